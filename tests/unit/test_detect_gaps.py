"""Generations of the wrong type, clocks in another zone, the longest revision annotation
(issue 40: each test here kills mutants of core/detect.py the unit tier let survive)."""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest

from kubectl_flux_plunger.core import constants
from kubectl_flux_plunger.core.detect import (
    attempted_since_generation,
    held_seconds,
    observed_lags,
    processed_version,
    uninstall_reached,
)

from .builders import NOW, hr

pytestmark = pytest.mark.unit


def test_a_bool_observed_generation_is_no_generation() -> None:
    """JSON true is 1 to Python: helm-controller never wrote it, so it proves nothing about
    generation 1 (the fence stays, storage is not touched, no attempt is counted)."""
    release = hr(finalizers=[constants.FENCE], generation=1,
                 deletion_timestamp="2026-11-29T19:59:00Z",
                 status_extra={"observedGeneration": True, "lastAttemptedGeneration": True})
    assert uninstall_reached(release) is False
    assert observed_lags(release) is True
    assert attempted_since_generation(release) is False


def test_a_string_observed_generation_counts_as_absent() -> None:
    release = hr(generation=2, status_extra={"observedGeneration": "2"})
    assert observed_lags(release) is True  # absent: lagging, never a TypeError


def test_a_clock_in_another_zone_measures_the_same_hold() -> None:
    release = hr(finalizers=[constants.FENCE], deletion_timestamp="2026-11-29T19:50:00Z")
    elsewhere = NOW.astimezone(timezone(timedelta(hours=2)))
    assert held_seconds(release, NOW) == held_seconds(release, elsewhere) == 600.0


@pytest.mark.parametrize(("value", "version"), [
    ("9" * 18, int("9" * 18)),   # the longest revision Helm's storage can name
    ("1" + "0" * 18, None),      # one digit more: not a revision of ours
])
def test_the_longest_processed_version(value, version) -> None:
    assert processed_version(hr(annotations={constants.PROCESSED_ANNOTATION: value})) == version
