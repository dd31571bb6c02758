"""A de-duplicating work queue of keys (``namespace/name``), like client-go's workqueue.

* A key is queued at most once (``dirty``); a key being processed is never handed to a second
  worker (``processing``): adding it meanwhile marks it dirty and it is queued again once
  ``done`` is called — serial per key, parallel across keys.
* ``add_after`` arms a timer (the earliest one per key wins); due timers are moved into the
  queue by ``get``.  A timer replaced by an earlier one stays in the heap until it is due,
  then is skipped; when such stale entries outnumber the armed ones (``STALE_TIMERS`` more),
  the heap is rebuilt from the armed ones, so it never holds more than about twice the keys
  armed, whatever the history of re-arms (issue 49).
* ``add_rate_limited`` re-adds after an exponential backoff per key (base·2^failures, capped);
  ``forget`` resets it after a success.  While a key backs off, plain ``add`` calls (watch
  events, often caused by the failed pass's own writes) wait for the armed retry.
* ``shutdown`` makes every ``get`` return None at once: no new work is taken.
* resourceVersion expectations: ``add`` may name the resourceVersion of the watch event
  that adds the key, and ``done`` the resourceVersion a pass settled the release at
  (``Outcome.settled``: the newest state it read or wrote, which wants no further pass).
  A change no newer than that is one the pass already judged — its own writes, and those of
  others its preconditions or its stream saw — so it neither queues the key again after the
  pass nor, delivered late, queues it anew.  The watcher reports how far its stream has got
  (``caught_up``, also at the end of a sync: the rv a LIST or a watch-list's initial events
  were read at): an expectation at or below that can skip nothing more and is dropped, so
  expectations live only while the watch trails a pass's last write.  A sync starts a new
  stream (``relisting``), whose resourceVersions need not follow the old one's (an etcd
  restored from a backup): the old stream's expectations go then.  Those of passes that
  settle while the sync runs stay past its end while above its rv — the new stream delivers
  the changes up to them (a start-up hint's recovery written while the sync was still
  streaming is not passed again for its own writes).  The sync's items name their
  resourceVersion too: one no newer than where such a pass settled the release is the state
  that pass judged, or an older one.  resourceVersions that do not compare
  (``objects.compare_resource_versions``) are taken as newer: nothing is skipped.
* ``add_first`` queues a key ahead of every other (serve's start-up hints: releases
  helm-controller has just reported stuck, before the sync reaches them) — unless the
  running sync has queued it and a pass has already taken it (``add(listed=True)``).
* ``add_behind`` queues a key behind every key ``add`` and ``add_first`` queue, now or while
  it waits (the catch-all's candidates, issue 58), and such a key is taken only while no key
  from those lanes is being processed and no other key from behind is (a free worker waits
  instead): a pass of the catch-all never holds up a live change, however many candidates it
  queued, none is taken up while a live pass runs, and candidates never hold more than one
  worker: with two or more, a live change never waits for a candidate's pass.  A
  live change of a key waiting behind, or its due timer, moves it up; one the catch-all alone
  queued again during the key's pass goes behind again.  Candidates wait as long as live
  passes keep a worker: the catch-all is the slow path.

Only keys are held, never objects: decisions re-read the release.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable

from ..core.objects import compare_resource_versions

# stale timer entries (module doc) tolerated beyond the armed ones before the heap is rebuilt
STALE_TIMERS = 64


class Backoff:
    """Exponential per-key backoff: ``base * 2**n`` capped at ``cap``."""

    def __init__(self, base: float = 1.0, cap: float = 300.0):
        if base <= 0 or cap < base:
            raise ValueError("backoff needs 0 < base <= cap")
        self.base, self.cap = base, cap
        self._failures: dict[str, int] = {}

    def next(self, key: str) -> float:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        # 2**n overflows nothing in Python, but keep the exponent small anyway
        return min(self.cap, self.base * float(2 ** min(n, 62)))

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def __len__(self) -> int:
        return len(self._failures)


class WorkQueue:
    def __init__(
        self, *, backoff: Backoff | None = None, clock: Callable[[], float] = time.monotonic
    ):
        self._clock = clock
        self._backoff = backoff if backoff is not None else Backoff()
        self._cond = threading.Condition()
        self._ready: deque[str] = deque()
        self._first: deque[str] = deque()  # add_first: handed out before _ready
        self._behind: deque[str] = deque()  # add_behind: handed out after _ready
        self._behind_keys: set[str] = set()  # the keys in _behind
        self._dirty_behind: set[str] = set()  # processing, dirtied by add_behind alone
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._live: set[str] = set()  # processing, taken from _first or _ready
        self._behind_taken: str | None = None  # processing, taken from _behind (one at most)
        self._timers: list[tuple[float, int, str]] = []  # heap; stale entries skipped
        self._due: dict[str, float] = {}  # key -> earliest armed due time
        self._seq = itertools.count()
        self._shutdown = False
        self.adds = 0
        # expectations (module doc): per key being processed, the newest change that made
        # it dirty ("" when one came without a resourceVersion); per key a finished pass
        # settled ahead of the watch, the resourceVersion it settled at; how far the
        # watch's stream has got ("" before it reports)
        self._dirty_rv: dict[str, str] = {}
        self._settled: dict[str, str] = {}
        self._position = ""
        self._listed: set[str] = set()  # the keys the running (or last) sync queued
        self.skipped = 0  # changes skipped as already judged (for tests and diagnostics)

    # -- adding ------------------------------------------------------------------

    def add(self, key: str, resource_version: str | None = None, *, listed: bool = False) -> None:
        """Queue ``key`` now — unless it is backing off after a failure: then the armed
        retry stands (our own writes during a failed pass re-trigger the watch, and must
        not turn the backoff into a hot loop) — or ``resource_version`` (the change that
        adds it) is no newer than where a pass settled the release.  ``listed``: the sync
        read it (``add_first`` leaves such a key alone once its pass has begun)."""
        with self._cond:
            if listed:
                self._listed.add(key)
            if resource_version is not None and self._judged_locked(key, resource_version):
                self.skipped += 1
                return
            if not self._backing_off_locked(key):
                self._add_locked(key, resource_version or "")

    def add_behind(self, key: str, resource_version: str | None = None) -> None:
        """Queue ``key`` as ``add`` does, but behind every key ``add`` or ``add_first``
        queues before it is taken.  A key already queued stays where it is."""
        with self._cond:
            if resource_version is not None and self._judged_locked(key, resource_version):
                self.skipped += 1
                return
            if self._shutdown or self._backing_off_locked(key):
                return
            if key in self._processing and key not in self._dirty:
                self._dirty_behind.add(key)  # done() queues it behind again
            if key in self._processing or key in self._dirty:
                self._add_locked(key, resource_version or "", behind=True)
                return
            self._dirty.add(key)
            self.adds += 1
            self._behind.append(key)
            self._behind_keys.add(key)
            self._cond.notify()

    def add_first(self, key: str) -> bool:
        """Queue ``key`` ahead of every key ``add`` queued: a key already waiting moves to
        the front.  One being processed is left to its pass (a change meanwhile is the
        watch's to report), one backing off to its armed retry, and one the running sync
        queued and a pass has taken since to that pass (the sync got there first; a change
        after its read is the watch's to report).  Returns whether the key is now ahead of
        the others."""
        with self._cond:
            if self._shutdown or key in self._processing or self._backing_off_locked(key):
                return False
            if key in self._listed and key not in self._dirty:
                return False
            if key in self._dirty:
                if key in self._first:
                    return True
                if not self._unbehind_locked(key):
                    self._ready.remove(key)  # O(n), for the few keys hinted at start-up
            else:
                self._dirty.add(key)
                self.adds += 1
            self._first.append(key)
            self._cond.notify()
            return True

    def relisting(self) -> None:
        """A sync starts a new stream: the old stream's expectations and position go, and
        so do the keys the last sync queued."""
        with self._cond:
            self._settled.clear()
            self._position = ""
            self._listed.clear()

    def caught_up(self, resource_version: str) -> None:
        """The watch has delivered every change up to ``resource_version`` (an event's or a
        bookmark's; or a sync's: a LIST, or a watch-list's initial events, read at it): no
        expectation at or below it can skip anything more.  One above it stays until the
        stream gets there."""
        with self._cond:
            self._position = resource_version
            if self._settled:
                for key, settled in list(self._settled.items()):
                    if _no_newer(settled, resource_version):
                        del self._settled[key]

    def _judged_locked(self, key: str, rv: str) -> bool:
        """Is the change at ``rv`` one a finished pass over ``key`` already judged?  Ends
        the key's expectation once the watch has caught up with it."""
        settled = self._settled.get(key)
        if settled is None:
            return False
        order = compare_resource_versions(rv, settled)
        if order is None or order >= 0:
            del self._settled[key]  # caught up (or unordered): later changes are new
        return order is not None and order <= 0

    def _backing_off_locked(self, key: str) -> bool:
        return key in self._due and self._backoff.failures(key) > 0

    def _add_locked(self, key: str, rv: str = "", *, behind: bool = False) -> None:
        """A change of ``key`` (``behind``: the catch-all's, which moves nothing up)."""
        if self._shutdown:
            return
        if key in self._processing:  # queued again by done(), unless the pass judged rv
            if not behind:
                self._dirty_behind.discard(key)  # a live change: its next pass is live
            if key in self._dirty:
                self._dirty_rv[key] = _newest(self._dirty_rv[key], rv)
            else:
                self._dirty.add(key)
                self._dirty_rv[key] = rv
                self.adds += 1
            return
        if key in self._dirty:
            if not behind and self._unbehind_locked(key):
                self._ready.append(key)  # a live change (or its timer): up to the others
                self._cond.notify()
            return
        self._dirty.add(key)
        self.adds += 1
        self._ready.append(key)
        self._cond.notify()

    def _unbehind_locked(self, key: str) -> bool:
        """Take ``key`` out of the lane behind, if it waits there (O(behind))."""
        if key not in self._behind_keys:
            return False
        self._behind_keys.discard(key)
        self._behind.remove(key)
        return True

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            due = self._clock() + delay
            current = self._due.get(key)
            if current is not None and current <= due:
                return
            self._due[key] = due
            heapq.heappush(self._timers, (due, next(self._seq), key))
            if len(self._timers) > 2 * len(self._due) + STALE_TIMERS:
                self._timers = [t for t in self._timers if self._due.get(t[2]) == t[0]]
                heapq.heapify(self._timers)
            self._cond.notify()

    def add_rate_limited(self, key: str) -> float:
        """Re-add after this key's next backoff delay; returns the delay."""
        with self._cond:
            delay = self._backoff.next(key)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        with self._cond:
            self._backoff.forget(key)

    def failures(self, key: str) -> int:
        with self._cond:
            return self._backoff.failures(key)

    # -- taking ------------------------------------------------------------------

    def _promote_due_locked(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            due, _, key = heapq.heappop(self._timers)
            if self._due.get(key) == due:
                del self._due[key]
                self._add_locked(key)

    def get(self, timeout: float | None = None) -> str | None:
        """The next key, or None on shutdown or when ``timeout`` passes (0: don't block)."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                now = self._clock()
                self._promote_due_locked(now)
                key = None
                if self._first or self._ready:
                    key = (self._first or self._ready).popleft()
                    self._live.add(key)
                elif self._behind and not self._live and self._behind_taken is None:
                    key = self._behind_taken = self._behind.popleft()
                    self._behind_keys.discard(key)
                if key is not None:
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                waits = []
                if self._timers:
                    waits.append(self._timers[0][0] - now)
                if deadline is not None:
                    if now >= deadline:
                        return None
                    waits.append(deadline - now)
                self._cond.wait(max(0.0, min(waits)) if waits else None)

    def done(self, key: str, settled: str | None = None) -> None:
        """The pass over ``key`` ended; ``settled`` is ``Outcome.settled``."""
        with self._cond:
            self._processing.discard(key)
            if key == self._behind_taken:
                self._behind_taken = None
            else:
                self._live.discard(key)
            if self._behind and not self._live and self._behind_taken is None:
                self._cond.notify()  # the next key waiting behind may go now
            behind = key in self._dirty_behind
            self._dirty_behind.discard(key)
            dirty_rv = self._dirty_rv.pop(key, "")
            if settled:
                if key in self._dirty and _no_newer(dirty_rv, settled):
                    self._dirty.discard(key)  # every change that dirtied it was judged
                if _no_newer(settled, self._position):
                    self._settled.pop(key, None)  # the watch is past it: nothing to skip
                else:
                    self._settled[key] = settled  # the watch has not delivered it yet
            if key in self._dirty and self._backing_off_locked(key):
                self._dirty.discard(key)  # the backoff timer re-adds it
            elif key in self._dirty and not self._shutdown:
                if behind:  # only the catch-all queued it again meanwhile
                    self._behind.append(key)
                    self._behind_keys.add(key)
                else:
                    self._ready.append(key)
                self._cond.notify()

    # -- lifecycle / introspection ----------------------------------------------------

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutdown

    def __len__(self) -> int:
        """Keys ready to be processed now (the queue-depth gauge)."""
        with self._cond:
            return len(self._first) + len(self._ready) + len(self._behind)

    def waiting(self) -> int:
        """Keys with an armed timer (requeue-after or backoff)."""
        with self._cond:
            return len(self._due)

    def sizes(self) -> dict[str, int]:
        """How many entries each structure holds (issue 49's bounds, for tests and
        diagnostics)."""
        with self._cond:
            return {
                "ready": len(self._ready) + len(self._first) + len(self._behind),
                "dirty": len(self._dirty),
                "processing": len(self._processing),
                "behind": len(self._behind),
                "live": len(self._live),
                "behind_taken": int(self._behind_taken is not None),
                "dirty_behind": len(self._dirty_behind),
                "timers": len(self._timers),
                "due": len(self._due),
                "dirty_rv": len(self._dirty_rv),
                "settled": len(self._settled),
                "listed": len(self._listed),
                "backoff": len(self._backoff),
            }

    def processing(self) -> int:
        with self._cond:
            return len(self._processing)

    def contains(self, key: str) -> bool:
        """Queued, being processed, or armed — for tests and diagnostics."""
        with self._cond:
            return key in self._dirty or key in self._processing or key in self._due


def _newest(a: str, b: str) -> str:
    """The newer of two resourceVersions; "" (unknown) when either is unknown or they do not
    compare — unknown counts as newer than anything."""
    if not a or not b:
        return ""
    order = compare_resource_versions(a, b)
    if order is None:
        return ""
    return a if order >= 0 else b


def _no_newer(rv: str, than: str) -> bool:
    """Is ``rv`` known, and no newer than ``than``?"""
    if not rv or not than:
        return False
    order = compare_resource_versions(rv, than)
    return order is not None and order <= 0
