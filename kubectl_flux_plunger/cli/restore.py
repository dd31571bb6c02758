"""``restore``: put back a revision saved by ``recover --backup-dir`` or serve's backup
Secrets, never over an existing Secret."""

from __future__ import annotations

import os
from typing import Any

import click

from .errors import Exit, api_errors, fail
from .examples import Command
from .options import (
    connection_options,
    dry_run_option,
    lease_scope_options,
    namespace_option,
    result_output_option,
)
from .session import Session, controller_check
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
    from ..executor.backup import BackupError, load_file, load_secret
    from ..verbs import restore as verb
    from . import render

    s = Session(Target(kubeconfig, kube_context, request_timeout, namespace), dry_run)
    try:
        if os.path.exists(source):
            doc, where = load_file(source), source
        else:
            ns, _, name = source.rpartition("/")
            ns = ns or s.selection.namespace or "default"
            doc, where = load_secret(s.kube, ns, name), f"Secret {ns}/{name}"
    except BackupError as exc:
        fail(str(exc))
    covered = (
        controller_check(s.kube, lease_namespace, force, lease_name, namespaces=(_release_ns(doc),))
        if dry_run != "client"
        else None
    )
    res = verb.run(s.kube, doc, where, force=force, dry_run=dry_run, covered=covered)
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


def _release_ns(doc: dict[str, Any]) -> str | None:
    """The namespace of the HelmRelease a backup belongs to (None: not a backup; the verb
    says so)."""
    from ..executor.backup import BackupError, provenance

    try:
        return provenance(doc)[0]
    except BackupError:
        return None
