"""The releases serve leaves stuck for a human (``plan.Stuck``), behind the
``flux_plunger_releases_left_stuck`` gauge.

A key is counted from the pass that skipped it with a ``Stuck`` cause (``Outcome.left_stuck``)
until the next pass over it ends otherwise, or the watch shows it no longer stuck or gone (a
repaired release is not queued again: helm-controller's success is a change no pass is
wanted for).  A sync replaces what is known with what it read.  Only keys and causes are
held; the set is bounded by the releases stuck at once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

from ..core.plan import Stuck


class LeftStuck:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._causes: dict[str, Stuck] = {}

    def passed(self, key: str, cause: Stuck | None) -> None:
        """A pass over ``key`` ended, leaving it stuck for ``cause`` (None: not so)."""
        with self._lock:
            if cause is None:
                self._causes.pop(key, None)
            else:
                self._causes[key] = cause

    def cause(self, key: str) -> Stuck | None:
        """Why ``key`` is counted as left stuck, if it is."""
        with self._lock:
            return self._causes.get(key)

    def forget(self, key: str) -> None:
        """The watch saw ``key`` no longer stuck, or deleted."""
        with self._lock:
            self._causes.pop(key, None)

    def keep_only(self, stuck: Iterable[str]) -> None:
        """A sync read every release: only those it saw stuck can still be left stuck."""
        keep = set(stuck)
        with self._lock:
            self._causes = {k: v for k, v in self._causes.items() if k in keep}

    def counts(self) -> dict[Stuck, int]:
        """Releases left stuck by cause, every cause present (0 when none)."""
        with self._lock:
            found = Counter(self._causes.values())
        return {cause: found.get(cause, 0) for cause in Stuck}
