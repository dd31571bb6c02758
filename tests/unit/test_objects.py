"""Comparing resourceVersions (KEP-5504: positive decimal integers without leading zeros,
ordered by value); anything else does not compare."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger.core.objects import compare_resource_versions

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [
        ("9", "10", -1),          # by value, not as text
        ("10", "9", 1),
        ("254", "254", 0),
        ("1000", "999", 1),
        ("123456789012345678901234567890", "123456789012345678901234567891", -1),  # no limit
        ("0", "1", None),         # zero is never a live resourceVersion
        ("010", "10", None),      # leading zero
        ("", "1", None),
        ("1", "abc", None),
        ("1", "-1", None),
        ("١٢", "12", None),       # decimal digits, but not ASCII ones
        (None, "1", None),        # not a string at all (malformed JSON)
    ],
)
def test_compare_resource_versions(a, b, order) -> None:
    assert compare_resource_versions(a, b) == order
    if order is not None:
        assert compare_resource_versions(b, a) == -order
