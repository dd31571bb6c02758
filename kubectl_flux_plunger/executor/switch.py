"""The switch: builds one unit per action (recover, relinquish, remove the fence, the dry
run's plan) and, for the action the classifier (``classify.action_for``) names, picks the
unit and runs it (helm-controller's ``internal/reconcile``: one type per action, a state
classifier, a separate switch that picks).  It also announces how a recovery ended."""

from __future__ import annotations

from collections.abc import Callable

from ..core import plan
from ..core.objects import Obj
from ..kube import Kube
from ..report.events import Recorder
from .classify import Act, action_for
from .dryrun import DryRun
from .handshake import Handshake, ReleaseWatch
from .outcome import Ending, Options, Report, Result
from .primitives import Primitives
from .recover import Recover
from .relinquish import Relinquish
from .remove_fence import RemoveFence


class Switch:
    """One unit per action, each handed what it uses, and the one place that picks."""

    def __init__(
        self,
        kube: Kube,
        prims: Primitives,
        handshake: Handshake,
        recorder: Recorder,
        options: Options,
        should_stop: Callable[[], bool],
    ):
        self.kube = kube
        self.prims = prims
        self.recorder = recorder
        self.opt = options
        self.recover = Recover(kube, prims, handshake, recorder, options, should_stop)
        self.relinquish = Relinquish(prims)
        self.remove_fence = RemoveFence(prims)
        self.dryrun = DryRun(self.recover, prims, options)

    def run(self, hr: Obj | None, d: plan.Decision, watch: ReleaseWatch | None) -> Report:
        """Carry out decision ``d`` on ``hr`` (the fresh read that made it; None: gone):
        the unit of the action the classifier names, after the decision's Event (a real
        run only).  ``watch``: the watch-list ``hr`` was read from (the recovery goes on
        on it)."""
        act = action_for(hr, d, self.opt)
        if act is Act.GONE or hr is None:
            return Report(Ending(Result.GONE))
        if act is Act.PLAN:
            return self.dryrun.plan_only(hr, d)
        if d.event:
            self.prims.event(hr, d.event)
        if act is Act.RELINQUISH:
            return self.relinquish.run(hr)
        if act is Act.REMOVE_FENCE:
            return self.remove_fence.run(hr)
        if act is Act.WAIT_FENCE:
            return Report(Ending(Result.WAITING))
        if act is Act.NOT_REQUESTED:
            return Report(Ending(Result.SKIPPED, "stuck; recovery not requested by this command"))
        if act is Act.RECOVER:
            return self.recover.run(hr, watch)
        return Report()

    def announce(self, hr: Obj | None, d: plan.Decision, ending: Ending) -> None:
        """How a recovery (a RECOVER decision, a real run) ended, when it failed or left the
        release stuck: a Warning Event (and a Flux notification)."""
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
