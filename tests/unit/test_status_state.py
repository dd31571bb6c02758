"""``status`` shows the row ``plan.decide`` picks, in words (no second classifier)."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants, plan
from kubectl_flux_plunger.kube.controller_lease import ControllerLease
from kubectl_flux_plunger.verbs.status import STATE_OF_ROW, state_of

from .builders import CLIENT_SIDE, NOW, OURS, hr, ready_condition, state_error_condition, stuck_condition

pytestmark = pytest.mark.unit

FENCE = constants.FENCE
HC = constants.HELM_CONTROLLER_FINALIZER
PROCESSED = constants.PROCESSED_ANNOTATION
RUNNING = ControllerLease("flux-plunger", "pod-1", NOW, 15.0, True)
EXPIRED = ControllerLease("flux-plunger", "pod-1", NOW, 15.0, False)


TERMINATING = "2026-11-29T19:30:00Z"
REMOTE = {"kubeConfig": {"secretRef": {"name": "remote"}}}


@pytest.mark.parametrize(
    ("release", "state"),
    [
        pytest.param(hr(conditions=[stuck_condition()]), "stuck", id="stuck"),
        pytest.param(hr(conditions=[state_error_condition()]), "stuck", id="stuck-state-error"),
        pytest.param(hr(conditions=[{**ready_condition(), "status": "False",
                                     "reason": "InstallFailed"}]), "failing", id="failing"),
        pytest.param(hr(suspend=True, managed=[("velero", "Update", True)],
                        conditions=[state_error_condition()]), "suspended-by-other,stuck",
                     id="suspended-by-other-state-error"),
        pytest.param(hr(suspend=True, managed=[("velero", "Update", True)],
                        conditions=[{**ready_condition(), "status": "False"}]),
                     "suspended-by-other", id="suspended-by-other-failing"),
        pytest.param(hr(suspend=True, managed=[OURS], finalizers=[FENCE]), "recovering",
                     id="recovering"),
        pytest.param(hr(suspend=False, finalizers=[FENCE]), "fenced", id="fenced"),
        pytest.param(hr(finalizers=[FENCE], deletion_timestamp=TERMINATING), "delete-held",
                     id="delete-held"),
        pytest.param(hr(suspend=True, managed=[OURS], finalizers=[FENCE],
                        deletion_timestamp=TERMINATING), "delete-held",
                     id="delete-held-while-ours"),
        pytest.param(hr(suspend=True, managed=[("velero", "Update", True)]), "suspended-by-other",
                     id="suspended-by-other"),
        pytest.param(hr(suspend=True, managed=[CLIENT_SIDE]), "suspended-by-other",
                     id="client-side-without-record"),
        pytest.param(hr(suspend=True, managed=[CLIENT_SIDE], annotations={PROCESSED: "3"}),
                     "legacy-suspension", id="legacy-client-side"),
        pytest.param(hr(suspend=True, annotations={constants.LEGACY_SUSPENDED_ANNOTATION: "true"}),
                     "legacy-suspension", id="legacy-annotation"),
        pytest.param(hr(suspend=True, managed=[(constants.FIELD_MANAGER, "Update", True)],
                        conditions=[stuck_condition()]), "suspended-by-other,stuck",
                     id="our-update-is-not-ours-and-stuck-shows-both"),
        pytest.param(hr(conditions=[stuck_condition()], spec_extra=REMOTE), "stuck",
                     id="remote-stuck"),
        pytest.param(hr(conditions=[ready_condition()], spec_extra=REMOTE), "healthy",
                     id="remote-healthy"),
        pytest.param(hr(conditions=[ready_condition()]), "healthy", id="healthy"),
        pytest.param(hr(finalizers=[HC], deletion_timestamp=TERMINATING), "terminating",
                     id="terminating-unfenced"),
        pytest.param(hr(finalizers=[HC], deletion_timestamp=TERMINATING,
                        conditions=[stuck_condition()]), "terminating",
                     id="terminating-unfenced-stuck-nothing-acts"),
    ],
)
def test_state_of(release: dict, state: str) -> None:
    assert state_of(release, NOW, RUNNING) == state


def test_our_suspension_left_by_a_gone_process_is_interrupted_not_recovering() -> None:
    release = hr(suspend=True, managed=[OURS], finalizers=[FENCE])   # applied long ago
    assert state_of(release, NOW, None) == "interrupted"
    assert state_of(release, NOW, EXPIRED) == "interrupted"
    assert state_of(release, NOW, RUNNING) == "recovering"


def test_every_row_of_decide_has_a_status_state() -> None:
    assert set(STATE_OF_ROW) == set(plan.Row) - {plan.Row.GONE}



def test_a_recovering_release_shows_since_when_and_which_process_holds_it() -> None:
    """The hold (issue 19): since = our Apply's managedFields time; by = the Lease holder
    while a controller runs, else a one-shot run; nothing for any other state."""
    from kubectl_flux_plunger.verbs.status import hold_note, hold_of

    release = hr(suspend=True, managed=[OURS], finalizers=[FENCE])
    since = release["metadata"]["managedFields"][0]["time"]
    held = hold_of(release, "recovering", RUNNING)
    assert held == {"since": since, "by": "controller pod-1"}
    assert hold_note(held) == f"held by flux-plunger since {since} (controller pod-1)"
    assert hold_of(release, "recovering", None) == {"since": since, "by": "a one-shot run"}
    assert hold_of(release, "recovering", EXPIRED)["by"] == "a one-shot run"
    assert hold_of(release, "interrupted", RUNNING) is None
    assert hold_of(hr(conditions=[stuck_condition()]), "stuck", RUNNING) is None
    assert hold_note({"since": None, "by": "a one-shot run"}) == \
        "held by flux-plunger (a one-shot run)"


# -- the Flux UI's suspendedBy next to the manager (issue 38) ------------------------------

SB = constants.SUSPENDED_BY_ANNOTATION


def ui_suspended(name: str = "alice", *, writer: str = "flux-operator-web",
                 suspender: str = "flux-operator-web") -> dict:
    """What the Web UI's Suspend leaves: one merge patch (manager flux-operator-web) setting
    spec.suspend and the annotation, so one Update entry lists both."""
    release = hr(suspend=True, annotations={SB: name})
    fields_of: dict[str, dict] = {}
    fields_of.setdefault(suspender, {})["f:spec"] = {"f:suspend": {}}
    fields_of.setdefault(writer, {})["f:metadata"] = {"f:annotations": {f"f:{SB}": {}}}
    release["metadata"]["managedFields"] = [
        {"manager": m, "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": f}
        for m, f in fields_of.items()]
    return release


def test_status_names_the_ui_suspender_next_to_its_manager() -> None:
    from kubectl_flux_plunger.verbs.status import _owners, suspenders

    release = ui_suspended()
    assert suspenders(release) == {"flux-operator-web": "alice"}
    assert _owners(release) == "flux-operator-web (alice)"
    assert state_of(release, NOW) == "suspended-by-other"


def test_a_name_another_manager_left_is_not_pinned_on_the_suspender() -> None:
    """The UI suspended (alice), `flux resume` kept the name, `flux suspend` suspended again:
    the name is not the suspender's."""
    from kubectl_flux_plunger.verbs.status import _owners, suspenders

    release = ui_suspended(suspender="flux-client-side-apply")
    assert suspenders(release) == {}
    assert _owners(release) == "flux-client-side-apply(Update)"
    # nor on a release nobody suspends
    resumed = ui_suspended()
    resumed["spec"]["suspend"] = False
    assert suspenders(resumed) == {} and _owners(resumed) == "-"


def test_our_own_name_is_not_repeated() -> None:
    from kubectl_flux_plunger.verbs.status import _owners, suspenders

    release = hr(suspend=True, annotations={SB: constants.SUSPENDED_BY})
    release["metadata"]["managedFields"] = [{
        "manager": constants.FIELD_MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:suspend": {}},
                     "f:metadata": {"f:annotations": {f"f:{SB}": {}}}}}]
    assert suspenders(release) == {} and _owners(release) == "flux-plunger"
