"""Request bodies of the write primitives (SPEC §5)."""

from __future__ import annotations

import copy
from typing import Callable

import jsonpatch
import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.core.writes import acquire_body, record_patch, relinquish_body, remove_fence_json_patch, unsuspend_json_patch

from .builders import OURS, hr

pytestmark = pytest.mark.unit

FENCE = constants.FENCE
HC = constants.HELM_CONTROLLER_FINALIZER
TERMINATING = "2026-11-29T19:30:00Z"
IDENTITY = {"name": "demo", "namespace": "default", "resourceVersion": "100", "uid": "uid-1"}
SB = constants.SUSPENDED_BY_ANNOTATION
US = constants.FIELD_MANAGER
SB_PATH = "/metadata/annotations/fluxcd.controlplane.io~1suspendedBy"


def wrote_suspended_by(release: dict, manager: str = US, operation: str = "Apply") -> dict:
    """``release`` with a managedFields entry of ``manager`` listing the suspendedBy key."""
    release["metadata"].setdefault("managedFields", []).append({
        "manager": manager,
        "operation": operation,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{SB}": {}}}},
    })
    return release


def test_acquire_body_is_exactly_the_minimal_apply() -> None:
    release = hr(suspend=False, finalizers=[HC], spec_extra={"interval": "10m"})
    assert acquire_body(release) == {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {**IDENTITY, "finalizers": [FENCE], "annotations": {SB: US}},
        "spec": {"suspend": True},
    }


@pytest.mark.parametrize(
    ("finalizers", "deletion", "kept"),
    [
        pytest.param([HC, FENCE], None, False, id="live-fenced-drops-fence"),
        pytest.param([HC], None, False, id="live-unfenced"),
        pytest.param([HC, FENCE], TERMINATING, True, id="terminating-fenced-keeps-fence"),
        pytest.param([HC], TERMINATING, False, id="terminating-unfenced-never-adds"),
    ],
)
def test_relinquish_body(finalizers: list[str], deletion: str | None, kept: bool) -> None:
    release = hr(suspend=True, managed=[OURS], finalizers=finalizers, deletion_timestamp=deletion)
    metadata = {**IDENTITY, "finalizers": [FENCE]} if kept else IDENTITY
    assert relinquish_body(release) == {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": metadata,
    }


def test_record_patch_is_a_locked_merge_patch() -> None:
    assert record_patch(hr(rv="555"), 3) == {
        "metadata": {
            "resourceVersion": "555",
            "annotations": {constants.PROCESSED_ANNOTATION: "3"},
        }
    }


def test_unsuspend_json_patch_applies_only_to_the_read_object() -> None:
    release = hr(suspend=True)
    patch = unsuspend_json_patch(release)
    assert patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "100"},
        {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
        {"op": "replace", "path": "/spec/suspend", "value": False},
    ]
    assert jsonpatch.apply_patch(release, patch)["spec"]["suspend"] is False
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(hr(suspend=True, rv="101"), patch)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(hr(suspend=True, uid="uid-2"), patch)


def test_remove_fence_json_patch_removes_every_copy_from_the_end() -> None:
    release = hr(finalizers=[FENCE, HC, FENCE])
    patch = remove_fence_json_patch(release)
    assert patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "100"},
        {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
        {"op": "test", "path": "/metadata/finalizers/2", "value": FENCE},
        {"op": "remove", "path": "/metadata/finalizers/2"},
        {"op": "test", "path": "/metadata/finalizers/0", "value": FENCE},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    assert jsonpatch.apply_patch(release, patch)["metadata"]["finalizers"] == [HC]


def test_remove_fence_json_patch_fails_when_the_list_moved() -> None:
    patch = remove_fence_json_patch(hr(finalizers=[HC, FENCE]))
    moved = hr(finalizers=[FENCE, HC])
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, patch)


def test_remove_fence_json_patch_is_none_without_fence() -> None:
    assert remove_fence_json_patch(hr(finalizers=[HC])) is None
    assert remove_fence_json_patch(hr()) is None


BUILDERS: list[Callable[[dict], object]] = [
    acquire_body,
    relinquish_body,
    lambda release: record_patch(release, 4),
    unsuspend_json_patch,
    remove_fence_json_patch,
]


@pytest.mark.parametrize("build", BUILDERS, ids=["acquire", "relinquish", "record", "unsuspend",
                                                 "remove-fence"])
def test_builders_never_mutate_input_and_return_fresh_lists(
    build: Callable[[dict], object],
) -> None:
    release = hr(suspend=True, managed=[OURS], finalizers=[FENCE, HC],
                 deletion_timestamp=TERMINATING, annotations={"keep": "me"})
    before = copy.deepcopy(release)
    body = build(release)
    assert release == before
    if isinstance(body, dict) and "finalizers" in body["metadata"]:
        body["metadata"]["finalizers"].append("x")
        assert release == before


@pytest.mark.parametrize("missing", ["resourceVersion", "uid"])
@pytest.mark.parametrize("build", BUILDERS, ids=["acquire", "relinquish", "record", "unsuspend",
                                                 "remove-fence"])
def test_builders_refuse_a_read_without_evidence(missing: str,
                                                 build: Callable[[dict], object]) -> None:
    release = hr(finalizers=[FENCE])
    del release["metadata"][missing]
    with pytest.raises(ValueError, match="resourceVersion and uid"):
        build(release)


# -- the Flux UI's suspendedBy annotation ---------------------------------------------------

@pytest.mark.parametrize("value", [None, US], ids=["absent", "already-ours"])
def test_acquire_marks_suspended_by_where_no_other_name_is(value: str | None) -> None:
    release = hr(suspend=False, annotations={SB: value} if value else {"other": "x"})
    assert acquire_body(release)["metadata"]["annotations"] == {SB: US}


@pytest.mark.parametrize("name", ["alice", "", "Flux-Plunger"])
def test_acquire_never_lists_another_suspenders_name(name: str) -> None:
    """A name left by the Web UI (its Suspend, then a `flux resume` that keeps it): our
    apply must not list the key at all — a forced acquire would take it over."""
    release = wrote_suspended_by(hr(suspend=False, annotations={SB: name}),
                                 "flux-operator-web", "Update")
    body = acquire_body(release)
    assert "annotations" not in body["metadata"], body
    assert body["spec"] == {"suspend": True} and body["metadata"]["finalizers"] == [FENCE]


def test_relinquish_omits_our_suspended_by_so_it_goes_with_the_suspension() -> None:
    release = wrote_suspended_by(hr(suspend=True, managed=[OURS], finalizers=[HC, FENCE],
                                    annotations={SB: US}))
    assert "annotations" not in relinquish_body(release)["metadata"]


def test_relinquish_keeps_our_suspended_by_while_a_co_owner_keeps_the_suspension() -> None:
    release = wrote_suspended_by(hr(suspend=True, managed=[OURS, ("kustomize-controller",
                                                                  "Apply", True)],
                                    finalizers=[HC, FENCE], annotations={SB: US}))
    assert relinquish_body(release)["metadata"]["annotations"] == {SB: US}
    # a name that is not ours is never listed (omitting it cannot remove it either)
    theirs = wrote_suspended_by(hr(suspend=True, managed=[OURS, ("kustomize-controller",
                                                                 "Apply", True)],
                                   annotations={SB: "alice"}), "flux-operator-web", "Update")
    assert "annotations" not in relinquish_body(theirs)["metadata"]


def test_our_value_written_by_someone_else_is_not_ours() -> None:
    release = wrote_suspended_by(hr(suspend=True, managed=[OURS], finalizers=[FENCE],
                                    annotations={SB: US}), "kubectl-annotate", "Update")
    assert all(op["path"] != SB_PATH for op in unsuspend_json_patch(release))
    release["spec"]["suspend"] = False
    assert all(op["path"] != SB_PATH for op in remove_fence_json_patch(release) or [])


def test_unsuspend_json_patch_removes_our_suspended_by_in_the_same_patch() -> None:
    release = wrote_suspended_by(hr(suspend=True, managed=[OURS], annotations={SB: US}))
    patch = unsuspend_json_patch(release)
    assert patch[-2:] == [{"op": "test", "path": SB_PATH, "value": US},
                          {"op": "remove", "path": SB_PATH}]
    after = jsonpatch.apply_patch(release, patch)
    assert SB not in after["metadata"]["annotations"] and after["spec"]["suspend"] is False


@pytest.mark.parametrize(("suspend", "removed"), [(None, True), (False, True), (True, False)],
                         ids=["resumed-null", "resumed-false", "someone-keeps-it-suspended"])
def test_remove_fence_json_patch_takes_our_suspended_by_only_when_nobody_suspends(
        suspend: bool | None, removed: bool) -> None:
    release = wrote_suspended_by(hr(suspend=suspend, finalizers=[HC, FENCE],
                                    annotations={SB: US, "keep": "me"}))
    patch = remove_fence_json_patch(release)
    assert patch is not None
    after = jsonpatch.apply_patch(release, patch)
    assert after["metadata"]["finalizers"] == [HC]
    assert (SB not in after["metadata"]["annotations"]) is removed
    assert after["metadata"]["annotations"]["keep"] == "me"


def test_remove_fence_json_patch_fails_when_the_name_changed() -> None:
    release = wrote_suspended_by(hr(finalizers=[FENCE], annotations={SB: US}))
    patch = remove_fence_json_patch(release)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(hr(finalizers=[FENCE], annotations={SB: "alice"}),
                              [op for op in patch or [] if "resourceVersion" not in op["path"]])
