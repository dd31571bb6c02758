"""Request bodies of the write primitives (SPEC §5).  Pure: they build new dicts, never send.

Every body carries the evidence of the read that decided on it: ``metadata.resourceVersion``
turns any write landing in between into a 409 (re-decide) and ``metadata.uid`` stops a
server-side apply from re-creating a release that is gone.  The apply bodies are minimal so we
never take ownership of a field we do not mean to own.  Builders never mutate their input.

The Flux UI's ``fluxcd.controlplane.io/suspendedBy`` annotation rides on the same requests as
the suspension, never a request of its own.  Under server-side apply a field our apply lists
is ours (a different value another writer set would be a conflict, which a forced acquire
would win: so the acquire lists it only where it is absent or already says flux-plunger),
and a field a later apply of ours omits is removed only when no other manager owns it.  The
relinquish omits it — it goes with the suspension — unless another manager keeps the
suspension on (a co-owner of ``spec.suspend``): then it stays, as the UI keeps the first
suspender's name.  The JSON patches remove it only where our ``Apply`` entry owns it and
nobody holds a suspension any more (``ownership.owns_suspended_by``).
"""

from __future__ import annotations

from . import constants
from .objects import Obj
from .ownership import (
    fence_indices,
    is_fenced,
    may_mark_suspended_by,
    owns_suspend,
    owns_suspended_by,
    sole_owner_is_us,
)

# JSON pointer of the annotation ("/" in the key escaped as "~1", RFC 6901)
SUSPENDED_BY_PATH = "/metadata/annotations/" + constants.SUSPENDED_BY_ANNOTATION.replace(
    "~", "~0"
).replace("/", "~1")


def _metadata(hr: Obj) -> Obj:
    """``metadata`` of the read (empty when malformed)."""
    metadata = hr.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _read_evidence(hr: Obj) -> tuple[str, str]:
    """(resourceVersion, uid) of the read; a write without them would be unconditional."""
    rv, uid = _metadata(hr).get("resourceVersion"), _metadata(hr).get("uid")
    if not isinstance(rv, str) or not rv or not isinstance(uid, str) or not uid:
        raise ValueError("HelmRelease read carries no metadata.resourceVersion and uid")
    return rv, uid


def _apply_metadata(hr: Obj) -> Obj:
    """Identity plus read preconditions: the metadata every server-side apply body starts from."""
    rv, uid = _read_evidence(hr)
    return {
        "name": _metadata(hr).get("name"),
        "namespace": _metadata(hr).get("namespace"),
        "resourceVersion": rv,
        "uid": uid,
    }


def _suspended_by() -> Obj:
    return {constants.SUSPENDED_BY_ANNOTATION: constants.SUSPENDED_BY}


def acquire_body(hr: Obj) -> Obj:
    """SSA body that suspends the release and adds our fence in one write — and the Flux
    UI's ``suspendedBy: flux-plunger`` unless the read carries another name there.

    No ``spec.interval`` or any other field: the apply must not claim fields we do not own.
    """
    metadata = {**_apply_metadata(hr), "finalizers": [constants.FENCE]}
    if may_mark_suspended_by(hr):
        metadata["annotations"] = _suspended_by()
    return {
        "apiVersion": constants.HR_API_VERSION,
        "kind": constants.HR_KIND,
        "metadata": metadata,
        "spec": {"suspend": True},
    }


def relinquish_body(hr: Obj) -> Obj:
    """SSA body that gives ``spec.suspend`` up (and, on a live release, the fence with it).

    Omitting a field from our apply drops our ownership: a sole-owned ``spec.suspend`` is
    removed (the release resumes) and, finalizers being a set, our fence entry goes while
    helm-controller's stays.  A terminating, fenced release keeps the fence (the apiserver would
    refuse to add it back) until helm-controller has run the uninstall.  Our ``suspendedBy``
    goes with the suspension, unless another manager co-owns ``spec.suspend`` and so keeps
    the release suspended: the UI's "Suspended by" then keeps naming the first suspender.
    """
    metadata = _apply_metadata(hr)
    terminating = bool(_metadata(hr).get("deletionTimestamp"))
    if terminating and is_fenced(hr):
        metadata["finalizers"] = [constants.FENCE]
    if owns_suspended_by(hr) and owns_suspend(hr) and not sole_owner_is_us(hr):
        metadata["annotations"] = _suspended_by()
    return {
        "apiVersion": constants.HR_API_VERSION,
        "kind": constants.HR_KIND,
        "metadata": metadata,
    }


def record_patch(hr: Obj, revision: int, budget: str | None = None) -> Obj:
    """JSON merge patch recording the revision about to be deleted, locked on resourceVersion,
    and — in the same patch — the recovery budget's record (``budget.record_value``)."""
    rv, _ = _read_evidence(hr)
    notes = {constants.PROCESSED_ANNOTATION: str(revision)}
    if budget is not None:
        notes[constants.BUDGET_ANNOTATION] = budget
    return {"metadata": {"resourceVersion": rv, "annotations": notes}}


def _evidence_tests(hr: Obj) -> list[Obj]:
    """JSON patch ``test`` ops that fail unless the object is still the one we read."""
    rv, uid = _read_evidence(hr)
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "test", "path": "/metadata/uid", "value": uid},
    ]


def _drop_suspended_by(hr: Obj) -> list[Obj]:
    """``test`` + ``remove`` of our ``suspendedBy`` where our apply owns it, else nothing."""
    if not owns_suspended_by(hr):
        return []
    return [
        {"op": "test", "path": SUSPENDED_BY_PATH, "value": constants.SUSPENDED_BY},
        {"op": "remove", "path": SUSPENDED_BY_PATH},
    ]


def unsuspend_json_patch(hr: Obj) -> list[Obj]:
    """Guarded JSON patch lifting a suspension flux-plunger alone owns (release-fence; never
    an SSA apply there), our ``suspendedBy`` with it."""
    return [
        *_evidence_tests(hr),
        {"op": "replace", "path": "/spec/suspend", "value": False},
        *_drop_suspended_by(hr),
    ]


def remove_fence_json_patch(hr: Obj) -> list[Obj] | None:
    """Guarded JSON patch removing every copy of the fence; None when there is none.

    Indices go in descending order so each removal leaves the earlier indices valid, and each
    is preceded by a ``test`` that the entry there is still our fence.  On a release nobody
    keeps suspended (another writer lifted our suspension: `flux resume`, the MCP server's
    resume) our ``suspendedBy`` goes in the same patch; while any suspension stands it stays.
    """
    indices = fence_indices(hr)
    if not indices:
        return None
    ops = _evidence_tests(hr)
    for index in sorted(indices, reverse=True):
        path = f"/metadata/finalizers/{index}"
        ops.append({"op": "test", "path": path, "value": constants.FENCE})
        ops.append({"op": "remove", "path": path})
    spec = hr.get("spec")
    if not (isinstance(spec, dict) and spec.get("suspend") is True):
        ops += _drop_suspended_by(hr)
    return ops
