"""``status``: read-only report of every HelmRelease flux-plunger would act on or has touched."""
from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass

from .. import constants as C
from .. import detect, ownership, storage
from ..kube import Kube, KubeError
from .select import Selection, fetch


@dataclass
class Row:
    namespace: str
    name: str
    state: str
    suspend: bool
    suspend_owner: str         # "flux-plunger", other manager names, or "-"
    revision: int | None
    helm_status: str           # payload status of the newest revision, or why unknown
    processed: str             # the processed-version annotation, or "-"
    fenced: bool
    age: str
    release: str
    storage_namespace: str
    note: str

    def as_dict(self) -> dict:
        return asdict(self)


def _age(seconds: float | None) -> str:
    """kubectl-style short age."""
    if seconds is None:
        return "<unknown>"
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 120:
        return f"{m}m"
    h = m // 60
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def _owners(hr: dict) -> str:
    owners = ownership.suspend_owners(hr)
    if not owners:
        return "-"
    return ",".join(dict.fromkeys(f"{m}({op})" if op != "Apply" or m != "flux-plunger" else m
                                  for m, op in owners))


def interesting(hr: dict, state: str) -> bool:
    """Would flux-plunger act on it, or has it touched it?"""
    return (state != "healthy" or detect.processed_annotation_present(hr)
            or detect.is_fenced(hr) or ownership.owns_suspend(hr))


def run(kube: Kube, sel: Selection, now: dt.datetime | None = None) -> tuple[list[Row], list[str]]:
    now = now or dt.datetime.now(dt.timezone.utc)
    releases, errors = fetch(kube, sel)
    rows = []
    for hr in releases:
        state = detect.state_of(hr, now)
        if not sel.names and not interesting(hr, state):
            continue
        rows.append(_row(kube, hr, state, now))
    return rows, errors


def _row(kube: Kube, hr: dict, state: str, now: dt.datetime) -> Row:
    md = hr["metadata"]
    release, ns = storage.release_name(hr), storage.storage_namespace(hr)
    revision, helm_status, note = None, "-", ""
    if detect.has_remote_kubeconfig(hr):
        helm_status, note = "<remote>", "storage is in the cluster of spec.kubeConfig; skipped"
    else:
        try:
            secrets = kube.list_secrets(ns, storage.label_selector(release))
            choice = storage.choose_revision(hr, secrets)
            if choice.revision is not None:
                revision = choice.revision.number
            helm_status = choice.helm_status or "-"
            note = choice.reason
        except KubeError as exc:
            helm_status, note = "<unreadable>", f"cannot list Helm storage: {exc}"
    processed = (md.get("annotations") or {}).get(C.PROCESSED_ANNOTATION, "-")
    return Row(namespace=md.get("namespace", ""), name=md["name"], state=state,
               suspend=detect.is_suspended(hr), suspend_owner=_owners(hr), revision=revision,
               helm_status=helm_status, processed=processed, fenced=detect.is_fenced(hr),
               age=_age(detect.age_seconds(hr, now)), release=release, storage_namespace=ns,
               note=note)
