"""serve's periodic catch-all (issue 58): every ``--resync-period``, each release whose last
seen state the whole SPEC §8 predicate selects — stuck, fenced, suspended by us, suspended
and terminating — is queued again, and its worker reads it fresh as for any key.  No stream
and no LIST: the live watch keeps running, so a re-sync never delays a live event, and after
start-up the apiserver is sent nothing for it.

Why a catch-all at all, with a watch that resumes from its resourceVersion (bookmarks; a 410
syncs afresh) and so misses no change of a HelmRelease: a pass decides on more than the
release.  What it catches that the watch does not report:

* a change outside the HelmRelease — a Helm storage Secret appearing, changing or going
  (a release skipped for its storage, e.g. no storage yet or a corrupt newest revision, is
  decided again once an operator repaired it);
* a release whose last change the event filter passed over (``plan.wanted_on_change``: Ready
  Unknown, a recovery awaiting helm-controller's retry; a release given up, issue 57) when
  helm-controller never writes it again (stopped mid-action);
* a ``LeftStuck`` entry a pass set from a read older than the watch's (the watch forgot the
  key, then a slower pass counted it): the gauge keeps only the candidates.

So it needs the keys the predicate selected, not the objects: ``Candidates`` holds them with
the resourceVersion last seen (the queue folds one no newer than where a pass has just
settled the release, as it folded a sync's item), updated by every watch event and replaced
by every sync.  A release the predicate does not select needs no pass (nothing to do, the
event filter is a subset of it), so the catch-all never needs to read it.  How often: the
cases above are an operator's repair or a helm-controller that stopped, minutes apart at
best — the default 10 minutes, as before.  One pass costs, per candidate, the pass's fresh
read (a watch-list of one release, or a GET) and its storage LIST, as the old re-sync's
queued keys did; none for the releases that are fine.  They wait behind every live change
(``WorkQueue.add_behind``) and are not taken up while a live pass runs: a release that becomes
stuck while a pass's candidates are being re-decided is taken by the next free worker, not
after the last candidate.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Protocol

from .logs import fields

if TYPE_CHECKING:
    from .metrics import Metrics

log = logging.getLogger(__name__)


class Requeue(Protocol):
    """Where a sync queues keys (``queue.WorkQueue``)."""

    def add(
        self, key: str, resource_version: str | None = None, *, listed: bool = False
    ) -> None: ...


class RequeueBehind(Protocol):
    """Where the catch-all queues keys (``queue.WorkQueue``): behind every live change."""

    def add_behind(self, key: str, resource_version: str | None = None) -> None: ...


class Candidates:
    """The keys whose last seen state the whole predicate selects, each with that state's
    resourceVersion.  Keys only; bounded by the releases in scope (in practice the few that
    are not Ready or are held)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, str] = {}

    def saw(self, key: str, selected: bool, resource_version: str = "") -> None:
        """One watch event: ``selected`` is ``plan.predicate`` of its object (False for a
        DELETED one)."""
        with self._lock:
            if selected:
                self._keys[key] = resource_version
            else:
                self._keys.pop(key, None)

    def replace(self, keys: dict[str, str]) -> None:
        """A sync read every release: its selection is all there is."""
        with self._lock:
            self._keys = dict(keys)

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self._keys)

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)


class CatchAll:
    """Every ``period`` seconds once the first sync is done: queue every candidate again."""

    def __init__(
        self,
        candidates: Candidates,
        queue: RequeueBehind,
        *,
        period: float,
        synced: threading.Event,
        metrics: Metrics | None = None,
    ) -> None:
        self.candidates, self.queue, self.period = candidates, queue, period
        self.synced, self.metrics = synced, metrics

    def pass_once(self) -> int:
        """One catch-all pass; returns the keys queued (0 before the first sync)."""
        if not self.synced.is_set():
            return 0
        keys = self.candidates.snapshot()
        for key, rv in keys.items():
            self.queue.add_behind(key, rv or None)
        if self.metrics is not None:
            self.metrics.left_stuck.keep_only(keys)
            self.metrics.caught_all(len(keys))
        log.info("catch-all: candidates queued again", extra=fields(count=len(keys)))
        return len(keys)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.period):
            try:
                self.pass_once()
            except Exception:  # never let the thread die (logged with the traceback)
                log.exception("catch-all: unexpected failure")
