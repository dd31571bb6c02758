"""Who else claims a Helm release, for the one-shot verbs: a LIST of the HelmReleases of the
cluster (SPEC §6, "Holding a release"; issue 55).

``ListedClaimants.others`` answers from one LIST per run for the check before anything is
written (``after`` None), and from a fresh LIST for the check right before the delete
(``after`` set): a HelmRelease created since the first LIST and naming the same release is
seen there.  serve answers from its watch instead (serve/claimants.py).

Where the cluster-wide LIST is refused (a namespace admin), the namespaces the release
itself names are listed instead — its own and its storage namespace — and the verb warns
once: a claimant elsewhere is then not seen.  A LIST refused there too is the caller's
error: nothing is written without knowing.
"""

from __future__ import annotations

import threading

from ..core import claims, storage
from ..core.objects import Obj
from .client import Kube
from .errors import KubeError


class ListedClaimants:
    """The other claimants of a release, from LISTs of HelmReleases.  Thread-safe (the
    verbs run releases in parallel)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.warning = ""  # set once the cluster-wide LIST was refused
        self._lock = threading.Lock()
        self._index: claims.ClaimIndex | None = None

    def seed(self, releases: list[Obj]) -> None:
        """Every HelmRelease of the cluster, just listed by the caller (``recover -A``
        without a selector): the run's first LIST, not sent again."""
        index = claims.ClaimIndex()
        index.replace(releases)
        with self._lock:
            self._index = index

    def others(self, hr: Obj, *, after: str | None = None) -> tuple[str, ...]:
        with self._lock:
            index = self._index if after is None else None
        if index is None:
            index, whole = self._list(hr)
            if whole and after is None:
                with self._lock:
                    self._index = index
        return tuple(index.others(hr))

    def _list(self, hr: Obj) -> tuple[claims.ClaimIndex, bool]:
        """A fresh index: of the cluster (True), or where that is refused of the release's
        own and storage namespaces (False)."""
        index = claims.ClaimIndex()
        try:
            index.replace(self.kube.list_hrs(None, None))
            return index, True
        except KubeError as exc:
            if not exc.forbidden:
                raise
            self.warning = (
                f"cannot list HelmReleases in all namespaces ({exc}): other HelmReleases "
                "naming the same Helm release are looked for only in the release's own and "
                "storage namespaces"
            )
        md = hr.get("metadata") or {}
        found: list[Obj] = []
        for ns in dict.fromkeys((str(md.get("namespace") or ""), storage.storage_namespace(hr))):
            found.extend(self.kube.list_hrs(ns, None))
        index.replace(found)
        return index, False
