"""The click layer: parses flags, builds the context, renders results.  No decisions here.

Heavy modules (the Kubernetes client, the executor) are imported inside the commands so
``--help`` and ``version --client`` start instantly.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar, cast

import click

from .. import __version__
from .examples import Group
from .options import (
    DURATION,
    Duration,
    check_selector,
    override_options,
    overrides,
    parse_duration,
)

__all__ = ["DURATION", "Duration", "Exit", "cli", "fail", "main", "parse_duration"]

F = TypeVar("F", bound=Callable[..., Any])


class Exit(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    INTERRUPTED = 130


def _prog_name() -> str:
    base = os.path.basename(sys.argv[0] or "")
    if base.startswith("flux-"):
        return "flux plunger"
    return "kubectl flux-plunger"


def fail(message: str, code: Exit = Exit.FAILURE) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(int(code))


OUTPUTS = click.Choice(["table", "wide", "json", "yaml", "name"])


def connection_options(f: F) -> F:
    """--kubeconfig, --context, --request-timeout and kubectl's other connection flags."""
    f = override_options(f)
    f = click.option(
        "--request-timeout",
        type=DURATION,
        default="30s",
        show_default=True,
        help="Time to wait for one API request (0: no timeout).",
    )(f)
    f = click.option(
        "--context",
        "kube_context",
        metavar="NAME",
        shell_complete=_complete_contexts,
        help="The kubeconfig context to use.",
    )(f)
    return click.option(
        "--kubeconfig",
        metavar="PATH",
        type=click.Path(dir_okay=False),
        help="Path to the kubeconfig file.",
    )(f)


def selection_options(f: F) -> F:
    """-n, -A, -l, NAME..."""
    f = click.argument("names", nargs=-1, metavar="[NAME]...", shell_complete=_complete_releases)(f)
    f = click.option(
        "-l",
        "--selector",
        metavar="SELECTOR",
        callback=check_selector,
        help="Label selector to filter HelmReleases (Kubernetes syntax, e.g. "
        "sharding.fluxcd.io/key=shard1, '!sharding.fluxcd.io/key', 'k in (a,b)').",
    )(f)
    f = click.option(
        "-A", "--all-namespaces", is_flag=True, help="Act on HelmReleases in every namespace."
    )(f)
    return click.option(
        "-n",
        "--namespace",
        metavar="NS",
        shell_complete=_complete_namespaces,
        help="Namespace of the HelmReleases (default: the context's).",
    )(f)


def lease_name_option(f: F) -> F:
    """--lease-name (alias --leader-election-id, serve's flag): a shard's controller Lease."""
    return click.option(
        "--lease-name",
        "--leader-election-id",
        "lease_name",
        metavar="NAME",
        callback=_check_lease_name,
        help="Name of the controller's Lease: the --leader-election-id of the flux-plunger "
        "(shard) whose releases these are [default: flux-plunger.cozystack.io].",
    )(f)


def _check_lease_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from .options import lease_name_problem

    if value is None or ctx.resilient_parsing:
        return value
    problem = lease_name_problem(value)
    if problem:
        raise click.UsageError(f"--lease-name {value!r}: {problem}", ctx)
    return value


def lease_options(f: F, *, force: bool = True) -> F:
    """--lease-namespace, --lease-name (and --force): the running-controller check of
    writing verbs."""
    f = lease_name_option(f)
    if force:
        f = click.option(
            "--force",
            is_flag=True,
            help="Act even while a flux-plunger controller holds its Lease.",
        )(f)
    return click.option(
        "--lease-namespace",
        metavar="NS",
        help="Namespace of the controller's Lease (see --lease-name) "
        "[default: the pod's namespace in a cluster, else flux-plunger].",
    )(f)


def _controller_check(
    kube: Any, lease_namespace: str | None, force: bool, lease_name: str | None = None
) -> None:
    """Refuse (exit 1) while another identity holds the controller's Lease, unless forced."""
    import datetime as dt

    from .. import constants as C
    from .. import controller_lease

    if lease_namespace is not None and not lease_namespace.strip():
        raise click.UsageError("--lease-namespace must not be empty")
    lease = controller_lease.read(
        kube,
        lease_namespace or controller_lease.default_lease_namespace(),
        name=lease_name or C.LEASE_NAME,
    )
    now = dt.datetime.now(dt.timezone.utc)
    if not lease.readable:
        click.echo(
            f"warning: cannot tell whether a flux-plunger controller is running: "
            f"{lease.describe(now)}",
            err=True,
        )
    why = controller_lease.refusal(lease, now)
    if why and not force:
        fail(why)


def output_option(f: F) -> F:
    f = click.option(
        "--no-headers", is_flag=True, help="Table output (-o table|wide): print no header line."
    )(f)
    return click.option(
        "-o",
        "--output",
        type=OUTPUTS,
        default="table",
        show_default=True,
        help="Output format (json/yaml: flux-plunger.cozystack.io/v1alpha1, "
        "see docs/output-schema.json).",
    )(f)


def dry_run_option(f: F) -> F:
    return click.option(
        "--dry-run",
        type=click.Choice(["none", "client", "server"]),
        default="none",
        show_default=True,
        is_flag=False,
        flag_value="client",
        help="client: print the plan only; server: send every write with dryRun=All.",
    )(f)


def _events_addr(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    del ctx, param
    if not value:
        return None
    from ..notify import validate_address

    try:
        return validate_address(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--events-addr") from None


EVENTS_ADDR_HELP = (
    "POST each Event flux-plunger records as a Flux event to notification-controller at "
    "URL (Flux's is http://notification-controller.flux-system.svc.cluster.local./), so "
    "Alerts on HelmReleases see it."
)


def events_addr_option(f: F) -> F:
    """--events-addr: Flux notifications from a one-shot writing verb (opt-in)."""
    return click.option(
        "--events-addr",
        metavar="URL",
        callback=_events_addr,
        help=EVENTS_ADDR_HELP + "  [default: off]",
    )(f)


def _notifier(events_addr: str | None, dry_run: str) -> Any:
    """The Notifier of a one-shot verb (None: off, or a dry run), flushed with a short
    bounded wait when the command ends."""
    if not events_addr or dry_run != "none":
        return None
    from ..notify import Notifier

    notifier = Notifier(events_addr)
    click.get_current_context().call_on_close(notifier.close)
    return notifier


class Session:
    """What a verb needs: a connected client and the resolved selection."""

    def __init__(
        self,
        kubeconfig: str | None,
        kube_context: str | None,
        request_timeout: float | None,
        namespace: str | None = None,
        all_namespaces: bool = False,
        selector: str | None = None,
        names: tuple[str, ...] = (),
        dry_run: str = "none",
    ) -> None:
        from ..kube import Kube
        from ..verbs.select import Selection

        if names and all_namespaces:
            raise click.UsageError("a resource cannot be retrieved by name across all namespaces")
        if names and selector:
            raise click.UsageError("name cannot be provided when a selector is specified")
        if namespace is not None and not namespace.strip():
            raise click.UsageError("--namespace must not be empty")
        self.kube: Kube = connect(
            kubeconfig, kube_context, request_timeout, dry_run=(dry_run == "server")
        )
        ns = None if all_namespaces else (namespace or _default_namespace(kubeconfig, kube_context))
        self.selection = Selection(
            namespace=ns, all_namespaces=all_namespaces, selector=selector, names=tuple(names)
        )
        self.dry_run = dry_run

    def where(self) -> str:
        """`` in NS namespace`` as kubectl words it (empty under -A)."""
        return "" if self.selection.all_namespaces else f" in {self.selection.namespace} namespace"


def connect(
    kubeconfig: str | None, kube_context: str | None, request_timeout: float | None, **kwargs: Any
) -> Any:
    """A :class:`~kubectl_flux_plunger.kube.Kube` for the command line's connection flags;
    configuration problems are one ``error:`` line."""
    from ..kube import ConfigError, Kube

    if kubeconfig and not os.path.exists(kubeconfig):
        fail(f"stat {kubeconfig}: no such file or directory")
    o = overrides()
    if o.certificate_authority and not os.path.isfile(o.certificate_authority):
        fail(
            f"unable to read certificate-authority {o.certificate_authority}: "
            "no such file or directory"
        )
    try:
        return Kube.from_kubeconfig(
            kubeconfig, kube_context, o, request_timeout=request_timeout or None, **kwargs
        )
    except ConfigError as exc:
        fail(str(exc))


def _default_namespace(kubeconfig: str | None, kube_context: str | None) -> str:
    from ..kube import ConfigError, default_namespace

    try:
        return default_namespace(kubeconfig, kube_context)
    except ConfigError as exc:
        fail(str(exc))


def _api_errors(fn: F) -> F:
    """Turn API failures into one ``error:`` line and exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..kube import KubeError
        from ..verbs.select import SelectionError

        try:
            return fn(*args, **kwargs)
        except KubeError as exc:
            fail(str(exc) if exc.status == 0 else f"{exc.reason}: {exc}")
        except SelectionError as exc:
            fail(str(exc))

    return cast(F, wrapper)  # functools.wraps keeps the signature mypy cannot see kept


# -- completion of flag values and names (cobra __complete and kubectl's helper) --------

COMPLETION_TIMEOUT = 2.0  # seconds per API request while completing


def _completion_kube(ctx: click.Context) -> Any:
    from ..kube import Kube

    p = ctx.params
    try:
        return Kube.from_kubeconfig(
            p.get("kubeconfig"),
            p.get("kube_context"),
            overrides(ctx),
            request_timeout=COMPLETION_TIMEOUT,
        )
    except Exception:  # noqa: BLE001 - no completion rather than an error while typing
        return None


def _complete_namespaces(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from ..kube import KubeError, core_path

    kube = _completion_kube(ctx)
    if kube is None:
        return []
    try:
        items = kube.request("LIST", "GET", core_path("namespaces")).get("items") or []
    except KubeError:
        return []
    finally:
        kube.close()
    return [
        CompletionItem(n)
        for n in sorted(i["metadata"]["name"] for i in items)
        if n.startswith(incomplete)
    ]


def _complete_releases(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from ..kube import ConfigError, KubeError, default_namespace

    if ctx.params.get("all_namespaces"):
        return []
    kube = _completion_kube(ctx)
    if kube is None:
        return []
    try:
        ns = ctx.params.get("namespace") or default_namespace(
            ctx.params.get("kubeconfig"), ctx.params.get("kube_context")
        )
        items = kube.list_hrs(ns, ctx.params.get("selector"))
    except (KubeError, ConfigError):
        return []
    finally:
        kube.close()
    typed = set(ctx.params.get("names") or ())
    return [
        CompletionItem(n)
        for n in sorted(i["metadata"]["name"] for i in items)
        if n.startswith(incomplete) and n not in typed
    ]


def _complete_contexts(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from ..kube import _client_modules

    try:
        _, config, _ = _client_modules()
        contexts, _active = config.list_kube_config_contexts(
            config_file=ctx.params.get("kubeconfig")
        )
    except Exception:  # noqa: BLE001 - no kubeconfig: nothing to offer
        return []
    return [CompletionItem(c["name"]) for c in contexts if c["name"].startswith(incomplete)]


# -- the commands ---------------------------------------------------------------------

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=Group, context_settings=CONTEXT_SETTINGS, invoke_without_command=True)
@click.version_option(__version__, "--version", message="%(version)s")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Unstick Flux HelmReleases that report "has no deployed releases", safely.

    flux-plunger deletes the newest Helm storage revision of a stuck release while
    helm-controller is kept off it (an owned suspension plus an uninstall fence), then
    lets helm-controller reconcile again. It never touches a suspension another manager set.
    """
    if ctx.invoked_subcommand is None:
        # like kubectl and flux: no verb prints the help and succeeds (click < 8.2 did this
        # for groups, click >= 8.2 raises a usage error; decided here, not by click)
        click.echo(ctx.get_help())
        ctx.exit(0)


@cli.command()
@connection_options
@selection_options
@output_option
@click.option(
    "-w",
    "--watch",
    is_flag=True,
    help="After listing, print each HelmRelease again whenever it changes.",
)
@click.option(
    "--lease-namespace",
    metavar="NS",
    help="Namespace of the controllers' Leases: every flux-plunger Lease there is read (one "
    "LIST; each shard's records what it watches) unless --lease-name names one "
    "[default: the pod's namespace in a cluster, else flux-plunger].",
)
@lease_name_option
@_api_errors
def status(
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    namespace: str | None,
    all_namespaces: bool,
    selector: str | None,
    names: tuple[str, ...],
    output: str,
    no_headers: bool,
    watch: bool,
    lease_namespace: str | None,
    lease_name: str | None,
) -> None:
    """Show every HelmRelease flux-plunger would act on or has touched (read-only).

    A namespace whose HelmReleases are all healthy and untouched says so on stderr.

    A release shown `recovering` is held by flux-plunger, which suspended it for the
    recovery (-o wide and -o json say since when, and whether the controller or a
    one-shot run holds it).  A `flux suspend` landing then is a no-op: spec.suspend is
    already true, so flux writes nothing, and flux-plunger lifts the suspension when it
    finishes.  Suspend again once status no longer shows the release recovering.  A
    `flux resume` landing then stops the recovery before any delete."""
    import datetime as dt

    from ..verbs import status as verb
    from . import render

    s = Session(
        kubeconfig, kube_context, request_timeout, namespace, all_namespaces, selector, names
    )
    if lease_namespace is not None and not lease_namespace.strip():
        raise click.UsageError("--lease-namespace must not be empty")
    leases = verb.controllers(s.kube, lease_namespace, lease_name)
    rep = verb.report(s.kube, s.selection, leases=leases)
    if output in ("table", "wide") and rep.rows:
        now = dt.datetime.now(dt.timezone.utc)
        for i, lease in enumerate(leases):
            if i == 0 or lease.holder:  # the contract's Lease always; a shard's when held
                click.echo(f"Controller: {lease.describe(now)}", err=True)
    for m in rep.missing:
        click.echo(f"Error from server (NotFound): {m}", err=True)
    wide = output == "wide"
    if output in ("json", "yaml"):
        click.echo(
            render.dump(
                render.document("HelmReleaseStatus", [render.status_item(r) for r in rep.rows]),
                output,
            )
        )
    elif rep.rows and output == "name":
        click.echo(render.names((r.namespace, r.name) for r in rep.rows))
    elif rep.rows:
        click.echo(
            render.status_table(
                rep.rows,
                all_namespaces=s.selection.all_namespaces,
                wide=wide,
                no_headers=no_headers,
            )
        )
    if not rep.rows and not rep.missing and output not in ("json", "yaml"):
        if rep.total == 0:
            click.echo(f"No resources found{s.where()}.", err=True)
        else:
            click.echo(
                f"{rep.total} HelmRelease{'s' if rep.total != 1 else ''}{s.where()}, "
                "none needs attention.",
                err=True,
            )
    if watch:
        _watch_status(
            s, output, wide=wide, shown={(r.namespace, r.name) for r in rep.rows}, leases=leases
        )
    raise SystemExit(int(Exit.FAILURE if rep.missing else Exit.OK))


def _watch_status(
    s: Session, output: str, *, wide: bool, shown: set[tuple[str, str]], leases: Any = None
) -> None:
    """``status --watch``: one line (or document) per change of a release that needs
    attention or was shown, until interrupted.  Like ``kubectl get -w``: no header again."""
    from ..kube import KubeError, hr_path
    from ..verbs import status as verb
    from ..verbs.status import interesting
    from . import render

    sel = s.selection
    ns = None if sel.all_namespaces else sel.namespace
    while True:
        rv = s.kube.request(
            "LIST", "GET", hr_path(ns), query={"labelSelector": sel.selector, "limit": 1}
        )["metadata"]["resourceVersion"]
        try:
            for event in s.kube.watch_hrs(ns, sel.selector, rv):
                if event.get("type") == "ERROR":
                    break
                if event.get("type") == "BOOKMARK":
                    continue
                hr = event["object"]
                md = hr["metadata"]
                key = (md.get("namespace", ""), md["name"])
                if sel.names and key[1] not in sel.names:
                    continue
                r = verb.row(s.kube, hr, leases=leases)
                if event["type"] == "DELETED":
                    r.state = "deleted"
                if not (sel.names or key in shown or interesting(hr, r.state)):
                    continue
                shown.add(key)
                if output in ("json", "yaml"):
                    text = render.dump(render.status_item(r), output)
                    # the listing's document (printed even when empty) came first
                    click.echo(("---\n" if output == "yaml" else "") + text)
                elif output == "name":
                    click.echo(render.names([key]))
                else:
                    click.echo(
                        render.table(
                            render.status_headers(all_namespaces=sel.all_namespaces, wide=wide),
                            [render.status_cells(r, all_namespaces=sel.all_namespaces, wide=wide)],
                            no_headers=True,
                        )
                    )
        except KubeError as exc:
            if exc.status != 410:
                raise


def _run_table(
    verb_name: str,
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    namespace: str | None,
    all_namespaces: bool,
    selector: str | None,
    names: tuple[str, ...],
    output: str,
    no_headers: bool,
    dry_run: str,
    concurrency: int,
    only_rows: frozenset[Any] | None,
    handshake_timeout: float = 30.0,
    lease_namespace: str | None = None,
    force: bool = False,
    backup_dir: str | None = None,
    lease_name: str | None = None,
    events_addr: str | None = None,
) -> NoReturn:
    from ..events import Recorder
    from ..executor import Executor, Options, Result
    from ..plan import Row
    from ..verbs import recover as verb
    from ..verbs.select import fetch
    from . import render
    from .progress import INTERRUPTED_EXIT, Stream

    s = Session(
        kubeconfig,
        kube_context,
        request_timeout,
        namespace,
        all_namespaces,
        selector,
        names,
        dry_run,
    )
    if dry_run != "client":
        # before the reads that decide: the named read stays right before its acquire
        _controller_check(s.kube, lease_namespace, force, lease_name)
    from ..backup import DirectoryBackup

    def show(o: Any) -> bool:
        return bool(
            o.row not in (Row.HEALTHY, Row.TERMINATING_UNFENCED)
            or names
            or o.result != Result.UNCHANGED
        )

    def line(o: Any) -> str | None:
        if output in ("json", "yaml") or not show(o):
            return None
        if output == "name":
            return render.names([(o.namespace, o.name)])
        return render.outcome_line(o, all_namespaces=s.selection.all_namespaces, dry_run=dry_run)

    # results stream as each release finishes; Ctrl-C stops (cli/progress.py); the total
    # is known once the releases are read
    stream = Stream(verb=verb_name, total=0, line=line, prog=_prog_name())
    # a stop is noticed between handshake watch windows: keep them short
    opts = Options(
        selector=s.selection.matcher(),
        dry_run_client=(dry_run == "client"),
        allow_recover=(only_rows is None),
        handshake_timeout=handshake_timeout,
        handshake_window=1.0,
        backup=DirectoryBackup(backup_dir) if backup_dir else None,
    )
    executor = Executor(
        s.kube,
        Recorder(s.kube, enabled=(dry_run == "none"), notifier=_notifier(events_addr, dry_run)),
        options=opts,
        should_stop=stream.stop.is_set,
    )
    # a named release is read as a watch-list the recovery then goes on on (one request
    # for the read and the WATCH); listed releases are re-read by name before acting
    watched = verb.WatchedReads(executor)
    try:
        releases, missing = fetch(s.kube, s.selection, read=watched)
    except BaseException:
        watched.close()
        raise
    for m in missing:
        click.echo(f"Error from server (NotFound): {m}", err=True)

    stream.total = len(releases)
    try:
        with stream.interruptible():
            outcomes = verb.run(
                executor,
                releases,
                concurrency=concurrency,
                only_rows=only_rows,
                fresh=bool(names),
                on_start=stream.started,
                on_result=stream.finished,
                stop=stream.stop,
                watched=watched,
            )
    finally:
        watched.close()
    stream.close()
    shown = [o for o in outcomes if show(o)]
    if output in ("json", "yaml"):
        click.echo(
            render.dump(
                render.document(
                    "RecoveryResult",
                    [render.outcome_item(o, dry_run) for o in shown],
                    dryRun=dry_run,
                    summary=_counts(outcomes),
                ),
                output,
            )
        )
    if not releases and not missing and output not in ("json", "yaml"):
        click.echo(f"No resources found{s.where()}.", err=True)
    failed = [o for o in outcomes if o.failed or o.result in (Result.DEFERRED, Result.SKIPPED)]
    if output in ("table", "wide"):
        click.echo(_summary(verb_name, outcomes, dry_run), err=not shown)
    if stream.stop.is_set():
        not_done = [
            (o.namespace, o.name) for o in outcomes if o.result == Result.DEFERRED or o.failed
        ]
        stream.report_left(not_done, verb.still_held(s.kube, stream.interrupted_in_flight()))
        raise SystemExit(INTERRUPTED_EXIT)
    raise SystemExit(int(Exit.FAILURE if failed or missing else Exit.OK))


def _counts(outcomes: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in outcomes:
        out[str(o.result)] = out.get(str(o.result), 0) + 1
    return dict(sorted(out.items()))


def _summary(verb_name: str, outcomes: list[Any], dry_run: str) -> str:
    from ..executor import Result
    from ..plan import Row
    from .render import DRY_SUFFIX

    def count(*results: Result) -> int:
        return sum(o.result in results for o in outcomes)

    def planned(*rows: Row) -> int:
        return sum(o.result == Result.PLANNED and bool(o.steps) and o.row in rows for o in outcomes)

    failed = sum(o.failed for o in outcomes)
    suffix = DRY_SUFFIX[dry_run]
    if verb_name == "recover":
        stuck = [o for o in outcomes if o.row == Row.LIVE_STUCK]
        waiting = count(Result.AWAITING_RETRY)
        done = (
            f"would recover {planned(Row.LIVE_STUCK)}"
            if dry_run == "client"
            else f"would recover {count(Result.RECOVERED)}"
            if dry_run == "server"
            else f"recovered {count(Result.RECOVERED)}"
        )
        return (
            f"{done} of {len(stuck) - waiting} stuck HelmReleases, "
            f"{count(Result.DEFERRED)} deferred, {count(Result.SKIPPED)} skipped, "
            f"{failed} failed"
            + (
                f"; {waiting} recovered earlier, awaiting helm-controller's retry"
                if waiting
                else ""
            )
            + suffix
        )
    lifted = (
        planned(Row.LIVE_SUSPENDED_OWNED, Row.TERMINATING_SUSPENDED_OWNED)
        if dry_run == "client"
        else count(Result.RELINQUISHED)
    )
    verb = "would lift" if dry_run != "none" else "lifted"
    return f"{verb} {lifted} flux-plunger suspensions, {failed} failed{suffix}"


@cli.command()
@connection_options
@selection_options
@output_option
@dry_run_option
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=8,
    show_default=True,
    help="Releases handled at once (each release is handled serially); also the "
    "most API requests in flight at any moment.",
)
@click.option(
    "--handshake-timeout",
    type=DURATION,
    default="30s",
    show_default=True,
    help="How long to wait for helm-controller to observe the suspension before deleting.",
)
@click.option(
    "--backup-dir",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Write each Secret to DIR (mode 0600) before deleting it; if the write fails "
    "nothing is deleted. Undo with `restore FILE`.",
)
@lease_options
@events_addr_option
@_api_errors
def recover(
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    namespace: str | None,
    all_namespaces: bool,
    selector: str | None,
    names: tuple[str, ...],
    output: str,
    no_headers: bool,
    dry_run: str,
    concurrency: int,
    handshake_timeout: float,
    backup_dir: str | None,
    lease_namespace: str | None,
    lease_name: str | None,
    force: bool,
    events_addr: str | None,
) -> None:
    """Recover stuck HelmReleases once (the same decision table the controller runs)."""
    _run_table(
        "recover",
        kubeconfig,
        kube_context,
        request_timeout,
        namespace,
        all_namespaces,
        selector,
        names,
        output,
        no_headers,
        dry_run,
        concurrency,
        None,
        handshake_timeout,
        lease_namespace,
        force,
        backup_dir,
        lease_name,
        events_addr,
    )


@cli.command("resume-owned")
@connection_options
@selection_options
@output_option
@dry_run_option
@lease_options
@events_addr_option
@_api_errors
def resume_owned(
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    namespace: str | None,
    all_namespaces: bool,
    selector: str | None,
    names: tuple[str, ...],
    output: str,
    no_headers: bool,
    dry_run: str,
    lease_namespace: str | None,
    lease_name: str | None,
    force: bool,
    events_addr: str | None,
) -> None:
    """Lift suspensions flux-plunger itself owns (e.g. left by a crash), with their fences.

    Never touches a suspension another manager set."""
    from ..verbs.recover import RESUME_ROWS

    _run_table(
        "resume-owned",
        kubeconfig,
        kube_context,
        request_timeout,
        namespace,
        all_namespaces,
        selector,
        names,
        output,
        no_headers,
        dry_run,
        1,
        RESUME_ROWS,
        lease_namespace=lease_namespace,
        force=force,
        lease_name=lease_name,
        events_addr=events_addr,
    )


@cli.command("release-fence")
@connection_options
@selection_options
@output_option
@dry_run_option
@click.option(
    "--wait-uninstall",
    is_flag=True,
    help="First let helm-controller finish the uninstall of deleted, fenced releases.",
)
@click.option(
    "--timeout", type=DURATION, default="120s", show_default=True, help="Bound of --wait-uninstall."
)
@click.option(
    "--retry-window",
    type=DURATION,
    default="60s",
    show_default=True,
    help="How long to keep retrying one release before reporting it NOT released.",
)
@click.option(
    "--deadline",
    type=DURATION,
    default="0",
    show_default=True,
    help="Finish everything (wait included) within this time and print the summary "
    "(0: no global deadline), e.g. from an uninstall hook's activeDeadlineSeconds.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=8,
    show_default=True,
    help="Releases handled at once.",
)
@click.option(
    "--stop-deployment",
    metavar="NS/NAME",
    help="First scale the controller's Deployment NS/NAME to zero and wait for its "
    "pods (what the chart's uninstall hook runs); no fence is touched unless "
    "the scale succeeded or the Deployment does not exist (nothing to stop, "
    "e.g. the hook running again after it was deleted).",
)
@click.option(
    "--stop-timeout",
    type=DURATION,
    default="100s",
    show_default=True,
    help="How long --stop-deployment waits for the pods to go (and, when some did "
    "not, once more after the sweep before looking for fences set behind it).",
)
@events_addr_option
@_api_errors
def release_fence(
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    namespace: str | None,
    all_namespaces: bool,
    selector: str | None,
    names: tuple[str, ...],
    output: str,
    no_headers: bool,
    dry_run: str,
    wait_uninstall: bool,
    timeout: float,
    retry_window: float,
    deadline: float,
    concurrency: int,
    stop_deployment: str | None,
    stop_timeout: float,
    events_addr: str | None,
) -> None:
    """Remove flux-plunger's uninstall fence (what uninstalling the controller runs).

    Lifts suspensions flux-plunger alone owns, removes every copy of the fence, and
    exits non-zero while any fence remains."""
    import time

    from .. import detect
    from ..events import Recorder
    from ..executor import Executor, Options
    from ..verbs import release_fence as verb
    from ..verbs.select import fetch
    from . import render

    stop_ref: tuple[str, str] | None = None
    if stop_deployment is not None:
        dep_ns, _, dep_name = stop_deployment.partition("/")
        if not dep_ns or not dep_name or "/" in dep_name:
            raise click.BadParameter(
                f"{stop_deployment!r} is not NAMESPACE/NAME", param_hint="--stop-deployment"
            )
        stop_ref = (dep_ns, dep_name)
    s = Session(
        kubeconfig,
        kube_context,
        request_timeout,
        namespace,
        all_namespaces,
        selector,
        names,
        dry_run,
    )
    all_ns = s.selection.all_namespaces
    stopped = (
        _stop_controller(s, stop_ref, stop_timeout, retry_window, dry_run) if stop_ref else None
    )
    # the global deadline counts from here: the stop before it is bounded on its own
    ends = time.monotonic() + deadline if deadline else None
    releases, missing = fetch(s.kube, s.selection)
    for m in missing:
        click.echo(f"Error from server (NotFound): {m}", err=True)
    fenced = [hr for hr in releases if detect.is_fenced(hr)]
    if dry_run == "client":
        refs = [(hr["metadata"]["namespace"], hr["metadata"]["name"]) for hr in fenced]
        if output in ("json", "yaml"):
            click.echo(
                render.dump(
                    render.document(
                        "FenceRelease",
                        [
                            {
                                "apiVersion": render.API_VERSION,
                                "kind": "FenceRelease",
                                "metadata": {"name": n, "namespace": ns},
                                "released": False,
                                "withoutUninstall": False,
                                "message": "fenced; would be released",
                                "dryRun": dry_run,
                            }
                            for ns, n in refs
                        ],
                        dryRun=dry_run,
                    ),
                    output,
                )
            )
        elif output == "name":
            if refs:
                click.echo(render.names(refs))
        else:
            for ns, n in refs:
                click.echo(
                    f"{render.ref(ns, n, all_namespaces=all_ns)} would release the "
                    "uninstall fence (dry run)"
                )
            click.echo(f"would release {len(refs)} fenced HelmReleases (dry run)")
        raise SystemExit(int(Exit.FAILURE if missing else Exit.OK))
    if wait_uninstall and fenced and dry_run == "none":
        executor = Executor(
            s.kube,
            Recorder(s.kube, enabled=(dry_run == "none"), notifier=_notifier(events_addr, dry_run)),
            options=Options(allow_recover=False, selector=s.selection.matcher()),
        )
        wait_for = timeout if ends is None else max(0.0, min(timeout, ends - time.monotonic()))
        fenced, released_waiting = verb.wait_uninstalls(executor, fenced, wait_for)
    else:
        released_waiting = []
    results = released_waiting + verb.run(
        s.kube,
        fenced,
        window=retry_window,
        deadline=ends,
        concurrency=concurrency,
        selector=s.selection.matcher(),
    )
    if stopped is not None and (stopped.pods_left or stopped.pods_unknown):
        # a controller pod that did not go may fence a release behind the sweep: give it
        # the stop timeout once more to go, then look for fences again
        from ..verbs.stop import wait_for_pods

        if stopped.selector and stop_ref:
            again_for = (
                stop_timeout
                if ends is None
                else max(0.0, min(stop_timeout, ends - time.monotonic()))
            )
            wait_for_pods(s.kube, stop_ref[0], stopped.selector, again_for)
        again, _ = fetch(s.kube, s.selection)
        refenced = {
            (hr["metadata"]["namespace"], hr["metadata"]["name"])
            for hr in again
            if detect.is_fenced(hr)
        }
        refenced -= {(r.namespace, r.name) for r in results if not r.released}
        results = [r for r in results if (r.namespace, r.name) not in refenced] + [
            verb.FenceResult(
                ns, n, False, False, "fenced after the sweep; a flux-plunger is still running"
            )
            for ns, n in sorted(refenced)
        ]
    if output in ("json", "yaml"):
        click.echo(
            render.dump(
                render.document(
                    "FenceRelease", [render.fence_item(r, dry_run) for r in results], dryRun=dry_run
                ),
                output,
            )
        )
    elif output == "name":
        if any(r.released for r in results):
            click.echo(render.names((r.namespace, r.name) for r in results if r.released))
    else:
        for r in results:
            click.echo(
                render.fence_line(r, all_namespaces=all_ns, dry_run=dry_run), err=not r.released
            )
        text = verb.summary(results)
        if dry_run == "server":
            text = "would have " + text + render.DRY_SUFFIX[dry_run]
        click.echo(text)
    ok = all(r.released for r in results) and not missing
    raise SystemExit(int(Exit.OK if ok else Exit.FAILURE))


def _stop_controller(
    s: Session, ref: tuple[str, str], wait: float, window: float, dry_run: str
) -> Any:
    """``release-fence --stop-deployment``: progress on stderr (stdout stays the result)."""
    from ..verbs import stop as verb
    from .render import DRY_SUFFIX

    ns, name = ref
    if dry_run == "client":
        click.echo(f"would scale Deployment {ns}/{name} to zero (dry run)", err=True)
        return None
    try:
        stopped = verb.stop(
            s.kube, ns, name, wait=wait, window=window, dry_run=(dry_run == "server")
        )
    except verb.StopError as exc:
        fail(f"{exc}; no fence was touched")
    if not stopped.found:
        click.echo(f"no Deployment {ns}/{name}; nothing to stop", err=True)
    else:
        click.echo(f"scaled Deployment {ns}/{name} to zero{DRY_SUFFIX[dry_run]}", err=True)
    if stopped.pods_left:
        click.echo(
            "warning: flux-plunger pods are still running, releasing anyway: "
            + " ".join(stopped.pods_left),
            err=True,
        )
    elif stopped.pods_unknown:
        click.echo(
            "warning: could not tell whether flux-plunger pods are still running; releasing anyway",
            err=True,
        )
    return stopped


@cli.command()
@connection_options
@click.argument("source", metavar="FILE|SECRET")
@click.option(
    "-n",
    "--namespace",
    metavar="NS",
    shell_complete=_complete_namespaces,
    help="Namespace of a backup SECRET (default: the context's).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Restore although the HelmRelease is not suspended by you (or is gone).",
)
@dry_run_option
@output_option
@_api_errors
def restore(
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    source: str,
    namespace: str | None,
    force: bool,
    dry_run: str,
    output: str,
    no_headers: bool,
) -> None:
    """Put back a revision saved by `recover --backup-dir` (FILE) or by serve's
    --backup-secret-namespace ([NS/]SECRET).

    Creates the Secret only while it is absent (never overwrites) and only while the
    HelmRelease is suspended by you (e.g. `flux suspend helmrelease`), unless --force."""
    from ..backup import BackupError, load_file, load_secret
    from ..verbs import restore as verb
    from . import render

    s = Session(kubeconfig, kube_context, request_timeout, namespace, dry_run=dry_run)
    try:
        if os.path.exists(source):
            doc, where = load_file(source), source
        else:
            ns, _, name = source.rpartition("/")
            ns = ns or s.selection.namespace or "default"
            doc, where = load_secret(s.kube, ns, name), f"Secret {ns}/{name}"
    except BackupError as exc:
        fail(str(exc))
    res = verb.run(s.kube, doc, where, force=force, dry_run=dry_run)
    if output in ("json", "yaml"):
        click.echo(
            render.dump(
                render.document(
                    "RestoreResult", [render.restore_item(res, dry_run)], dryRun=dry_run
                ),
                output,
            )
        )
    elif output == "name":
        if res.ok and res.name:
            click.echo(f"secret/{res.name}")
    else:
        click.echo(res.line() + (render.DRY_SUFFIX[dry_run] if res.ok else ""), err=not res.ok)
    raise SystemExit(int(Exit.OK if res.ok else Exit.FAILURE))


@cli.command()
@connection_options
@click.option("--client", "client_only", is_flag=True, help="Only the client version; no cluster.")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text")
@_api_errors
def version(
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    client_only: bool,
    output: str,
) -> None:
    """Print the client version and, with a cluster, the server and helm-controller versions."""
    from ..verbs import version as verb

    info: dict[str, Any] = verb.client()
    if not client_only:
        from ..kube import ConfigError, Kube

        try:
            kube = Kube.from_kubeconfig(
                kubeconfig, kube_context, overrides(), request_timeout=request_timeout or 10
            )
            info.update(verb.server(kube))
        except ConfigError as exc:
            info["serverVersion"] = f"unknown ({exc})"
    if output == "json":
        import json

        click.echo(json.dumps(info, indent=2))
    elif output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(info, sort_keys=False).rstrip())
    else:
        labels = {
            "clientVersion": "Client Version",
            "serverVersion": "Server Version",
            "helmControllerVersion": "helm-controller Version",
        }
        for k, v in info.items():
            click.echo(f"{labels[k]}: {v}")


def _register_serve() -> None:
    with contextlib.suppress(ImportError):  # the optional "serve" extra
        from .serve import serve  # noqa: F401 - registered on import


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kubectl-flux_plunger`` and ``flux-plunger``."""
    from .argv import hoist_global_flags

    _register_serve()
    prog = _prog_name()
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["__complete"], ["__completeNoDesc"]):
        from .complete import cobra_complete

        return cobra_complete(cli, prog, args[1:])
    # click derives the completion variable from the program name, which has a space here
    complete_var = (
        "_FLUX_PLUNGER_COMPLETE" if prog.startswith("flux ") else "_KUBECTL_FLUX_PLUNGER_COMPLETE"
    )
    if os.environ.get(complete_var):
        prog = os.path.basename(sys.argv[0] or "") or "kubectl-flux_plunger"
    try:
        args = hoist_global_flags(cli, args)
        cli.main(args=args, prog_name=prog, complete_var=complete_var, standalone_mode=False)
    except click.UsageError as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        cmd = exc.ctx.command_path if exc.ctx else prog
        click.echo(f"See '{cmd} --help' for usage.", err=True)
        return int(Exit.USAGE)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            # Ctrl-C inside a command (e.g. ending `status --watch`): click turns it into
            # Abort (chained with `from` since click 8.2, implicitly before); exit as an
            # interrupt, like kubectl, not as an error
            return int(Exit.INTERRUPTED)
        click.echo("error: aborted", err=True)
        return int(Exit.FAILURE)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return int(Exit.FAILURE)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        return int(Exit.INTERRUPTED)
    except BrokenPipeError:
        return int(Exit.FAILURE)
    return int(Exit.OK)
