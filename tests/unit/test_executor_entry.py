"""The executor's entry points (executor/executor.Executor): one pass (``reconcile``: the
fresh read, the selector and covered refusals, the decision), the one place a pass's Outcome
is made (``apply_decision``, ``_settled``) and the bounded determine -> act -> re-determine
loop (``settle``), on fakes of the client, the fresh read and the switch (issue 40: the
mutants of its exits — every exit closes the watch it opened, a clean-up is followed by at
most MAX_PASSES passes, a refusal writes nothing).  The switch itself is
tests/unit/test_executor_actions.py; the same entry against the real apiserver is
tests/apiserver/test_saga_safety.py and test_decision_rows.py."""
from __future__ import annotations

import copy

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import plan
from kubectl_flux_plunger.core.selector import parse
from kubectl_flux_plunger.executor import executor as executor_mod
from kubectl_flux_plunger.executor.executor import Executor, _settled
from kubectl_flux_plunger.executor.outcome import (
    MAX_PASSES,
    Covered,
    Ending,
    Options,
    Outcome,
    Report,
    Result,
    outside,
)
from kubectl_flux_plunger.kube import KubeError

from .builders import NOW, OURS, hr, stuck_condition

pytestmark = pytest.mark.unit

NS, NAME = "default", "demo"


def rv(obj: dict | None) -> str | None:
    return None if obj is None else obj["metadata"]["resourceVersion"]


def stuck(rv_: str = "100", **kw: object) -> dict:
    return hr(generation=2, observed_generation=2, last_attempted_generation=2, rv=rv_,
              conditions=[stuck_condition(2)], **kw)  # type: ignore[arg-type]


def ours(rv_: str = "200", **kw: object) -> dict:
    """Suspended by us and fenced, live: RELINQUISH."""
    return hr(suspend=True, managed=[OURS], finalizers=[C.FENCE], rv=rv_,
              **kw)  # type: ignore[arg-type]


def healthy(rv_: str = "300") -> dict:
    return hr(rv=rv_)


def waiting(rv_: str = "400") -> dict:
    """Terminating, fenced, helm-controller has not uninstalled: WAIT_FENCE (held an hour)."""
    return hr(finalizers=[C.FENCE, C.HELM_CONTROLLER_FINALIZER], generation=2,
              observed_generation=1, deletion_timestamp="2026-11-29T19:00:00Z", rv=rv_)


def foreign(rv_: str = "500") -> dict:
    """Suspended by another manager, unfenced: nothing but an Event."""
    return hr(suspend=True, managed=[("kubectl", "Update", True)], rv=rv_)


class Kube:
    """The client: the GETs settle re-reads with, scripted."""

    def __init__(self, *gets: object, dry_run: bool = False):
        self.dry_run = dry_run
        self.request_timeout = None
        self.gets = list(gets)
        self.got: list[tuple[str, str]] = []

    def get_hr(self, namespace, name):
        self.got.append((namespace, name))
        answer = self.gets.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return copy.deepcopy(answer)


class Watch:
    def __init__(self):
        self.closed = 0

    def close(self):
        self.closed += 1


class Switch:
    """The switch: its reports scripted, what it was asked recorded."""

    def __init__(self, *reports: Report):
        self.reports = list(reports)
        self.runs: list[tuple] = []
        self.announced: list[tuple] = []

    def run(self, hr_, d, watch):
        self.runs.append((rv(hr_), d.row, watch))
        return self.reports.pop(0) if self.reports else Report()

    def announce(self, hr_, d, ending):
        self.announced.append((rv(hr_), d.row, ending))


class Reads:
    """The fresh read (executor.read_watched): its answers scripted, its calls recorded."""

    def __init__(self, *answers: tuple[object, object]):
        self.answers = list(answers)
        self.calls: list[tuple] = []

    def __call__(self, kube, opt, namespace, name, only_rows=None):
        self.calls.append((kube, opt, namespace, name, only_rows))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        obj, watch = answer
        return copy.deepcopy(obj), watch


def make(monkeypatch, *reads: tuple[object, object], kube: Kube | None = None,
         reports: tuple[Report, ...] = (), **opts: object):
    r = Reads(*reads)
    monkeypatch.setattr(executor_mod, "read_watched", r)
    ex = Executor(kube or Kube(), options=Options(**opts), clock=lambda: NOW)  # type: ignore
    sw = Switch(*reports)
    ex.switch = sw  # type: ignore[assignment]
    return ex, r, sw


RELINQUISHED = Report(Ending(Result.RELINQUISHED), steps=("lifted our suspension",))
RECOVERED = Report(Ending(Result.RECOVERED, "deleted it"), steps=("suspended", "deleted"),
                   revision=2)


# -- reconcile: one pass ----------------------------------------------------------------------


def test_a_pass_decides_on_the_fresh_read_acts_on_its_watch_and_closes_it(monkeypatch):
    w = Watch()
    ex, r, sw = make(monkeypatch, (stuck(), w), reports=(RECOVERED,))
    out = ex.reconcile(NS, NAME)
    assert r.calls == [(ex.kube, ex.opt, NS, NAME, None)]
    assert sw.runs == [("100", plan.Row.LIVE_STUCK, w)]
    assert (out.result, out.detail, out.row, out.revision) == (
        Result.RECOVERED, "deleted it", plan.Row.LIVE_STUCK, 2)
    assert (out.namespace, out.name) == (NS, NAME)
    assert w.closed == 1


def test_a_pass_outside_the_selector_writes_nothing_and_closes_the_watch(monkeypatch):
    w = Watch()
    sel = parse("team=a")
    ex, _, sw = make(monkeypatch, (stuck(), w), selector=sel)
    out = ex.reconcile(NS, NAME)
    assert out == outside(sel, NS, NAME)
    assert out.selected is False
    assert sw.runs == [] and w.closed == 1


def test_a_pass_inside_the_selector_acts(monkeypatch):
    labelled = stuck()
    labelled["metadata"]["labels"] = {"team": "a"}
    ex, _, sw = make(monkeypatch, (labelled, None), selector=parse("team=a"),
                     reports=(RECOVERED,))
    assert ex.reconcile(NS, NAME).result is Result.RECOVERED
    assert len(sw.runs) == 1


def test_a_gone_release_is_not_outside_any_selector(monkeypatch):
    ex, _, sw = make(monkeypatch, (None, None), selector=parse("team=a"),
                     reports=(Report(Ending(Result.GONE)),))
    out = ex.reconcile(NS, NAME)
    assert out.result is Result.GONE and out.selected
    assert sw.runs == [(None, plan.Row.GONE, None)]
    assert ex.selected(None) and not ex.selected(stuck())


def test_a_pass_limited_to_other_rows_leaves_the_release_unchanged(monkeypatch):
    w = Watch()
    only = frozenset({plan.Row.LIVE_SUSPENDED_OWNED})
    ex, r, sw = make(monkeypatch, (stuck(), w))
    out = ex.reconcile(NS, NAME, only_rows=only)
    assert r.calls[0][4] is only
    assert out == Outcome(NS, NAME, Result.UNCHANGED,
                          'stuck with "has no deployed releases": recover',
                          row=plan.Row.LIVE_STUCK)
    assert sw.runs == [] and w.closed == 1


def test_a_pass_limited_to_its_row_acts(monkeypatch):
    ex, _, sw = make(monkeypatch, (ours(), None), reports=(RELINQUISHED,))
    out = ex.reconcile(NS, NAME, only_rows=frozenset({plan.Row.LIVE_SUSPENDED_OWNED}))
    assert out.result is Result.RELINQUISHED
    assert sw.runs == [("200", plan.Row.LIVE_SUSPENDED_OWNED, None)]


def test_a_pass_limited_to_rows_on_a_gone_release_still_reports_it_gone(monkeypatch):
    ex, _, sw = make(monkeypatch, (None, None), reports=(Report(Ending(Result.GONE)),))
    out = ex.reconcile(NS, NAME, only_rows=frozenset({plan.Row.LIVE_SUSPENDED_OWNED}))
    assert out.result is Result.GONE
    assert len(sw.runs) == 1


def covering(lease: str = "flux-plunger-a"):
    asked: list[str | None] = []

    def check(obj):
        asked.append(rv(obj))
        return Covered(lease, f"covered by {lease}")
    return check, asked


def test_a_write_a_running_controller_covers_is_left_to_it(monkeypatch):
    check, asked = covering()
    w = Watch()
    ex, _, sw = make(monkeypatch, (stuck(), w), covered=check)
    out = ex.reconcile(NS, NAME)
    assert out == Outcome(NS, NAME, Result.DEFERRED, "covered by flux-plunger-a",
                          controller="flux-plunger-a")
    assert asked == ["100"]
    assert sw.runs == [] and w.closed == 1


def test_a_decision_that_writes_nothing_goes_on_though_a_controller_covers_it(monkeypatch):
    check, asked = covering()
    ex, _, sw = make(monkeypatch, (foreign(), None), covered=check)
    ex.reconcile(NS, NAME)
    assert asked == []
    assert sw.runs == [("500", plan.Row.LIVE_SUSPENDED_FOREIGN, None)]


def test_a_write_no_running_controller_covers_goes_on(monkeypatch):
    asked: list[object] = []
    ex, _, sw = make(monkeypatch, (stuck(), None), covered=lambda o: asked.append(o),
                     reports=(RECOVERED,))
    assert ex.reconcile(NS, NAME).result is Result.RECOVERED
    assert len(asked) == 1 and len(sw.runs) == 1


def test_a_gone_release_is_not_asked_about_cover(monkeypatch):
    check, asked = covering()
    ex, _, sw = make(monkeypatch, (None, None), covered=check)
    ex.reconcile(NS, NAME)
    assert asked == [] and len(sw.runs) == 1


def test_a_wait_for_the_uninstall_is_decided_on_the_clock_and_not_left_to_a_controller(
    monkeypatch,
):
    check, asked = covering()
    ex, _, sw = make(monkeypatch, (waiting(), None), covered=check)
    out = ex.reconcile(NS, NAME)
    assert asked == [] and sw.runs == [("400", plan.Row.TERMINATING_FENCED_WAITING, None)]
    assert out.row == plan.Row.TERMINATING_FENCED_WAITING


def test_a_pass_limited_to_rows_decides_a_wait_on_the_clock(monkeypatch):
    ex, _, sw = make(monkeypatch, (waiting(), None))
    out = ex.reconcile(NS, NAME, only_rows=frozenset({plan.Row.LIVE_SUSPENDED_OWNED}))
    assert (out.result, out.row) == (Result.UNCHANGED, plan.Row.TERMINATING_FENCED_WAITING)
    assert sw.runs == []


def test_a_pass_that_fails_to_act_still_closes_the_watch(monkeypatch):
    w = Watch()
    ex, _, sw = make(monkeypatch, (stuck(), w))

    def boom(*_):
        raise KubeError(500, "InternalError", "etcd down")
    sw.run = boom  # type: ignore[method-assign]
    with pytest.raises(KubeError):
        ex.reconcile(NS, NAME)
    assert w.closed == 1


def test_read_watched_reads_with_the_executors_client_and_options(monkeypatch):
    ex, r, _ = make(monkeypatch, (stuck(), None))
    only = frozenset({plan.Row.LIVE_STUCK})
    assert rv(ex.read_watched(NS, NAME, only)[0]) == "100"
    assert r.calls == [(ex.kube, ex.opt, NS, NAME, only)]


# -- apply_decision: the one place an Outcome is made --------------------------------------


def test_the_outcome_carries_what_the_report_says(monkeypatch):
    report = Report(Ending(Result.SKIPPED, "left stuck", stuck=plan.Stuck.NO_STORAGE),
                    steps=("a", "b"), revision=7, backup="/tmp/x")
    ex, _, sw = make(monkeypatch, reports=(report,))
    out = ex.apply_decision(NS, NAME, stuck())
    assert out == Outcome(NS, NAME, Result.SKIPPED, "left stuck", row=plan.Row.LIVE_STUCK,
                          revision=7, failed=False, steps=["a", "b"], backup="/tmp/x",
                          settled=None, left_stuck=plan.Stuck.NO_STORAGE)
    assert sw.announced == [("100", plan.Row.LIVE_STUCK, report.ending)]


def test_a_report_without_an_ending_is_unchanged_for_the_decisions_reason(monkeypatch):
    ex, _, sw = make(monkeypatch, reports=(Report(),))
    out = ex.apply_decision(NS, NAME, foreign())
    assert (out.result, out.failed, out.steps) == (Result.UNCHANGED, False, [])
    assert out.detail == "suspended by another manager: left untouched, only our fence can go"
    assert sw.announced == [("500", plan.Row.LIVE_SUSPENDED_FOREIGN, Ending(Result.UNCHANGED))]


def test_a_failed_ending_fails_the_outcome(monkeypatch):
    ex, _, _ = make(monkeypatch, reports=(Report(Ending(Result.FAILED, "x", failed=True)),))
    out = ex.apply_decision(NS, NAME, stuck())
    assert out.failed and out.result is Result.FAILED and out.detail == "x"


def test_the_decision_heeds_the_fence_options_and_its_requeue_reaches_the_outcome(monkeypatch):
    ex, _, sw = make(monkeypatch, fence_warn_after=100.0, fence_recheck=7.5)
    seen: list[plan.Decision] = []
    sw.run = lambda hr_, d, watch: seen.append(d) or Report()  # type: ignore[method-assign]
    out = ex.apply_decision(NS, NAME, waiting())
    assert seen[0].event is plan.UNINSTALL_FENCE_HELD
    assert out.requeue_after == 7.5
    ex2, _, sw2 = make(monkeypatch, fence_warn_after=7200.0)
    sw2.run = lambda hr_, d, watch: seen.append(d) or Report()  # type: ignore[method-assign]
    ex2.apply_decision(NS, NAME, waiting())
    assert seen[1].event is None


def test_apply_decision_hands_the_watch_to_the_switch(monkeypatch):
    w = Watch()
    ex, _, sw = make(monkeypatch)
    ex.apply_decision(NS, NAME, stuck(), w)  # type: ignore[arg-type]
    ex.apply_decision(NS, NAME, stuck())
    assert [run[2] for run in sw.runs] == [w, None]


def test_a_settled_pass_names_the_state_its_last_write_left(monkeypatch):
    ex, _, _ = make(monkeypatch, reports=(Report(Ending(Result.RELINQUISHED),
                                                 wrote=healthy("301")),))
    assert ex.apply_decision(NS, NAME, ours()).settled == "301"


def test_a_settled_pass_without_a_write_names_the_read(monkeypatch):
    ex, _, _ = make(monkeypatch, reports=(Report(Ending(Result.UNCHANGED)),))
    assert ex.apply_decision(NS, NAME, healthy("302")).settled == "302"


def test_a_server_side_dry_run_settles_nothing(monkeypatch):
    ex, _, _ = make(monkeypatch, kube=Kube(dry_run=True),
                    reports=(Report(Ending(Result.RELINQUISHED), wrote=healthy("301")),))
    assert ex.apply_decision(NS, NAME, ours()).settled is None


SETTLING = {Result.RECOVERED, Result.AWAITING_RETRY, Result.SKIPPED, Result.UNCHANGED,
            Result.RELINQUISHED, Result.FENCE_REMOVED}


@pytest.mark.parametrize("result", list(Result))
def test_which_endings_settle_the_release(result):
    expected = "300" if result in SETTLING else None
    assert _settled(healthy("300"), Ending(result)) == expected


@pytest.mark.parametrize("newest", [
    None, hr(finalizers=[C.FENCE], rv="300"), hr(rv=""), hr(rv=7),  # type: ignore[arg-type]
    {"metadata": {}}, {},
])
def test_nothing_settles_on_a_gone_wanted_or_unversioned_state(newest):
    assert _settled(newest, Ending(Result.RECOVERED)) is None


# -- settle: determine -> act -> re-determine -----------------------------------------------


def test_settle_leaves_a_listed_copy_that_needs_nothing_without_a_read(monkeypatch):
    ex, r, sw = make(monkeypatch)
    out = ex.settle(healthy())
    assert out == Outcome(NS, NAME, Result.UNCHANGED, "nothing to do", row=plan.Row.HEALTHY)
    assert r.calls == [] and sw.runs == []


def test_settle_acts_on_a_fresh_read_of_a_listed_copy_and_closes_its_watch(monkeypatch):
    w = Watch()
    ex, r, sw = make(monkeypatch, (stuck("101"), w), reports=(RECOVERED,))
    out = ex.settle(stuck("100"))
    assert r.calls == [(ex.kube, ex.opt, NS, NAME, None)]
    assert sw.runs == [("101", plan.Row.LIVE_STUCK, w)]
    assert out.result is Result.RECOVERED and out.steps == ["suspended", "deleted"]
    assert w.closed == 1


def test_settle_records_a_decisions_event_though_nothing_is_written(monkeypatch):
    ex, r, sw = make(monkeypatch, (foreign("501"), None))
    out = ex.settle(foreign())
    assert len(r.calls) == 1 and sw.runs == [("501", plan.Row.LIVE_SUSPENDED_FOREIGN, None)]
    assert out.result is Result.UNCHANGED


def test_settle_hands_the_fresh_read_to_the_pass_even_when_it_now_needs_nothing(monkeypatch):
    ex, r, sw = make(monkeypatch, (healthy("301"), None), reports=(Report(),))
    out = ex.settle(stuck())
    assert sw.runs == [("301", plan.Row.HEALTHY, None)]
    assert (out.result, out.row, out.settled) == (Result.UNCHANGED, plan.Row.HEALTHY, "301")


def test_settle_uses_a_fresh_read_as_is_and_closes_its_watch(monkeypatch):
    w = Watch()
    ex, r, sw = make(monkeypatch, reports=(RECOVERED,))
    out = ex.settle(stuck(), fresh=True, watch=w)  # type: ignore[arg-type]
    assert r.calls == [] and sw.runs == [("100", plan.Row.LIVE_STUCK, w)]
    assert out.result is Result.RECOVERED and w.closed == 1


def test_settle_closes_a_watch_it_was_handed_on_every_exit(monkeypatch):
    w = Watch()
    ex, _, _ = make(monkeypatch)
    ex.settle(healthy(), watch=w)  # type: ignore[arg-type]
    assert w.closed == 1


def test_settle_of_a_listed_copy_found_outside_the_selector_writes_nothing(monkeypatch):
    w = Watch()
    sel = parse("team=a")
    listed = stuck()
    listed["metadata"]["labels"] = {"team": "a"}
    ex, _, sw = make(monkeypatch, (stuck("101"), w), selector=sel)
    assert ex.settle(listed) == outside(sel, NS, NAME)
    assert sw.runs == [] and w.closed == 1


def test_settle_decides_a_listed_wait_on_the_clock(monkeypatch):
    ex, r, sw = make(monkeypatch, (waiting("401"), None))
    out = ex.settle(waiting())
    assert len(r.calls) == 1 and sw.runs == [("401", plan.Row.TERMINATING_FENCED_WAITING, None)]
    assert (out.namespace, out.name, out.row) == (NS, NAME, plan.Row.TERMINATING_FENCED_WAITING)


def test_settle_limited_to_rows_decides_again_on_the_fresh_read(monkeypatch):
    only = frozenset({plan.Row.LIVE_SUSPENDED_OWNED})
    ex, r, sw = make(monkeypatch, (healthy("301"), None))
    out = ex.settle(ours(), only_rows=only)
    assert r.calls[0][4] is only
    assert out == Outcome(NS, NAME, Result.UNCHANGED, "nothing to do", row=plan.Row.HEALTHY)
    assert sw.runs == []


def test_settle_limited_to_rows_acts_once_when_the_fresh_read_is_still_one(monkeypatch):
    only = frozenset({plan.Row.LIVE_SUSPENDED_OWNED})
    ex, _, sw = make(monkeypatch, (ours("201"), None), kube=Kube(), reports=(RELINQUISHED,))
    out = ex.settle(ours(), only_rows=only)
    assert out.result is Result.RELINQUISHED
    assert sw.runs == [("201", plan.Row.LIVE_SUSPENDED_OWNED, None)]  # no pass after it


def test_settle_limited_to_rows_leaves_a_listed_copy_of_another_row(monkeypatch):
    ex, r, _ = make(monkeypatch)
    out = ex.settle(stuck(), only_rows=frozenset({plan.Row.LIVE_SUSPENDED_OWNED}))
    assert (out.result, out.row) == (Result.UNCHANGED, plan.Row.LIVE_STUCK)
    assert r.calls == []


def test_settle_limited_to_rows_on_a_release_gone_since_the_list_says_gone(monkeypatch):
    ex, _, sw = make(monkeypatch, (None, None))
    out = ex.settle(ours(), only_rows=frozenset({plan.Row.LIVE_SUSPENDED_OWNED}))
    assert out == Outcome(NS, NAME, Result.GONE, "the HelmRelease no longer exists",
                          row=plan.Row.GONE)
    assert sw.runs == []


def test_settle_leaves_a_covered_write_to_the_running_controller(monkeypatch):
    check, asked = covering()
    ex, _, sw = make(monkeypatch, covered=check)
    out = ex.settle(stuck(), fresh=True)
    assert (out.result, out.controller) == (Result.DEFERRED, "flux-plunger-a")
    assert (out.namespace, out.name) == (NS, NAME)
    assert asked == ["100"] and sw.runs == []


def test_after_a_clean_up_settle_decides_again_and_joins_the_steps(monkeypatch):
    ex, _, sw = make(monkeypatch, kube=Kube(stuck("202")), reports=(RELINQUISHED, RECOVERED))
    out = ex.settle(ours(), fresh=True, watch=Watch())  # type: ignore[arg-type]
    assert [(run[0], run[2]) for run in sw.runs][1] == ("202", None)  # no watch past the first
    assert out.result is Result.RECOVERED
    assert out.steps == ["lifted our suspension", "suspended", "deleted"]
    assert (out.namespace, out.name) == (NS, NAME)
    assert ex.kube.got == [(NS, NAME)]  # type: ignore[attr-defined]


def test_after_a_clean_up_an_unchanged_pass_reports_the_clean_up(monkeypatch):
    ex, _, sw = make(monkeypatch, kube=Kube(stuck("202")),
                     reports=(RELINQUISHED, Report(Ending(Result.UNCHANGED))))
    out = ex.settle(ours(), fresh=True)
    assert len(sw.runs) == 2
    assert out.result is Result.RELINQUISHED and out.steps == ["lifted our suspension"]


def test_after_a_clean_up_a_release_that_needs_nothing_reports_the_clean_up(monkeypatch):
    ex, _, sw = make(monkeypatch, kube=Kube(healthy("203")), reports=(RELINQUISHED,))
    out = ex.settle(ours(), fresh=True)
    assert len(sw.runs) == 1
    assert out.result is Result.RELINQUISHED and out.row == plan.Row.LIVE_SUSPENDED_OWNED


@pytest.mark.parametrize("after", [
    None, waiting("204"), ours("205"),
], ids=["gone", "terminating", "outside-the-selector"])
def test_after_a_clean_up_a_release_gone_terminating_or_unselected_is_left(monkeypatch, after):
    opts: dict = {}
    listed = ours()
    if after is not None and after["metadata"]["resourceVersion"] == "205":
        opts["selector"] = parse("team=a")
        listed["metadata"]["labels"] = {"team": "a"}
    ex, _, sw = make(monkeypatch, kube=Kube(after), reports=(RELINQUISHED, RELINQUISHED),
                     **opts)
    out = ex.settle(listed, fresh=True)
    assert len(sw.runs) == 1 and out.result is Result.RELINQUISHED


def test_after_a_clean_up_a_release_a_controller_now_covers_is_left(monkeypatch):
    calls: list[str | None] = []

    def check(obj):
        calls.append(rv(obj))
        return None if len(calls) == 1 else Covered("l", "covered")
    ex, _, sw = make(monkeypatch, kube=Kube(stuck("202")), covered=check,
                     reports=(RELINQUISHED, RECOVERED))
    out = ex.settle(ours(), fresh=True)
    assert calls == ["200", "202"]
    assert len(sw.runs) == 1 and out.result is Result.RELINQUISHED and out.controller == ""


@pytest.mark.parametrize("opts, kube_dry_run", [
    ({"dry_run_client": True}, False), ({}, True),
])
def test_a_dry_run_does_not_decide_again_after_a_clean_up(monkeypatch, opts, kube_dry_run):
    ex, _, sw = make(monkeypatch, kube=Kube(dry_run=kube_dry_run), reports=(RELINQUISHED,),
                     **opts)
    out = ex.settle(ours(), fresh=True)
    assert len(sw.runs) == 1 and out.result is Result.RELINQUISHED
    assert ex.kube.got == []  # type: ignore[attr-defined]


def test_a_fence_removed_is_a_clean_up_too(monkeypatch):
    ex, _, sw = make(monkeypatch, kube=Kube(stuck("202")),
                     reports=(Report(Ending(Result.FENCE_REMOVED)), RECOVERED))
    out = ex.settle(hr(finalizers=[C.FENCE]), fresh=True)
    assert len(sw.runs) == 2 and out.result is Result.RECOVERED


def test_an_ending_that_is_no_clean_up_is_final(monkeypatch):
    ex, _, sw = make(monkeypatch, kube=Kube(stuck("202")), reports=(RECOVERED, RECOVERED))
    ex.settle(stuck(), fresh=True)
    assert len(sw.runs) == 1


def test_settle_passes_at_most_max_passes(monkeypatch):
    kube = Kube(*[ours(str(210 + i)) for i in range(MAX_PASSES + 2)])
    ex, _, sw = make(monkeypatch, kube=kube, reports=(RELINQUISHED,) * (MAX_PASSES + 2))
    out = ex.settle(ours(), fresh=True)
    assert len(sw.runs) == MAX_PASSES == 3
    assert out.result is Result.RELINQUISHED
    assert out.steps == ["lifted our suspension"] * MAX_PASSES


def test_a_read_that_fails_fails_the_settle(monkeypatch):
    ex, _, sw = make(monkeypatch, KubeError(503, "ServiceUnavailable", "apiserver down"))
    out = ex.settle(stuck())
    assert out == Outcome(NS, NAME, Result.FAILED, "apiserver down", failed=True)


def test_a_re_read_after_a_clean_up_that_fails_fails_the_settle(monkeypatch):
    ex, _, _ = make(monkeypatch, kube=Kube(KubeError(500, "InternalError", "etcd down")),
                    reports=(RELINQUISHED,))
    out = ex.settle(ours(), fresh=True)
    assert (out.result, out.detail, out.failed) == (Result.FAILED, "etcd down", True)


# -- the wiring -------------------------------------------------------------------------------


def test_the_executor_hands_its_primitives_to_its_callers():
    ex = Executor(Kube(), clock=lambda: NOW)  # type: ignore[arg-type]
    assert ex.retry_on_conflict == ex.prims.retry_on_conflict
    assert ex.relinquish == ex.prims.relinquish
    assert ex.remove_fence == ex.prims.remove_fence
    assert ex.lift_sole_suspension == ex.prims.lift_sole_suspension
    assert ex.opt == Options() and not ex.recorder.enabled
    assert ex.remotes.local is ex.kube and ex.prims.remotes is ex.remotes


def test_the_executor_wires_one_client_options_clock_and_stop_flag_through():
    kube, remotes, recorder, opt = Kube(), object(), object(), Options(allow_recover=False)

    def clock():
        return NOW

    def stop():
        return False

    ex = Executor(kube, recorder, options=opt, clock=clock, should_stop=stop,  # type: ignore
                  remotes=remotes)  # type: ignore[arg-type]
    assert (ex.kube, ex.remotes, ex.recorder, ex.opt, ex.clock, ex.should_stop) == (
        kube, remotes, recorder, opt, clock, stop)
    p = ex.prims
    assert (p.kube, p.remotes, p.recorder, p.opt, p.clock) == (kube, remotes, recorder, opt, clock)
    h = ex.handshake
    assert (h.kube, h.opt, h.should_stop, h.fresh) == (kube, opt, stop, p.fresh)
    sw = ex.switch
    assert (sw.kube, sw.prims, sw.recorder, sw.opt) == (kube, p, recorder, opt)
    rec = sw.recover
    assert (rec.kube, rec.prims, rec.handshake, rec.recorder, rec.opt, rec.should_stop) == (
        kube, p, h, recorder, opt, stop)
