"""The recovery budget (``core/budget.py``, issue 57): the record read and written, every
reset, the backoff arithmetic, the cap by helm-controller's remediation retries, and the
storage verdict it turns a recovery into (deferred while backing off, a ``given-up`` skip)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from kubectl_flux_plunger.core import budget, constants, plan, writes
from kubectl_flux_plunger.core.budget import Policy, Reset, State
from kubectl_flux_plunger.core.storage import make_storage_secret

from .builders import hr

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 7, 1, 0, 0, tzinfo=timezone.utc)
STATE_ERROR = {
    "type": "Ready",
    "status": "False",
    "reason": "StateError",
    "message": "Could not determine release state: unable to determine state for release "
    "with status 'uninstalling'",
}
ATTEMPTED = {
    "lastAttemptedRevision": "0.1.0",
    "lastAttemptedConfigDigest": "sha256:values",
    "lastAttemptedReleaseAction": "install",
    "history": [{"name": "demo", "version": 1, "status": "uninstalling"}],
}


def stuck(
    recoveries: int | None = None,
    *,
    at: datetime = T0,
    spec_extra: dict | None = None,
    status_extra: dict | None = None,
    annotations: dict | None = None,
    record_over: dict | None = None,
) -> dict:
    """A release stuck again (StateError, helm-controller attempted generation 5) after
    ``recoveries`` recoveries in a row recorded at ``at`` (None: no record).  The record is
    taken from the release as recorded (``budget.record_value``), then ``spec_extra``,
    ``status_extra`` and ``annotations`` change the release after it."""
    base = hr(
        generation=5,
        last_attempted_generation=5,
        conditions=[STATE_ERROR],
        status_extra=dict(ATTEMPTED),
        annotations={constants.PROCESSED_ANNOTATION: "1"},
    )
    if recoveries is not None:
        value = json.loads(budget.record_value(base, recoveries, at, 3, 30.0))
        value.update(record_over or {})
        base["metadata"]["annotations"][constants.BUDGET_ANNOTATION] = json.dumps(value)
    base["spec"].update(spec_extra or {})
    base["status"].update(status_extra or {})
    base["metadata"]["annotations"].update(annotations or {})
    return base


# -- the record -----------------------------------------------------------------------


def test_the_record_rides_on_the_processed_version_patch():
    release = stuck()
    value = budget.record_value(release, 2, T0, 3, 30.0)
    patch = writes.record_patch(release, 4, value)
    assert patch == {
        "metadata": {
            "resourceVersion": "100",
            "annotations": {
                constants.PROCESSED_ANNOTATION: "4",
                constants.BUDGET_ANNOTATION: value,
            },
        }
    }
    assert writes.record_patch(release, 4) == {
        "metadata": {"resourceVersion": "100", "annotations": {constants.PROCESSED_ANNOTATION: "4"}}
    }
    assert json.loads(value) == {
        "recoveries": 2,
        "at": "2026-12-07T01:00:00.000Z",
        "limit": 3,
        "wait": 30.0,
        "spec": budget.spec_digest(release),
        "chart": "0.1.0",
        "values": "sha256:values",
        "asked": "||",
    }


def test_the_record_reads_back():
    rec = budget.parse(stuck(2))
    assert rec is not None
    assert (rec.recoveries, rec.at, rec.limit, rec.wait) == (2, T0, 3, 30.0)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "not json",
        "[1]",
        '{"at": "2026-12-07T01:00:00.000Z"}',  # no count
        '{"recoveries": 0, "at": "2026-12-07T01:00:00.000Z"}',
        '{"recoveries": true, "at": "2026-12-07T01:00:00.000Z"}',
        '{"recoveries": 1, "at": "yesterday"}',
    ],
)
def test_an_unreadable_record_starts_a_new_run(raw):
    release = stuck()
    if raw is not None:
        release["metadata"]["annotations"][constants.BUDGET_ANNOTATION] = raw
    assert budget.parse(release) is None
    assert budget.standing(release, T0, Policy()).state is State.FRESH


def test_odd_limit_and_wait_in_a_record_read_as_the_defaults():
    release = stuck(1, record_over={"limit": 0, "wait": "soon", "spec": 7})
    rec = budget.parse(release)
    assert rec is not None
    assert (rec.limit, rec.wait, rec.spec) == (budget.DEFAULT_LIMIT, budget.DEFAULT_FIRST_WAIT, "")
    release = stuck(1, record_over={"limit": True, "wait": -1})
    rec = budget.parse(release)
    assert rec is not None and (rec.limit, rec.wait) == (3, 30.0)


def test_the_spec_digest_ignores_our_suspension_only():
    release = stuck()
    digest = budget.spec_digest(release)
    release["spec"]["suspend"] = True
    assert budget.spec_digest(release) == digest
    release["spec"]["interval"] = "10m"
    assert budget.spec_digest(release) != digest
    assert budget.spec_digest({"spec": "odd"}) == budget.spec_digest({})


def test_the_chart_is_its_version_and_oci_digest():
    assert budget.chart_of(stuck()) == "0.1.0"
    oci = stuck(status_extra={"lastAttemptedRevisionDigest": "sha256:abc"})
    assert budget.chart_of(oci) == "0.1.0@sha256:abc"
    assert budget.chart_of({}) == ""


# -- the resets -----------------------------------------------------------------------


def test_no_change_goes_on_with_the_run():
    release = stuck(1)
    rec = budget.parse(release)
    assert rec is not None and budget.reset_by(release, rec) is None


@pytest.mark.parametrize(
    ("change", "reset"),
    [
        # helm-controller deployed a revision since the recovery that deleted revision 1
        (
            {"status_extra": {"history": [{"version": 1, "status": "deployed"}]}},
            Reset.READY,
        ),
        (
            {"status_extra": {"history": [{"version": 2, "status": "superseded"}]}},
            Reset.READY,
        ),
        # an operator's spec change (a new generation not ours)
        ({"spec_extra": {"values": {"fixed": True}}}, Reset.SPEC),
        # a new chart artifact revision, or the same version at another OCI digest
        ({"status_extra": {"lastAttemptedRevision": "0.1.1"}}, Reset.CHART),
        ({"status_extra": {"lastAttemptedRevisionDigest": "sha256:new"}}, Reset.CHART),
        # new values (a valuesFrom ConfigMap changed)
        ({"status_extra": {"lastAttemptedConfigDigest": "sha256:other"}}, Reset.VALUES),
        # `flux reconcile`, --force, and helm-controller's reset annotation
        ({"annotations": {"reconcile.fluxcd.io/requestedAt": "now"}}, Reset.ASKED),
        ({"annotations": {"reconcile.fluxcd.io/forceAt": "now"}}, Reset.ASKED),
        ({"annotations": {"reconcile.fluxcd.io/resetAt": "now"}}, Reset.ASKED),
    ],
)
def test_every_reset_ends_the_run(change, reset):
    release = stuck(3, **change)
    rec = budget.parse(release)
    assert rec is not None
    assert budget.reset_by(release, rec) is reset
    standing = budget.standing(release, T0, Policy())
    assert (standing.state, standing.reset, standing.failed) == (State.FRESH, reset, 0)
    assert standing.may_recover and standing.recoveries == 1
    assert not budget.given_up(release)


def test_ready_true_ends_the_run():
    release = stuck(3)
    release["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    rec = budget.parse(release)
    assert rec is not None and budget.reset_by(release, rec) is Reset.READY


def test_revisions_older_than_the_recovery_or_not_deployed_are_no_success():
    history = [
        {"version": 0, "status": "deployed"},  # before the revision the recovery deleted
        {"version": 3, "status": "failed"},
        {"version": "7", "status": "deployed"},  # not a number
        "odd",
    ]
    release = stuck(3, status_extra={"history": history})
    rec = budget.parse(release)
    assert rec is not None and budget.reset_by(release, rec) is None
    no_history = stuck(3, status_extra={"history": "odd"})
    assert budget.reset_by(no_history, rec) is None
    unprocessed = stuck(3, status_extra={"history": [{"version": 9, "status": "deployed"}]})
    del unprocessed["metadata"]["annotations"][constants.PROCESSED_ANNOTATION]
    assert budget.reset_by(unprocessed, rec) is None


# -- the backoff and the limit ----------------------------------------------------------


@pytest.mark.parametrize(
    ("failed", "wait"), [(0, 0.0), (1, 30.0), (2, 60.0), (3, 120.0), (5, 480.0), (99, 30.0 * 2**30)]
)
def test_the_wait_doubles_from_the_first(failed, wait):
    assert budget.wait_after(30.0, failed) == wait


def test_a_failed_recovery_backs_off_then_is_due():
    release = stuck(1)
    waiting = budget.standing(release, T0 + timedelta(seconds=29), Policy())
    assert waiting.state is State.WAITING and not waiting.may_recover
    assert waiting.next_at == T0 + timedelta(seconds=30)
    assert waiting.seconds_left(T0 + timedelta(seconds=29)) == 1.0
    assert waiting.words() == (
        "backing off: 1 failed recovery in a row (limit 3); the next recovery not before "
        "2026-12-07T01:00:30Z"
    )
    due = budget.standing(release, T0 + timedelta(seconds=30), Policy())
    assert due.state is State.DUE and due.may_recover
    assert due.recoveries == 2 and due.seconds_left(T0 + timedelta(seconds=31)) == 0.0
    assert due.words() == "1 failed recovery in a row (limit 3)"
    two = budget.standing(stuck(2), T0 + timedelta(seconds=59), Policy())
    assert two.state is State.WAITING and two.next_at == T0 + timedelta(seconds=60)
    naive = budget.standing(stuck(2), datetime(2026, 12, 7, 1, 1, 0), Policy())
    assert naive.state is State.DUE


def test_the_limit_gives_up():
    standing = budget.standing(stuck(3), T0 + timedelta(hours=9), Policy())
    assert standing.state is State.GIVEN_UP and not standing.may_recover
    assert standing.seconds_left(T0) == 0.0
    assert standing.words().startswith("given up: 3 failed recoveries in a row (limit 3); ")
    assert budget.given_up(stuck(3))
    assert not budget.given_up(stuck(2))
    assert not budget.given_up(stuck())
    # the smaller of the deciding process's limit and the record's; no process: the record's
    assert (
        budget.standing(stuck(3, record_over={"limit": 5}), T0, Policy(limit=5)).state
        is State.WAITING
    )
    assert budget.standing(stuck(3), T0, Policy(limit=5)).state is State.GIVEN_UP
    assert (
        budget.standing(stuck(2, record_over={"limit": 5}), T0, Policy(limit=2)).state
        is State.GIVEN_UP
    )
    assert budget.standing(stuck(3, record_over={"limit": 5}), T0).state is State.WAITING


def test_by_hand_acts_once_and_starts_a_new_run():
    hand = Policy(by_hand=True)
    given_up = budget.standing(stuck(3), T0, hand)
    assert given_up.state is State.GIVEN_UP and given_up.spent and given_up.may_recover
    assert given_up.recoveries == 1
    waiting = budget.standing(stuck(1), T0, hand)
    assert waiting.state is State.WAITING and waiting.spent and waiting.recoveries == 1
    due = budget.standing(stuck(1), T0 + timedelta(minutes=1), hand)
    assert not due.spent and due.recoveries == 1  # due anyway: not spent, a new run
    assert budget.standing(stuck(1), T0 + timedelta(minutes=1)).recoveries == 2
    assert not budget.standing(stuck(), T0, hand).spent


def test_a_record_stamped_ahead_of_this_clock_keeps_its_count_not_its_wait():
    ahead = stuck(1, at=T0 + timedelta(days=365))
    assert budget.standing(ahead, T0, Policy(first_wait=30)).state is State.DUE
    assert budget.standing(stuck(3, at=T0 + timedelta(days=365)), T0).state is State.GIVEN_UP
    # stamped exactly now: the wait runs
    assert budget.standing(stuck(1, at=T0), T0, Policy(first_wait=30)).state is State.WAITING


@pytest.mark.parametrize(
    ("remediation", "action", "limit"),
    [
        ({}, "install", 3),
        ({"install": {"remediation": {"retries": 1}}}, "install", 1),
        ({"install": {"remediation": {"retries": 2}}}, "upgrade", 3),  # not the action
        ({"upgrade": {"remediation": {"retries": 2}}}, "upgrade", 2),
        ({"install": {"remediation": {"retries": 0}}}, "install", 1),  # the repair still runs
        ({"install": {"remediation": {"retries": -1}}}, "install", 3),  # unlimited
        ({"install": {"remediation": {"retries": 9}}}, "install", 3),
        ({"install": {"remediation": {"retries": True}}}, "install", 3),
        # RetryOnFailure: helm-controller ignores remediation.retries, so does the cap
        (
            {"install": {"remediation": {"retries": 1}, "strategy": {"name": "RetryOnFailure"}}},
            "install",
            3,
        ),
        (
            {
                "install": {
                    "remediation": {"retries": 1},
                    "strategy": {"name": "RemediateOnFailure"},
                }
            },
            "install",
            1,
        ),
        # no action recorded: the smaller of the two set
        (
            {
                "install": {"remediation": {"retries": 2}},
                "upgrade": {"remediation": {"retries": 1}},
            },
            None,
            1,
        ),
    ],
)
def test_never_more_than_helm_controllers_remediation_retries(remediation, action, limit):
    release = stuck(1, spec_extra=remediation)
    if action is None:
        del release["status"]["lastAttemptedReleaseAction"]
    else:
        release["status"]["lastAttemptedReleaseAction"] = action
    assert budget.limit_for(release, 3) == limit


def test_given_up_at_a_remediation_cap_of_one():
    release = stuck(1, spec_extra={"install": {"remediation": {"retries": 1}}})
    # the record was made under the same spec: the cap does not reset the run
    release = stuck(
        1,
        record_over={"spec": budget.spec_digest(release)},
        spec_extra={"install": {"remediation": {"retries": 1}}},
    )
    assert budget.standing(release, T0, Policy()).state is State.GIVEN_UP


# -- the verdict and the output --------------------------------------------------------


def verdict(release: dict, now: datetime, policy: Policy | None = Policy()) -> plan.StorageVerdict:
    secrets = [make_storage_secret("demo", "default", 1, "uninstalling")]
    standing = None if policy is None else budget.standing(release, now, policy)
    return plan.storage_verdict(release, secrets, None, standing)


def test_the_verdict_recovers_within_the_budget():
    v = verdict(stuck(), T0)
    assert v.verdict is plan.Verdict.RECOVER
    assert v.standing is not None and v.standing.recoveries == 1
    assert verdict(stuck(3), T0, None).verdict is plan.Verdict.RECOVER  # no budget applied


def test_the_verdict_defers_while_backing_off():
    v = verdict(stuck(1), T0 + timedelta(seconds=10))
    assert (v.verdict, v.stuck) == (plan.Verdict.DEFERRED, None)
    assert v.detail.startswith("backing off: 1 failed recovery in a row")
    assert v.standing is not None and v.standing.state is State.WAITING


def test_the_verdict_gives_up_announced():
    v = verdict(stuck(3), T0)
    assert (v.verdict, v.stuck) == (plan.Verdict.SKIPPED, plan.Stuck.GIVEN_UP)
    assert v.standing is not None and v.standing.state is State.GIVEN_UP
    assert plan.RECOVERY_SKIPPED[plan.Stuck.GIVEN_UP].reason == "RecoverySkipped"
    # not announced while helm-controller's failure is not current (mid-action)
    unknown = stuck(3)
    unknown["status"]["conditions"] = [
        {**STATE_ERROR, "status": "False"},
        {"type": "Ready", "status": "Unknown"},
    ]
    unknown["status"]["lastAttemptedGeneration"] = 4
    assert verdict(unknown, T0).stuck is None


def test_a_skip_of_storage_is_not_turned_into_a_budget_verdict():
    release = stuck(3)
    v = plan.storage_verdict(release, [], None, budget.standing(release, T0, Policy()))
    assert v.verdict is plan.Verdict.SKIPPED and v.stuck is plan.Stuck.NO_STORAGE


def test_a_given_up_release_is_still_wanted_by_the_watch_filter():
    """The pass that gives a release up is the one that announces it: the pure filter keeps
    it (serve's watch skips it once announced, test_serve_left_stuck)."""
    assert plan.wanted_on_change(stuck(3))
    assert plan.predicate(stuck(3))


def test_the_budget_for_status_json():
    release = stuck(1)
    waiting = budget.standing(release, T0, None)
    assert budget.as_dict(waiting, release) == {
        "state": "backing-off",
        "failedRecoveries": 1,
        "limit": 3,
        "lastRecovery": "2026-12-07T01:00:00Z",
        "nextRecovery": "2026-12-07T01:00:30Z",
        "resetsOn": list(budget.RESETS_ON),
    }
    gone = budget.as_dict(budget.standing(stuck(3), T0, None), stuck(3))
    assert (gone["state"], gone["nextRecovery"]) == ("given-up", None)
    fresh = stuck()
    assert budget.as_dict(budget.standing(fresh, T0, None), fresh) == {
        "state": "fresh",
        "failedRecoveries": 0,
        "limit": 3,
        "lastRecovery": None,
        "nextRecovery": None,
        "resetsOn": [],
    }
    assert str(State.GIVEN_UP) == "given-up" and str(Reset.SPEC) == "spec"


# -- what the mutants of core/budget.py found untested (hack/mutation.sh --module budget) ---


def test_the_digest_is_of_the_canonical_spec():
    import hashlib

    release = {"spec": {"b": 2, "a": {"d": 1, "c": 2}, "suspend": True}}
    canonical = '{"a":{"c":2,"d":1},"b":2}'
    assert budget.spec_digest(release) == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    reordered = {"spec": {"a": {"c": 2, "d": 1}, "b": 2}}
    assert budget.spec_digest(reordered) == budget.spec_digest(release)


def test_the_record_value_is_compact_and_carries_the_requests():
    release = stuck(
        annotations={"reconcile.fluxcd.io/requestedAt": "r1", "reconcile.fluxcd.io/resetAt": "x"}
    )
    value = budget.record_value(release, 1, T0, 2, 10.0)
    assert value == (
        '{"recoveries":1,"at":"2026-12-07T01:00:00.000Z","limit":2,"wait":10.0,'
        f'"spec":"{budget.spec_digest(release)}","chart":"0.1.0","values":"sha256:values",'
        '"asked":"r1||x"}'
    )


def test_stamps_are_utc_to_the_millisecond(monkeypatch):
    import time

    plus_two = timezone(timedelta(hours=2))
    when = datetime(2026, 12, 7, 3, 0, 0, 999_999, tzinfo=plus_two)
    monkeypatch.setenv("TZ", "America/New_York")  # the local zone never leaks in
    time.tzset()
    try:
        assert budget.stamp(when, millis=True) == "2026-12-07T01:00:00.999Z"
        assert budget.stamp(when) == "2026-12-07T01:00:00Z"
        half = when.replace(microsecond=500_000)
        assert budget.stamp(half, millis=True) == "2026-12-07T01:00:00.500Z"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_an_aware_clock_in_another_zone_is_the_same_instant():
    plus_two = timezone(timedelta(hours=2))
    now = (T0 + timedelta(seconds=29)).astimezone(plus_two)
    assert budget.standing(stuck(1), now, Policy()).state is State.WAITING


def test_the_first_wait_is_the_deciders_else_the_records():
    ten = Policy(first_wait=10.0)
    assert budget.standing(stuck(1), T0 + timedelta(seconds=10), ten).state is State.DUE
    five = stuck(1, record_over={"wait": 5})
    rec = budget.parse(five)
    assert rec is not None and rec.wait == 5.0
    assert budget.standing(five, T0 + timedelta(seconds=5), None).state is State.DUE
    assert budget.standing(five, T0 + timedelta(seconds=4), None).state is State.WAITING
    zero = budget.parse(stuck(1, record_over={"wait": 0, "limit": 1}))
    assert zero is not None and (zero.wait, zero.limit) == (0.0, 1)
    # the standing carries the wait that applied, in every state
    for release, now in (
        (stuck(), T0),
        (stuck(3), T0),
        (stuck(1), T0),
        (stuck(1), T0 + timedelta(minutes=5)),
    ):
        assert budget.standing(release, now, ten).wait == 10.0


def test_a_due_standing_keeps_when_it_became_due_but_shows_no_next_recovery():
    release = stuck(1)
    due = budget.standing(release, T0 + timedelta(minutes=5), Policy())
    assert due.state is State.DUE and due.next_at == T0 + timedelta(seconds=30)
    assert budget.as_dict(due, release)["nextRecovery"] is None


@pytest.mark.parametrize(
    ("spec", "action", "limit"),
    [
        # the action named picks its own retries, even when the other's are fewer
        (
            {
                "install": {"remediation": {"retries": 2}},
                "upgrade": {"remediation": {"retries": 1}},
            },
            "install",
            2,
        ),
        # no action recorded: either one set counts
        ({"install": {"remediation": {"retries": 1}}}, None, 1),
        ({"upgrade": {"remediation": {"retries": 1}}}, None, 1),
    ],
)
def test_the_retries_of_the_action_helm_controller_attempted(spec, action, limit):
    release = stuck(1, spec_extra=spec)
    if action is None:
        del release["status"]["lastAttemptedReleaseAction"]
    else:
        release["status"]["lastAttemptedReleaseAction"] = action
    assert budget.limit_for(release, 3) == limit
