"""Reading a HelmRelease: stuck detection, staleness guard, small accessors (SPEC §4–§6).

``fence_indices`` and ``is_fenced`` live in ``ownership`` (the layers contract keeps ``writes``
off this module) and are re-exported here so callers find every state accessor in one place.

Everything here takes the plain JSON dict the apiserver returns and never raises on odd shapes:
a missing or mistyped field reads as absent.
"""

# no `from __future__ import annotations`: it would shadow `annotations()` below for mypy
import enum
import re
from datetime import datetime, timezone
from typing import Any

from . import constants, ownership
from .objects import Obj
from .ownership import fence_indices as fence_indices  # re-exported
from .ownership import is_fenced as is_fenced  # re-exported

_DECIMAL = re.compile(r"[0-9]+")
# Helm revisions are Go ints; a longer run of digits is not a revision (and would exceed
# Python's int-from-string digit limit)
MAX_REVISION_DIGITS = 18
_RFC3339 = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ]([0-9]{2}:[0-9]{2}:[0-9]{2})"  # date, time
    r"(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})?"  # fraction, offset
)


def dig(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…`` or None as soon as a step is missing or not a mapping."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _int_or_none(value: Any) -> int | None:
    """An int field as int; bools and other types read as absent."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _conditions(hr: Obj) -> list[Obj]:
    conditions = dig(hr, "status", "conditions")
    if not isinstance(conditions, list):
        return []
    return [c for c in conditions if isinstance(c, dict)]


def finalizers(hr: Obj) -> list[Any]:
    """``metadata.finalizers`` as a list (empty when absent or malformed)."""
    value = dig(hr, "metadata", "finalizers")
    return list(value) if isinstance(value, list) else []


def annotations(hr: Obj) -> Obj:
    """``metadata.annotations`` as a dict (empty when absent or malformed)."""
    value = dig(hr, "metadata", "annotations")
    return value if isinstance(value, dict) else {}


def generation(hr: Obj) -> int | None:
    """``metadata.generation``, or None when absent."""
    return _int_or_none(dig(hr, "metadata", "generation"))


def get_condition(hr: Obj, type: str) -> Obj | None:  # noqa: A002 - Kubernetes' own key name
    """The first ``status.conditions`` entry of the given type, or None."""
    return next((c for c in _conditions(hr) if c.get("type") == type), None)


class Face(str, enum.Enum):
    """How helm-controller says a release is stuck for good, closed (SPEC §4; the table of
    faces in docs/DESIGN.md).  The face picks the storage check (``storage.choose_revision``);
    the message alone never deletes anything.  A ``str`` so it prints as its value."""

    # Helm's upgrade error: helm-controller took the release for unmanaged (its history
    # does not match the newest revision) and upgraded; no revision is deployed
    NO_DEPLOYED = "no-deployed-releases"
    # helm-controller's own history recorded the newest revision, in a status its
    # DetermineReleaseState cannot place (Ready=False, reason StateError)
    STATE_ERROR = "state-error"
    # Helm's install error: the newest revision is `uninstalled` (an uninstall kept its
    # history), helm-controller installs (Absent) and Helm refuses a name with history
    # unless spec.install.replace
    NAME_IN_USE = "name-in-use"

    def __str__(self) -> str:
        return self.value


_STATE_ERROR_STATUS = re.compile(re.escape(constants.STATE_ERROR_MESSAGE) + r"([^']*)'")


def _failed_with(c: Obj, *messages: str) -> bool:
    """A False condition whose message carries one of ``messages``."""
    message = c.get("message")
    return (
        c.get("status") == "False"
        and isinstance(message, str)
        and any(m in message for m in messages)
    )


def _no_deployed(c: Obj) -> bool:
    """A False condition carrying Helm's "has no deployed releases"."""
    return _failed_with(c, constants.STUCK_MESSAGE)


def _name_in_use(c: Obj) -> bool:
    """A False condition carrying Helm's "cannot reuse a name that is still in use"."""
    return _failed_with(c, *constants.NAME_IN_USE_MESSAGES)


def state_error_status(hr: Obj) -> str | None:
    """The Helm status helm-controller could not place, as its Ready condition quotes it
    (``Ready=False``, reason ``StateError``, ``… unable to determine state for release with
    status '<status>'``); None when the Ready condition is not that."""
    for c in _conditions(hr):
        if (
            c.get("type") == "Ready"
            and c.get("status") == "False"
            and c.get("reason") == constants.STATE_ERROR_REASON
            and isinstance(c.get("message"), str)
        ):
            match = _STATE_ERROR_STATUS.search(c["message"])
            if match:
                return match.group(1)
    return None


def stuck_face(hr: Obj) -> Face | None:
    """The face helm-controller shows of a release stuck for good, or None.

    * ``NO_DEPLOYED``: the Ready condition is False with Helm's "has no deployed releases"
      (the reason, usually ``UpgradeFailed``, is deliberately not examined) — or Ready is
      Unknown (helm-controller mid-retry marks it Unknown/Progressing while it runs the
      upgrade again) and the Released condition still carries that failure;
    * ``STATE_ERROR``: Ready is False, reason ``StateError``, and the message quotes the
      status helm-controller could not place (``state_error_status``);
    * ``NAME_IN_USE``: as ``NO_DEPLOYED``, with Helm's install error "cannot reuse a name
      that is still in use" (Helm v3: "re-use"; the reason, usually ``InstallFailed``, is
      not examined).
    """
    conditions = _conditions(hr)
    ready = [c for c in conditions if c.get("type") == "Ready"]
    retrying = any(c.get("status") == "Unknown" for c in ready)
    released = [c for c in conditions if c.get("type") == "Released"] if retrying else []
    if any(_no_deployed(c) for c in ready):
        return Face.NO_DEPLOYED
    if state_error_status(hr) is not None:
        return Face.STATE_ERROR
    if any(_name_in_use(c) for c in ready):
        return Face.NAME_IN_USE
    if any(_no_deployed(c) for c in released):
        return Face.NO_DEPLOYED
    if any(_name_in_use(c) for c in released):
        return Face.NAME_IN_USE
    return None


def is_stuck(hr: Obj) -> bool:
    """True iff helm-controller shows the release stuck for good, in any face
    (``stuck_face``)."""
    return stuck_face(hr) is not None


def ready_false_reason(hr: Obj) -> str | None:
    """The Ready condition's reason as helm-controller wrote it ("" when it wrote none)
    while Ready is False; None otherwise."""
    ready = get_condition(hr, "Ready")
    if ready is None or ready.get("status") != "False":
        return None
    reason = ready.get("reason")
    return reason if isinstance(reason, str) else ""


def failing_reason(hr: Obj) -> str | None:
    """helm-controller's reason (else ``Unspecified``) when the Ready condition is False for
    something flux-plunger does not repair; None when Ready is not False or the release
    is stuck (``stuck_face``).  ``status`` lists these, and writes nothing to them."""
    reason = None if is_stuck(hr) else ready_false_reason(hr)
    return None if reason is None else reason or "Unspecified"


def is_terminating(hr: Obj) -> bool:
    """True once the HelmRelease has a ``metadata.deletionTimestamp``."""
    return bool(dig(hr, "metadata", "deletionTimestamp"))


def is_suspended(hr: Obj) -> bool:
    """True iff ``spec.suspend`` is literally true."""
    return dig(hr, "spec", "suspend") is True


def processed_annotation_present(hr: Obj) -> bool:
    """True iff the processed-version annotation key exists, whatever its value."""
    return constants.PROCESSED_ANNOTATION in annotations(hr)


def processed_version(hr: Obj) -> int | None:
    """The processed-version annotation as a decimal int; absent or unparsable → None."""
    value = annotations(hr).get(constants.PROCESSED_ANNOTATION)
    if isinstance(value, str) and len(value) <= MAX_REVISION_DIGITS and _DECIMAL.fullmatch(value):
        return int(value)
    return None


def uninstall_reached(hr: Obj) -> bool:
    """True iff helm-controller's finalizer is gone and it observed the current generation.

    helm-controller drops its finalizer without uninstalling a suspended release; lifting the
    suspension bumps the generation, so equality proves it reconciled the unsuspended release.
    """
    current = generation(hr)
    return (
        constants.HELM_CONTROLLER_FINALIZER not in finalizers(hr)
        and current is not None
        and _int_or_none(dig(hr, "status", "observedGeneration")) == current
    )


def observed_lags(hr: Obj) -> bool:
    """True while helm-controller has not finished a reconcile of the current generation.

    After our suspend bumps the generation, helm-controller's suspended reconcile sets
    ``status.observedGeneration`` to it; until then it may still be acting on the release, so
    storage must not be touched.  An absent observedGeneration counts as lagging.
    """
    current = generation(hr)
    observed = _int_or_none(dig(hr, "status", "observedGeneration"))
    return current is None or observed is None or observed < current


def attempted_since_generation(hr: Obj) -> bool:
    """True iff helm-controller has attempted the release at its current generation.

    ``status.lastAttemptedGeneration`` is set when helm-controller starts its Helm logic; the
    Ready condition's ``observedGeneration`` (when present) must agree, so a condition left over
    from an older generation is not taken as a fresh failure.
    """
    current = generation(hr)
    if current is None or _int_or_none(dig(hr, "status", "lastAttemptedGeneration")) != current:
        return False
    ready = get_condition(hr, "Ready") or {}
    if "observedGeneration" not in ready:
        return True
    return _int_or_none(ready["observedGeneration"]) == current


def ready_unknown(hr: Obj) -> bool:
    """True iff the Ready condition is Unknown: helm-controller is running an action on the
    release (it marks Ready Unknown/Progressing while it installs or upgrades) and writes
    Ready True or False when the action ends."""
    return any(c.get("type") == "Ready" and c.get("status") == "Unknown" for c in _conditions(hr))


def recovery_awaits_retry(hr: Obj) -> bool:
    """True iff a recovery recorded a revision on this release and helm-controller has not
    attempted the release since: the recovery's relinquish bumped the generation, so
    helm-controller's next attempt writes ``status.lastAttemptedGeneration``.  Whether a pass
    would still act needs the storage (``already_processed``); this is the release's half."""
    return processed_version(hr) is not None and not attempted_since_generation(hr)


def already_processed(hr: Obj, revision: int) -> tuple[bool, str]:
    """The staleness guard: should a stuck release whose newest revision is ``revision`` be left?

    We record P = the revision we are about to delete *before* deleting it.  Right after a
    recovery the newest revision is P - 1 while the old "has no deployed releases" message is
    still on the Ready condition until helm-controller retries, so ``revision + 1 == P`` means
    "we just did this".  Our relinquish bumped ``metadata.generation``, so once helm-controller
    has attempted the release at that generation (``attempted_since_generation``) the message is
    fresh: the release is stuck again at a lower blocking revision and a second deletion is
    legitimate.  ``P == revision`` means we recorded but never deleted (crash, failed delete):
    the retry deletes the same revision.  Any other P says nothing about this revision.

    The Ready condition's ``lastTransitionTime`` cannot prove a retry (a False → False failure
    keeps it), so the generation fields are the evidence used.

    Returns (True, why) when the release must be left alone, else (False, "").
    """
    processed = processed_version(hr)
    if processed is None or processed != revision + 1 or attempted_since_generation(hr):
        return False, ""
    return True, (
        f"revision {processed} was deleted by an earlier recovery and helm-controller "
        f"has not retried since (lastAttemptedGeneration "
        f"{dig(hr, 'status', 'lastAttemptedGeneration')}, generation {generation(hr)})"
    )


def awaiting_retry_without_storage(hr: Obj) -> tuple[bool, str]:
    """The staleness guard when the release has no storage left at all: a recovery deleted
    its only revision and helm-controller has not attempted it since (it then installs
    afresh).  Not a skip: the release awaits helm-controller.  (True, why) or (False, "")."""
    processed = processed_version(hr)
    if processed is None or attempted_since_generation(hr):
        return False, ""
    return True, (
        f"revision {processed} was deleted by an earlier recovery (no storage is left) and "
        f"helm-controller has not retried since (lastAttemptedGeneration "
        f"{dig(hr, 'status', 'lastAttemptedGeneration')}, generation {generation(hr)})"
    )


def parse_timestamp(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime (UTC when no offset); None if unparsable.

    Parsed by hand because Python 3.10's ``fromisoformat`` rejects ``Z`` and fractions that are
    not 3 or 6 digits long, both of which the apiserver may send.
    """
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    date, time, fraction, offset = match.groups()
    micro = (fraction or "")[1:7].ljust(6, "0")
    zone = "+00:00" if offset in (None, "Z", "z") else offset
    try:
        return datetime.fromisoformat(f"{date}T{time}.{micro}{zone}")
    except ValueError:
        return None


def _seconds_since(value: Any, now: datetime) -> float | None:
    stamp = parse_timestamp(value)
    if stamp is None:
        return None
    aware_now = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
    return (aware_now - stamp).total_seconds()


def age_seconds(hr: Obj, now: datetime) -> float | None:
    """Seconds since ``metadata.creationTimestamp``; None when absent or unparsable."""
    return _seconds_since(dig(hr, "metadata", "creationTimestamp"), now)


def held_seconds(hr: Obj, now: datetime) -> float | None:
    """Seconds since ``metadata.deletionTimestamp`` (how long a delete is held); None if live."""
    return _seconds_since(dig(hr, "metadata", "deletionTimestamp"), now)


def has_remote_kubeconfig(hr: Obj) -> bool:
    """True iff ``spec.kubeConfig`` is set: the Helm storage lives in another cluster."""
    return bool(dig(hr, "spec", "kubeConfig"))


def legacy_suspension(hr: Obj) -> bool:
    """True when a suspension we do not own looks left behind by an older flux-plunger.

    Older versions marked it with an annotation, or suspended through the shared client-side
    manager on releases they had recovered (processed-version annotation present).
    """
    if constants.LEGACY_SUSPENDED_ANNOTATION in annotations(hr):
        return True
    client_side_owns = any(
        manager == constants.CLIENT_SIDE_MANAGER for manager, _ in ownership.suspend_owners(hr)
    )
    return client_side_owns and processed_annotation_present(hr)
