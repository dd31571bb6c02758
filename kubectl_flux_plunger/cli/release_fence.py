"""``release-fence``: remove flux-plunger's uninstall fence (what uninstalling the controller
runs), optionally after stopping the controller and waiting for the uninstalls."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NoReturn

import click

from .errors import Exit, api_errors, fail, warn
from .examples import Command
from .notifier import notifier
from .options import (
    concurrency_option,
    connection_options,
    dry_run_option,
    duration_option,
    events_addr_option,
    lease_options,
    result_output_option,
    selection_options,
)
from .session import Session
from .target import Target, pass_target

if TYPE_CHECKING:
    from ..verbs.fence_sweep import SweepOptions


@click.command("release-fence", cls=Command)
@connection_options
@selection_options
@result_output_option
@dry_run_option
@click.option(
    "--wait-uninstall",
    is_flag=True,
    help="First let helm-controller finish the uninstall of deleted, fenced releases.",
)
@duration_option("--timeout", default="120s", show_default=True, help="Bound of --wait-uninstall.")
@duration_option(
    "--retry-window",
    default="60s",
    show_default=True,
    help="How long to keep retrying one release before reporting it NOT released.",
)
@duration_option(
    "--deadline",
    default="0",
    show_default=True,
    help="Finish everything (wait included) within this time and print the summary "
    "(0: no global deadline), e.g. from an uninstall hook's activeDeadlineSeconds.",
)
@concurrency_option("--concurrency", default=8, show_default=True, help="Releases handled at once.")
@click.option(
    "--stop-deployment",
    metavar="NS/NAME",
    help="First scale the controller's Deployment NS/NAME to zero and wait for its "
    "pods (what the chart's uninstall hook runs); no fence is touched unless "
    "the scale succeeded or the Deployment does not exist (nothing to stop, "
    "e.g. the hook running again after it was deleted).",
)
@duration_option(
    "--stop-timeout",
    default="100s",
    show_default=True,
    help="How long --stop-deployment waits for the pods to go (and, when some did "
    "not, once more after the sweep before looking for fences set behind it).",
)
@lease_options
@events_addr_option
@api_errors
@pass_target
def release_fence(
    target: Target,
    output: str,
    dry_run: str,
    wait_uninstall: bool,
    timeout: float,
    retry_window: float,
    deadline: float,
    concurrency: int,
    stop_deployment: str | None,
    stop_timeout: float,
    lease_namespace: str | None,
    force: bool,
    lease_name: str | None,
    events_addr: str | None,
) -> None:
    """Remove flux-plunger's uninstall fence (what uninstalling the controller runs).

    Lifts suspensions flux-plunger alone owns, removes every copy of the fence, and
    exits non-zero while any fence remains.  A release a running flux-plunger controller
    covers is left to it (NOT released), unless --force; the controller --stop-deployment
    stopped does not count."""
    from ..verbs.controller_check import LeaseFlags
    from ..verbs.fence_sweep import SweepOptions

    opts = SweepOptions(
        dry_run=dry_run,
        wait_uninstall=wait_uninstall,
        timeout=timeout,
        retry_window=retry_window,
        deadline=deadline,
        concurrency=concurrency,
        stop_deployment=_deployment(stop_deployment),
        stop_timeout=stop_timeout,
        lease=LeaseFlags(lease_namespace, lease_name, force),
    )
    _run(target, opts, output, events_addr)


def _deployment(value: str | None) -> tuple[str, str] | None:
    """``--stop-deployment NS/NAME`` as (namespace, name)."""
    if value is None:
        return None
    ns, _, name = value.partition("/")
    if not ns or not name or "/" in name:
        raise click.BadParameter(f"{value!r} is not NAMESPACE/NAME", param_hint="--stop-deployment")
    return ns, name


def _run(target: Target, opts: SweepOptions, output: str, events_addr: str | None) -> NoReturn:
    """Connect, sweep (verbs/fence_sweep.py), render; exit 1 while any fence remains."""
    from ..verbs import fence_sweep, stop

    s = Session(target, opts.dry_run)
    hooks = fence_sweep.SweepHooks(
        stopped=functools.partial(_stopped, opts.dry_run),
        warned=warn,
        missing=lambda m: click.echo(f"Error from server (NotFound): {m}", err=True),
        notifier=lambda: notifier(events_addr, opts.dry_run),
    )
    try:
        swept = fence_sweep.sweep(s.kube, s.selection, opts, hooks)
    except stop.StopError as exc:
        fail(f"{exc}; no fence was touched")
    if swept.refusal:
        fail(swept.refusal)
    all_ns = s.selection.all_namespaces
    if opts.dry_run == "client":
        _render_plan(swept.would_release, output, all_ns)
        raise SystemExit(int(Exit.FAILURE if swept.missing else Exit.OK))
    _render(swept.results, output, opts.dry_run, all_ns)
    raise SystemExit(int(Exit.OK if swept.ok else Exit.FAILURE))


def _render_plan(refs: list[tuple[str, str]], output: str, all_ns: bool) -> None:
    """A client dry run: the fenced releases that would be released."""
    from . import render

    if output in ("json", "yaml"):
        items = [
            {
                "apiVersion": render.API_VERSION,
                "kind": "FenceRelease",
                "metadata": {"name": n, "namespace": ns},
                "released": False,
                "withoutUninstall": False,
                "message": "fenced; would be released",
                "dryRun": "client",
            }
            for ns, n in refs
        ]
        click.echo(render.dump(render.document("FenceRelease", items, dryRun="client"), output))
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


def _render(results: list[Any], output: str, dry_run: str, all_ns: bool) -> None:
    from ..verbs import release_fence as verb
    from . import render

    if output in ("json", "yaml"):
        items = [render.fence_item(r, dry_run) for r in results]
        click.echo(render.dump(render.document("FenceRelease", items, dryRun=dry_run), output))
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


def _stopped(dry_run: str, ref: tuple[str, str], stopped: Any) -> None:
    """``release-fence --stop-deployment``: progress on stderr (stdout stays the result);
    ``stopped`` None: a client dry run."""
    from .render import DRY_SUFFIX

    ns, name = ref
    if stopped is None:
        click.echo(f"would scale Deployment {ns}/{name} to zero (dry run)", err=True)
        return
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
