"""The REMOVE_FENCE action: drop our fence from a release a decision found fenced by us,
never spec.suspend."""

from __future__ import annotations

from ..core.objects import Obj
from ..kube import KubeError
from .outcome import Ending, Report, Result, failed, fence_hint
from .primitives import Primitives


class RemoveFence:
    """The REMOVE_FENCE row, over the write primitives."""

    def __init__(self, prims: Primitives):
        self.prims = prims

    def run(self, hr: Obj) -> Report:
        """Drop our fence from ``hr``, the fresh read that decided."""
        try:
            written = self.prims.remove_fence(hr)
        except KubeError as exc:
            return Report(failed(f"could not remove the fence: {exc}; {fence_hint(hr)}"))
        if written is None:
            return Report(Ending(Result.UNCHANGED))
        return Report(Ending(Result.FENCE_REMOVED), wrote=written)
