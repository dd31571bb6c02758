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


def test_after_keeps_the_answer_of_the_last_write() -> None:
    first, last = {"metadata": {"resourceVersion": "5"}}, {"metadata": {"resourceVersion": "6"}}
    report = Report().after(first).did("x").after(last)
    assert report.wrote is last and Report().wrote is None


def _release(rv: str, **kw) -> dict:
    from .builders import hr, stuck_condition

    return hr(rv=rv, conditions=[stuck_condition()], **kw)


AWAITING = dict(generation=3, last_attempted_generation=2,
                annotations={"flux-plunger.cozystack.io/last-processed-version": "2"})


@pytest.mark.parametrize(
    ("newest", "ending", "settled"),
    [
        # the relinquish's answer: awaiting helm-controller's retry, worth no pass
        (_release("254", **AWAITING), Ending(Result.RECOVERED), "254"),
        (_release("254", **AWAITING), Ending(Result.AWAITING_RETRY), "254"),
        # stuck and worth a pass (e.g. a skip that a change may lift): nothing settled
        (_release("254"), Ending(Result.SKIPPED), None),
        # ended for now, not for good
        (_release("254", **AWAITING), failed("x"), None),
        (_release("254", **AWAITING), deferred("x"), None),
        (_release("254", **AWAITING), Ending(Result.PLANNED), None),
        (None, Ending(Result.GONE), None),
        (_release("", **AWAITING), Ending(Result.UNCHANGED), None),
    ],
)
def test_a_pass_settles_the_release_where_it_ended_when_that_wants_no_further_pass(
        newest, ending, settled) -> None:
    from kubectl_flux_plunger.executor.executor import _settled

    assert _settled(newest, ending) == settled
