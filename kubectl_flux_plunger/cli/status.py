"""``status``: every HelmRelease flux-plunger would act on or has touched (read-only), and
``--watch``."""

from __future__ import annotations

from typing import Any

import click

from .errors import Exit, api_errors, warn
from .examples import Command
from .options import (
    connection_options,
    default_service_account_option,
    lease_name_option,
    output_option,
    selection_options,
)
from .session import Session
from .target import Target, pass_target


@click.command("status", cls=Command)
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
    help="Where to look for the controllers' Leases when the Leases of the cluster may not "
    "be listed (with the releases' namespace); every flux-plunger Lease of the cluster is "
    "read otherwise (one LIST; each shard's records what it watches) "
    "[default: the pod's namespace in a cluster, else flux-plunger].",
)
@lease_name_option
@default_service_account_option
@api_errors
@pass_target
def status(
    target: Target,
    output: str,
    no_headers: bool,
    watch: bool,
    lease_namespace: str | None,
    lease_name: str | None,
    default_service_account: str | None,
) -> None:
    """Show every HelmRelease flux-plunger would act on or has touched (read-only).

    A namespace whose HelmReleases are all healthy and untouched says so on stderr.

    A release shown `recovering` is held by flux-plunger, which suspended it for the
    recovery (-o wide and -o json say since when, and whether the controller or a
    one-shot run holds it).  A `flux suspend` landing then is a no-op: spec.suspend is
    already true, so flux writes nothing, and flux-plunger lifts the suspension when it
    finishes.  Suspend again once status no longer shows the release recovering.  A
    `flux resume` landing then stops the recovery before any delete.

    The Flux Operator's Web UI shows such a release "Suspended by flux-plunger" (annotation
    fluxcd.controlplane.io/suspendedBy); its Suspend and its MCP server's suspend write
    nothing then, and their Resume stops the recovery as `flux resume` does.  A release
    suspended in that UI shows its user next to the manager in SUSPEND-OWNER:
    `flux-operator-web (alice)`."""
    import datetime as dt

    from ..verbs import status as verb
    from . import render

    s = Session(target)
    if lease_namespace is not None and not lease_namespace.strip():
        raise click.UsageError("--lease-namespace must not be empty")
    found = verb.controllers(s.kube, lease_namespace, lease_name, (s.selection.namespace,))
    leases = list(found.leases)
    held = verb.judge(s.kube, default_service_account)
    rep = verb.report(s.kube, s.selection, leases=leases, held=held)
    for line in found.warnings:
        warn(line)
    if getattr(held.claimants, "warning", ""):
        warn(held.claimants.warning)  # type: ignore[union-attr]
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
    _summary(s, rep, output, watch=watch)
    if watch:
        _watch_status(
            s, output, wide=wide, shown={(r.namespace, r.name) for r in rep.rows}, leases=leases
        )
    raise SystemExit(int(Exit.FAILURE if rep.missing else Exit.OK))


def _summary(s: Session, rep: Any, output: str, *, watch: bool) -> None:
    """The line on stderr after a table, as kubectl's "No resources found": how many
    releases of how many selected are in which state — or that none needs attention."""
    from . import render

    plural = "s" if rep.total != 1 else ""
    if rep.rows and output in ("table", "wide") and not watch:
        counts = render.state_counts(r.state for r in rep.rows)
        listed = f"{len(rep.rows)} listed"
        click.echo(f"{rep.total} HelmRelease{plural}{s.where()}, {listed}: {counts}.", err=True)
    if not rep.rows and not rep.missing and output not in ("json", "yaml"):
        if rep.total == 0:
            click.echo(f"No resources found{s.where()}.", err=True)
        else:
            click.echo(
                f"{rep.total} HelmRelease{plural}{s.where()}, none needs attention.", err=True
            )


def _watch_status(
    s: Session, output: str, *, wide: bool, shown: set[tuple[str, str]], leases: Any = None
) -> None:
    """``status --watch``: one line (or document) per change of a release that needs
    attention or was shown, until interrupted.  Like ``kubectl get -w``: no header again."""
    from ..kube import KubeError, hr_path
    from ..verbs import status as verb
    from ..verbs.status import interesting
    from . import render
    from .wakeful import wakeful

    sel = s.selection
    ns = None if sel.all_namespaces else sel.namespace
    while True:
        rv = s.kube.request(
            "LIST", "GET", hr_path(ns), query={"labelSelector": sel.selector, "limit": 1}
        )["metadata"]["resourceVersion"]
        try:
            for event in wakeful(s.kube.watch_hrs(ns, sel.selector, rv)):
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
