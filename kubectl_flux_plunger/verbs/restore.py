"""``restore FILE|SECRET``: put back a Helm storage revision saved by ``recover --backup-dir``
or by serve's backup Secret.

Guarded: the Secret is created, never overwritten (a create fails on an existing name); only
while the revision is absent; and only while the HelmRelease it belongs to is suspended by its
caller (any manager but flux-plunger), so helm-controller is not acting on it — unless
``force``.  The revision goes back to the cluster it was taken from (the remote cluster of
``spec.kubeConfig`` for such releases).

:func:`restore` is the verb as the command line runs it (the backup read, the
running-controller check, :func:`run`); what it cannot do comes back as data."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core import detect, ownership
from ..executor.backup import (
    BackupError,
    load_file,
    load_secret,
    original,
    provenance,
    revision_of,
)
from ..executor.primitives import create_storage_secret
from ..kube import Kube
from ..kube.remote import RemoteError, Remotes, storage_cluster
from .controller_check import LeaseFlags
from .controller_check import check as controller_check


@dataclass
class RestoreResult:
    action: str  # created, would-create, refused
    detail: str
    namespace: str = ""
    name: str = ""
    revision: int = 0
    cluster: str = ""
    controller: str = ""  # the Lease of the running controller that covers the release

    @property
    def ok(self) -> bool:
        return self.action != "refused"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return self.detail


@dataclass(frozen=True)
class RestoreOptions:
    """What ``restore`` was asked for: ``source``, a backup file or a Secret ``[NS/]NAME``
    (``namespace``: of a Secret named without one; None: ``default``); ``force``; ``dry_run``
    none|client|server; ``lease``, the flags of the running-controller check."""

    source: str
    namespace: str | None = None
    force: bool = False
    dry_run: str = "none"
    lease: LeaseFlags = field(default_factory=LeaseFlags)


@dataclass(frozen=True)
class Restored:
    """What the verb did (``result``), or why it did nothing (``refusal``: the backup cannot
    be read, or the running-controller check refused; ``result`` is None then)."""

    result: RestoreResult | None = None
    refusal: str = ""


def restore(
    kube: Kube, opts: RestoreOptions, on_warning: Callable[[str], None] = lambda _: None
) -> Restored:
    """The verb: read the backup (a file when ``opts.source`` is one, else the Secret), then
    the running-controller check (none for a client-side dry run; its warnings told through
    ``on_warning``), then :func:`run`."""
    try:
        if os.path.exists(opts.source):
            doc, where = load_file(opts.source), opts.source
        else:
            ns, _, name = opts.source.rpartition("/")
            ns = ns or opts.namespace or "default"
            doc, where = load_secret(kube, ns, name), f"Secret {ns}/{name}"
    except BackupError as exc:
        return Restored(refusal=str(exc))
    covered = None
    if opts.dry_run != "client":
        found = controller_check(kube, opts.lease, namespaces=(_release_ns(doc),))
        if found.refusal:
            return Restored(refusal=found.refusal)
        for line in found.warnings:
            on_warning(line)
        covered = found.covered
    return Restored(run(kube, doc, where, force=opts.force, dry_run=opts.dry_run, covered=covered))


def _release_ns(doc: dict[str, Any]) -> str | None:
    """The namespace of the HelmRelease a backup belongs to (None: not a backup; :func:`run`
    says so)."""
    try:
        return provenance(doc)[0]
    except BackupError:
        return None


def run(
    kube: Kube,
    doc: dict[str, Any],
    source: str,
    *,
    force: bool = False,
    dry_run: str = "none",
    covered: Callable[[Any], Any] | None = None,
) -> RestoreResult:
    """Restore the backup document ``doc`` (read from ``source``); never raises KubeError
    for an expected refusal, which comes back as ``action == "refused"``.  ``covered``:
    which running flux-plunger controller covers the HelmRelease (``Options.covered``);
    the revision is then not restored behind its back."""
    secret = original(doc)
    hr_ns, hr_name, cluster = provenance(doc)
    md = secret["metadata"]
    ns, name, rev = md["namespace"], md["name"], revision_of(secret)
    ref = f"Secret {ns}/{name}"
    where = "" if cluster == "local" else f" in cluster {cluster}"
    result = RestoreResult("refused", "", ns, name, rev, cluster)

    def refuse(why: str) -> RestoreResult:
        result.detail = f"not restored {ref} (revision {rev}){where}: {why}"
        return result

    hr = kube.get_hr(hr_ns, hr_name)
    by = covered(hr) if covered is not None and hr is not None else None
    if by is not None:
        result.controller = by.lease
        return refuse(by.detail)
    why = _refusal(hr, f"{hr_ns}/{hr_name}", cluster, force)
    if why:
        return refuse(why)
    remotes = Remotes(kube)
    try:
        store = remotes.storage_kube(hr) if hr is not None else kube
        now = storage_cluster(store)
        if now != cluster:
            return refuse(
                f"the backup comes from cluster {cluster}, but the HelmRelease's "
                f"storage is now in cluster {now}"
            )
        if not create_storage_secret(store, secret, dry_run):
            return refuse("it already exists; restore never overwrites")
        result.cluster = now
        if dry_run == "client":
            result.action = "would-create"
            result.detail = f"would create {ref} (revision {rev}){where} from {source}"
            return result
        # a server dry run is a would-create; the caller adds the one dry-run suffix
        result.action = "would-create" if dry_run == "server" else "created"
        result.detail = (
            f"{'would create' if dry_run == 'server' else 'created'} {ref} "
            f"(revision {rev} of release "
            f"{(md.get('labels') or {}).get('name', '?')}){where} from {source}"
        )
        return result
    except RemoteError as exc:
        return refuse(str(exc))
    finally:
        remotes.close()


def _refusal(hr: dict[str, Any] | None, hr_ref: str, cluster: str, force: bool) -> str:
    """Why the HelmRelease ``hr`` (None: gone) forbids the restore; empty when it does not:
    helm-controller may act on it unless its caller suspended it (``force`` skips that)."""
    if hr is None:
        if not force:
            return (
                f"HelmRelease {hr_ref} does not exist; pass --force to restore the revision anyway"
            )
        if cluster != "local":
            return f"HelmRelease {hr_ref} does not exist, so its remote cluster cannot be reached"
    elif not force:
        if not detect.is_suspended(hr):
            return (
                f"HelmRelease {hr_ref} is not suspended; suspend it "
                "first (flux suspend helmrelease) or pass --force"
            )
        if ownership.owns_suspend(hr):
            return (
                f"HelmRelease {hr_ref} is suspended by flux-plunger "
                "(a recovery is in flight); suspend it yourself or pass --force"
            )
    return ""


__all__ = ["BackupError", "RestoreResult", "run"]
