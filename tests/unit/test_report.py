"""The value the saga's steps return (``executor.outcome.Report``): immutable, and a failed
clean-up appended to the words that ended the pass exactly as a user reads them."""
from __future__ import annotations

import dataclasses

import pytest

from kubectl_flux_plunger.executor.outcome import Ending, Report, Result, deferred, failed


def test_did_and_end_return_a_new_report_and_leave_the_old_one_alone() -> None:
    start = Report(revision=2)
    going = start.did("suspended and fenced").did("recorded revision 2", "deleted x")
    ended = going.end(deferred("why"))
    assert start == Report(revision=2)
    assert going.steps == ("suspended and fenced", "recorded revision 2", "deleted x")
    assert going.ending is None and going.revision == 2
    assert ended.ending == Ending(Result.DEFERRED, "why") and ended.steps == going.steps
    with pytest.raises(dataclasses.FrozenInstanceError):
        ended.backup = "elsewhere"  # type: ignore[misc]


def test_a_failed_clean_up_after_a_success_says_but() -> None:
    done = Report(Ending(Result.RECOVERED, "deleted revision 2"), steps=("a",))
    after = done.but("could not lift our suspension (boom); hint")
    assert after.ending == Ending(
        Result.FAILED, "deleted revision 2; but could not lift our suspension (boom); hint", True
    )
    assert after.steps == ("a",)


def test_a_failed_clean_up_after_a_failure_is_appended_without_but() -> None:
    after = Report(failed("could not suspend the release: x")).but("cleanup")
    assert after.ending == failed("could not suspend the release: x; cleanup")
    assert after.ending is not None and after.ending.failed
