"""What flux-plunger holds on a HelmRelease: ``spec.suspend`` and the uninstall fence (SPEC §5).

flux-plunger owns the suspension iff a ``flux-plunger`` entry with operation ``Apply`` lists
``f:spec`` → ``f:suspend``.  The apiserver moves a field away from a manager the moment another
writer sets a different value, so this is the only signal that cannot go stale; the value of
``spec.suspend``, annotations and the shared ``flux-client-side-apply`` manager never count.
Malformed entries are treated as owning nothing: this module never raises on odd input.
The fence is ours by name alone: no other writer uses ``constants.FENCE``.

The Flux UI's ``suspendedBy`` annotation is ours only when it carries our value **and** our
``Apply`` entry lists it (``f:metadata`` → ``f:annotations`` → ``f:<key>``): a name some
other writer put there — even ours, spelled the same — is never taken for ours.
"""

from __future__ import annotations

from typing import Any

from . import constants
from .objects import Obj

APPLY = "Apply"


def _metadata_list(hr: Obj, key: str) -> list[Any]:
    """``metadata[key]`` when it is a list, else empty."""
    metadata = hr.get("metadata")
    value = metadata.get(key) if isinstance(metadata, dict) else None
    return value if isinstance(value, list) else []


def _entries(hr: Obj) -> list[Obj]:
    """The well-formed (dict) entries of ``metadata.managedFields``, in order."""
    return [entry for entry in _metadata_list(hr, "managedFields") if isinstance(entry, dict)]


def _claims_suspend(entry: Obj) -> bool:
    """True when the entry's ``fieldsV1`` contains ``f:spec`` → ``f:suspend``."""
    fields: Any = entry.get("fieldsV1")
    if not isinstance(fields, dict):
        return False
    spec = fields.get("f:spec")
    return isinstance(spec, dict) and "f:suspend" in spec


def _is_ours(entry: Obj) -> bool:
    """True for flux-plunger's own server-side-apply entry (not its Update entries)."""
    return entry.get("manager") == constants.FIELD_MANAGER and entry.get("operation") == APPLY


def suspend_owners(hr: Obj) -> list[tuple[str, str]]:
    """(manager, operation) of every managedFields entry owning ``spec.suspend``, in order.

    Shown by ``status`` and used by ``release-fence`` to refuse lifting a co-owned suspension.
    """
    return [
        (str(entry.get("manager", "")), str(entry.get("operation", "")))
        for entry in _entries(hr)
        if _claims_suspend(entry)
    ]


def owns_suspend(hr: Obj) -> bool:
    """True iff flux-plunger's ``Apply`` entry owns ``spec.suspend`` (SPEC §5)."""
    return any(_is_ours(entry) and _claims_suspend(entry) for entry in _entries(hr))


def sole_owner_is_us(hr: Obj) -> bool:
    """True iff we own ``spec.suspend`` and no other entry (other manager or operation) does.

    Lifting a suspension another manager also owns would override that manager's intent.
    """
    owners = [entry for entry in _entries(hr) if _claims_suspend(entry)]
    return bool(owners) and all(_is_ours(entry) for entry in owners)


def _claims_suspended_by(entry: Obj) -> bool:
    """True when the entry's ``fieldsV1`` lists the ``suspendedBy`` annotation."""
    fields: Any = entry.get("fieldsV1")
    metadata = fields.get("f:metadata") if isinstance(fields, dict) else None
    notes = metadata.get("f:annotations") if isinstance(metadata, dict) else None
    return isinstance(notes, dict) and f"f:{constants.SUSPENDED_BY_ANNOTATION}" in notes


def suspended_by(hr: Obj) -> str | None:
    """The value of the Flux UI's ``suspendedBy`` annotation; None when absent or odd."""
    metadata = hr.get("metadata")
    notes = metadata.get("annotations") if isinstance(metadata, dict) else None
    value = notes.get(constants.SUSPENDED_BY_ANNOTATION) if isinstance(notes, dict) else None
    return value if isinstance(value, str) else None


def suspended_by_managers(hr: Obj) -> list[str]:
    """Every manager whose managedFields entry lists the ``suspendedBy`` annotation."""
    return list(
        dict.fromkeys(
            str(entry.get("manager", "")) for entry in _entries(hr) if _claims_suspended_by(entry)
        )
    )


def owns_suspended_by(hr: Obj) -> bool:
    """True iff the annotation says flux-plunger and our ``Apply`` entry lists it."""
    return suspended_by(hr) == constants.SUSPENDED_BY and any(
        _is_ours(entry) and _claims_suspended_by(entry) for entry in _entries(hr)
    )


def may_mark_suspended_by(hr: Obj) -> bool:
    """May our apply carry ``suspendedBy: flux-plunger``?  Only when the key is absent or
    already says flux-plunger: applying a different value over another writer's would be a
    field-manager conflict, and a forced acquire would take the name over."""
    metadata = hr.get("metadata")
    notes = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(notes, dict) or constants.SUSPENDED_BY_ANNOTATION not in notes:
        return True
    return suspended_by(hr) == constants.SUSPENDED_BY


def fence_indices(hr: Obj) -> list[int]:
    """Every index of ``metadata.finalizers`` holding our uninstall fence (duplicates included)."""
    finalizers = _metadata_list(hr, "finalizers")
    return [i for i, name in enumerate(finalizers) if name == constants.FENCE]


def is_fenced(hr: Obj) -> bool:
    """True iff our uninstall fence is among the finalizers."""
    return bool(fence_indices(hr))
