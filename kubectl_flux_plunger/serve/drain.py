"""The drain on shutdown (SPEC §8): leave no release suspended or fenced by us.

Take the releases carrying our fence or a suspension we own, and apply the decision table to
each — on a fresh read, by the executor's drain loop — with an executor that never starts a
recovery: live ones lose our suspension with the fence (a live recovery is aborted,
the release left as recovery found it), or just the fence; terminating ones are carried
through the uninstall — our suspension lifted keeping the fence, then the fence removed once
helm-controller has reconciled the unsuspended release (``detect.uninstall_reached``).  At the
deadline the remaining fences stay for the next leader or ``release-fence``.

Where the releases come from: once the watch has synced, from what it saw (``known``: the keys
it saw fenced or suspended by us) — no LIST, so the first pass acts at once; a key leaves the
set when a pass over it settled it (``settled``); keys the watch sees held meanwhile join.
When the set is empty and time remains, one full LIST confirms nothing was missed (what it
finds goes through the same loop).  Before the watch synced, a fresh LIST (same
namespace/selector as the watch) every pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Protocol

from ..core.objects import Obj
from ..core.plan import Row, holds_ours
from ..executor import Outcome, Result
from ..executor.drain import DONE, Drain, released
from ..kube import KubeError
from .logs import fields
from .options import DrainOptions
from .sync import key_of
from .watch import PAGE_SIZE

if TYPE_CHECKING:
    from ..executor import Executor
    from .metrics import Metrics

log = logging.getLogger(__name__)


class Lister(Protocol):
    """What the drain lists through (``kube.Kube``)."""

    def iter_hr_pages(
        self, namespace: str | None, label_selector: str | None, limit: int
    ) -> Iterator[tuple[list[Obj], str]]: ...


# A fresh read in one of these rows found a spec.suspend we own: whatever the pass did, the
# release may still be ours (a relinquished one may keep the fence), so it is read again.
OWNED_ROWS = frozenset({Row.LIVE_SUSPENDED_OWNED, Row.TERMINATING_SUSPENDED_OWNED})


def settled(out: Outcome) -> bool:
    """Nothing of ours is left on the release, by the fresh read of this pass: its fence
    removed, it is gone, or nothing to do (unchanged; skipped: stuck, not ours) on a
    release whose suspension is not ours."""
    if out.result in DONE:
        return True
    return (
        out.result in (Result.UNCHANGED, Result.SKIPPED)
        and not out.failed
        and out.row not in OWNED_ROWS
    )


class KnownFirst:
    """``held()`` for a drain that starts from the keys the watch knows (``known()``, read
    again each pass: the watch still runs) and ends with one confirming LIST
    (``confirm()``: the keys of ours it found, or None when it could not finish — deadline,
    Lease lost).  ``outcome`` drops a key once a pass settled it."""

    def __init__(
        self, known: Callable[[], Collection[str]], confirm: Callable[[], list[str] | None]
    ) -> None:
        self.known, self.confirm = known, confirm
        self.pending: dict[str, None] = {}  # insertion-ordered set
        self.done: set[str] = set()
        self.confirmed = False  # the confirming LIST was made, or cut short
        self.unconfirmed = False  # the confirming LIST was cut short

    def held(self) -> list[str]:
        for key in sorted(set(self.known()) - self.done - self.pending.keys()):
            self.pending[key] = None
        if not self.pending and not self.confirmed:
            found = self.confirm()  # a KubeError: the drain retries after a poll
            self.confirmed = True
            if found is None:
                self.unconfirmed = True
                return []
            self.done.difference_update(found)
            self.pending.update(dict.fromkeys(found))
            if found:
                log.info(
                    "drain: the confirming LIST found releases the watch had not reported",
                    extra=fields(count=len(found)),
                )
        return list(self.pending)

    def outcome(self, key: str, out: Outcome) -> None:
        if settled(out):
            self.pending.pop(key, None)
            self.done.add(key)


class Drainer:
    def __init__(
        self,
        kube: Lister,
        executor: Executor,
        options: DrainOptions,
        *,
        known: Callable[[], Collection[str]] | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kube, self.executor = kube, executor
        self.known = known  # the watch's held keys, once it synced (None: LIST every pass)
        self.namespace, self.selector = options.scope.namespace, options.scope.selector
        self.poll = options.poll
        self.metrics = metrics
        self.clock = clock
        self.sleep = sleep
        self._last: dict[str, str] = {}  # key -> last result logged (repeats go to debug)

    def _list(self, stop: Callable[[], bool] = lambda: False) -> list[str] | None:
        """The keys of ours, by a full paged LIST; None when ``stop()`` turned true between
        pages."""
        keys: list[str] = []
        if stop():
            return None
        for items, _ in self.kube.iter_hr_pages(self.namespace, self.selector, PAGE_SIZE):
            keys.extend(key_of(hr) for hr in items if holds_ours(hr))
            if stop():
                return None
        return keys

    def _list_all(self) -> list[str]:
        return self._list() or []

    def _list_error(self, exc: KubeError) -> None:
        log.warning("drain: cannot list HelmReleases: %s", exc)

    def run(self, timeout: float, still_leading: Callable[[], bool] = lambda: True) -> int:
        """Drain within ``timeout`` seconds (the executor's one drain loop).  Returns the
        releases still held at the last successful look (0 = every fence released;
        -1 = never looked)."""
        deadline = self.clock() + timeout
        known = None
        if self.known is not None:
            known = KnownFirst(
                self.known,
                lambda: self._list(lambda: self.clock() >= deadline or not still_leading()),
            )
        log.info(
            "drain: releasing flux-plunger's suspensions and uninstall fences",
            extra=fields(timeout=timeout, source="watch" if known else "list"),
        )
        on_outcome, held = self._outcome, self._list_all
        if known is not None:
            tracker = known

            def on_outcome(key: str, out: Outcome) -> None:
                tracker.outcome(key, out)
                self._outcome(key, out)

            held = tracker.held
        report = Drain(self.executor, poll=self.poll, clock=self.clock, sleep=self.sleep).run(
            held,
            timeout,
            still_going=still_leading,
            on_outcome=on_outcome,
            on_error=self._error,
            on_list_error=self._list_error,
            # from the watch's keys a key is done once nothing of ours is left on it;
            # listing every pass, once its fence went (the LIST finds the rest again)
            settled=settled if known is not None else released,
        )
        if report.stopped or (known is not None and known.unconfirmed and not still_leading()):
            log.error("drain: lost the Lease; leaving the rest to the new leader")
            return report.held
        if known is not None and known.unconfirmed:
            log.warning(
                "drain: released every fence the watch knew of; no time left for the LIST "
                "that confirms nothing was missed (`kubectl flux-plunger release-fence` "
                "finds any)",
                extra=fields(passes=report.passes),
            )
            return 0
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
