"""Who else claims a Helm release, for the one-shot verbs: a LIST of the HelmReleases of the
cluster (SPEC §6, "Holding a release"; issue 55).

``ListedClaimants.others`` answers the check before anything is written (``after`` None)
from a LIST kept for ``keep`` seconds (a one-shot run: for the run; a sharded or namespaced
serve: briefly, so a claimant created or removed since is seen by the next pass), and the
check right before the delete (``after`` set) from a fresh LIST: a HelmRelease created since
the first LIST and naming the same release is seen there.  serve watching every HelmRelease
answers from its watch instead (serve/watch.Watcher.others).

Where the cluster-wide LIST is refused (a namespace admin), the namespaces the release
itself names are listed instead — its own and its storage namespace — and ``on_warning``
is called once, when that happens (before anything is written): a claimant elsewhere is then
not seen.  A LIST refused there too is the caller's error: nothing is written without
knowing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..core import claims, storage
from ..core.objects import Obj
from .client import Kube
from .errors import KubeError


class ListedClaimants:
    """The other claimants of a release, from LISTs of HelmReleases.  Thread-safe (the
    verbs run releases in parallel)."""

    def __init__(
        self,
        kube: Kube,
        *,
        keep: float | None = None,
        on_warning: Callable[[str], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.keep, self.clock = keep, clock  # keep: seconds a LIST answers (None: for ever)
        self.on_warning = on_warning
        self.warning = ""  # set once the cluster-wide LIST was refused
        self._lock = threading.Lock()
        self._index: claims.ClaimIndex | None = None
        self._listed_at = 0.0

    def seed(self, releases: list[Obj]) -> None:
        """Every HelmRelease of the cluster, just listed by the caller (``recover -A``
        without a selector): the run's first LIST, not sent again."""
        index = claims.ClaimIndex()
        index.replace(releases)
        with self._lock:
            self._index, self._listed_at = index, self.clock()

    def others(self, hr: Obj, *, after: str | None = None) -> tuple[str, ...]:
        with self._lock:
            index = self._index if after is None and self._fresh() else None
        if index is None:
            listed_at = self.clock()
            index, whole = self._list(hr)
            if whole and after is None:
                with self._lock:
                    self._index, self._listed_at = index, listed_at
        return tuple(index.others(hr))

    def _fresh(self) -> bool:
        return self.keep is None or self.clock() - self._listed_at < self.keep

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
            first = not self.warning
            self.warning = (
                f"cannot list HelmReleases in all namespaces ({exc}): other HelmReleases "
                "naming the same Helm release are looked for only in the release's own and "
                "storage namespaces"
            )
            if first:
                self.on_warning(self.warning)
        md = hr.get("metadata") or {}
        found: list[Obj] = []
        for ns in dict.fromkeys((str(md.get("namespace") or ""), storage.storage_namespace(hr))):
            found.extend(self.kube.list_hrs(ns, None))
        index.replace(found)
        return index, False
