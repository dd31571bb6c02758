"""The executor: turns a decision of :mod:`plan` into requests, each carrying the
preconditions of the read that decided it, and re-reads.

Every decision is made on a fresh GET (never a cache).  A 409 means "someone wrote between
our read and our write": the executor re-reads and re-decides, bounded by time, instead of
pushing its stale view through.  One job per module:

* ``outcome``    — ``Result``, ``Outcome``, the ``Report`` the steps return, ``Options``,
  what a failed clean-up leaves;
* ``primitives`` — the write primitives with one ``retry_on_conflict``; storage list/DELETE;
* ``handshake``  — waiting for helm-controller to observe the suspension;
* ``saga``       — the recovery sequence;
* ``dryrun``     — the plan of a decision without writes;
* here           — the ``Executor``: it wires those collaborators (none inherits from
  another; each is handed the client, options, clock or stop flag it uses) and holds the
  entry points and the one determine → act → re-determine loop.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import replace

from ..core import detect, plan
from ..core.objects import Obj
from ..kube import Kube, KubeError
from ..kube.remote import Remotes
from ..report.events import Recorder
from .dryrun import DryRun
from .handshake import Handshake, InitialStateUnknown, ReleaseWatch, watch_timeout
from .outcome import (
    CLEANUP_RESULTS,
    MAX_PASSES,
    Covered,
    Ending,
    Options,
    Outcome,
    Report,
    Result,
    Stopped,
    covered,
    fence_hint,
    leftover_hint,
    outside,
    utcnow,
)
from .primitives import Primitives
from .saga import Saga

log = logging.getLogger(__name__)

__all__ = [
    "Covered",
    "Executor",
    "Options",
    "Outcome",
    "Result",
    "Stopped",
    "fence_hint",
    "leftover_hint",
    "utcnow",
]


# How long the watch-list read waits for the release's current state before it reads it
# with a GET instead (the state, or for a missing release the end-of-initial-events
# bookmark, arrives within milliseconds: bench/read_bench.py).
FIRST_WAIT = 5.0
# Watch-lists that gave no state in a row before this process reads with GETs only.
WATCH_LIST_MISSES = 3


# the decisions that write to the release: the ones a one-shot verb leaves to a running
# controller that covers it (``Options.covered``)
_WRITES = frozenset({plan.Action.RELINQUISH, plan.Action.REMOVE_FENCE, plan.Action.RECOVER})

# results after which the release's newest state is one the pass judged through
_SETTLING = frozenset(
    {
        Result.RECOVERED,
        Result.AWAITING_RETRY,
        Result.SKIPPED,
        Result.UNCHANGED,
        Result.RELINQUISHED,
        Result.FENCE_REMOVED,
    }
)


def _settled(newest: Obj | None, ending: Ending) -> str | None:
    """``Outcome.settled``: the resourceVersion of ``newest`` (the read, or the answer of the
    pass's last write) when the pass ended on it for good and it wants no further pass.
    Every change up to it is then one this pass judged — the writes of its own, and those
    of others its preconditions or its stream saw — so serve skips their watch events."""
    if newest is None or ending.result not in _SETTLING:  # failed, deferred, waiting, ...
        return None
    if plan.wanted_on_change(newest):
        return None
    rv = (newest.get("metadata") or {}).get("resourceVersion")
    return rv if isinstance(rv, str) and rv else None


class Executor:
    """The entry points over one client.  Wires its collaborators — the write primitives,
    the handshake, the saga and the dry run — each handed what it uses."""

    def __init__(
        self,
        kube: Kube,
        recorder: Recorder | None = None,
        *,
        options: Options | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        should_stop: Callable[[], bool] = lambda: False,
        remotes: Remotes | None = None,
    ):
        self.kube = kube
        self.remotes = remotes or Remotes(kube)  # where spec.kubeConfig releases keep storage
        self.recorder = recorder or Recorder(kube, enabled=False)
        self.opt = options or Options()
        self.clock = clock
        self.should_stop = should_stop
        self.prims = Primitives(kube, self.remotes, self.recorder, self.opt, clock)
        self.handshake = Handshake(kube, self.opt, should_stop, self.prims.fresh)
        self.saga = Saga(kube, self.prims, self.handshake, self.recorder, self.opt, should_stop)
        self.dryrun = DryRun(self.saga, self.prims, self.opt)
        # the primitives callers use on an executor (release-fence's lift and sweep)
        self.retry_on_conflict = self.prims.retry_on_conflict
        self.relinquish = self.prims.relinquish
        self.remove_fence = self.prims.remove_fence

    # -- the entry points ------------------------------------------------------------

    def reconcile(
        self, namespace: str, name: str, *, only_rows: frozenset[plan.Row] | None = None
    ) -> Outcome:
        """One pass over one release: fresh read, decide (SPEC §6), act — only on the rows
        in ``only_rows`` when given (otherwise: unchanged, nothing written)."""
        hr, watch = self.read_watched(namespace, name, only_rows)
        try:
            if (left := self._outside(hr, namespace, name)) is not None:
                return left
            if only_rows is not None and hr is not None:
                d = plan.decide(hr, self.clock())
                if d.row not in only_rows:
                    return Outcome(namespace, name, Result.UNCHANGED, d.reason, row=d.row)
            if (left := self._left_to(hr, namespace, name)) is not None:
                return left
            return self.apply_decision(namespace, name, hr, watch)
        finally:
            if watch is not None:
                watch.close()

    def selected(self, hr: Obj | None) -> bool:
        """Whether a fresh read is inside ``Options.selector`` (a gone release is: its
        row is ``gone``, which writes nothing)."""
        return self._outside(hr, "", "") is None

    def _outside(self, hr: Obj | None, namespace: str, name: str) -> Outcome | None:
        """The pass's outcome when a fresh read found the release outside
        ``Options.selector`` (nothing is written to it), else None."""
        sel = self.opt.selector
        if hr is None or sel is None or sel.matches_object(hr):
            return None
        return outside(sel, namespace, name)

    def _left_to(self, hr: Obj | None, namespace: str, name: str) -> Outcome | None:
        """The pass's outcome when the decision on the fresh read ``hr`` would write to the
        release and a running flux-plunger controller covers it (``Options.covered``, the
        one-shot verbs): nothing is written, the release is left to that controller.  A
        decision that writes nothing to the release (an Event, a wait) goes on."""
        check = self.opt.covered
        if hr is None or check is None:
            return None
        if plan.decide(hr, self.clock()).action not in _WRITES:
            return None
        by = check(hr)
        return None if by is None else covered(by, namespace, name)

    def read_watched(
        self, namespace: str, name: str, only_rows: frozenset[plan.Row] | None = None
    ) -> tuple[Obj | None, ReleaseWatch | None]:
        """The fresh read that decides, as a watch-list where a recovery may follow: its
        initial event is the read (as fresh as a GET), and the saga goes on on the same
        stream — the acquire on the newest state, the handshake — so the read and the
        WATCH are one request.  A GET (and no watch) where nothing can be recovered (not
        allowed, or not among ``only_rows``), on a dry run, and where the server has no
        watch-lists.  The caller closes the watch."""
        if (
            self.kube.dry_run
            or self.opt.dry_run_client
            or not self.opt.allow_recover
            or (only_rows is not None and plan.Row.LIVE_STUCK not in only_rows)
            or not self.kube.watch_list
        ):
            return self.kube.get_hr(namespace, name), None
        try:
            read = ReleaseWatch.read(
                self.kube, namespace, name, watch_timeout(self.opt), FIRST_WAIT
            )
            self.kube.watch_list_misses = 0
            return read
        except KubeError as exc:
            if exc.not_found and not exc.object_missing:
                raise  # the API itself is missing: the GET would say the same
            if exc.status in (400, 422):
                self._no_watch_lists(str(exc))  # no WatchList on this server
            else:
                self._watch_list_missed(str(exc))
        except InitialStateUnknown as exc:
            self._watch_list_missed(str(exc))
        return self.kube.get_hr(namespace, name), None

    def _watch_list_missed(self, why: str) -> None:
        """A watch-list that gave no state (a stream ERROR, silence, a failing server):
        after WATCH_LIST_MISSES in a row this process reads with GETs (a server whose
        storage cannot serve them fails every one the same way)."""
        self.kube.watch_list_misses += 1
        if self.kube.watch_list_misses >= WATCH_LIST_MISSES:
            self._no_watch_lists(why)

    def _no_watch_lists(self, why: str) -> None:
        self.kube.watch_list = False
        log.info("the server does not serve watch-lists (%s): reading with GET", why)

    def apply_decision(
        self,
        namespace: str,
        name: str,
        hr: Obj | None,
        watch: ReleaseWatch | None = None,
    ) -> Outcome:
        d = plan.decide(
            hr,
            self.clock(),
            fence_warn_after=self.opt.fence_warn_after,
            fence_recheck=self.opt.fence_recheck,
        )
        if hr is None:
            report = Report(Ending(Result.GONE))
        elif self.opt.dry_run_client:
            report = self.dryrun.plan_only(hr, d)
        else:
            report = self._act(hr, d, watch)
        # the one place a pass's Outcome is made: of the report its steps returned
        ending = report.ending or Ending(Result.UNCHANGED)
        announce = (
            hr is not None
            and d.action is plan.Action.RECOVER
            and not (self.opt.dry_run_client or self.kube.dry_run)
        )
        if announce and hr is not None and ending.failed:
            # a Warning Event (and a Flux notification of severity error) with the cause
            # for the notification only: the Event's message stays static
            self.recorder.record(
                hr,
                plan.RECOVERY_FAILED.reason,
                plan.RECOVERY_FAILED.type,
                plan.RECOVERY_FAILED.message,
                metadata={"error": ending.detail or ""},
            )
        elif announce and hr is not None and ending.stuck is not None:
            # the same for a skip that leaves the release stuck: one static message per
            # cause (so repeats fold), the words of this pass for the notification only
            skipped = plan.RECOVERY_SKIPPED[ending.stuck]
            self.recorder.record(
                hr,
                skipped.reason,
                skipped.type,
                skipped.message,
                metadata={"cause": ending.stuck.value, "detail": ending.detail or ""},
            )
        return Outcome(
            namespace,
            name,
            ending.result,
            d.reason if ending.detail is None else ending.detail,
            row=d.row,
            revision=report.revision,
            failed=ending.failed,
            requeue_after=d.requeue_after,
            steps=list(report.steps),
            backup=report.backup,
            settled=None if self.kube.dry_run else _settled(report.wrote or hr, ending),
            left_stuck=ending.stuck,
        )

    def _act(self, hr: Obj, d: plan.Decision, watch: ReleaseWatch | None) -> Report:
        """Carry out decision ``d`` on ``hr`` (the fresh read that made it)."""
        if d.event:
            self.prims.event(hr, d.event)
        act = d.action
        if act is plan.Action.RELINQUISH:
            return self.saga.relinquish_action(hr)
        if act is plan.Action.REMOVE_FENCE:
            return self.saga.remove_fence_action(hr)
        if act is plan.Action.WAIT_FENCE:
            return Report(Ending(Result.WAITING))
        if act is plan.Action.RECOVER:
            if not self.opt.allow_recover:
                return Report(
                    Ending(Result.SKIPPED, "stuck; recovery not requested by this command")
                )
            return self.saga.recover(hr, watch)
        return Report()

    def settle(
        self,
        hr: Obj,
        *,
        only_rows: frozenset[plan.Row] | None = None,
        fresh: bool = False,
        watch: ReleaseWatch | None = None,
    ) -> Outcome:
        """Determine → act → re-determine until nothing changes (bounded, like
        helm-controller's AtomicRelease): one-shot verbs finish what an interrupted run
        left (our suspension or fence on a live release) and then decide again on a fresh
        read, as the controller would on the update event its own write causes.

        ``hr`` is a listed copy (re-read before anything acts on it) or, with ``fresh``, a
        read just made (used as is: the named read is the fresh read).  ``only_rows``
        limits which rows may act (``resume-owned``).  ``watch``: the watch-list ``hr`` was
        read from (:meth:`read_watched`); the first pass goes on on it; closed here."""
        with contextlib.ExitStack() as opened:
            if watch is not None:
                opened.callback(watch.close)
            return self._settle(hr, only_rows, fresh, watch, opened)

    def _settle(
        self,
        hr: Obj,
        only_rows: frozenset[plan.Row] | None,
        fresh: bool,
        watch: ReleaseWatch | None,
        opened: contextlib.ExitStack,
    ) -> Outcome:
        md = hr["metadata"]
        ns, name = md["namespace"], md["name"]
        prev: Outcome | None = None
        current: Obj | None = hr
        out = Outcome(ns, name, Result.UNCHANGED, "")
        try:
            for _ in range(MAX_PASSES):
                d = plan.decide(current, self.clock())
                if (d.action is plan.Action.NOTHING and d.event is None) or (
                    only_rows is not None and d.row not in only_rows
                ):
                    if prev is not None:
                        return prev
                    return Outcome(
                        ns,
                        name,
                        Result.GONE if current is None else Result.UNCHANGED,
                        d.reason,
                        row=d.row,
                    )
                if prev is None and not fresh:
                    # the LIST only chose candidates: every decision that acts is re-made
                    # on a fresh read (the listed copy may be minutes old by now)
                    current, watch = self.read_watched(ns, name, only_rows)
                    fresh = True
                    if watch is not None:
                        opened.callback(watch.close)
                    if (left := self._outside(current, ns, name)) is not None:
                        return left
                    if only_rows is not None:
                        continue  # its row must still be one of only_rows
                if prev is None and (left := self._left_to(current, ns, name)) is not None:
                    return left  # a running controller covers it: left to that controller
                out = self.apply_decision(ns, name, current, watch if prev is None else None)
                if prev is not None:
                    if out.result == Result.UNCHANGED:
                        return prev  # the clean-up was all there was to do
                    out = replace(out, steps=prev.steps + out.steps)
                again = (
                    only_rows is None
                    and out.result in CLEANUP_RESULTS
                    and not self.opt.dry_run_client
                    and not self.kube.dry_run
                )
                if not again:
                    return out
                prev = out
                current = self.kube.get_hr(ns, name)
                if (
                    current is None
                    or detect.is_terminating(current)
                    or not self.selected(current)
                    or self._left_to(current, ns, name) is not None
                ):
                    return out
            return out
        except KubeError as exc:
            return Outcome(ns, name, Result.FAILED, str(exc), failed=True)
