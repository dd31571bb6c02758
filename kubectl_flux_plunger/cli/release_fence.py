"""``release-fence``: remove flux-plunger's uninstall fence (what uninstalling the controller
runs), optionally after stopping the controller and waiting for the uninstalls."""

from __future__ import annotations

from typing import Any

import click

from .examples import Command
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
from .session import (
    Exit,
    Session,
    Target,
    api_errors,
    controller_check,
    fail,
    notifier,
    pass_target,
)


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
    s = Session(target, dry_run)
    all_ns = s.selection.all_namespaces
    stopped = (
        _stop_controller(s, stop_ref, stop_timeout, retry_window, dry_run) if stop_ref else None
    )
    # the global deadline counts from here: the stop before it is bounded on its own
    ends = time.monotonic() + deadline if deadline else None
    # every flux-plunger Lease, read after the stop (a controller that stopped gave its
    # Lease up) and before the LIST that decides; the stopped controller's own Lease does
    # not count (it may outlive a pod that did not drain)
    covered = (
        controller_check(
            s.kube,
            lease_namespace,
            force,
            lease_name,
            stopped=(stopped.lease,) if stopped is not None and stopped.lease else (),
        )
        if dry_run != "client"
        else None
    )
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
            Recorder(s.kube, enabled=(dry_run == "none"), notifier=notifier(events_addr, dry_run)),
            options=Options(allow_recover=False, selector=s.selection.matcher(), covered=covered),
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
        covered=covered,
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
