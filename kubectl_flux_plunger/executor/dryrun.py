"""``--dry-run=client``: the plan of a decision, without a write."""

from __future__ import annotations

from .. import constants as C
from .. import plan, writes
from ..objects import Obj
from .outcome import Outcome, Result
from .saga import DELETE, RECOVERY_STEPS, Saga, step_args


class DryRun(Saga):
    def _plan_only(self, hr: Obj, d: plan.Decision, out: Outcome) -> Outcome:
        out.result = Result.PLANNED
        if d.action is plan.Action.RELINQUISH:
            out.steps.append(
                "apply (flux-plunger) without spec.suspend"
                + (
                    " keeping the fence"
                    if writes.relinquish_body(hr)["metadata"].get("finalizers")
                    else " and without the fence"
                )
            )
        elif d.action is plan.Action.REMOVE_FENCE:
            out.steps.append(f"remove finalizer {C.FENCE}")
        elif d.action is plan.Action.WAIT_FENCE:
            out.steps.append("wait for helm-controller to uninstall, then remove the fence")
        elif d.action is plan.Action.RECOVER and self.opt.allow_recover:
            choice = self._choose(hr, out)
            if choice is None:
                return out
            args = step_args(choice, self.storage_where(hr))
            out.result = Result.PLANNED
            for step in RECOVERY_STEPS:
                if step is DELETE and self.opt.backup is not None:
                    out.steps.append(f"save the Secret first to {self.opt.backup.describe()}")
                out.steps.append(step.plan.format(**args))
        else:
            out.result = Result.UNCHANGED
        return out
