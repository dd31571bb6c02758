"""Ownership of spec.suspend from managedFields (SPEC §5)."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.core.ownership import owns_suspend, sole_owner_is_us, suspend_owners

from .builders import CLIENT_SIDE, OURS, hr

pytestmark = pytest.mark.unit

US = constants.FIELD_MANAGER


def test_our_apply_entry_owning_suspend_is_ownership() -> None:
    release = hr(suspend=True, managed=[("helm-controller", "Update", False), OURS])
    assert owns_suspend(release) is True
    assert suspend_owners(release) == [(US, "Apply")]
    assert sole_owner_is_us(release) is True


def test_ownership_ignores_the_value_of_suspend() -> None:
    assert owns_suspend(hr(suspend=False, managed=[OURS])) is True


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param((US, "Update", True), id="our-update"),
        pytest.param((constants.CLIENT_SIDE_MANAGER, "Apply", True), id="client-side-apply"),
        pytest.param(CLIENT_SIDE, id="client-side-update"),
        pytest.param(("kubectl", "Apply", True), id="other-apply"),
        pytest.param((US, "Apply", False), id="our-apply-without-suspend"),
    ],
)
def test_other_evidence_is_not_ownership(entry: tuple[str, str, bool]) -> None:
    assert owns_suspend(hr(suspend=True, managed=[entry])) is False


def test_no_managed_fields_is_not_ownership() -> None:
    release = hr(suspend=True, annotations={constants.LEGACY_SUSPENDED_ANNOTATION: "true"})
    assert owns_suspend(release) is False
    assert suspend_owners(release) == []
    assert sole_owner_is_us(release) is False


@pytest.mark.parametrize(
    "managed",
    [
        pytest.param([{"manager": US, "operation": "Apply"}], id="fieldsV1-missing"),
        pytest.param(
            [{"manager": US, "operation": "Apply", "fieldsV1": '{"f:spec":{"f:suspend":{}}}'}],
            id="fieldsV1-string",
        ),
        pytest.param(
            [{"manager": US, "operation": "Apply", "fieldsV1": {"f:spec": ["f:suspend"]}}],
            id="f-spec-list",
        ),
        pytest.param(
            [{"manager": US, "operation": "Apply", "fieldsV1": {"f:suspend": {}}}],
            id="suspend-not-under-spec",
        ),
        pytest.param(["not-an-entry", None, 7], id="entries-not-dicts"),
        pytest.param({"manager": US}, id="managedFields-not-a-list"),
    ],
)
def test_malformed_managed_fields_own_nothing(managed: object) -> None:
    release = hr(suspend=True)
    release["metadata"]["managedFields"] = managed
    assert owns_suspend(release) is False
    assert suspend_owners(release) == []
    assert sole_owner_is_us(release) is False


def test_metadata_missing_owns_nothing() -> None:
    assert owns_suspend({"spec": {"suspend": True}}) is False
    assert owns_suspend({"metadata": "garbage"}) is False


def test_suspend_owners_lists_every_owner_in_order() -> None:
    release = hr(
        managed=[
            CLIENT_SIDE,
            ("helm-controller", "Update", False),
            OURS,
            ("velero", "Update", True),
        ]
    )
    assert suspend_owners(release) == [
        (constants.CLIENT_SIDE_MANAGER, "Update"),
        (US, "Apply"),
        ("velero", "Update"),
    ]


@pytest.mark.parametrize(
    ("managed", "expected"),
    [
        pytest.param([OURS], True, id="only-us"),
        pytest.param([OURS, ("helm-controller", "Update", False)], True,
                     id="others-not-on-suspend"),
        pytest.param([OURS, ("kubectl", "Apply", True)], False, id="co-owned-by-other-apply"),
        pytest.param([OURS, CLIENT_SIDE], False, id="co-owned-client-side"),
        pytest.param([OURS, (US, "Update", True)], False, id="co-owned-by-our-update"),
        pytest.param([(US, "Update", True)], False, id="only-our-update"),
    ],
)
def test_sole_owner_is_us(managed: list[tuple[str, str, bool]], expected: bool) -> None:
    assert sole_owner_is_us(hr(suspend=True, managed=managed)) is expected


# -- the Flux UI's suspendedBy annotation ---------------------------------------------------

SB = constants.SUSPENDED_BY_ANNOTATION


def _listing(manager: str, operation: str) -> dict:
    return {"manager": manager, "operation": operation, "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{SB}": {}}}}}


def test_suspended_by_is_ours_only_with_our_value_and_our_apply_entry() -> None:
    from kubectl_flux_plunger.core.ownership import may_mark_suspended_by, owns_suspended_by, suspended_by, suspended_by_managers

    ours = hr(annotations={SB: US})
    ours["metadata"]["managedFields"] = [_listing(US, "Apply")]
    assert suspended_by(ours) == US and owns_suspended_by(ours) and may_mark_suspended_by(ours)
    assert suspended_by_managers(ours) == [US]
    for manager, operation in ((US, "Update"), ("kubectl-annotate", "Update")):
        other = hr(annotations={SB: US})
        other["metadata"]["managedFields"] = [_listing(manager, operation)]
        assert not owns_suspended_by(other)
        assert may_mark_suspended_by(other)        # the same value: applying it is no conflict
    alice = hr(annotations={SB: "alice"})
    alice["metadata"]["managedFields"] = [_listing(US, "Apply")]   # (cannot happen; still no)
    assert not owns_suspended_by(alice) and not may_mark_suspended_by(alice)
    assert may_mark_suspended_by(hr()) and may_mark_suspended_by(hr(annotations={}))
    odd = hr(annotations={SB: 7})  # type: ignore[dict-item]
    assert suspended_by(odd) is None and not may_mark_suspended_by(odd)
