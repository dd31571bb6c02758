"""The recovery budget in the recovery sequence (executor/recover.Recover, issue 57): a
release within its budget is recovered and the record carries its place in the run; one
backing off is deferred until its wait is out, with no request but the storage LIST; one
given up is skipped with the ``given-up`` cause (the RecoverySkipped Warning); a recovery
by hand acts regardless and says the budget was spent."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from kubectl_flux_plunger.core import budget, plan
from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core.budget import Policy
from kubectl_flux_plunger.executor.outcome import Result

from .test_executor_recover import Prims, Watch, make

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 7, 1, 0, 0, tzinfo=timezone.utc)


class Clocked(Prims):
    """The scripted primitives with a clock, keeping the standing each record is given."""

    def __init__(self, now: datetime, **kw: object):
        super().__init__(**kw)
        self.now = now
        self.standings: list[object] = []

    def clock(self) -> datetime:
        return self.now

    def record(self, current, revision, standing=None):
        self.standings.append(standing)
        return super().record(current, revision, standing)


def stuck_after(recoveries: int | None) -> dict:
    """Stuck again ("has no deployed releases", attempted) after ``recoveries`` recoveries
    in a row recorded at T0 (the last deleted revision 3)."""
    from .test_executor_recover import stuck

    release = stuck()
    notes = {C.PROCESSED_ANNOTATION: "3"}
    if recoveries is not None:
        notes[C.BUDGET_ANNOTATION] = budget.record_value(release, recoveries, T0, 3, 30.0)
    release["metadata"]["annotations"] = notes
    return release


def run_on(release: dict, now: datetime, policy: Policy):
    prims = Clocked(now)
    r, p, rec = make(prims, budget=policy)
    return r.run(release, Watch()), prims, rec


def test_within_the_budget_the_record_carries_the_place_in_the_run():
    rep, prims, _ = run_on(stuck_after(1), T0 + timedelta(seconds=30), Policy())
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    (standing,) = prims.standings
    assert isinstance(standing, budget.Standing)
    assert (standing.state, standing.recoveries) == (budget.State.DUE, 2)
    rep, prims, _ = run_on(stuck_after(None), T0, Policy())
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert [s.recoveries for s in prims.standings] == [1]


def test_no_budget_records_none():
    prims = Clocked(T0)
    r, _, _ = make(prims)
    rep = r.run(stuck_after(3), Watch())
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert prims.standings == [None]


def test_backing_off_defers_until_the_wait_is_out():
    rep, prims, rec = run_on(stuck_after(1), T0 + timedelta(seconds=10), Policy())
    assert rep.ending is not None
    assert (rep.ending.result, rep.ending.stuck, rep.ending.requeue_after) == (
        Result.DEFERRED, None, 20.0)
    assert rep.ending.detail == (
        "backing off: 1 failed recovery in a row (limit 3); the next recovery not before "
        "2026-12-07T01:00:30Z")
    assert prims.kinds() == ["list"]  # nothing written
    assert rec.records == []
    # a wait almost out still requeues a second on
    rep, _, _ = run_on(stuck_after(1), T0 + timedelta(seconds=29.9), Policy())
    assert rep.ending is not None and rep.ending.requeue_after == 1.0


def test_given_up_is_skipped_with_its_cause():
    rep, prims, _ = run_on(stuck_after(3), T0 + timedelta(hours=1), Policy())
    assert rep.ending is not None
    assert (rep.ending.result, rep.ending.stuck, rep.ending.requeue_after) == (
        Result.SKIPPED, plan.Stuck.GIVEN_UP, None)
    assert rep.ending.detail is not None and rep.ending.detail.startswith("given up: 3 failed")
    assert prims.kinds() == ["list"]


def test_by_hand_recovers_regardless_and_says_the_budget_was_spent():
    rep, prims, _ = run_on(stuck_after(3), T0, Policy(by_hand=True))
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert rep.ending.detail == (
        "deleted revision 2 (uninstalling) of release demo; helm-controller will reconcile "
        "it again; the recovery budget was spent (3 failed recoveries in a row (limit 3)); "
        "recovered by hand regardless, which starts a new run")
    assert [s.recoveries for s in prims.standings] == [1]
    rep, _, _ = run_on(stuck_after(1), T0, Policy(by_hand=True))
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert rep.ending.detail is not None and rep.ending.detail.endswith(
        "; the recovery budget was backing off (1 failed recovery in a row (limit 3)); "
        "recovered by hand regardless, which starts a new run")
    # within the budget a recovery by hand says nothing of it
    rep, _, _ = run_on(stuck_after(None), T0, Policy(by_hand=True))
    assert rep.ending is not None and "budget" not in (rep.ending.detail or "")


def test_the_primitive_writes_the_record_in_the_same_patch():
    from kubectl_flux_plunger.executor.outcome import Options
    from kubectl_flux_plunger.executor.primitives import Primitives

    class Kube:
        dry_run = False

        def __init__(self):
            self.patches: list[dict] = []

        def merge_patch_hr(self, ns, name, patch):
            self.patches.append(patch)
            return {"metadata": {"name": name, "namespace": ns}}

    kube = Kube()
    prims = Primitives(kube, None, None, Options(), lambda: T0)  # type: ignore[arg-type]
    release = stuck_after(1)
    standing = budget.standing(release, T0 + timedelta(minutes=1), Policy())
    prims.record(release, 2, standing)
    prims.record(release, 2)
    first, second = (p["metadata"]["annotations"] for p in kube.patches)
    assert json.loads(first[C.BUDGET_ANNOTATION])["recoveries"] == 2
    assert json.loads(first[C.BUDGET_ANNOTATION])["at"] == "2026-12-07T01:00:00.000Z"
    assert second == {C.PROCESSED_ANNOTATION: "2"}
