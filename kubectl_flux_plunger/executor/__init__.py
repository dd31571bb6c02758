"""The executor: turns a decision of :mod:`plan` into requests, each carrying the
preconditions of the read that decided it, and re-reads.

Every decision is made on a fresh GET (never a cache).  A 409 means "someone wrote between
our read and our write": the executor re-reads and re-decides, bounded by time, instead of
pushing its stale view through.  One job per module:

* ``outcome``    — ``Result``, ``Outcome``, ``Options``, what a failed clean-up leaves;
* ``primitives`` — the write primitives with one ``retry_on_conflict``; storage list/DELETE;
* ``handshake``  — waiting for helm-controller to observe the suspension;
* ``saga``       — the recovery sequence;
* ``dryrun``     — the plan of a decision without writes;
* here           — the entry points and the one determine → act → re-determine loop.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from .. import detect, plan
from ..events import Recorder
from ..kube import Kube, KubeError
from ..objects import Obj
from ..remote import Remotes
from .dryrun import DryRun
from .outcome import (
    CLEANUP_RESULTS,
    MAX_PASSES,
    Options,
    Outcome,
    Result,
    Stopped,
    fence_hint,
    leftover_hint,
    utcnow,
)

__all__ = [
    "Executor",
    "Options",
    "Outcome",
    "Result",
    "Stopped",
    "fence_hint",
    "leftover_hint",
    "utcnow",
]


class Executor(DryRun):
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

    def reconcile(
        self, namespace: str, name: str, *, only_rows: frozenset[plan.Row] | None = None
    ) -> Outcome:
        """One pass over one release: fresh read, decide (SPEC §6), act — only on the rows
        in ``only_rows`` when given (otherwise: unchanged, nothing written)."""
        hr = self.kube.get_hr(namespace, name)
        if only_rows is not None and hr is not None:
            d = plan.decide(hr, self.clock())
            if d.row not in only_rows:
                return Outcome(namespace, name, Result.UNCHANGED, d.reason, row=d.row)
        return self.apply_decision(namespace, name, hr)

    def apply_decision(self, namespace: str, name: str, hr: Obj | None) -> Outcome:
        d = plan.decide(
            hr,
            self.clock(),
            fence_warn_after=self.opt.fence_warn_after,
            fence_recheck=self.opt.fence_recheck,
        )
        out = Outcome(
            namespace, name, Result.UNCHANGED, d.reason, row=d.row, requeue_after=d.requeue_after
        )
        if hr is None:
            out.result = Result.GONE
            return out
        if self.opt.dry_run_client:
            return self._plan_only(hr, d, out)
        if d.event:
            self._event(hr, d.event)
        act = d.action
        if act is plan.Action.RELINQUISH:
            self._relinquish_or_warn(hr, out)
        elif act is plan.Action.REMOVE_FENCE:
            self._remove_fence(hr, out)
        elif act is plan.Action.WAIT_FENCE:
            out.result = Result.WAITING
        elif act is plan.Action.RECOVER:
            if not self.opt.allow_recover:
                out.result, out.detail = (
                    Result.SKIPPED,
                    "stuck; recovery not requested by this command",
                )
            else:
                self.recover(hr, out)
        return out

    def settle(
        self, hr: Obj, *, only_rows: frozenset[str] | None = None, fresh: bool = False
    ) -> Outcome:
        """Determine → act → re-determine until nothing changes (bounded, like
        helm-controller's AtomicRelease): one-shot verbs finish what an interrupted run
        left (our suspension or fence on a live release) and then decide again on a fresh
        read, as the controller would on the update event its own write causes.

        ``hr`` is a listed copy (re-read before anything acts on it) or, with ``fresh``, a
        read just made (used as is: the named read is the fresh read).  ``only_rows``
        limits which rows may act (``resume-owned``)."""
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
                    current, fresh = self.kube.get_hr(ns, name), True
                    if only_rows is not None:
                        continue  # its row must still be one of only_rows
                out = self.apply_decision(ns, name, current)
                if prev is not None:
                    if out.result == Result.UNCHANGED:
                        return prev  # the clean-up was all there was to do
                    out.steps[:0] = prev.steps
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
                if current is None or detect.is_terminating(current):
                    return out
            return out
        except KubeError as exc:
            return Outcome(ns, name, Result.FAILED, str(exc), failed=True)
