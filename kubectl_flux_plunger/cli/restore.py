"""``restore``: put back a revision saved by ``recover --backup-dir`` or serve's backup
Secrets, never over an existing Secret."""

from __future__ import annotations

import click

from .errors import Exit, api_errors, fail, warn
from .examples import Command
from .options import (
    connection_options,
    dry_run_option,
    lease_scope_options,
    namespace_option,
    result_output_option,
)
from .session import Session
from .target import Target


@click.command("restore", cls=Command)
@connection_options
@click.argument("source", metavar="FILE|SECRET")
@namespace_option(help="Namespace of a backup SECRET (default: the context's).")
@click.option(
    "--force",
    is_flag=True,
    help="Restore although the HelmRelease is not suspended by you (or is gone), or a "
    "running flux-plunger controller covers it.",
)
@dry_run_option
@result_output_option
@lease_scope_options
@api_errors
def restore(
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    source: str,
    namespace: str | None,
    force: bool,
    dry_run: str,
    output: str,
    lease_namespace: str | None,
    lease_name: str | None,
) -> None:
    """Put back a revision saved by `recover --backup-dir` (FILE) or by serve's
    --backup-secret-namespace ([NS/]SECRET).

    Creates the Secret only while it is absent (never overwrites) and only while the
    HelmRelease is suspended by you (e.g. `flux suspend helmrelease`) and no running
    flux-plunger controller covers it, unless --force."""
    from ..verbs import restore as verb
    from ..verbs.controller_check import LeaseFlags
    from . import render

    s = Session(Target(kubeconfig, kube_context, request_timeout, namespace), dry_run)
    opts = verb.RestoreOptions(
        source,
        s.selection.namespace,
        force,
        dry_run,
        LeaseFlags(lease_namespace, lease_name, force),
    )
    done = verb.restore(s.kube, opts, on_warning=warn)
    if done.result is None:
        fail(done.refusal)
    res = done.result
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
