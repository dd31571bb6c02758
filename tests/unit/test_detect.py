"""Detection, the staleness guard, timestamps and the status states."""

from __future__ import annotations

from datetime import datetime

import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.core.detect import age_seconds, already_processed, attempted_since_generation, dig, fence_indices, get_condition, has_remote_kubeconfig, held_seconds, is_fenced, is_stuck, is_suspended, is_terminating, observed_lags, processed_annotation_present, processed_version, ready_unknown, recovery_awaits_retry, uninstall_reached

from .builders import NOW, STUCK_MESSAGE, hr, ready_condition, stuck_condition

pytestmark = pytest.mark.unit

FENCE = constants.FENCE
HC = constants.HELM_CONTROLLER_FINALIZER
PROCESSED = constants.PROCESSED_ANNOTATION


def test_dig_walks_mappings_and_stops_on_anything_else() -> None:
    obj = {"a": {"b": {"c": 1}}, "l": [1]}
    assert dig(obj, "a", "b", "c") == 1
    assert dig(obj, "a", "x", "c") is None
    assert dig(obj, "l", "0") is None
    assert dig(None, "a") is None


def test_get_condition_returns_first_of_type() -> None:
    release = hr(conditions=[{"type": "Released", "status": "True"}, stuck_condition()])
    assert get_condition(release, "Ready")["message"] == STUCK_MESSAGE
    assert get_condition(release, "Stalled") is None
    assert get_condition(hr(status_extra={"conditions": "junk"}), "Ready") is None


@pytest.mark.parametrize(
    ("condition", "stuck"),
    [
        pytest.param(stuck_condition(), True, id="upgrade-failed"),
        pytest.param(stuck_condition(reason="InstallFailed"), True, id="any-reason"),
        pytest.param({"type": "Ready", "status": "False", "message": STUCK_MESSAGE}, True,
                     id="no-reason"),
        pytest.param({**stuck_condition(), "status": "True"}, False, id="ready-true"),
        pytest.param({**stuck_condition(), "status": "Unknown"}, False, id="ready-unknown"),
        pytest.param({**stuck_condition(), "type": "Released"}, False, id="released-only"),
        pytest.param({**stuck_condition(), "message": "timed out waiting"}, False,
                     id="other-message"),
        pytest.param({**stuck_condition(), "message": "Has No Deployed Releases"}, False,
                     id="case-sensitive"),
        pytest.param({**stuck_condition(), "message": None}, False, id="message-not-string"),
        pytest.param(ready_condition(), False, id="healthy"),
    ],
)
def test_is_stuck(condition: dict, stuck: bool) -> None:
    assert is_stuck(hr(conditions=[condition])) is stuck


@pytest.mark.parametrize(
    ("ready_status", "released", "stuck"),
    [
        pytest.param("Unknown", {**stuck_condition(), "type": "Released"}, True,
                     id="mid-retry-released-still-failed"),
        pytest.param("Unknown", {"type": "Released", "status": "True", "message": "ok"}, False,
                     id="mid-retry-released-ok"),
        pytest.param("True", {**stuck_condition(), "type": "Released"}, False,
                     id="ready-true-wins"),
    ],
)
def test_is_stuck_while_helm_controller_retries(ready_status, released, stuck) -> None:
    """helm-controller marks Ready Unknown (Progressing) while it runs the upgrade again;
    the Released condition keeps the failure, so a one-shot run at that instant still sees it."""
    ready = {"type": "Ready", "status": ready_status, "reason": "Progressing",
             "message": "Running 'upgrade' action with timeout of 5m0s"}
    assert is_stuck(hr(conditions=[ready, released])) is stuck


def test_is_stuck_looks_at_every_ready_entry() -> None:
    assert is_stuck(hr(conditions=[ready_condition(), stuck_condition()])) is True
    assert is_stuck(hr()) is False


def test_terminating_suspended_and_fence_accessors() -> None:
    release = hr(suspend=True, finalizers=[FENCE, HC, FENCE],
                 deletion_timestamp="2026-11-29T19:30:00Z")
    assert is_terminating(release) is True
    assert is_suspended(release) is True
    assert is_fenced(release) is True
    assert fence_indices(release) == [0, 2]
    plain = hr(suspend=False, finalizers=[HC])
    assert (is_terminating(plain), is_suspended(plain), is_fenced(plain)) == (False, False, False)
    assert fence_indices(plain) == []


def test_only_literal_true_is_suspended() -> None:
    assert is_suspended(hr(spec_extra={"suspend": "true"})) is False
    assert is_suspended(hr()) is False


@pytest.mark.parametrize(
    ("annotations", "version", "present"),
    [
        pytest.param(None, None, False, id="no-annotations"),
        pytest.param({"other": "1"}, None, False, id="absent"),
        pytest.param({PROCESSED: "3"}, 3, True, id="decimal"),
        pytest.param({PROCESSED: "10"}, 10, True, id="two-digits"),
        pytest.param({PROCESSED: "x"}, None, True, id="garbage"),
        pytest.param({PROCESSED: ""}, None, True, id="empty"),
        pytest.param({PROCESSED: "-1"}, None, True, id="negative"),
        pytest.param({PROCESSED: " 3"}, None, True, id="whitespace"),
    ],
)
def test_processed_version(annotations: dict | None, version: int | None, present: bool) -> None:
    release = hr(annotations=annotations)
    assert processed_version(release) == version
    assert processed_annotation_present(release) is present


@pytest.mark.parametrize(
    ("finalizers", "generation", "observed", "reached"),
    [
        pytest.param([FENCE], 3, 3, True, id="reached"),
        pytest.param([FENCE, HC], 3, 3, False, id="hc-finalizer-present"),
        pytest.param([FENCE], 3, 2, False, id="older-generation-observed"),
        pytest.param([FENCE], 3, None, False, id="never-observed"),
    ],
)
def test_uninstall_reached(finalizers: list[str], generation: int, observed: int | None,
                           reached: bool) -> None:
    release = hr(finalizers=finalizers, generation=generation, observed_generation=observed)
    assert uninstall_reached(release) is reached


def test_uninstall_not_reached_without_generation() -> None:
    release = hr()
    del release["metadata"]["generation"]
    assert uninstall_reached(release) is False


@pytest.mark.parametrize(
    ("generation", "observed", "lags"),
    [
        pytest.param(4, 4, False, id="observed-current"),
        pytest.param(4, 3, True, id="observed-older"),
        pytest.param(4, None, True, id="never-observed"),
    ],
)
def test_observed_lags(generation: int, observed: int | None, lags: bool) -> None:
    assert observed_lags(hr(generation=generation, observed_generation=observed)) is lags


@pytest.mark.parametrize(
    ("last_attempted", "condition_generation", "attempted"),
    [
        pytest.param(5, None, True, id="attempted-no-condition-generation"),
        pytest.param(5, 5, True, id="attempted-condition-agrees"),
        pytest.param(5, 3, False, id="condition-from-older-generation"),
        pytest.param(3, 5, False, id="attempted-older-generation"),
        pytest.param(None, 5, False, id="never-attempted"),
    ],
)
def test_attempted_since_generation(last_attempted: int | None, condition_generation: int | None,
                                    attempted: bool) -> None:
    release = hr(generation=5, last_attempted_generation=last_attempted,
                 conditions=[stuck_condition(condition_generation)])
    assert attempted_since_generation(release) is attempted


def recovered(processed: str | None, *, last_attempted: int, condition_generation: int) -> dict:
    """A stuck release at generation 5, as seen some time after a recovery."""
    return hr(
        generation=5,
        annotations=None if processed is None else {PROCESSED: processed},
        last_attempted_generation=last_attempted,
        conditions=[stuck_condition(condition_generation)],
    )


@pytest.mark.parametrize(
    ("processed", "revision", "last_attempted", "condition_generation", "expected"),
    [
        pytest.param(None, 2, 3, 3, False, id="never-processed"),
        pytest.param("garbage", 2, 3, 3, False, id="unparsable-annotation"),
        pytest.param("3", 2, 3, 3, True, id="just-recovered-not-retried"),
        pytest.param("3", 2, 5, 3, True, id="condition-still-old"),
        pytest.param("3", 2, 5, 5, False, id="retried-and-stuck-again"),
        pytest.param("3", 3, 3, 3, False, id="recorded-but-not-deleted"),
        pytest.param("7", 2, 3, 3, False, id="unrelated-older-record"),
        pytest.param("1", 2, 3, 3, False, id="history-moved-on"),
    ],
)
def test_already_processed(processed: str | None, revision: int, last_attempted: int,
                           condition_generation: int, expected: bool) -> None:
    release = recovered(processed, last_attempted=last_attempted,
                        condition_generation=condition_generation)
    done, why = already_processed(release, revision)
    assert done is expected
    assert (why != "") is expected


def test_already_processed_reason_explains() -> None:
    done, why = already_processed(recovered("3", last_attempted=3, condition_generation=3), 2)
    assert done is True
    assert why == ("revision 3 was deleted by an earlier recovery and helm-controller has not "
                   "retried since (lastAttemptedGeneration 3, generation 5)")


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        pytest.param("2026-11-29T19:00:00Z", 3600.0, id="zulu"),
        pytest.param("2026-11-29T19:59:59.5Z", 0.5, id="fractional"),
        pytest.param("2026-11-29T20:00:00+01:00", 3600.0, id="offset"),
        pytest.param("2026-11-29T19:00:00", 3600.0, id="naive-is-utc"),
        pytest.param("2026-11-29T19:59:59.250000000Z", 0.75, id="nanoseconds"),
        pytest.param("2026-11-29 19:00:00z", 3600.0, id="space-lower-z"),
        pytest.param("2026-13-29T19:00:00Z", None, id="month-13"),
        pytest.param("2026-11-29", None, id="date-only"),
        pytest.param("yesterday", None, id="garbage"),
        pytest.param("", None, id="empty"),
        pytest.param(12, None, id="not-a-string"),
    ],
)
def test_age_seconds(stamp: object, seconds: float | None) -> None:
    release = hr()
    release["metadata"]["creationTimestamp"] = stamp
    assert age_seconds(release, NOW) == seconds


def test_age_seconds_absent_and_naive_now() -> None:
    release = hr()
    assert age_seconds(release, datetime(2026, 11, 29, 19, 0, 30)) == 30.0
    del release["metadata"]["creationTimestamp"]
    assert age_seconds(release, NOW) is None


def test_held_seconds() -> None:
    assert held_seconds(hr(deletion_timestamp="2026-11-29T19:50:00Z"), NOW) == 600.0
    assert held_seconds(hr(), NOW) is None


def test_has_remote_kubeconfig() -> None:
    remote = hr(spec_extra={"kubeConfig": {"secretRef": {"name": "remote"}}})
    assert has_remote_kubeconfig(remote) is True
    assert has_remote_kubeconfig(hr()) is False


def test_ready_unknown_is_helm_controller_mid_action() -> None:
    unknown = {"type": "Ready", "status": "Unknown", "reason": "Progressing"}
    assert ready_unknown(hr(conditions=[unknown]))
    assert not ready_unknown(hr(conditions=[stuck_condition()]))
    assert not ready_unknown(hr(conditions=[dict(unknown, type="Reconciling")]))
    assert not ready_unknown(hr())


@pytest.mark.parametrize(
    ("annotations", "last_attempted", "awaits"),
    [
        ({constants.PROCESSED_ANNOTATION: "2"}, 2, True),    # generation 3 not attempted yet
        ({constants.PROCESSED_ANNOTATION: "2"}, 3, False),   # attempted since
        ({constants.PROCESSED_ANNOTATION: "two"}, 2, False),  # no revision recorded
        ({}, 2, False),                                      # never recovered
    ],
)
def test_recovery_awaits_retry(annotations: dict, last_attempted: int, awaits: bool) -> None:
    release = hr(conditions=[stuck_condition()], annotations=annotations, generation=3,
                 last_attempted_generation=last_attempted)
    assert recovery_awaits_retry(release) is awaits
