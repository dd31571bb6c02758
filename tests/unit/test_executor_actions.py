"""The action units besides the recovery (executor/relinquish.Relinquish,
executor/remove_fence.RemoveFence) and the switch that picks one per decision and announces
how a recovery ended (executor/switch.Switch), on fakes of the write primitives and the Event
recorder (issue 40: the mutants of their exits — what each reports, writes and warns)."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import plan
from kubectl_flux_plunger.executor.outcome import (
    Ending,
    Options,
    Report,
    Result,
    failed,
    fence_hint,
    leftover_hint,
)
from kubectl_flux_plunger.executor.relinquish import Relinquish
from kubectl_flux_plunger.executor.remove_fence import RemoveFence
from kubectl_flux_plunger.executor.switch import Switch
from kubectl_flux_plunger.kube import KubeError

from .builders import OURS, hr
from .test_executor_recover import Handshake, Kube, Watch, stuck
from .test_executor_recover import Prims as _Prims
from .test_executor_recover import Recorder as _Recorder

pytestmark = pytest.mark.unit

NO_LONGER_OURS = ("the suspension is no longer ours (another manager took spec.suspend, or "
                  "the release is gone): nothing of ours to lift")


class Prims(_Prims):
    """The write primitives, also noting which release each Event is on."""

    def __init__(self, **kw: object):
        super().__init__(**kw)
        self.events_on: list[str] = []

    def event(self, hr_, spec):
        self.events_on.append(hr_["metadata"]["resourceVersion"])
        super().event(hr_, spec)


class Recorder(_Recorder):
    """The Event recorder, also noting which release each Event is on."""

    def __init__(self):
        super().__init__()
        self.on: list[str | None] = []

    def record(self, hr_, reason, type_, message, metadata=None):
        self.on.append(hr_["metadata"]["resourceVersion"] if hr_ else None)
        super().record(hr_, reason, type_, message, metadata)


def ours() -> dict:
    """Suspended by us and fenced, live: what RELINQUISH is decided on."""
    return hr(suspend=True, managed=[OURS], finalizers=[C.FENCE], rv="200")


def decision(action: plan.Action, event: plan.EventSpec | None = None,
             row: plan.Row = plan.Row.LIVE_STUCK) -> plan.Decision:
    return plan.Decision(action, row, "the decision's reason", event, None)


# -- RELINQUISH -----------------------------------------------------------------------------


def test_relinquish_lifts_our_suspension_and_reports_the_write():
    p = Prims()
    p.relinquish_answer = hr(rv="201")
    rep = Relinquish(p).run(ours())
    assert rep == Report(Ending(Result.RELINQUISHED), steps=("lifted our suspension",),
                         wrote=hr(rv="201"))
    assert p.kinds() == ["relinquish"]  # no fresh read: the lift was ours
    assert p.events == []


def test_relinquish_of_a_suspension_taken_meanwhile_drops_our_fence_on_a_live_release():
    p = Prims()
    p.relinquish_answer = None
    p.fresh_answers = [hr(suspend=False, finalizers=[C.FENCE], rv="202")]
    p.remove_fence_answer = hr(rv="203")
    rep = Relinquish(p).run(ours())
    assert rep == Report(Ending(Result.FENCE_REMOVED, NO_LONGER_OURS),
                         steps=("removed the fence",))
    assert p.kinds() == ["relinquish", "fresh", "remove_fence"]
    assert p.calls[-1] == ("remove_fence", "202")


def test_relinquish_with_nothing_of_ours_left_changes_nothing():
    p = Prims()
    p.relinquish_answer = None
    p.fresh_answers = [hr(suspend=False, rv="202")]
    rep = Relinquish(p).run(ours())
    assert rep == Report(Ending(Result.UNCHANGED, NO_LONGER_OURS))
    assert p.kinds() == ["relinquish", "fresh"]


def test_relinquish_that_fails_warns_and_says_what_is_left():
    p = Prims()
    p.relinquish_answer = KubeError(500, "InternalError", "etcd down")
    rep = Relinquish(p).run(ours())
    assert rep == Report(failed(f"could not lift our suspension: etcd down; "
                                f"{leftover_hint(ours())}"))
    assert p.events == [plan.UNSUSPEND_FAILED.reason] and p.events_on == ["200"]


def test_relinquish_that_lost_a_race_fails_without_a_warning():
    p = Prims()
    p.relinquish_answer = KubeError(409, "Conflict", "modified")
    rep = Relinquish(p).run(ours())
    assert rep.ending is not None and rep.ending.failed
    assert rep.ending.detail == f"could not lift our suspension: modified; {leftover_hint(ours())}"
    assert p.events == []


def test_relinquish_whose_fence_removal_fails_fails_and_warns():
    p = Prims()
    p.relinquish_answer = None
    p.fresh_answers = [hr(suspend=False, finalizers=[C.FENCE], rv="202")]
    p.remove_fence_answer = KubeError(503, "ServiceUnavailable", "apiserver down")
    rep = Relinquish(p).run(ours())
    assert rep.ending is not None and rep.ending.result is Result.FAILED
    assert rep.steps == ()
    assert p.events == [plan.UNSUSPEND_FAILED.reason]


# -- REMOVE_FENCE ---------------------------------------------------------------------------


def fenced() -> dict:
    return hr(finalizers=[C.FENCE], rv="300")


def test_remove_fence_drops_our_fence_and_reports_the_write():
    p = Prims()
    p.remove_fence_answer = hr(rv="301")
    rep = RemoveFence(p).run(fenced())
    assert rep == Report(Ending(Result.FENCE_REMOVED), wrote=hr(rv="301"))
    assert p.calls == [("remove_fence", "300")]


def test_remove_fence_with_no_fence_left_changes_nothing():
    p = Prims()
    p.remove_fence_answer = None
    assert RemoveFence(p).run(fenced()) == Report(Ending(Result.UNCHANGED))


def test_remove_fence_that_fails_says_how_to_remove_it():
    p = Prims()
    p.remove_fence_answer = KubeError(500, "InternalError", "etcd down")
    rep = RemoveFence(p).run(fenced())
    assert rep == Report(failed(f"could not remove the fence: etcd down; {fence_hint(fenced())}"))
    assert p.events == []


# -- the switch -----------------------------------------------------------------------------


def switch(p: Prims | None = None, *, kube_dry_run: bool = False, stop=lambda: False,
           **opts: object) -> tuple[Switch, Prims, Recorder]:
    p = p or Prims()
    rec = Recorder()
    sw = Switch(Kube(kube_dry_run), p, Handshake(), rec, Options(**opts), stop)  # type: ignore
    return sw, p, rec


def test_the_switch_on_a_gone_release_reports_it_gone_and_writes_nothing():
    sw, p, _ = switch()
    rep = sw.run(None, decision(plan.Action.RECOVER, plan.RECOVERY_FAILED), None)
    assert rep == Report(Ending(Result.GONE))
    assert p.calls == [] and p.events == []


def test_the_switch_runs_a_recovery_on_the_watch_it_was_read_from():
    sw, p, _ = switch()
    rep = sw.run(stuck(), decision(plan.Action.RECOVER), Watch())
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert p.kinds() == ["list", "acquire", "record", "delete", "relinquish"]


def test_the_switchs_recovery_heeds_the_stop_flag():
    sw, p, _ = switch(stop=lambda: True)
    rep = sw.run(stuck(), decision(plan.Action.RECOVER), Watch())
    assert rep.ending == Ending(Result.DEFERRED, "shutting down; recovery not started")
    assert p.kinds() == ["list"]


def test_the_switch_relinquishes_after_the_decisions_event():
    sw, p, _ = switch()
    rep = sw.run(ours(), decision(plan.Action.RELINQUISH, plan.SUSPENSION_NOT_OWNED), None)
    assert rep.ending == Ending(Result.RELINQUISHED)
    assert p.events == [plan.SUSPENSION_NOT_OWNED.reason] and p.events_on == ["200"]
    assert p.kinds() == ["relinquish"]


def test_the_switch_without_an_event_records_none():
    sw, p, _ = switch()
    sw.run(ours(), decision(plan.Action.RELINQUISH), None)
    assert p.events == []


def test_the_switch_removes_the_fence():
    sw, p, _ = switch()
    p.remove_fence_answer = hr(rv="301")
    rep = sw.run(fenced(), decision(plan.Action.REMOVE_FENCE), None)
    assert rep == Report(Ending(Result.FENCE_REMOVED), wrote=hr(rv="301"))


def test_the_switch_waits_for_the_uninstall_after_its_event():
    sw, p, _ = switch()
    rep = sw.run(fenced(), decision(plan.Action.WAIT_FENCE, plan.UNSUSPEND_FAILED), None)
    assert rep == Report(Ending(Result.WAITING))
    assert p.calls == [] and p.events == [plan.UNSUSPEND_FAILED.reason]


def test_the_switch_skips_a_recovery_this_command_does_not_request():
    sw, p, _ = switch(allow_recover=False)
    rep = sw.run(stuck(), decision(plan.Action.RECOVER), Watch())
    assert rep == Report(Ending(Result.SKIPPED, "stuck; recovery not requested by this command"))
    assert p.calls == []


def test_the_switch_does_nothing_for_nothing_but_records_its_event():
    sw, p, _ = switch()
    rep = sw.run(hr(), decision(plan.Action.NOTHING, plan.SUSPENSION_NOT_OWNED), None)
    assert rep == Report()
    assert p.calls == [] and p.events == [plan.SUSPENSION_NOT_OWNED.reason]


def test_the_switch_on_a_client_dry_run_plans_the_recovery_and_records_nothing():
    sw, p, _ = switch(dry_run_client=True)
    rep = sw.run(stuck(), decision(plan.Action.RECOVER, plan.SUSPENSION_NOT_OWNED), None)
    assert rep.ending == Ending(Result.PLANNED)
    assert rep.revision == 2
    assert rep.steps[0].startswith("apply (flux-plunger) spec.suspend=true")
    assert p.kinds() == ["list"] and p.events == []


# -- how a recovery ended -------------------------------------------------------------------


FAILED_RECOVERY = Ending(Result.FAILED, "etcd down", failed=True)
LEFT_STUCK = Ending(Result.SKIPPED, "no storage at all", stuck=plan.Stuck.NO_STORAGE)


def test_a_failed_recovery_is_announced_with_its_cause_as_metadata():
    sw, _, rec = switch()
    sw.announce(stuck(), decision(plan.Action.RECOVER), FAILED_RECOVERY)
    spec = plan.RECOVERY_FAILED
    assert rec.records == [(spec.reason, spec.type, spec.message, {"error": "etcd down"})]
    assert rec.on == ["100"]


def test_a_failed_recovery_without_words_is_announced_with_an_empty_cause():
    sw, _, rec = switch()
    sw.announce(stuck(), decision(plan.Action.RECOVER), Ending(Result.FAILED, failed=True))
    assert [r[3] for r in rec.records] == [{"error": ""}]


def test_a_recovery_that_leaves_the_release_stuck_is_announced_with_its_cause():
    sw, _, rec = switch()
    sw.announce(stuck(), decision(plan.Action.RECOVER), LEFT_STUCK)
    spec = plan.RECOVERY_SKIPPED[plan.Stuck.NO_STORAGE]
    assert rec.records == [(spec.reason, spec.type, spec.message,
                            {"cause": "no-storage", "detail": "no storage at all"})]
    assert rec.on == ["100"]


def test_a_stuck_skip_without_words_is_announced_with_an_empty_detail():
    sw, _, rec = switch()
    sw.announce(stuck(), decision(plan.Action.RECOVER),
                Ending(Result.SKIPPED, stuck=plan.Stuck.CORRUPT_PAYLOAD))
    assert [r[3] for r in rec.records] == [{"cause": "corrupt-payload", "detail": ""}]


def test_a_failure_that_also_left_it_stuck_is_announced_once_as_failed():
    sw, _, rec = switch()
    both = Ending(Result.FAILED, "x", failed=True, stuck=plan.Stuck.NO_STORAGE)
    sw.announce(stuck(), decision(plan.Action.RECOVER), both)
    assert [r[0] for r in rec.records] == [plan.RECOVERY_FAILED.reason]


@pytest.mark.parametrize("ending", [FAILED_RECOVERY, LEFT_STUCK])
def test_nothing_is_announced_on_a_dry_run_another_decision_or_a_gone_release(ending):
    for sw, hr_, d in (
        (switch(dry_run_client=True)[0], stuck(), decision(plan.Action.RECOVER)),
        (switch(kube_dry_run=True)[0], stuck(), decision(plan.Action.RECOVER)),
        (switch()[0], stuck(), decision(plan.Action.RELINQUISH)),
        (switch()[0], None, decision(plan.Action.RECOVER)),
    ):
        sw.announce(hr_, d, ending)
        assert sw.recorder.records == []  # type: ignore[attr-defined]


def test_a_recovery_that_ended_well_is_not_announced():
    sw, _, rec = switch()
    sw.announce(stuck(), decision(plan.Action.RECOVER), Ending(Result.RECOVERED))
    sw.announce(stuck(), decision(plan.Action.RECOVER), Ending(Result.DEFERRED, "x"))
    assert rec.records == []
