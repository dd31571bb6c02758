"""The RELINQUISH action: lift our suspension from a release a decision found held by us
(a Warning Event when that fails); when it is no longer ours, drop our fence where it must
not outlive us."""

from __future__ import annotations

from ..core import plan
from ..core.objects import Obj
from ..kube import KubeError
from .outcome import Ending, Report, Result, failed, leftover_hint
from .primitives import Primitives
from .steps import drop_fence_not_ours


class Relinquish:
    """The RELINQUISH row, over the write primitives."""

    def __init__(self, prims: Primitives):
        self.prims = prims

    def run(self, hr: Obj) -> Report:
        """Lift our suspension from ``hr``, the fresh read that decided."""
        try:
            lifted = self.prims.relinquish(hr)
            removed = lifted is None and drop_fence_not_ours(self.prims, hr)
        except KubeError as exc:
            if not exc.conflict:
                self.prims.event(hr, plan.UNSUSPEND_FAILED)
            return Report(failed(f"could not lift our suspension: {exc}; {leftover_hint(hr)}"))
        if lifted is None:
            # the suspension changed hands (or the release went) after the read that decided
            return Report(
                Ending(
                    Result.FENCE_REMOVED if removed else Result.UNCHANGED,
                    "the suspension is no longer ours (another manager took "
                    "spec.suspend, or the release is gone): nothing of ours to lift",
                ),
                steps=("removed the fence",) if removed else (),
            )
        return Report(Ending(Result.RELINQUISHED), steps=("lifted our suspension",), wrote=lifted)
