"""The storage half of the live-stuck row (``plan.storage_verdict``): recover the chosen
revision, await helm-controller's retry after an earlier recovery (with or without storage
left), or skip with the reason — and the staleness guard for a release whose storage is gone
(``detect.awaiting_retry_without_storage``)."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.core.detect import awaiting_retry_without_storage
from kubectl_flux_plunger.core.plan import RECOVERY_SKIPPED, Stuck, Verdict, failure_is_current, left_stuck, storage_verdict
from kubectl_flux_plunger.core.storage import Refusal, choose_revision, make_storage_secret

from .builders import hr

pytestmark = pytest.mark.unit


def processed(revision: int, *, attempted: bool) -> dict:
    """A release after a recovery that deleted ``revision``: our relinquish bumped the
    generation to 3; helm-controller attempted generation 3 (or not yet: 2)."""
    return hr(annotations={constants.PROCESSED_ANNOTATION: str(revision)}, generation=3,
              last_attempted_generation=3 if attempted else 2)


def secret(revision: int, status: str, **kw: object) -> dict:
    return make_storage_secret("demo", "default", revision, status, **kw)


def test_no_storage_after_our_recovery_awaits_helm_controller():
    release = processed(1, attempted=False)
    done, why = awaiting_retry_without_storage(release)
    assert done
    assert why == ("revision 1 was deleted by an earlier recovery (no storage is left) and "
                   "helm-controller has not retried since (lastAttemptedGeneration 2, "
                   "generation 3)")
    verdict = storage_verdict(release, [])
    assert (verdict.verdict, verdict.detail) == (Verdict.AWAITING_RETRY, why)
    assert verdict.choice.storage_found is False


def test_no_storage_once_helm_controller_retried_is_a_skip():
    release = processed(1, attempted=True)
    assert awaiting_retry_without_storage(release) == (False, "")
    verdict = storage_verdict(release, [])
    assert verdict.verdict is Verdict.SKIPPED
    assert verdict.detail.startswith("no Helm storage Secrets for release demo")


def test_no_storage_and_no_recovery_of_ours_is_a_skip():
    assert awaiting_retry_without_storage(hr()) == (False, "")
    assert storage_verdict(hr(), []).verdict is Verdict.SKIPPED


def test_the_revision_below_the_one_we_deleted_awaits_the_retry():
    verdict = storage_verdict(processed(3, attempted=False),
                              [secret(1, "superseded"), secret(2, "uninstalling")])
    assert verdict.verdict is Verdict.AWAITING_RETRY
    assert verdict.detail.startswith("revision 3 was deleted by an earlier recovery")
    assert verdict.choice.revision is not None and verdict.choice.revision.number == 2


def test_a_blocking_newest_revision_is_recovered():
    secrets = [secret(1, "superseded"), secret(2, "uninstalling")]
    verdict = storage_verdict(hr(), secrets)
    assert verdict.verdict is Verdict.RECOVER
    assert verdict.choice == choose_revision(hr(), secrets)
    assert verdict.detail == verdict.choice.reason


def test_storage_without_a_revision_number_is_a_skip_not_a_wait():
    odd = secret(1, "uninstalling")
    odd["metadata"]["labels"].pop("version")
    odd["metadata"]["name"] = "sh.helm.release.v1.demo.vX"
    verdict = storage_verdict(processed(1, attempted=False), [odd])
    assert verdict.verdict is Verdict.SKIPPED
    assert verdict.detail.endswith("has no revision number")


def test_a_payload_without_info_status_is_corrupt():
    broken = secret(2, "uninstalling", extra={"info": {}})
    choice = choose_revision(hr(), [broken])
    assert not choice.ok
    assert choice.reason == "newest revision 2 has a corrupt payload: no info.status"


# -- which skips leave the release stuck, announced (plan.Stuck) ------------------------------

def failing(**kw: object) -> dict:
    """A release helm-controller attempted at its generation (2) and failed: stuck, current."""
    from .builders import stuck_condition
    kw.setdefault("conditions", [stuck_condition(2)])
    return hr(generation=2, last_attempted_generation=2, **kw)


def unnumbered() -> dict:
    odd = secret(1, "uninstalling")
    odd["metadata"]["labels"].pop("version")
    odd["metadata"]["name"] = "sh.helm.release.v1.demo.vX"
    return odd


def corrupt(revision: int = 2) -> dict:
    body = secret(revision, "uninstalling")
    body["data"]["release"] = "bm90IGJhc2U2NA=="  # base64 of "not base64"
    return body


@pytest.mark.parametrize(("secrets", "refusal", "stuck"), [
    ([secret(1, "superseded"), corrupt()], Refusal.CORRUPT, Stuck.CORRUPT_PAYLOAD),
    ([secret(2, "uninstalling", extra={"info": {}})], Refusal.CORRUPT, Stuck.CORRUPT_PAYLOAD),
    ([], Refusal.NO_STORAGE, Stuck.NO_STORAGE),
    ([unnumbered()], Refusal.UNNUMBERED, Stuck.UNNUMBERED_REVISION),
    ([secret(2, "uninstalling"), {**secret(2, "uninstalling"),
                                  "metadata": {**secret(2, "uninstalling")["metadata"],
                                               "name": "sh.helm.release.v1.demo.v2.copy"}}],
     Refusal.DUPLICATE, Stuck.DUPLICATE_REVISION),
    ([secret(2, "uninstalling", extra={"version": 7})], Refusal.VERSION_MISMATCH,
     Stuck.VERSION_MISMATCH),
    ([secret(2, "weird")], Refusal.UNEXPECTED_STATUS, Stuck.UNEXPECTED_STATUS),
])
def test_a_skip_helm_controller_cannot_go_past_is_announced_once_its_failure_is_current(
        secrets, refusal, stuck):
    verdict = storage_verdict(failing(), secrets)
    assert verdict.verdict is Verdict.SKIPPED
    assert verdict.choice.refusal is refusal
    assert verdict.stuck is stuck
    assert RECOVERY_SKIPPED[stuck].reason == "RecoverySkipped"
    assert RECOVERY_SKIPPED[stuck].type == "Warning"


@pytest.mark.parametrize("secrets", [
    [secret(1, "deployed"), secret(2, "uninstalling")],     # a deployed revision
    [secret(2, "deployed")],                                # the newest is deployed
    [secret(2, "superseded")],                              # helm-controller upgrades from it
    [secret(1, "superseded"), secret(2, "failed")],
    [secret(2, "pending-upgrade")],                         # helm-controller unlocks it
])
def test_storage_helm_controller_goes_on_from_is_never_announced(secrets):
    """The "has no deployed releases" is then older than the storage: helm-controller's next
    attempt clears it, whatever the generations say."""
    verdict = storage_verdict(failing(), secrets)
    assert verdict.verdict is Verdict.SKIPPED
    assert verdict.choice.refusal in (Refusal.DEPLOYED, Refusal.HELM_HANDLES)
    assert verdict.stuck is None


def test_right_after_our_recovery_a_stale_message_is_not_announced():
    """Our relinquish bumped the generation (3) and helm-controller has not attempted it
    (2): the message is the one our recovery answered; a gap in the revisions makes the
    newest one we did not delete superseded (helm-controller upgrades from it), or odd
    storage is left — silent until helm-controller has tried again."""
    after = processed(5, attempted=False)
    gap = storage_verdict(after, [secret(3, "superseded")])
    assert (gap.verdict, gap.stuck) == (Verdict.SKIPPED, None)
    odd = storage_verdict(after, [unnumbered()])
    assert (odd.verdict, odd.stuck) == (Verdict.SKIPPED, None)
    # once helm-controller attempted generation 3 and is still stuck, the odd storage is news
    retried = processed(5, attempted=True)
    assert storage_verdict(retried, [unnumbered()]).stuck is Stuck.UNNUMBERED_REVISION


def test_helm_controller_mid_action_is_not_announced():
    """Ready Unknown (helm-controller runs an action; Released still carries the failure):
    its result comes next."""
    from .builders import STUCK_MESSAGE
    conditions = [{"type": "Ready", "status": "Unknown", "reason": "Progressing",
                   "message": "running upgrade", "observedGeneration": 2},
                  {"type": "Released", "status": "False", "reason": "UpgradeFailed",
                   "message": STUCK_MESSAGE}]
    release = failing(conditions=conditions)
    assert not failure_is_current(release)
    verdict = storage_verdict(release, [corrupt()])
    assert (verdict.verdict, verdict.stuck) == (Verdict.SKIPPED, None)


def test_a_recovery_or_a_wait_is_never_a_release_left_stuck():
    assert storage_verdict(failing(), [secret(2, "uninstalling")]).stuck is None
    waiting = storage_verdict(processed(3, attempted=False), [secret(2, "uninstalling")])
    assert (waiting.verdict, waiting.stuck) == (Verdict.AWAITING_RETRY, None)


def test_remote_storage_flux_plunger_does_not_support_is_announced_once_current():
    assert left_stuck(failing(), Stuck.REMOTE_UNSUPPORTED) is Stuck.REMOTE_UNSUPPORTED
    assert left_stuck(hr(), Stuck.REMOTE_UNSUPPORTED) is None  # never attempted: not current


def test_every_cause_has_one_static_message_of_its_own():
    assert set(RECOVERY_SKIPPED) == set(Stuck)
    messages = [spec.message for spec in RECOVERY_SKIPPED.values()]
    assert len(set(messages)) == len(messages)
    for message in messages:   # static: no name, no number that would defeat folding
        assert message.startswith("Recovery skipped, the release stays stuck")
        assert not any(ch.isdigit() for ch in message)
    assert str(Stuck.NO_STORAGE) == "no-storage"
    assert str(Refusal.CORRUPT) == "corrupt-payload"


def test_a_choice_to_recover_is_no_skip():
    from kubectl_flux_plunger.core.plan import skip_of
    choice = choose_revision(failing(), [secret(2, "uninstalling")])
    assert choice.ok and choice.refusal is None
    assert skip_of(failing(), choice) is None
