"""Rendering of verb results: kubectl-style tables, json, yaml and name output."""
from __future__ import annotations

import json
from typing import Iterable, Sequence

KIND_REF = "helmrelease.helm.toolkit.fluxcd.io"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded like kubectl's printer: three spaces between columns."""
    rows = [[_cell(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    lines = ["   ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for r in rows:
        lines.append("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def as_json(items: list[dict], kind: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        dict(kind=kind, **i) for i in items]}, indent=2, sort_keys=False)


def as_yaml(items: list[dict], kind: str) -> str:
    import yaml  # PyYAML ships with the kubernetes client
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        dict(kind=kind, **i) for i in items]}, sort_keys=False).rstrip()


def names(items: list[dict]) -> str:
    return "\n".join(f"{KIND_REF}/{i['name']}" for i in items)


STATUS_HEADERS = ["NAME", "STATE", "SUSPEND-OWNER", "REVISION", "HELM-STATUS", "PROCESSED",
                  "FENCED", "AGE"]
STATUS_WIDE = ["RELEASE", "STORAGE-NAMESPACE", "CLUSTER", "NOTE"]


def status_table(rows, *, all_namespaces: bool, wide: bool) -> str:
    headers = (["NAMESPACE"] if all_namespaces else []) + STATUS_HEADERS + (STATUS_WIDE if wide else [])
    out = []
    for r in rows:
        cells = [r.name, r.state, r.suspend_owner, r.revision, r.helm_status, r.processed,
                 r.fenced, r.age]
        if all_namespaces:
            cells.insert(0, r.namespace)
        if wide:
            cells += [r.release, r.storage_namespace, r.cluster, r.note]
        out.append(cells)
    return table(headers, out)


def outcome_line(o, *, all_namespaces: bool) -> str:
    ref = f"{o.namespace}/{o.name}" if all_namespaces else o.name
    line = f"{KIND_REF}/{ref} {o.result}"
    if o.detail:
        line += f": {o.detail}"
    for step in o.steps if o.result == "planned" else ():
        line += f"\n  - {step}"
    return line
