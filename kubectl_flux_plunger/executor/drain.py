"""The drain of SPEC §8 — one loop for serve's shutdown and ``release-fence
--wait-uninstall``: pass after pass, take the releases still held, apply the decision table
to each on a fresh read with an executor that never starts a recovery (live ones lose our
suspension with the fence, terminating ones are carried through helm-controller's
uninstall, the fence removed once ``detect.uninstall_reached``), until none is held, the
caller stops us, or the deadline passes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core import plan
from ..kube import KubeError
from .outcome import Outcome, Result

if TYPE_CHECKING:
    from .executor import Executor

DONE = frozenset({Result.FENCE_REMOVED, Result.GONE})


@dataclass(frozen=True)
class DrainReport:
    held: int  # releases still held at the last successful look (-1: never looked)
    passes: int
    done: bool  # nothing held any more
    stopped: bool = False  # ``still_going`` said stop


def _ignore(*_: object) -> None:
    return None


def released(out: Outcome) -> bool:
    """The default settled test: the fence is gone (removed, or the release is gone)."""
    return out.result in DONE


class Drain:
    def __init__(
        self,
        executor: Executor,
        *,
        poll: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.executor = executor
        self.poll = poll
        self.clock = clock
        self.sleep = sleep

    def run(
        self,
        held: Callable[[], list[str]],
        timeout: float,
        *,
        still_going: Callable[[], bool] = lambda: True,
        only_rows: frozenset[plan.Row] | None = None,
        on_outcome: Callable[[str, Outcome], None] = _ignore,
        on_error: Callable[[str, KubeError], None] = _ignore,
        on_list_error: Callable[[KubeError], None] = _ignore,
        settled: Callable[[Outcome], bool] = released,
    ) -> DrainReport:
        """``held()`` names the releases (``namespace/name``) still to drain, fresh each
        pass; a pass in which every one came out ``settled`` (default: fence-removed or
        gone) is followed at once by another look, which ends the drain when nothing is
        held; after any other pass the next look waits one poll."""
        deadline = self.clock() + timeout
        count, passes = -1, 0
        while True:
            if not still_going():
                return DrainReport(count, passes, False, stopped=True)
            try:
                keys = held()
            except KubeError as exc:
                on_list_error(exc)
                if self._wait(deadline):
                    return DrainReport(count, passes, False)
                continue
            passes += 1
            count = len(keys)
            if not keys:
                return DrainReport(0, passes, True)
            all_settled = True
            for key in keys:
                if not still_going():
                    return DrainReport(count, passes, False, stopped=True)
                if self.clock() >= deadline:
                    all_settled = False
                    break
                ns, name = key.split("/", 1)
                try:
                    out = self.executor.reconcile(ns, name, only_rows=only_rows)
                except KubeError as exc:
                    all_settled = False
                    on_error(key, exc)
                    continue
                on_outcome(key, out)
                if not settled(out):
                    all_settled = False
            if self.clock() >= deadline:
                return DrainReport(count, passes, False)
            if not all_settled and self._wait(deadline):
                with contextlib.suppress(KubeError):  # one last look: report a current count
                    count = len(held())
                return DrainReport(count, passes, count == 0)

    def _wait(self, deadline: float) -> bool:
        """Sleep one poll; True when the deadline has passed."""
        remaining = deadline - self.clock()
        if remaining <= 0:
            return True
        self.sleep(min(self.poll, remaining))
        return self.clock() >= deadline
