"""``--dry-run=client``: the plan of a decision, without a write (the action the
classifier picks for every decision on a client dry run)."""

from __future__ import annotations

from ..core import constants as C
from ..core import ownership, plan, writes
from ..core.objects import Obj
from .outcome import Ending, Options, Report, Result
from .primitives import Primitives
from .recover import Recover
from .steps import DELETE, RECOVERY_STEPS, step_args

PLANNED = Ending(Result.PLANNED)


class DryRun:
    """The plan of a decision: what the executor would send, rendered from the recovery's own
    step list after the recovery's own choice (its one storage LIST) — never a write."""

    def __init__(self, recover: Recover, prims: Primitives, options: Options):
        self.recover = recover
        self.prims = prims
        self.opt = options

    def plan_only(self, hr: Obj, d: plan.Decision) -> Report:
        """The steps ``d`` would take on ``hr``, as a planned report (the recovery's from
        the recovery's own step list, after the real storage LIST that chooses)."""
        if d.action is plan.Action.RELINQUISH:
            body = writes.relinquish_body(hr)["metadata"]
            keep, mark = body.get("finalizers"), body.get("annotations")
            unmark = ownership.owns_suspended_by(hr) and not mark
            return Report(
                PLANNED,
                steps=(
                    "apply (flux-plunger) without spec.suspend"
                    + (" keeping the fence" if keep else " and without the fence")
                    + (f", and without annotation {C.SUSPENDED_BY_ANNOTATION}" if unmark else ""),
                ),
            )
        if d.action is plan.Action.REMOVE_FENCE:
            ops = writes.remove_fence_json_patch(hr) or []
            unmark = any(op["path"] == writes.SUSPENDED_BY_PATH for op in ops)
            return Report(
                PLANNED,
                steps=(
                    f"remove finalizer {C.FENCE}"
                    + (f" and annotation {C.SUSPENDED_BY_ANNOTATION}" if unmark else ""),
                ),
            )
        if d.action is plan.Action.WAIT_FENCE:
            return Report(
                PLANNED, steps=("wait for helm-controller to uninstall, then remove the fence",)
            )
        if d.action is plan.Action.RECOVER and self.opt.allow_recover:
            choice, report = self.recover.choose(hr)
            if choice is None:
                return report
            args = step_args(choice, self.prims.storage_where(hr), hr)
            steps: list[str] = []
            for step in RECOVERY_STEPS:
                if step is DELETE and self.opt.backup is not None:
                    steps.append(f"save the Secret first to {self.opt.backup.describe()}")
                steps.append(step.plan.format(**args))
            return report.did(*steps).end(PLANNED)
        return Report(Ending(Result.UNCHANGED))
