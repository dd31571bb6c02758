"""The click layer: parses flags, builds the context, renders results.  No decisions here.

Heavy modules (the Kubernetes client, the executor) are imported inside the commands so
``--help`` and ``version --client`` start instantly.
"""
from __future__ import annotations

import enum
import os
import re
import sys

import click

from .. import __version__


class Exit(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2


def _prog_name() -> str:
    base = os.path.basename(sys.argv[0] or "")
    if base.startswith("flux-"):
        return "flux plunger"
    return "kubectl flux-plunger"


def fail(message: str, code: Exit = Exit.FAILURE) -> "None":
    click.echo(f"error: {message}", err=True)
    raise SystemExit(int(code))


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def parse_duration(value: str | float | int | None, *, flag: str) -> float | None:
    """kubectl/Go style durations ("30s", "1m30s", "500ms", bare seconds "10")."""
    if value is None or isinstance(value, (int, float)):
        return value
    text = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    m = _DURATION.fullmatch(text)
    if not text or not m or not any(m.groups()):
        raise click.BadParameter(f"invalid duration {value!r} (use e.g. 30s, 1m, 500ms)",
                                 param_hint=flag)
    h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        try:
            return parse_duration(value, flag=param.opts[-1] if param else "duration")
        except click.BadParameter as exc:
            self.fail(exc.message, param, ctx)


DURATION = Duration()

OUTPUTS = click.Choice(["table", "wide", "json", "yaml", "name"])


def connection_options(f):
    """--kubeconfig, --context, --request-timeout."""
    f = click.option("--request-timeout", type=DURATION, default="30s", show_default=True,
                     help="Time to wait for one API request (0: no timeout).")(f)
    f = click.option("--context", "kube_context", metavar="NAME",
                     help="The kubeconfig context to use.")(f)
    f = click.option("--kubeconfig", metavar="PATH", type=click.Path(dir_okay=False),
                     help="Path to the kubeconfig file.")(f)
    return f


def selection_options(f):
    """-n, -A, -l, NAME..."""
    f = click.argument("names", nargs=-1, metavar="[NAME]...")(f)
    f = click.option("-l", "--selector", metavar="SELECTOR",
                     help="Label selector to filter HelmReleases (e.g. sharding.fluxcd.io/key=shard1).")(f)
    f = click.option("-A", "--all-namespaces", is_flag=True,
                     help="Act on HelmReleases in every namespace.")(f)
    f = click.option("-n", "--namespace", metavar="NS",
                     help="Namespace of the HelmReleases (default: the context's).")(f)
    return f


def lease_options(f, *, force: bool = True):
    """--lease-namespace (and --force): the running-controller check of writing verbs."""
    if force:
        f = click.option("--force", is_flag=True,
                         help="Act even while a flux-plunger controller holds its Lease.")(f)
    return click.option("--lease-namespace", metavar="NS",
                        help="Namespace of the controller's Lease flux-plunger.cozystack.io "
                             "[default: the pod's namespace in a cluster, else flux-plunger].")(f)


def _controller_check(kube, lease_namespace, force: bool) -> None:
    """Refuse (exit 1) while another identity holds the controller's Lease, unless forced."""
    import datetime as dt

    from .. import controller_lease

    if lease_namespace is not None and not lease_namespace.strip():
        raise click.UsageError("--lease-namespace must not be empty")
    lease = controller_lease.read(kube, lease_namespace or controller_lease.default_lease_namespace())
    now = dt.datetime.now(dt.timezone.utc)
    if not lease.readable:
        click.echo(f"warning: cannot tell whether a flux-plunger controller is running: "
                   f"{lease.describe(now)}", err=True)
    why = controller_lease.refusal(lease, now)
    if why and not force:
        fail(why)


def output_option(f):
    return click.option("-o", "--output", type=OUTPUTS, default="table", show_default=True,
                        help="Output format.")(f)


def dry_run_option(f):
    return click.option("--dry-run", type=click.Choice(["none", "client", "server"]),
                        default="none", show_default=True, is_flag=False, flag_value="client",
                        help="client: print the plan only; server: send every write with dryRun=All.")(f)


class Session:
    """What a verb needs: a connected client and the resolved selection."""

    def __init__(self, kubeconfig, kube_context, request_timeout, namespace=None,
                 all_namespaces=False, selector=None, names=(), dry_run="none"):
        from ..kube import ConfigError, Kube, default_namespace
        from ..verbs.select import Selection

        if names and all_namespaces:
            raise click.UsageError("a resource cannot be retrieved by name across all namespaces")
        if names and selector:
            raise click.UsageError("name cannot be provided when a selector is specified")
        if namespace is not None and not namespace.strip():
            raise click.UsageError("--namespace must not be empty")
        if kubeconfig and not os.path.exists(kubeconfig):
            fail(f"stat {kubeconfig}: no such file or directory")
        try:
            ns = None if all_namespaces else (namespace or default_namespace(kubeconfig, kube_context))
            self.kube = Kube.from_kubeconfig(kubeconfig, kube_context,
                                             request_timeout=request_timeout or None,
                                             dry_run=(dry_run == "server"))
        except ConfigError as exc:
            fail(str(exc))
        self.selection = Selection(namespace=ns, all_namespaces=all_namespaces,
                                   selector=selector, names=tuple(names))
        self.dry_run = dry_run


def _api_errors(fn):
    """Turn API failures into one ``error:`` line and exit 1."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from ..kube import KubeError
        from ..verbs.select import SelectionError
        try:
            return fn(*args, **kwargs)
        except KubeError as exc:
            fail(str(exc) if exc.status == 0 else f"{exc.reason}: {exc}")
        except SelectionError as exc:
            fail(str(exc))
    return wrapper


CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "--version", message="%(version)s")
def cli():
    """Unstick Flux HelmReleases that report "has no deployed releases", safely.

    flux-plunger deletes the newest Helm storage revision of a stuck release while
    helm-controller is kept off it (an owned suspension plus an uninstall fence), then
    lets helm-controller reconcile again. It never touches a suspension another manager set.
    """


@cli.command()
@connection_options
@selection_options
@output_option
@click.option("--lease-namespace", metavar="NS",
              help="Namespace of the controller's Lease flux-plunger.cozystack.io "
                   "[default: the pod's namespace in a cluster, else flux-plunger].")
@_api_errors
def status(kubeconfig, kube_context, request_timeout, namespace, all_namespaces, selector,
           names, output, lease_namespace):
    """Show every HelmRelease flux-plunger would act on or has touched (read-only)."""
    from ..verbs import status as verb
    from . import render

    s = Session(kubeconfig, kube_context, request_timeout, namespace, all_namespaces,
                selector, names)
    import datetime as dt

    if lease_namespace is not None and not lease_namespace.strip():
        raise click.UsageError("--lease-namespace must not be empty")
    lease = verb.controller(s.kube, lease_namespace)
    rows, missing = verb.run(s.kube, s.selection, lease=lease)
    if output in ("table", "wide") and rows:
        click.echo(f"Controller: {lease.describe(dt.datetime.now(dt.timezone.utc))}", err=True)
    for m in missing:
        click.echo(f"Error from server (NotFound): {m}", err=True)
    if output in ("json", "yaml"):
        items = [r.as_dict() for r in rows]
        click.echo(render.as_json(items, "HelmReleaseStatus") if output == "json"
                   else render.as_yaml(items, "HelmReleaseStatus"))
    elif not rows:
        if not missing:
            where = "" if s.selection.all_namespaces else f" in {s.selection.namespace} namespace"
            click.echo(f"No resources found{where}.", err=True)
    elif output == "name":
        click.echo(render.names([r.as_dict() for r in rows]))
    else:
        click.echo(render.status_table(rows, all_namespaces=s.selection.all_namespaces,
                                       wide=(output == "wide")))
    raise SystemExit(int(Exit.FAILURE if missing else Exit.OK))


def _run_table(verb_name, kubeconfig, kube_context, request_timeout, namespace, all_namespaces,
               selector, names, output, dry_run, concurrency, only_rows, handshake_timeout=30.0,
               lease_namespace=None, force=False, backup_dir=None):
    from ..events import Recorder
    from ..executor import Executor, Options
    from ..verbs import recover as verb
    from ..verbs.select import fetch
    from . import render
    from .progress import INTERRUPTED_EXIT, Stream

    s = Session(kubeconfig, kube_context, request_timeout, namespace, all_namespaces,
                selector, names, dry_run)
    if dry_run != "client":
        # before the reads that decide: the named read stays right before its acquire
        _controller_check(s.kube, lease_namespace, force)
    releases, missing = fetch(s.kube, s.selection)
    for m in missing:
        click.echo(f"Error from server (NotFound): {m}", err=True)
    from ..backup import DirectoryBackup

    def show(o):
        return (o.row not in ("healthy", "terminating-unfenced") or names
                or o.result not in ("unchanged",))

    def line(o):
        if output in ("json", "yaml") or not show(o):
            return None
        if output == "name":
            return render.names([o.as_dict()])
        return render.outcome_line(o, all_namespaces=s.selection.all_namespaces)

    # results stream as each release finishes; Ctrl-C stops (cli/progress.py)
    stream = Stream(verb=verb_name, total=len(releases), line=line, prog=_prog_name())
    # a stop is noticed between handshake watch windows: keep them short
    opts = Options(dry_run_client=(dry_run == "client"), allow_recover=(only_rows is None),
                   handshake_timeout=handshake_timeout, handshake_window=1.0,
                   backup=DirectoryBackup(backup_dir) if backup_dir else None)
    executor = Executor(s.kube, Recorder(s.kube, enabled=(dry_run == "none")), options=opts,
                        should_stop=stream.stop.is_set)
    with stream.interruptible():
        outcomes = verb.run(executor, releases, concurrency=concurrency, only_rows=only_rows,
                            fresh=bool(names), on_start=stream.started,
                            on_result=stream.finished, stop=stream.stop)
    stream.close()
    shown = [o for o in outcomes if show(o)]
    if output in ("json", "yaml"):
        items = [o.as_dict() for o in shown]
        click.echo(render.as_json(items, "RecoveryOutcome") if output == "json"
                   else render.as_yaml(items, "RecoveryOutcome"))
    if not releases and not missing and output not in ("json", "yaml"):
        where = "" if s.selection.all_namespaces else f" in {s.selection.namespace} namespace"
        click.echo(f"No resources found{where}.", err=True)
    failed = [o for o in outcomes if o.failed or o.result in ("deferred", "skipped")]
    if output in ("table", "wide"):
        click.echo(_summary(verb_name, outcomes, dry_run), err=not shown)
    if stream.stop.is_set():
        not_done = [(o.namespace, o.name) for o in outcomes
                    if o.result == "deferred" or o.failed]
        stream.report_left(not_done, verb.still_held(s.kube, stream.interrupted_in_flight()))
        raise SystemExit(INTERRUPTED_EXIT)
    raise SystemExit(int(Exit.FAILURE if failed or missing else Exit.OK))


def _summary(verb_name: str, outcomes, dry_run: str) -> str:
    def count(*results):
        return sum(o.result in results for o in outcomes)
    suffix = " (dry run)" if dry_run != "none" else ""
    if verb_name == "recover":
        stuck = [o for o in outcomes if o.row == "live-stuck"]
        waiting = count("awaiting-retry")
        return (f"recovered {count('recovered')} of {len(stuck) - waiting} stuck HelmReleases, "
                f"{count('deferred')} deferred, {count('skipped')} skipped, "
                f"{sum(o.failed for o in outcomes)} failed"
                + (f"; {waiting} recovered earlier, awaiting helm-controller's retry"
                   if waiting else "") + suffix)
    return (f"lifted {count('relinquished')} flux-plunger suspensions, "
            f"{sum(o.failed for o in outcomes)} failed{suffix}")


@cli.command()
@connection_options
@selection_options
@output_option
@dry_run_option
@click.option("--concurrency", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Releases handled at once (each release is handled serially); also the "
                   "most API requests in flight at any moment.")
@click.option("--handshake-timeout", type=DURATION, default="30s", show_default=True,
              help="How long to wait for helm-controller to observe the suspension before deleting.")
@click.option("--backup-dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Write each Secret to DIR (mode 0600) before deleting it; if the write fails "
                   "nothing is deleted. Undo with `restore FILE`.")
@lease_options
@_api_errors
def recover(kubeconfig, kube_context, request_timeout, namespace, all_namespaces, selector,
            names, output, dry_run, concurrency, handshake_timeout, backup_dir, lease_namespace,
            force):
    """Recover stuck HelmReleases once (the same decision table the controller runs)."""
    _run_table("recover", kubeconfig, kube_context, request_timeout, namespace, all_namespaces,
               selector, names, output, dry_run, concurrency, None, handshake_timeout,
               lease_namespace, force, backup_dir)


@cli.command("resume-owned")
@connection_options
@selection_options
@output_option
@dry_run_option
@lease_options
@_api_errors
def resume_owned(kubeconfig, kube_context, request_timeout, namespace, all_namespaces,
                 selector, names, output, dry_run, lease_namespace, force):
    """Lift suspensions flux-plunger itself owns (e.g. left by a crash), with their fences.

    Never touches a suspension another manager set."""
    from ..verbs.recover import RESUME_ROWS
    _run_table("resume-owned", kubeconfig, kube_context, request_timeout, namespace,
               all_namespaces, selector, names, output, dry_run, 1, RESUME_ROWS,
               lease_namespace=lease_namespace, force=force)


@cli.command("release-fence")
@connection_options
@selection_options
@output_option
@dry_run_option
@click.option("--wait-uninstall", is_flag=True,
              help="First let helm-controller finish the uninstall of deleted, fenced releases.")
@click.option("--timeout", type=DURATION, default="120s", show_default=True,
              help="Bound of --wait-uninstall.")
@click.option("--retry-window", type=DURATION, default="60s", show_default=True,
              help="How long to keep retrying one release before reporting it NOT released.")
@click.option("--deadline", type=DURATION, default="0", show_default=True,
              help="Finish everything (wait included) within this time and print the summary "
                   "(0: no global deadline), e.g. from an uninstall hook's activeDeadlineSeconds.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Releases handled at once.")
@_api_errors
def release_fence(kubeconfig, kube_context, request_timeout, namespace, all_namespaces,
                  selector, names, output, dry_run, wait_uninstall, timeout, retry_window,
                  deadline, concurrency):
    """Remove flux-plunger's uninstall fence (what uninstalling the controller runs).

    Lifts suspensions flux-plunger alone owns, removes every copy of the fence, and
    exits non-zero while any fence remains."""
    from ..events import Recorder
    from ..executor import Executor, Options
    from ..verbs import release_fence as verb
    from ..verbs.select import fetch
    from . import render
    from .. import detect

    import time

    ends = time.monotonic() + deadline if deadline else None
    s = Session(kubeconfig, kube_context, request_timeout, namespace, all_namespaces,
                selector, names, dry_run)
    releases, missing = fetch(s.kube, s.selection)
    for m in missing:
        click.echo(f"Error from server (NotFound): {m}", err=True)
    fenced = [hr for hr in releases if detect.is_fenced(hr)]
    if dry_run == "client":
        for hr in fenced:
            md = hr["metadata"]
            click.echo(f"would release the uninstall fence from {md['namespace']}/{md['name']}")
        click.echo(f"{len(fenced)} fenced HelmReleases (dry run)")
        raise SystemExit(int(Exit.FAILURE if missing else Exit.OK))
    if wait_uninstall and fenced and dry_run == "none":
        executor = Executor(s.kube, Recorder(s.kube, enabled=(dry_run == "none")),
                            options=Options(allow_recover=False))
        wait_for = timeout if ends is None else max(0.0, min(timeout, ends - time.monotonic()))
        fenced, released_waiting = verb.wait_uninstalls(executor, fenced, wait_for)
    else:
        released_waiting = []
    results = released_waiting + verb.run(s.kube, fenced, window=retry_window, deadline=ends,
                                          concurrency=concurrency)
    if output in ("json", "yaml"):
        items = [r.as_dict() for r in results]
        click.echo(render.as_json(items, "FenceRelease") if output == "json"
                   else render.as_yaml(items, "FenceRelease"))
    elif output == "name":
        if results:
            click.echo(render.names([r.as_dict() for r in results if r.released]))
    else:
        for r in results:
            click.echo(r.line(), err=not r.released)
        click.echo(verb.summary(results) + (" (dry run)" if dry_run == "server" else ""))
    ok = all(r.released for r in results) and not missing
    raise SystemExit(int(Exit.OK if ok else Exit.FAILURE))


@cli.command()
@connection_options
@click.argument("source", metavar="FILE|SECRET")
@click.option("-n", "--namespace", metavar="NS",
              help="Namespace of a backup SECRET (default: the context's).")
@click.option("--force", is_flag=True,
              help="Restore although the HelmRelease is not suspended by you (or is gone).")
@dry_run_option
@output_option
@_api_errors
def restore(kubeconfig, kube_context, request_timeout, source, namespace, force, dry_run, output):
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
            ns = ns or s.selection.namespace
            doc, where = load_secret(s.kube, ns, name), f"Secret {ns}/{name}"
    except BackupError as exc:
        fail(str(exc))
    res = verb.run(s.kube, doc, where, force=force, dry_run=dry_run)
    if output in ("json", "yaml"):
        click.echo(render.as_json([res.as_dict()], "Restore") if output == "json"
                   else render.as_yaml([res.as_dict()], "Restore"))
    else:
        click.echo(res.line(), err=not res.ok)
    raise SystemExit(int(Exit.OK if res.ok else Exit.FAILURE))


@cli.command()
@connection_options
@click.option("--client", "client_only", is_flag=True, help="Only the client version; no cluster.")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text")
@_api_errors
def version(kubeconfig, kube_context, request_timeout, client_only, output):
    """Print the client version and, with a cluster, the server and helm-controller versions."""
    from ..verbs import version as verb
    info = verb.client()
    if not client_only:
        from ..kube import ConfigError, Kube
        try:
            kube = Kube.from_kubeconfig(kubeconfig, kube_context,
                                        request_timeout=request_timeout or 10)
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
        labels = {"clientVersion": "Client Version", "serverVersion": "Server Version",
                  "helmControllerVersion": "helm-controller Version"}
        for k, v in info.items():
            click.echo(f"{labels[k]}: {v}")


def _register_serve():
    try:
        from .serve import serve  # noqa: F401 - registered on import
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kubectl-flux_plunger`` and ``flux-plunger``."""
    _register_serve()
    prog = _prog_name()
    # click derives the completion variable from the program name, which has a space here
    complete_var = ("_FLUX_PLUNGER_COMPLETE" if prog.startswith("flux ")
                    else "_KUBECTL_FLUX_PLUNGER_COMPLETE")
    if os.environ.get(complete_var):
        prog = os.path.basename(sys.argv[0] or "") or "kubectl-flux_plunger"
    try:
        cli.main(args=argv, prog_name=prog, complete_var=complete_var, standalone_mode=False)
    except click.UsageError as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        cmd = exc.ctx.command_path if exc.ctx else prog
        click.echo(f"See '{cmd} --help' for usage.", err=True)
        return int(Exit.USAGE)
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        return int(Exit.FAILURE)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return int(Exit.FAILURE)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return int(Exit.FAILURE)
    return int(Exit.OK)
