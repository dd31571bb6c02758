"""The state classifier: which action a pass runs on the fresh read that decided, given
that read, the decision ``plan.decide`` made on it, and the command's options
(helm-controller's ``actionForState``).  Pure: the switch (``switch``) picks the unit that
carries it out."""

from __future__ import annotations

import enum

from ..core import plan
from ..core.objects import Obj
from .outcome import Options


class Act(enum.Enum):
    """The action a pass runs, one unit each (``switch.Switch``)."""

    GONE = enum.auto()  # the release is gone: nothing to do
    PLAN = enum.auto()  # --dry-run=client: the plan of the decision, no write (``dryrun``)
    RELINQUISH = enum.auto()  # lift our suspension (``relinquish``)
    REMOVE_FENCE = enum.auto()  # drop our fence (``remove_fence``)
    WAIT_FENCE = enum.auto()  # wait for helm-controller's uninstall
    RECOVER = enum.auto()  # the recovery sequence (``recover``)
    NOT_REQUESTED = enum.auto()  # stuck, but this command starts no recovery
    NOTHING = enum.auto()


# the decisions that write to the release: the ones a one-shot verb leaves to a running
# controller that covers it (``Options.covered``)
WRITES = frozenset({plan.Action.RELINQUISH, plan.Action.REMOVE_FENCE, plan.Action.RECOVER})

_BY_DECISION = {
    plan.Action.RELINQUISH: Act.RELINQUISH,
    plan.Action.REMOVE_FENCE: Act.REMOVE_FENCE,
    plan.Action.WAIT_FENCE: Act.WAIT_FENCE,
    plan.Action.RECOVER: Act.RECOVER,
}


def writes_release(d: plan.Decision) -> bool:
    """Whether decision ``d`` writes to the release (an Event or a wait does not)."""
    return d.action in WRITES


def action_for(hr: Obj | None, d: plan.Decision, opt: Options) -> Act:
    """The action for decision ``d`` on ``hr`` (None: gone) under ``opt``."""
    if hr is None:
        return Act.GONE
    if opt.dry_run_client:
        return Act.PLAN
    act = _BY_DECISION.get(d.action, Act.NOTHING)
    if act is Act.RECOVER and not opt.allow_recover:
        return Act.NOT_REQUESTED
    return act
