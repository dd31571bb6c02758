"""What the action units share: the step texts of the recovery sequence (one list, so a
dry run's plan cannot drift from what a real run reports) and what they name
(``step_args``), and the one step both the recovery's final relinquish and the RELINQUISH
action end with when the suspension is no longer ours (``drop_fence_not_ours``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core import constants as C
from ..core import detect, ownership, storage
from ..core.objects import Obj
from .primitives import Primitives


@dataclass(frozen=True)
class Step:
    """One step of the recovery sequence: how a dry run announces it and how a real run
    reports it done — one list, so the plan cannot drift from what runs."""

    plan: str
    done: str


ACQUIRE = Step(
    f"apply (flux-plunger) spec.suspend=true and finalizer {C.FENCE}{{mark}}",
    "suspended and fenced",
)
HANDSHAKE = Step("wait for helm-controller to observe the suspension", "")
RECORD = Step(f"annotate {C.PROCESSED_ANNOTATION}={{revision}}", "recorded revision {revision}")
DELETE = Step(
    "delete Secret {namespace}/{name}{where} (uid {uid}, resourceVersion {rv}, Helm "
    "status {status})",
    "deleted {namespace}/{name}{where}",
)
RELINQUISH = Step(
    "apply (flux-plunger) without spec.suspend and without the fence{unmark}",
    "lifted the suspension",
)
RECOVERY_STEPS = (ACQUIRE, HANDSHAKE, RECORD, DELETE, RELINQUISH)


def step_args(choice: storage.Choice, where: str = "", hr: Obj | None = None) -> dict[str, object]:
    """What the step texts name for the chosen revision (``where``: `` in cluster <server>``
    for storage in the remote cluster of spec.kubeConfig; ``hr``: the read the acquire would
    be built from — whether it marks the Flux UI's suspendedBy)."""
    rev = choice.revision
    assert rev is not None
    marks = hr is not None and ownership.may_mark_suspended_by(hr)
    return {
        "mark": f", with annotation {C.SUSPENDED_BY_ANNOTATION}={C.SUSPENDED_BY}" if marks else "",
        "unmark": f", and without annotation {C.SUSPENDED_BY_ANNOTATION}" if marks else "",
        "revision": rev.number,
        "namespace": rev.namespace,
        "name": rev.name,
        "uid": rev.uid,
        "rv": rev.resource_version,
        "status": choice.helm_status,
        "where": where,
    }


def drop_fence_not_ours(prims: Primitives, current: Obj) -> bool:
    """Our suspension is not ours any more: on a fresh read, drop our fence where SPEC
    §6 says it must not outlive us (live; terminating and suspended by another
    manager).  True when a fence was removed."""
    fresh = prims.fresh(current)
    if (
        fresh is not None
        and detect.is_fenced(fresh)
        and (
            not detect.is_terminating(fresh)
            or (detect.is_suspended(fresh) and not ownership.owns_suspend(fresh))
        )
    ):
        return prims.remove_fence(fresh) is not None
    return False
