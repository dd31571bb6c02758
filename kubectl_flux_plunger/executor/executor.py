"""The ``Executor``: the entry points over one client — one pass over one release
(``reconcile``: fresh read, decide, act) and the one determine → act → re-determine loop
(``settle``) — and the one place a pass's ``Outcome`` is made (``apply_decision``).

It wires its collaborators (none inherits from another; each is handed the client,
options, clock or stop flag it uses): the write primitives, the handshake, and the switch
that picks the action unit the classifier names and runs it."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from dataclasses import replace

from ..core import detect, plan
from ..core.objects import Obj
from ..kube import Kube, KubeError
from ..kube.remote import Remotes
from ..report.events import Recorder
from .classify import writes_release
from .handshake import Handshake, ReleaseWatch
from .outcome import (
    CLEANUP_RESULTS,
    MAX_PASSES,
    Ending,
    Options,
    Outcome,
    Result,
    covered,
    outside,
    utcnow,
)
from .primitives import Primitives
from .read import read_watched
from .switch import Switch

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
    the handshake and the switch over the action units — each handed what it uses."""

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
        self.switch = Switch(kube, self.prims, self.handshake, self.recorder, self.opt, should_stop)
        # the primitives callers use on an executor (release-fence's lift and sweep)
        self.retry_on_conflict = self.prims.retry_on_conflict
        self.relinquish = self.prims.relinquish
        self.remove_fence = self.prims.remove_fence
        self.lift_sole_suspension = self.prims.lift_sole_suspension

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
        if not writes_release(plan.decide(hr, self.clock())):
            return None
        by = check(hr)
        return None if by is None else covered(by, namespace, name)

    def read_watched(
        self, namespace: str, name: str, only_rows: frozenset[plan.Row] | None = None
    ) -> tuple[Obj | None, ReleaseWatch | None]:
        """The fresh read that decides (:func:`.read.read_watched`): a watch-list where a
        recovery may follow, else a GET.  The caller closes the watch."""
        return read_watched(self.kube, self.opt, namespace, name, only_rows)

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
        report = self.switch.run(hr, d, watch)
        # the one place a pass's Outcome is made: of the report its steps returned
        ending = report.ending or Ending(Result.UNCHANGED)
        self.switch.announce(hr, d, ending)
        return Outcome(
            namespace,
            name,
            ending.result,
            d.reason if ending.detail is None else ending.detail,
            row=d.row,
            revision=report.revision,
            failed=ending.failed,
            requeue_after=d.requeue_after if ending.requeue_after is None else ending.requeue_after,
            steps=list(report.steps),
            backup=report.backup,
            settled=None if self.kube.dry_run else _settled(report.wrote or hr, ending),
            left_stuck=ending.stuck,
        )

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
