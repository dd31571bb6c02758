"""The StateError face of a stuck release (issue 47, SPEC §4): helm-controller's history
recorded the newest revision in a status its DetermineReleaseState cannot place
(``uninstalling`` after its own remediation's uninstall failed), so every reconcile ends
``Ready=False`` reason ``StateError``.  Detection (``detect.stuck_face``), the storage check
for that face (``storage.choose_revision(…, state_error)``, ``plan.choose``), the decision
and the verdict, and the ``failing`` releases flux-plunger does not repair."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import detect, plan
from kubectl_flux_plunger.core.detect import Face, failing_reason, is_stuck, state_error_status, stuck_face
from kubectl_flux_plunger.core.storage import Refusal, choose_revision, make_storage_secret

from .builders import NOW, OURS, history, hr, ready_condition, state_error_condition, stuck_condition

pytestmark = pytest.mark.unit


def secret(revision: int, status: str, **kwargs: object) -> dict:
    return make_storage_secret("demo", "default", revision, status, **kwargs)


def stuck_hr(status: str = "uninstalling", recorded: tuple[int, str] | None = (2, "uninstalling"),
             **kwargs: object) -> dict:
    """A HelmRelease showing the StateError face, helm-controller's attempt current."""
    extra = history(*recorded) if recorded else {}
    return hr(conditions=[state_error_condition(status, observed_generation=1)],
              last_attempted_generation=1, observed_generation=1, status_extra=extra, **kwargs)


# --- detection --------------------------------------------------------------------------------


def test_state_error_is_a_face_of_stuck() -> None:
    release = stuck_hr()
    assert stuck_face(release) is Face.STATE_ERROR
    assert is_stuck(release)
    assert state_error_status(release) == "uninstalling"
    assert failing_reason(release) is None


def test_no_deployed_face_is_unchanged() -> None:
    release = hr(conditions=[stuck_condition()])
    assert stuck_face(release) is Face.NO_DEPLOYED
    assert state_error_status(release) is None


@pytest.mark.parametrize("status", ["unknown", "superseded", ""])
def test_state_error_quotes_any_status(status: str) -> None:
    assert state_error_status(hr(conditions=[state_error_condition(status)])) == status


@pytest.mark.parametrize("condition", [
    # another reason with the same words is not helm-controller's StateError
    state_error_condition(reason="InstallFailed"),
    # Ready True or Unknown: not failing
    {**state_error_condition(), "status": "True"},
    {**state_error_condition(), "status": "Unknown"},
    # helm-controller's other StateErrors (storage unreadable, verification failed)
    {**state_error_condition(), "message": "Could not determine release state: failed to "
                                           "retrieve last release from storage: boom"},
    # no closing quote: not the message helm-controller writes
    {**state_error_condition(), "message": "unable to determine state for release with status 'x"},
    {**state_error_condition(), "message": 42},
    # not the Ready condition
    {**state_error_condition(), "type": "Released"},
])
def test_state_error_needs_ready_false_reason_and_message(condition: dict) -> None:
    release = hr(conditions=[condition])
    assert stuck_face(release) is None
    assert state_error_status(release) is None


def test_failing_reason_for_what_flux_plunger_does_not_repair() -> None:
    failing = {**ready_condition(), "status": "False", "reason": "InstallFailed"}
    assert failing_reason(hr(conditions=[failing])) == "InstallFailed"
    assert failing_reason(hr(conditions=[{**failing, "reason": ""}])) == "Unspecified"
    assert failing_reason(hr(conditions=[{**failing, "reason": None}])) == "Unspecified"
    assert failing_reason(hr(conditions=[ready_condition()])) is None
    assert failing_reason(hr()) is None
    assert failing_reason(hr(conditions=[stuck_condition()])) is None


# --- the storage check for the face ------------------------------------------------------------


def test_uninstalling_recorded_in_history_is_deleted_even_with_a_deployed_older() -> None:
    """The uninstall-strategy upgrade remediation: v1 deployed, v2 uninstalling, history v2."""
    choice = plan.choose(stuck_hr(), [secret(1, "deployed"), secret(2, "uninstalling")])
    assert choice.ok and choice.revision is not None and choice.revision.number == 2
    assert choice.helm_status == "uninstalling" and "StateError" in choice.reason
    # the same storage judged as "has no deployed releases" is refused: v1 is deployed
    assert not choose_revision(stuck_hr(), [secret(1, "deployed"), secret(2, "uninstalling")]).ok


def test_only_revision_uninstalling_from_install_remediation() -> None:
    choice = plan.choose(stuck_hr(recorded=(1, "uninstalling")), [secret(1, "uninstalling")])
    assert choice.ok and choice.revision is not None and choice.revision.number == 1


def test_unknown_status_is_deleted_too() -> None:
    release = stuck_hr("unknown", recorded=(2, "unknown"))
    assert plan.choose(release, [secret(1, "superseded"), secret(2, "unknown")]).ok


@pytest.mark.parametrize("recorded", [
    None,  # no history: helm-controller takes the release for unmanaged next time
    (1, "uninstalling"),  # history names an older revision
    (2, "failed"),  # history names the revision in another status
    ("2", "uninstalling"),  # a version that is not a number
])
def test_history_must_record_the_newest_revision_in_its_status(recorded) -> None:
    choice = plan.choose(stuck_hr(recorded=recorded), [secret(1, "deployed"),
                                                        secret(2, "uninstalling")])
    assert not choice.ok and choice.refusal is Refusal.STALE_FACE
    assert choice.revision is not None and choice.revision.number == 2


def test_history_that_is_not_a_list_of_objects() -> None:
    for value in ("x", [], ["x"]):
        release = stuck_hr(recorded=None)
        release["status"]["history"] = value
        assert plan.choose(release, [secret(2, "uninstalling")]).refusal is Refusal.STALE_FACE


@pytest.mark.parametrize("newest", ["deployed", "failed", "unknown", "pending-upgrade"])
def test_storage_no_longer_what_helm_controller_reported(newest: str) -> None:
    """The message quotes 'uninstalling'; the newest revision now has another status: the
    message is older than the storage and helm-controller's next attempt reports anew."""
    choice = plan.choose(stuck_hr(recorded=(2, newest)), [secret(1, "deployed"),
                                                           secret(2, newest)])
    assert not choice.ok and choice.refusal is Refusal.STALE_FACE
    assert choice.helm_status == newest


def test_a_status_helm_controller_cannot_place_but_we_never_delete() -> None:
    release = stuck_hr("superseded", recorded=(2, "superseded"))
    choice = plan.choose(release, [secret(1, "deployed"), secret(2, "superseded")])
    assert not choice.ok and choice.refusal is Refusal.UNEXPECTED_STATUS


def test_corrupt_and_mismatching_payloads_are_refused_in_this_face_too() -> None:
    corrupt = secret(2, "uninstalling")
    corrupt["data"]["release"] = "not base64!"
    assert plan.choose(stuck_hr(), [corrupt]).refusal is Refusal.CORRUPT
    mismatch = secret(2, "uninstalling", extra={"version": 3})
    assert plan.choose(stuck_hr(), [mismatch]).refusal is Refusal.VERSION_MISMATCH
    no_status = secret(2, "uninstalling", extra={"info": {}})
    assert plan.choose(stuck_hr(), [no_status]).refusal is Refusal.CORRUPT
    assert plan.choose(stuck_hr(), []).refusal is Refusal.NO_STORAGE
    twins = [secret(2, "uninstalling"), {**secret(2, "uninstalling"),
                                         "metadata": {**secret(2, "uninstalling")["metadata"],
                                                      "name": "other"}}]
    assert plan.choose(stuck_hr(), twins).refusal is Refusal.DUPLICATE


# --- decision and verdict ---------------------------------------------------------------------


def test_decide_recovers_the_state_error_face() -> None:
    decision = plan.decide(stuck_hr(), NOW)
    assert decision.action is plan.Action.RECOVER and decision.row is plan.Row.LIVE_STUCK
    assert "StateError" in decision.reason
    assert plan.predicate(stuck_hr())
    assert plan.wanted_on_change(stuck_hr())


def test_decide_leaves_a_suspended_state_error_release_to_its_owner() -> None:
    foreign = stuck_hr(suspend=True, managed=[("flux", "Update", True)])
    assert plan.decide(foreign, NOW).action is plan.Action.NOTHING
    ours = stuck_hr(suspend=True, managed=[OURS])
    assert plan.decide(ours, NOW).action is plan.Action.RELINQUISH


def test_a_terminating_state_error_release_is_never_recovered() -> None:
    release = stuck_hr(deletion_timestamp="2026-01-01T00:00:00Z")
    assert plan.decide(release, NOW).action is not plan.Action.RECOVER


def test_verdict_recovers_then_awaits_helm_controllers_retry() -> None:
    storage_now = [secret(1, "deployed"), secret(2, "uninstalling")]
    assert plan.storage_verdict(stuck_hr(), storage_now).verdict is plan.Verdict.RECOVER
    # after the recovery: v2 deleted, the processed annotation says 2, the generation bumped
    # by the relinquish and helm-controller has not retried: the old StateError is stale
    after = stuck_hr(annotations={"flux-plunger.cozystack.io/last-processed-version": "2"},
                     generation=3)
    verdict = plan.storage_verdict(after, storage_now[:1])
    assert verdict.verdict is plan.Verdict.AWAITING_RETRY
    # the only revision deleted (install remediation): no storage left, awaiting too
    only = stuck_hr(recorded=(1, "uninstalling"), generation=3,
                    annotations={"flux-plunger.cozystack.io/last-processed-version": "1"})
    assert plan.storage_verdict(only, []).verdict is plan.Verdict.AWAITING_RETRY


def test_a_stale_face_is_not_announced_but_a_corrupt_one_is() -> None:
    stale = plan.storage_verdict(stuck_hr(recorded=(1, "deployed")),
                                 [secret(1, "deployed"), secret(2, "uninstalling")])
    assert stale.verdict is plan.Verdict.SKIPPED and stale.stuck is None
    corrupt = secret(2, "uninstalling")
    corrupt["data"]["release"] = "%%%"
    announced = plan.storage_verdict(stuck_hr(), [corrupt])
    assert announced.stuck is plan.Stuck.CORRUPT_PAYLOAD


def test_recovered_event_names_every_face() -> None:
    message = plan.RECOVERED.message
    assert "has no deployed releases" in message and "StateError" in message
    assert "cannot reuse a name" in message
    assert detect.Face.STATE_ERROR.value == str(detect.Face.STATE_ERROR) == "state-error"


# --- every verdict of the face, whole (what `status` and `recover` print) ---------------------


def _rev(number: int, status: str):
    from kubectl_flux_plunger.core.storage import Revision
    return Revision.from_secret(secret(number, status))


def test_each_verdict_of_the_face_whole() -> None:
    from kubectl_flux_plunger.core.storage import Choice
    older = secret(1, "deployed")
    assert plan.choose(stuck_hr(), [older, secret(2, "uninstalling")]) == Choice(
        _rev(2, "uninstalling"), "uninstalling", True,
        "newest revision 2 has status uninstalling, recorded in helm-controller's history, "
        "which it cannot place (StateError)")
    assert plan.choose(stuck_hr(recorded=(2, "failed")), [older, secret(2, "failed")]) == Choice(
        _rev(2, "failed"), "failed", False,
        "newest revision 2 has status failed, not the 'uninstalling' helm-controller reported "
        "(its next attempt reports anew)", refusal=Refusal.STALE_FACE)
    superseded = stuck_hr("superseded", recorded=(2, "superseded"))
    assert plan.choose(superseded, [older, secret(2, "superseded")]) == Choice(
        _rev(2, "superseded"), "superseded", False,
        "newest revision 2 has status superseded, which helm-controller cannot place but "
        "flux-plunger never deletes", refusal=Refusal.UNEXPECTED_STATUS)
    assert plan.choose(stuck_hr(recorded=(1, "deployed")), [older, secret(2, "uninstalling")]) \
        == Choice(_rev(2, "uninstalling"), "uninstalling", False,
                  "status.history's latest snapshot is revision 1 ('deployed'), not newest "
                  "revision 2 (uninstalling): helm-controller's next attempt takes the release "
                  "for unmanaged", refusal=Refusal.STALE_FACE)
    corrupt = secret(2, "uninstalling")
    corrupt["data"]["release"] = "%%%"
    choice = plan.choose(stuck_hr(), [older, corrupt])
    assert choice.refusal is Refusal.CORRUPT and choice.reason.startswith(
        "newest revision 2 has a corrupt payload: data.release is not valid base64 ("), choice


def test_the_face_is_read_from_the_condition_that_names_it() -> None:
    """A malformed status with two Ready conditions, the first saying "has no deployed
    releases": that face decides, and the storage is judged as for it (a deployed v1
    refuses), not by the StateError of the second."""
    release = stuck_hr()
    release["status"]["conditions"].insert(0, stuck_condition())
    assert stuck_face(release) is Face.NO_DEPLOYED
    choice = plan.choose(release, [secret(1, "deployed"), secret(2, "uninstalling")])
    assert not choice.ok and choice.refusal is Refusal.DEPLOYED
