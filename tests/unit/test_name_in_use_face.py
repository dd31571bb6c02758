"""The faces issue 56 added (SPEC §4): Helm's install refusing the name of a release whose
newest revision is ``uninstalled`` with its history kept (``Face.NAME_IN_USE``), and the
StateError face over a ``status.history`` snapshot helm-controller <= v1.4 wrote (no
``apiVersion: v2``), which helm-controller v1.5+ verifies against nothing."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import plan
from kubectl_flux_plunger.core.detect import Face, failing_reason, is_stuck, stuck_face
from kubectl_flux_plunger.core.storage import Refusal, choose_revision, make_storage_secret

from .builders import (NOW, history, hr, name_in_use_condition, ready_condition,
                       state_error_condition, stuck_condition)

pytestmark = pytest.mark.unit

PROCESSED = "flux-plunger.cozystack.io/last-processed-version"


def secret(revision: int, status: str, **kwargs: object) -> dict:
    return make_storage_secret("demo", "default", revision, status, **kwargs)


def in_use(*, recorded: tuple[int, str] | None = None, legacy: bool = False,
           replace: bool | None = None, **kwargs: object) -> dict:
    """A HelmRelease showing the name-in-use face, helm-controller's attempt current (its
    install cleared the history: ``recorded`` None)."""
    extra = history(*recorded, api_version=None if legacy else "v2") if recorded else {}
    spec = {"install": {"replace": replace}} if replace is not None else None
    return hr(conditions=[name_in_use_condition()], last_attempted_generation=1,
              observed_generation=1, status_extra=extra, spec_extra=spec, **kwargs)


# --- detection --------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["reuse", "re-use"])
def test_name_in_use_is_a_face_of_stuck(spelling: str) -> None:
    release = hr(conditions=[name_in_use_condition(spelling=spelling)])
    assert stuck_face(release) is Face.NAME_IN_USE and is_stuck(release)
    assert failing_reason(release) is None          # no longer "failing": flux-plunger repairs it
    assert str(Face.NAME_IN_USE) == "name-in-use"


def test_mid_retry_the_released_condition_still_names_it() -> None:
    """helm-controller marks Ready Unknown while it runs the install again; Released keeps
    the failure (as for "has no deployed releases")."""
    unknown = {**ready_condition(), "status": "Unknown", "reason": "Progressing"}
    release = hr(conditions=[unknown, name_in_use_condition(type="Released")])
    assert stuck_face(release) is Face.NAME_IN_USE
    # Ready True: whatever Released says, not stuck
    assert stuck_face(hr(conditions=[ready_condition(),
                                     name_in_use_condition(type="Released")])) is None
    # Released alone, Ready False for something else: not this face
    other = {**ready_condition(), "status": "False", "reason": "ArtifactFailed", "message": "x"}
    assert stuck_face(hr(conditions=[other, name_in_use_condition(type="Released")])) is None


@pytest.mark.parametrize("condition", [
    {**name_in_use_condition(), "status": "True"},
    {**name_in_use_condition(), "status": "Unknown"},
    {**name_in_use_condition(), "message": "cannot reuse a name"},
    {**name_in_use_condition(), "message": None},
    {**name_in_use_condition(), "type": "Remediated"},
])
def test_name_in_use_needs_a_false_ready_with_helms_words(condition: dict) -> None:
    assert stuck_face(hr(conditions=[condition])) is None


def test_the_first_face_named_decides() -> None:
    """The earlier faces keep their order: a Ready saying "has no deployed releases" or
    StateError is that face even beside a Ready naming the name check (malformed status)."""
    assert stuck_face(hr(conditions=[stuck_condition(), name_in_use_condition()])) \
        is Face.NO_DEPLOYED
    assert stuck_face(hr(conditions=[name_in_use_condition(), state_error_condition()])) \
        is Face.STATE_ERROR
    # Ready False naming the name check wins over a Released "has no deployed releases"
    released = {**stuck_condition(), "type": "Released"}
    assert stuck_face(hr(conditions=[name_in_use_condition(), released])) is Face.NAME_IN_USE


# --- the storage check for the face ------------------------------------------------------------


def test_the_only_revision_uninstalled_by_a_remediation_that_kept_history() -> None:
    """Install remediation with spec.uninstall.keepHistory: revision 1 `uninstalled`, the
    history cleared by helm-controller's install."""
    choice = plan.choose(in_use(), [secret(1, "uninstalled")])
    assert choice.ok and choice.revision is not None and choice.revision.number == 1
    assert choice.helm_status == "uninstalled"
    assert choice.reason == (
        "newest revision 1 has status uninstalled (an uninstall kept its history): "
        "helm-controller installs and Helm cannot reuse the name (spec.install.replace: "
        "true is the operator's own way out)")


def test_an_older_deployed_revision_does_not_refuse() -> None:
    """Upgrade remediation with strategy uninstall and keepHistory under helm-controller
    v1.4.3 (Helm v3.19: a failed upgrade supersedes nothing, nor does the uninstall): v1
    `deployed`, v2 `uninstalled`.  Helm's name check and helm-controller look at the newest
    only; deleting v2 leaves v1 to upgrade from."""
    storage = [secret(1, "deployed"), secret(2, "uninstalled")]
    choice = plan.choose(in_use(), storage)
    assert choice.ok and choice.revision is not None and choice.revision.number == 2
    # the same storage judged as "has no deployed releases" is refused: v1 is deployed
    assert choose_revision(in_use(), storage).refusal is Refusal.DEPLOYED


@pytest.mark.parametrize("recorded,legacy", [
    ((2, "uninstalled"), False),   # history verifies the uninstalled revision: Absent
    ((1, "deployed"), True),       # legacy snapshot: verified against nothing: Absent
    ((7, "superseded"), True),
])
def test_a_history_that_leads_helm_controller_to_install(recorded, legacy) -> None:
    choice = plan.choose(in_use(recorded=recorded, legacy=legacy),
                         [secret(1, "superseded"), secret(2, "uninstalled")])
    assert choice.ok, choice


@pytest.mark.parametrize("recorded", [(1, "deployed"), (2, "deployed"), (2, "failed"),
                                      ("2", "uninstalled")])
def test_a_v2_snapshot_not_of_the_newest_makes_helm_controller_upgrade(recorded) -> None:
    """helm-controller v1.5+ verifies a v2 snapshot: not the newest revision → Unmanaged →
    upgrade (its next attempt reports anew, so the name check is stale)."""
    choice = plan.choose(in_use(recorded=recorded),
                         [secret(1, "superseded"), secret(2, "uninstalled")])
    assert not choice.ok and choice.refusal is Refusal.STALE_FACE
    assert "takes the release for unmanaged" in choice.reason
    # stale: not announced (the next reconcile reports anew)
    verdict = plan.storage_verdict(in_use(recorded=recorded),
                                   [secret(1, "superseded"), secret(2, "uninstalled")])
    assert verdict.verdict is plan.Verdict.SKIPPED and verdict.stuck is None


@pytest.mark.parametrize("newest", ["deployed", "failed", "uninstalling", "superseded",
                                    "pending-install"])
def test_a_newest_revision_that_is_not_uninstalled_is_stale(newest: str) -> None:
    choice = plan.choose(in_use(), [secret(1, "superseded"), secret(2, newest)])
    assert not choice.ok and choice.refusal is Refusal.STALE_FACE
    assert choice.reason == (f"newest revision 2 has status {newest}, not uninstalled "
                             "(helm-controller's next attempt reports anew)")


def test_install_replace_is_helm_controllers_own_way_out() -> None:
    choice = plan.choose(in_use(replace=True), [secret(1, "uninstalled")])
    assert not choice.ok and choice.refusal is Refusal.HELM_HANDLES
    assert "spec.install.replace is set" in choice.reason
    # only a literal true: a string or false is not Replace
    for value in (False, "true"):
        assert plan.choose(in_use(replace=value), [secret(1, "uninstalled")]).ok


def test_unjudgeable_payloads_are_refused_in_this_face_too() -> None:
    corrupt = secret(1, "uninstalled")
    corrupt["data"]["release"] = "%%%"
    assert plan.choose(in_use(), [corrupt]).refusal is Refusal.CORRUPT
    assert plan.choose(in_use(), [secret(1, "uninstalled", extra={"version": 2})]).refusal \
        is Refusal.VERSION_MISMATCH
    assert plan.choose(in_use(), []).refusal is Refusal.NO_STORAGE


# --- decision, verdict, the already-processed guard -------------------------------------------


def test_decide_recovers_it() -> None:
    decision = plan.decide(in_use(), NOW)
    assert decision.action is plan.Action.RECOVER and decision.row is plan.Row.LIVE_STUCK
    assert "cannot reuse a name that is still in use" in decision.reason
    assert plan.predicate(in_use()) and plan.wanted_on_change(in_use())


def test_verdict_recovers_then_awaits_helm_controllers_retry() -> None:
    storage_now = [secret(1, "deployed"), secret(2, "uninstalled")]
    assert plan.storage_verdict(in_use(), storage_now).verdict is plan.Verdict.RECOVER
    after = in_use(annotations={PROCESSED: "2"}, generation=3)
    assert plan.storage_verdict(after, storage_now[:1]).verdict is plan.Verdict.AWAITING_RETRY
    only = in_use(annotations={PROCESSED: "1"}, generation=3)
    assert plan.storage_verdict(only, []).verdict is plan.Verdict.AWAITING_RETRY
    # helm-controller retried the new generation and the name check failed again on an
    # older uninstalled revision: a fresh failure, recovered again
    again = in_use(annotations={PROCESSED: "2"})
    verdict = plan.storage_verdict(again, [secret(1, "uninstalled")])
    assert verdict.verdict is plan.Verdict.RECOVER and verdict.choice.revision.number == 1


# --- StateError over a legacy snapshot ---------------------------------------------------------


def state_error(recorded: tuple[int, str], *, api_version: str | None) -> dict:
    return hr(conditions=[state_error_condition(observed_generation=1)],
              last_attempted_generation=1, observed_generation=1,
              status_extra=history(*recorded, api_version=api_version))


@pytest.mark.parametrize("recorded", [(2, "deployed"), (1, "deployed"), (2, "uninstalling")])
@pytest.mark.parametrize("api_version", [None, "", "v1"])
def test_a_legacy_snapshot_is_verified_against_nothing(recorded, api_version) -> None:
    """An upgrade from helm-controller <= v1.4: the snapshot of revision 2 `deployed` has no
    apiVersion; an interrupted `helm uninstall` marks revision 2 `uninstalling` in place.
    helm-controller v1.5+ skips VerifyReleaseObject and fails on the status for ever."""
    release = state_error(recorded, api_version=api_version)
    choice = plan.choose(release, [secret(1, "deployed"), secret(2, "uninstalling")])
    assert choice.ok and choice.revision is not None and choice.revision.number == 2, choice
    assert plan.choose(release, [secret(2, "uninstalling")]).ok


def test_a_v2_snapshot_is_still_compared() -> None:
    release = state_error((2, "deployed"), api_version="v2")
    choice = plan.choose(release, [secret(1, "superseded"), secret(2, "uninstalling")])
    assert not choice.ok and choice.refusal is Refusal.STALE_FACE
    assert choice.reason == (
        "status.history's latest snapshot is revision 2 ('deployed'), not newest revision 2 "
        "(uninstalling): helm-controller's next attempt takes the release for unmanaged")


def test_a_legacy_snapshot_does_not_lift_the_other_checks() -> None:
    """The payload still has to be in the quoted status, and one flux-plunger deletes."""
    release = state_error((2, "deployed"), api_version=None)
    assert plan.choose(release, [secret(2, "failed")]).refusal is Refusal.STALE_FACE
    superseded = hr(conditions=[state_error_condition("superseded")],
                    status_extra=history(2, "deployed", api_version=None))
    assert plan.choose(superseded, [secret(2, "superseded")]).refusal \
        is Refusal.UNEXPECTED_STATUS


# --- every verdict of the face, whole (what `status` and `recover` print) ---------------------


def _rev(number: int, status: str):
    from kubectl_flux_plunger.core.storage import Revision
    return Revision.from_secret(secret(number, status))


def test_each_verdict_of_the_face_whole() -> None:
    from kubectl_flux_plunger.core.storage import Choice
    older = secret(1, "superseded")
    assert plan.choose(in_use(), [older, secret(2, "failed")]) == Choice(
        _rev(2, "failed"), "failed", False,
        "newest revision 2 has status failed, not uninstalled (helm-controller's next attempt "
        "reports anew)", refusal=Refusal.STALE_FACE)
    assert plan.choose(in_use(recorded=(1, "deployed")), [older, secret(2, "uninstalled")]) \
        == Choice(_rev(2, "uninstalled"), "uninstalled", False,
                  "status.history's latest snapshot is revision 1 ('deployed'), not newest "
                  "revision 2 (uninstalled): helm-controller's next attempt takes the release "
                  "for unmanaged", refusal=Refusal.STALE_FACE)
    assert plan.choose(in_use(replace=True), [older, secret(2, "uninstalled")]) == Choice(
        _rev(2, "uninstalled"), "uninstalled", False,
        "newest revision 2 has status uninstalled and spec.install.replace is set: "
        "helm-controller's next install reuses the name", refusal=Refusal.HELM_HANDLES)
    corrupt = secret(2, "uninstalled")
    corrupt["data"]["release"] = "%%%"
    choice = plan.choose(in_use(), [older, corrupt])
    assert choice.refusal is Refusal.CORRUPT and choice.reason.startswith(
        "newest revision 2 has a corrupt payload: data.release is not valid base64 ("), choice


def test_a_state_error_over_an_empty_history_whole() -> None:
    from kubectl_flux_plunger.core.storage import Choice
    release = hr(conditions=[state_error_condition(observed_generation=1)],
                 last_attempted_generation=1, observed_generation=1)
    assert plan.choose(release, [secret(2, "uninstalling")]) == Choice(
        _rev(2, "uninstalling"), "uninstalling", False,
        "status.history is empty: helm-controller's next attempt takes the release for "
        "unmanaged", refusal=Refusal.STALE_FACE)


# --- a legacy snapshot over a superseded revision: a dead end helm-controller cannot leave ----


@pytest.mark.parametrize("api_version", [None, "v1"])
def test_a_superseded_revision_beneath_a_legacy_snapshot_is_not_deleted_into(api_version) -> None:
    """The issue's upgrade of Flux after an upgraded release: v1 `superseded`, v2 `deployed`
    rewritten `uninstalling` in place by an interrupted `helm uninstall`, the history legacy.
    Deleting v2 would leave v1 superseded, which helm-controller v1.5+ places by status alone
    (StateError 'superseded', for ever): refused, announced, the way out named."""
    release = state_error((2, "deployed"), api_version=api_version)
    storage = [secret(1, "superseded"), secret(2, "uninstalling")]
    choice = plan.choose(release, storage)
    assert not choice.ok and choice.refusal is Refusal.LEGACY_HISTORY
    assert choice.revision is not None and choice.revision.number == 2
    assert choice.helm_status == "uninstalling"
    assert choice.reason == (
        "status.history's latest snapshot is one helm-controller <= v1.4 wrote (no apiVersion "
        "v2), which helm-controller v1.5+ verifies against nothing: deleting the newest "
        "revision would leave revision 1 (superseded), which it cannot place either; clear "
        "the HelmRelease's status.history (kubectl patch helmrelease NAME --subresource=status "
        """--type=json -p '[{"op":"remove","path":"/status/history"}]') and helm-controller """
        "takes the release for unmanaged")
    verdict = plan.storage_verdict(release, storage)
    assert verdict.verdict is plan.Verdict.SKIPPED and verdict.stuck is plan.Stuck.LEGACY_HISTORY
    event = plan.RECOVERY_SKIPPED[plan.Stuck.LEGACY_HISTORY]
    assert event.type == "Warning" and "status.history" in event.message


@pytest.mark.parametrize("beneath", ["deployed", "failed", "uninstalling", "uninstalled",
                                     "pending-upgrade"])
def test_what_helm_controller_goes_on_from_beneath_a_legacy_snapshot(beneath: str) -> None:
    release = state_error((2, "deployed"), api_version=None)
    assert plan.choose(release, [secret(1, beneath), secret(2, "uninstalling")]).ok


def test_the_revision_beneath_is_the_next_lower_and_its_label_speaks_when_its_payload_cannot(
        ) -> None:
    release = state_error((5, "deployed"), api_version=None)
    # the next lower is v4 (deployed); the superseded v1 further down does not matter
    assert plan.choose(release, [secret(1, "superseded"), secret(4, "deployed"),
                                 secret(5, "uninstalling")]).ok
    corrupt = secret(4, "superseded")
    corrupt["data"]["release"] = "%%%"
    assert plan.choose(release, [corrupt, secret(5, "uninstalling")]).refusal \
        is Refusal.LEGACY_HISTORY
    corrupt["metadata"]["labels"]["status"] = "deployed"
    assert plan.choose(release, [corrupt, secret(5, "uninstalling")]).ok


def test_a_v2_snapshot_over_a_superseded_revision_is_recovered() -> None:
    """With a v2 snapshot the delete leaves a revision that no longer verifies: Unmanaged,
    the history cleared, an upgrade from the superseded one (issue 47's path)."""
    release = state_error((2, "uninstalling"), api_version="v2")
    assert plan.choose(release, [secret(1, "superseded"), secret(2, "uninstalling")]).ok


def test_the_payload_not_the_label_names_the_revision_beneath() -> None:
    """Helm reads the payload; the label is only the fallback for one that cannot be read."""
    release = state_error((5, "deployed"), api_version=None)
    relabelled = secret(4, "superseded")
    relabelled["metadata"]["labels"]["status"] = "deployed"
    assert plan.choose(release, [relabelled, secret(5, "uninstalling")]).refusal \
        is Refusal.LEGACY_HISTORY
    relabelled = secret(4, "deployed")
    relabelled["metadata"]["labels"]["status"] = "superseded"
    assert plan.choose(release, [relabelled, secret(5, "uninstalling")]).ok
    no_status = secret(4, "superseded", extra={"info": {}})     # decodes, says nothing
    assert plan.choose(release, [no_status, secret(5, "uninstalling")]).refusal \
        is Refusal.LEGACY_HISTORY                                # its label speaks
