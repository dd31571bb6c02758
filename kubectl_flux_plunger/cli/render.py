"""Rendering of verb results: kubectl-style tables, result lines, and the versioned
``-o json|yaml`` documents (schema: docs/output-schema.json).

The documents are ``apiVersion: flux-plunger.cozystack.io/v1alpha1`` lists with camelCase
keys, ``null`` for what is unknown or absent, the apiserver's RFC 3339 timestamps, and for
``status`` the HelmRelease's ``metadata`` as ``kubectl get -o json`` prints it (without
``managedFields``, as kubectl hides them by default).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ..core.plan import Row

API_VERSION = "flux-plunger.cozystack.io/v1alpha1"
HR_API_VERSION = "helm.toolkit.fluxcd.io/v2"
KIND_REF = "helmrelease.helm.toolkit.fluxcd.io"


# -- tables ---------------------------------------------------------------------------


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    no_headers: bool = False,
    widths: list[int] | None = None,
) -> str:
    """Columns padded like kubectl's printer: three spaces between columns."""
    cells = [[_cell(c) for c in r] for r in rows]
    w = list(widths) if widths else [len(h) for h in headers]
    for r in cells:
        w = [max(a, len(c)) for a, c in zip(w, r, strict=False)]
    lines = (
        []
        if no_headers
        else ["   ".join(h.ljust(x) for h, x in zip(headers, w, strict=False)).rstrip()]
    )
    for r in cells:
        lines.append("   ".join(c.ljust(x) for c, x in zip(r, w, strict=False)).rstrip())
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# STORAGE-REV: the newest Helm storage revision (sh.helm.release.v1.<release>.v<N>);
# flux's REVISION column is the chart version, a different thing.
STATUS_HEADERS = [
    "NAME",
    "STATE",
    "SUSPEND-OWNER",
    "STORAGE-REV",
    "HELM-STATUS",
    "PROCESSED",
    "FENCED",
    "AGE",
]
# CONTROLLER: the Lease of the running controller whose recorded scope selects the release
STATUS_WIDE = ["RELEASE", "STORAGE-NAMESPACE", "CLUSTER", "CONTROLLER", "NOTE"]


def status_headers(*, all_namespaces: bool, wide: bool) -> list[str]:
    return (
        (["NAMESPACE"] if all_namespaces else []) + STATUS_HEADERS + (STATUS_WIDE if wide else [])
    )


def status_cells(r: Any, *, all_namespaces: bool, wide: bool) -> list[object]:
    cells: list[object] = [
        r.name,
        r.state,
        r.suspend_owner,
        r.revision,
        r.helm_status,
        r.processed,
        r.fenced,
        r.age,
    ]
    if all_namespaces:
        cells.insert(0, r.namespace)
    if wide:
        cells += [
            r.release,
            r.storage_namespace,
            getattr(r, "cluster", "local"),
            getattr(r, "controller", ""),
            r.note,
        ]
    return cells


def status_table(
    rows: Sequence[Any], *, all_namespaces: bool, wide: bool, no_headers: bool = False
) -> str:
    return table(
        status_headers(all_namespaces=all_namespaces, wide=wide),
        [status_cells(r, all_namespaces=all_namespaces, wide=wide) for r in rows],
        no_headers=no_headers,
    )


# -- result lines ---------------------------------------------------------------------


def state_counts(states: Iterable[str]) -> str:
    """``status``'s summary of the rows it listed: how many in each state, most first
    (``2 stuck, 1 failing``); a state shared with another's (``suspended-by-other,stuck``)
    counts as written."""
    counts = Counter(states)
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=_by_count))


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def ref(namespace: str, name: str, *, all_namespaces: bool) -> str:
    """A reference kubectl accepts: ``KIND/NAME``, with ``-n NS`` first under -A."""
    return (f"-n {namespace} " if all_namespaces else "") + f"{KIND_REF}/{name}"


DRY_SUFFIX = {"none": "", "client": " (dry run)", "server": " (server dry run)"}

# what a client dry run would do, by decision row
_WOULD = {
    Row.LIVE_STUCK: "would recover",
    Row.LIVE_SUSPENDED_OWNED: "would lift flux-plunger's suspension",
    Row.TERMINATING_SUSPENDED_OWNED: "would lift flux-plunger's suspension",
    Row.LIVE_FENCED: "would remove the uninstall fence",
    Row.TERMINATING_FENCED_UNINSTALLED: "would remove the uninstall fence",
    Row.TERMINATING_FENCED_WAITING: "would wait for helm-controller's uninstall",
    Row.LIVE_SUSPENDED_FOREIGN: "would remove the uninstall fence",
    Row.TERMINATING_SUSPENDED_FOREIGN: "would remove the uninstall fence",
}


def _planned(o: Any) -> bool:
    from ..executor import Result  # outcomes exist only once the executor is loaded

    return bool(o.result == Result.PLANNED and o.steps)


def result_word(o: Any) -> str:
    from ..executor import Result

    if o.result == Result.PLANNED:
        return _WOULD.get(o.row, "would act") if o.steps else Result.UNCHANGED.value
    return str(o.result)


def outcome_line(o: Any, *, all_namespaces: bool, dry_run: str = "none") -> str:
    line = f"{ref(o.namespace, o.name, all_namespaces=all_namespaces)} {result_word(o)}"
    if o.detail and not _planned(o):
        line += f": {o.detail}"
    line += DRY_SUFFIX[dry_run]
    for step in o.steps if _planned(o) else ():
        line += f"\n  - {step}"
    return line


def fence_line(r: Any, *, all_namespaces: bool, dry_run: str = "none") -> str:
    where = ref(r.namespace, r.name, all_namespaces=all_namespaces)
    if not r.released:
        return f"{where} NOT released: {r.detail}{DRY_SUFFIX[dry_run]}"
    if r.without_uninstall:
        text = (
            f"{where} uninstall fence released without an uninstall: helm-controller "
            "had not handled it"
        )
    else:
        text = f"{where} uninstall fence released" + (f" ({r.detail})" if r.detail else "")
    return text + DRY_SUFFIX[dry_run]


def names(refs: Iterable[tuple[str, str]]) -> str:
    """``-o name``: ``KIND/NAME`` lines, as ``kubectl get -o name`` prints them."""
    return "\n".join(f"{KIND_REF}/{name}" for _, name in refs)


# -- versioned documents --------------------------------------------------------------


def kubectl_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """The HelmRelease's metadata as ``kubectl get -o json`` prints it by default."""
    md = copy.deepcopy(metadata)
    md.pop("managedFields", None)
    return md


def _null(value: Any) -> Any:
    return None if value in (None, "", "-") else value


def _owner(manager: str, operation: str, r: Any) -> dict[str, Any]:
    """One owner of spec.suspend; ``suspendedBy`` when it also wrote the Flux UI's name."""
    by = (getattr(r, "suspended_by", None) or {}).get(manager)
    return {"manager": manager, "operation": operation, **({"suspendedBy": by} if by else {})}


def status_item(r: Any) -> dict[str, Any]:
    helm_status = r.helm_status if r.helm_status not in ("-", "<remote>", "<unreadable>") else None
    processed = _null(r.processed)
    return {
        "apiVersion": API_VERSION,
        "kind": "HelmReleaseStatus",
        "metadata": kubectl_metadata(r.metadata)
        if r.metadata
        else {"name": r.name, "namespace": r.namespace},
        "state": r.state,
        "stuck": bool(getattr(r, "stuck", False)),
        # which face helm-controller shows of a stuck release; helm-controller's Ready
        # reason while Ready is False (a failing release's, or the stuck face's)
        "face": _null(getattr(r, "face", "")),
        "readyReason": _null(getattr(r, "ready_reason", "")),
        "suspended": bool(r.suspend),
        # like the SUSPEND-OWNER column: nobody owns a suspension that is not there (an
        # owner of `suspend: false` is no suspension)
        # (with the Flux UI's suspendedBy name on the owner that wrote it)
        "suspendOwners": [_owner(m, op, r) for m, op in r.suspend_owners] if r.suspend else [],
        "fenced": bool(r.fenced),
        "processedRevision": processed,
        "storage": {
            "releaseName": r.release,
            "namespace": r.storage_namespace,
            "latestRevision": r.revision,
            "helmStatus": helm_status,
            "cluster": getattr(r, "cluster", "local"),
        },
        "message": _null(r.note),
        "controller": _null(getattr(r, "controller", "")),
        # claimed-twice: the other HelmReleases naming the same Helm release (namespace/name)
        **({"claimants": list(r.claimants)} if getattr(r, "claimants", None) else {}),
        # while recovering: {"since": RFC 3339, "by": "controller ID" | "a one-shot run"}
        **({"hold": r.hold} if getattr(r, "hold", None) else {}),
        **({"budget": r.budget} if getattr(r, "budget", None) else {}),
    }


def outcome_item(o: Any, dry_run: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "RecoveryResult",
        "metadata": {"name": o.name, "namespace": o.namespace},
        "decision": _null(str(o.row)),
        "result": str(o.result),
        "failed": bool(o.failed),
        "revision": o.revision,
        "message": _null(o.detail),
        "steps": list(o.steps),
        # the Lease of the running controller the release was left to (it covers it)
        "controller": _null(getattr(o, "controller", "")),
        "dryRun": dry_run,
    }


def fence_item(r: Any, dry_run: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "FenceRelease",
        "metadata": {"name": r.name, "namespace": r.namespace},
        "released": bool(r.released),
        "withoutUninstall": bool(r.without_uninstall),
        "message": _null(r.detail),
        "controller": _null(getattr(r, "controller", "")),
        "dryRun": dry_run,
    }


def restore_item(res: Any, dry_run: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "RestoreResult",
        "metadata": {"name": res.name, "namespace": res.namespace},
        "action": res.action,
        "revision": res.revision or None,
        "cluster": _null(res.cluster),
        "message": _null(res.detail),
        "controller": _null(getattr(res, "controller", "")),
        "dryRun": dry_run,
    }


def document(kind: str, items: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": f"{kind}List", **extra, "items": items}


def dump(doc: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False)
    import yaml  # PyYAML ships with the kubernetes client

    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).rstrip()
