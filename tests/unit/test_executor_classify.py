"""The state classifier (executor/classify.action_for): every decision to its action, under
every option that changes it (issue 40: the mutants of its table lookup)."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import plan
from kubectl_flux_plunger.executor.classify import Act, action_for, writes_release
from kubectl_flux_plunger.executor.outcome import Options

HR = {"metadata": {"namespace": "ns", "name": "demo"}}


def decision(action: plan.Action) -> plan.Decision:
    return plan.Decision(action, plan.Row.GONE, "why", None, None)


@pytest.mark.parametrize("action, act", [
    (plan.Action.NOTHING, Act.NOTHING),
    (plan.Action.RELINQUISH, Act.RELINQUISH),
    (plan.Action.REMOVE_FENCE, Act.REMOVE_FENCE),
    (plan.Action.WAIT_FENCE, Act.WAIT_FENCE),
    (plan.Action.RECOVER, Act.RECOVER),
])
def test_each_decision_has_its_action(action, act):
    assert action_for(HR, decision(action), Options()) is act


@pytest.mark.parametrize("action", list(plan.Action))
def test_a_gone_release_is_gone_whatever_was_decided(action):
    assert action_for(None, decision(action), Options(dry_run_client=True)) is Act.GONE


@pytest.mark.parametrize("action", list(plan.Action))
def test_dry_run_client_only_plans(action):
    assert action_for(HR, decision(action), Options(dry_run_client=True)) is Act.PLAN


def test_a_recovery_not_allowed_is_not_requested_and_the_others_still_run():
    no = Options(allow_recover=False)
    assert action_for(HR, decision(plan.Action.RECOVER), no) is Act.NOT_REQUESTED
    assert action_for(HR, decision(plan.Action.RELINQUISH), no) is Act.RELINQUISH
    assert action_for(HR, decision(plan.Action.NOTHING), no) is Act.NOTHING


@pytest.mark.parametrize("action, writes", [
    (plan.Action.NOTHING, False), (plan.Action.WAIT_FENCE, False),
    (plan.Action.RELINQUISH, True), (plan.Action.REMOVE_FENCE, True),
    (plan.Action.RECOVER, True),
])
def test_which_decisions_write_to_the_release(action, writes):
    assert writes_release(decision(action)) is writes
