"""What flux-plunger holds on a HelmRelease: ``spec.suspend`` and the uninstall fence (SPEC §5).

flux-plunger owns the suspension iff a ``flux-plunger`` entry with operation ``Apply`` lists
``f:spec`` → ``f:suspend``.  The apiserver moves a field away from a manager the moment another
writer sets a different value, so this is the only signal that cannot go stale; the value of
``spec.suspend``, annotations and the shared ``flux-client-side-apply`` manager never count.
Malformed entries are treated as owning nothing: this module never raises on odd input.
The fence is ours by name alone: no other writer uses ``constants.FENCE``.
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


def fence_indices(hr: Obj) -> list[int]:
    """Every index of ``metadata.finalizers`` holding our uninstall fence (duplicates included)."""
    finalizers = _metadata_list(hr, "finalizers")
    return [i for i, name in enumerate(finalizers) if name == constants.FENCE]


def is_fenced(hr: Obj) -> bool:
    """True iff our uninstall fence is among the finalizers."""
    return bool(fence_indices(hr))
