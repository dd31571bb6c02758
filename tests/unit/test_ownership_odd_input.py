"""The Flux UI's suspendedBy on odd objects, and owners without a name (issue 40: found by
mutation testing).  ownership.py never raises on odd input (its docstring's promise): the
suspendedBy half was checked only on well-formed objects."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.core.ownership import (
    may_mark_suspended_by,
    owns_suspended_by,
    suspend_owners,
    suspended_by,
    suspended_by_managers,
)

from .builders import hr

pytestmark = pytest.mark.unit

SB = constants.SUSPENDED_BY_ANNOTATION
LISTS_SB = {"f:metadata": {"f:annotations": {f"f:{SB}": {}}}}


@pytest.mark.parametrize("release", [
    pytest.param({"spec": {"suspend": True}}, id="metadata-missing"),
    pytest.param({"metadata": None}, id="metadata-null"),
    pytest.param({"metadata": ["annotations"]}, id="metadata-a-list"),
])
def test_no_metadata_means_no_suspended_by_and_we_may_mark_it(release) -> None:
    assert suspended_by(release) is None
    assert may_mark_suspended_by(release) is True  # the key is absent: ours to set
    assert owns_suspended_by(release) is False
    assert suspended_by_managers(release) == []


@pytest.mark.parametrize("fields", [
    pytest.param(None, id="fieldsV1-null"),
    pytest.param(f'{{"f:metadata":{{"f:annotations":{{"f:{SB}":{{}}}}}}}}', id="fieldsV1-string"),
    pytest.param(["f:metadata"], id="fieldsV1-list"),
    pytest.param({"f:metadata": ["f:annotations"]}, id="f-metadata-list"),
])
def test_an_entry_with_odd_fields_lists_no_suspended_by(fields) -> None:
    release = hr(annotations={SB: constants.SUSPENDED_BY})
    release["metadata"]["managedFields"] = [
        {"manager": constants.FIELD_MANAGER, "operation": "Apply", "fieldsV1": fields}]
    assert suspended_by_managers(release) == []
    assert owns_suspended_by(release) is False


def test_an_owner_without_a_name_is_shown_as_empty_not_as_a_word() -> None:
    """status and release-fence print the owners: a managedFields entry with no manager or
    operation is listed as "" (never as "None" or any other made-up name)."""
    release = hr(suspend=True, annotations={SB: "someone"})
    release["metadata"]["managedFields"] = [
        {"fieldsV1": {"f:spec": {"f:suspend": {}}}},
        {"manager": "ui", "fieldsV1": LISTS_SB},
        {"fieldsV1": LISTS_SB},
    ]
    assert suspend_owners(release) == [("", "")]
    assert suspended_by_managers(release) == ["ui", ""]
