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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from ..detect import is_fenced, is_suspended
from ..executor import Outcome, Result
from ..executor.drain import Drain
from ..kube import KubeError
from ..objects import Obj
from ..ownership import owns_suspend
from .logs import fields
from .watch import PAGE_SIZE, key_of

if TYPE_CHECKING:
    from ..executor import Executor
    from .metrics import Metrics

log = logging.getLogger(__name__)


class Lister(Protocol):
    """What the drain lists through (``kube.Kube``)."""

    def iter_hr_pages(
        self, namespace: str | None, label_selector: str | None, limit: int
    ) -> Iterator[tuple[list[Obj], str]]: ...


def ours(hr: Obj) -> bool:
    return is_fenced(hr) or (is_suspended(hr) and owns_suspend(hr))


class Drainer:
    def __init__(
        self,
        kube: Lister,
        executor: Executor,
        *,
        namespace: str | None,
        selector: str | None,
        poll: float = 1.0,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kube, self.executor = kube, executor
        self.namespace, self.selector = namespace, selector
        self.poll = poll
        self.metrics = metrics
        self.clock = clock
        self.sleep = sleep
        self._last: dict[str, str] = {}  # key -> last result logged (repeats go to debug)

    def _list(self) -> list[str]:
        keys: list[str] = []
        for items, _ in self.kube.iter_hr_pages(self.namespace, self.selector, PAGE_SIZE):
            keys.extend(key_of(hr) for hr in items if ours(hr))
        return keys

    def run(self, timeout: float, still_leading: Callable[[], bool] = lambda: True) -> int:
        """Drain within ``timeout`` seconds (the executor's one drain loop).  Returns the
        releases still held in the last successful listing (0 = every fence released;
        -1 = never listed)."""
        log.info(
            "drain: releasing flux-plunger's suspensions and uninstall fences",
            extra=fields(timeout=timeout),
        )
        report = Drain(self.executor, poll=self.poll, clock=self.clock, sleep=self.sleep).run(
            self._list,
            timeout,
            still_going=still_leading,
            on_outcome=self._outcome,
            on_error=self._error,
            on_list_error=lambda exc: log.warning("drain: cannot list HelmReleases: %s", exc),
        )
        if report.stopped:
            log.error("drain: lost the Lease; leaving the rest to the new leader")
            return report.held
        if report.done:
            log.info(
                "drain: released every uninstall fence before stopping",
                extra=fields(passes=report.passes),
            )
            return 0
        return self._gave_up(report.held)

    def _outcome(self, key: str, out: Outcome) -> None:
        if self.metrics is not None:
            self.metrics.observe(out)
        repeat = self._last.get(key) == out.result
        self._last[key] = out.result
        log.log(
            logging.DEBUG if repeat or out.result == Result.UNCHANGED else logging.INFO,
            "drain: %s: %s",
            out.result,
            out.detail,
            extra=fields(release=key, row=str(out.row), result=str(out.result)),
        )

    def _error(self, key: str, exc: KubeError) -> None:
        if self.metrics is not None:
            self.metrics.error()
        log.warning("drain: %s: %s", key, exc, extra=fields(release=key))

    def _gave_up(self, held: int) -> int:
        log.warning(
            "drain: stopped with %s uninstall fence(s) still held; the next "
            "flux-plunger or `kubectl flux-plunger release-fence` releases them",
            held if held >= 0 else "an unknown number of",
            extra=fields(held=held),
        )
        return held
