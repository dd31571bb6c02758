"""The drain on shutdown (SPEC §8): leave no release suspended or fenced by us.

Repeatedly list (fresh LIST, same namespace/selector as the watch) the releases carrying our
fence or a suspension we own, and apply the decision table to each with an executor that never
starts a recovery: live ones lose our suspension with the fence (a live recovery is aborted,
the release left as recovery found it), or just the fence; terminating ones are carried
through the uninstall — our suspension lifted keeping the fence, then the fence removed once
helm-controller has reconciled the unsuspended release (``detect.uninstall_reached``).  At the
deadline the remaining fences stay for the next leader or ``release-fence``.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from ..detect import is_fenced, is_suspended
from ..executor import Result
from ..kube import KubeError
from ..ownership import owns_suspend
from .logs import fields
from .watch import PAGE_SIZE, key_of

log = logging.getLogger(__name__)

DONE = (Result.FENCE_REMOVED, Result.GONE)


def ours(hr: dict) -> bool:
    return is_fenced(hr) or (is_suspended(hr) and owns_suspend(hr))


class Drainer:
    def __init__(self, kube, executor, *, namespace: str | None, selector: str | None,
                 poll: float = 1.0, metrics=None, clock: Callable[[], float] = time.monotonic):
        self.kube, self.executor = kube, executor
        self.namespace, self.selector = namespace, selector
        self.poll = poll
        self.metrics = metrics
        self.clock = clock
        self._last: dict[str, str] = {}   # key -> last result logged (repeats go to debug)

    def _list(self) -> list[str]:
        keys: list[str] = []
        for items, _ in self.kube.iter_hr_pages(self.namespace, self.selector, PAGE_SIZE):
            keys.extend(key_of(hr) for hr in items if ours(hr))
        return keys

    def run(self, timeout: float, still_leading: Callable[[], bool] = lambda: True) -> int:
        """Drain within ``timeout`` seconds.  Returns the releases still held in the last
        successful listing (0 = every fence released; -1 = never listed)."""
        deadline = self.clock() + timeout
        held = -1
        passes = 0
        log.info("drain: releasing flux-plunger's suspensions and uninstall fences",
                 extra=fields(timeout=timeout))
        while True:
            if not still_leading():
                log.error("drain: lost the Lease; leaving the rest to the new leader")
                return held
            try:
                keys = self._list()
            except KubeError as exc:
                log.warning("drain: cannot list HelmReleases: %s", exc)
                if self._wait(deadline):
                    return self._gave_up(held)
                continue
            passes += 1
            held = len(keys)
            if not keys:
                log.info("drain: released every uninstall fence before stopping",
                         extra=fields(passes=passes))
                return 0
            settled = True
            for key in keys:
                if self.clock() >= deadline or not still_leading():
                    settled = False
                    break
                ns, name = key.split("/", 1)
                try:
                    out = self.executor.reconcile(ns, name)
                except KubeError as exc:
                    settled = False
                    if self.metrics is not None:
                        self.metrics.error()
                    log.warning("drain: %s: %s", key, exc, extra=fields(release=key))
                    continue
                if self.metrics is not None:
                    self.metrics.observe(out)
                repeat = self._last.get(key) == out.result
                self._last[key] = out.result
                log.log(logging.DEBUG if repeat or out.result == Result.UNCHANGED else logging.INFO,
                        "drain: %s: %s", out.result, out.detail,
                        extra=fields(release=key, row=out.row, result=out.result))
                if out.result not in DONE:
                    settled = False
            if self.clock() >= deadline:
                return self._gave_up(held)
            if not settled and self._wait(deadline):
                # one last look so the count we report is current
                try:
                    held = len(self._list())
                except KubeError:
                    pass
                if held == 0:
                    log.info("drain: released every uninstall fence before stopping")
                    return 0
                return self._gave_up(held)

    def _wait(self, deadline: float) -> bool:
        """Sleep one poll; True when the deadline has passed."""
        remaining = deadline - self.clock()
        if remaining <= 0:
            return True
        time.sleep(min(self.poll, remaining))
        return self.clock() >= deadline

    def _gave_up(self, held: int) -> int:
        log.warning("drain: stopped with %s uninstall fence(s) still held; the next "
                    "flux-plunger or `kubectl flux-plunger release-fence` releases them",
                    held if held >= 0 else "an unknown number of",
                    extra=fields(held=held))
        return held
