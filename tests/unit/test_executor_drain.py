"""The executor's drain loop (executor/drain.py) on its own, with a fake clock, a fake
executor whose ``reconcile`` follows a script, and a scripted ``held()``: what it reports
(held, passes, done, stopped), whom it asks and tells (reconcile, the hooks), and when it
sleeps, at each edge of the deadline.

serve's Drainer wraps this loop (tests/unit/test_serve_drain.py); ``release-fence
--wait-uninstall`` runs it through verbs/release_fence.py."""

from __future__ import annotations

import time

import pytest

from kubectl_flux_plunger.core.plan import Row
from kubectl_flux_plunger.executor import Outcome, Result
from kubectl_flux_plunger.executor.drain import DONE, Drain, DrainReport, released
from kubectl_flux_plunger.kube import KubeError

from .fakes import Clock

pytestmark = pytest.mark.unit

ROWS = frozenset({Row.TERMINATING_FENCED_WAITING})


class Executor:
    """``reconcile`` answers each key's next scripted step (a Result, or a KubeError to
    raise; the last repeats) and takes ``cost`` seconds of the clock."""

    def __init__(self, clock: Clock, steps: dict[str, list], cost: float = 0.0) -> None:
        self.clock, self.steps, self.cost = clock, steps, cost
        self.calls: list[tuple[str, str, object, float]] = []

    def reconcile(self, namespace: str, name: str, only_rows=None) -> Outcome:
        self.calls.append((namespace, name, only_rows, self.clock()))
        self.clock.now += self.cost
        key = f"{namespace}/{name}"
        script = self.steps[key]
        step = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(step, Exception):
            raise step
        return Outcome(namespace, name, Result(step), f"{step} (scripted)")

    @property
    def keys(self) -> list[str]:
        return [f"{ns}/{name}" for ns, name, _, _ in self.calls]


class Held:
    """``held()``: answers the scripted lists in order (the last repeats); a KubeError in
    the script is raised instead."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.asked: list[float] = []
        self.clock: Clock | None = None

    def __call__(self) -> list[str]:
        if self.clock is not None:
            self.asked.append(self.clock())
        else:
            self.asked.append(-1.0)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return list(answer)


def unavailable() -> KubeError:
    return KubeError(503, "ServiceUnavailable", "the server is currently unable")


def drain(clock: Clock, executor: Executor, poll: float = 1.0) -> Drain:
    return Drain(executor, poll=poll, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]


def watched(held: Held, clock: Clock) -> Held:
    held.clock = clock
    return held


# -- the defaults ---------------------------------------------------------------------------


def test_by_default_it_polls_every_second_on_the_real_clock():
    d = Drain(Executor(Clock(), {}))  # type: ignore[arg-type]
    assert d.poll == 1.0
    assert d.clock is time.monotonic and d.sleep is time.sleep


def test_the_default_poll_is_one_second_between_passes():
    clock = Clock()
    ex = Executor(clock, {"apps/web": ["waiting", "fence-removed"]})
    d = Drain(ex, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    report = d.run(Held(["apps/web"], ["apps/web"], []), 30)
    assert clock.slept == [1.0]
    assert report == DrainReport(held=0, passes=3, done=True, stopped=False)


def test_the_default_settled_test_is_the_fence_gone():
    assert DONE == {Result.FENCE_REMOVED, Result.GONE}
    for result in Result:
        assert released(Outcome("apps", "web", result, "")) is (result in DONE)


def test_a_report_is_not_stopped_unless_said():
    assert DrainReport(3, 2, False).stopped is False


# -- nothing held, everything settled -------------------------------------------------------


def test_nothing_held_ends_at_the_first_look_done():
    clock = Clock()
    ex = Executor(clock, {})
    held = Held([])
    report = drain(clock, ex).run(held, 30)
    assert report == DrainReport(held=0, passes=1, done=True, stopped=False)
    assert ex.calls == [] and clock.slept == [] and len(held.asked) == 1


def test_a_pass_that_settles_everything_looks_again_at_once():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["fence-removed"], "ops/b": ["gone"]})
    told: list[tuple[str, Result]] = []
    report = drain(clock, ex).run(
        Held(["apps/a", "ops/b"], []), 30, only_rows=ROWS,
        on_outcome=lambda key, out: told.append((key, out.result)),
    )
    assert report == DrainReport(held=0, passes=2, done=True, stopped=False)
    assert ex.calls == [("apps", "a", ROWS, 0.0), ("ops", "b", ROWS, 0.0)]
    assert told == [("apps/a", Result.FENCE_REMOVED), ("ops/b", Result.GONE)]
    assert clock.slept == []


def test_without_only_rows_the_executor_is_not_limited():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["gone"]})
    drain(clock, ex).run(Held(["apps/a"], []), 30)
    assert ex.calls == [("apps", "a", None, 0.0)]


def test_the_key_splits_at_the_first_slash_only():
    clock = Clock()
    ex = Executor(clock, {"apps/a/b": ["gone"]})
    drain(clock, ex).run(Held(["apps/a/b"], []), 30)
    assert [(ns, name) for ns, name, _, _ in ex.calls] == [("apps", "a/b")]


def test_a_pass_with_one_release_unsettled_waits_one_poll_before_the_next():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["fence-removed"], "apps/b": ["waiting", "fence-removed"]})
    held = watched(Held(["apps/a", "apps/b"], ["apps/b"], []), clock)
    report = drain(clock, ex, poll=2.5).run(held, 30)
    assert report == DrainReport(held=0, passes=3, done=True, stopped=False)
    assert clock.slept == [2.5]
    assert held.asked == [0.0, 2.5, 2.5]  # after the settling pass: at once
    assert ex.keys == ["apps/a", "apps/b", "apps/b"]


def test_a_caller_settled_test_decides_what_ends_a_pass():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["unchanged"]})
    held = Held(["apps/a"], [])
    unchanged = lambda out: out.result == Result.UNCHANGED
    report = drain(clock, ex).run(held, 30, settled=unchanged)
    assert report == DrainReport(held=0, passes=2, done=True, stopped=False)
    assert clock.slept == []
    # by the default test, unchanged is not settled: it waits a poll
    clock2 = Clock()
    ex2 = Executor(clock2, {"apps/a": ["unchanged"]})
    assert drain(clock2, ex2).run(Held(["apps/a"], []), 30).done
    assert clock2.slept == [1.0]


# -- the caller stops us --------------------------------------------------------------------


def test_told_to_stop_before_looking_it_never_looks():
    clock = Clock()
    ex = Executor(clock, {})
    held = Held(["apps/a"])
    report = drain(clock, ex).run(held, 30, still_going=lambda: False)
    assert report == DrainReport(held=-1, passes=0, done=False, stopped=True)
    assert held.asked == [] and ex.calls == []


def test_told_to_stop_mid_pass_it_leaves_the_rest():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["relinquished"], "apps/b": ["relinquished"]})
    going = iter([True, True, False])
    report = drain(clock, ex).run(Held(["apps/a", "apps/b"]), 30, still_going=lambda: next(going))
    assert report == DrainReport(held=2, passes=1, done=False, stopped=True)
    assert ex.keys == ["apps/a"] and clock.slept == []


def test_told_to_stop_between_passes_it_reports_the_last_count():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["waiting"], "apps/b": ["waiting"], "apps/c": ["waiting"]})
    going = iter([True, True, True, True, False])
    report = drain(clock, ex).run(
        Held(["apps/a", "apps/b", "apps/c"]), 30, still_going=lambda: next(going)
    )
    assert report == DrainReport(held=3, passes=1, done=False, stopped=True)
    assert clock.slept == [1.0]


# -- failures -------------------------------------------------------------------------------


def test_a_failing_look_is_told_and_retried_after_a_poll():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["gone"]})
    failure = unavailable()
    errors: list[KubeError] = []
    held = watched(Held(failure, ["apps/a"], []), clock)
    report = drain(clock, ex, poll=2.0).run(held, 30, on_list_error=errors.append)
    assert report == DrainReport(held=0, passes=2, done=True, stopped=False)
    assert errors == [failure]
    assert held.asked == [0.0, 2.0, 2.0] and clock.slept == [2.0]


def test_a_look_failing_until_the_deadline_never_counted():
    clock = Clock()
    errors: list[KubeError] = []
    held = watched(Held(unavailable()), clock)
    report = drain(clock, Executor(clock, {}), poll=2.0).run(held, 5, on_list_error=errors.append)
    assert report == DrainReport(held=-1, passes=0, done=False, stopped=False)
    assert clock.slept == [2.0, 2.0, 1.0]  # the last wait ends at the deadline
    assert held.asked == [0.0, 2.0, 4.0] and len(errors) == 3


def test_a_look_failing_after_a_pass_keeps_the_last_count():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["waiting"], "apps/b": ["waiting"]})
    held = watched(Held(["apps/a", "apps/b"], unavailable()), clock)
    report = drain(clock, ex, poll=2.0).run(held, 4)
    assert report == DrainReport(held=2, passes=1, done=False, stopped=False)
    assert held.asked == [0.0, 2.0] and clock.slept == [2.0, 2.0]


def test_a_look_failing_exactly_at_the_deadline_does_not_sleep():
    clock = Clock()

    def held() -> list[str]:
        clock.now = 3.0  # the LIST took until the deadline
        raise unavailable()

    report = drain(clock, Executor(clock, {})).run(held, 3)
    assert report == DrainReport(held=-1, passes=0, done=False, stopped=False)
    assert clock.slept == []


def test_a_failing_reconcile_is_told_the_pass_goes_on_and_is_not_settled():
    clock = Clock()
    failure = KubeError(409, "Conflict", "the object has been modified")
    ex = Executor(clock, {"apps/a": [failure, "fence-removed"], "apps/b": ["fence-removed"]})
    errors: list[tuple[str, KubeError]] = []
    told: list[str] = []
    report = drain(clock, ex).run(
        Held(["apps/a", "apps/b"], ["apps/a"], []), 30,
        on_error=lambda key, exc: errors.append((key, exc)),
        on_outcome=lambda key, out: told.append(key),
    )
    assert errors == [("apps/a", failure)]
    assert told == ["apps/b", "apps/a"]  # the failed one is not told as an outcome
    assert ex.keys == ["apps/a", "apps/b", "apps/a"]
    assert clock.slept == [1.0]  # the pass with the failure waits a poll
    assert report == DrainReport(held=0, passes=3, done=True, stopped=False)


def test_a_failing_last_reconcile_still_waits_a_poll():
    clock = Clock()
    failure = KubeError(409, "Conflict", "the object has been modified")
    ex = Executor(clock, {"apps/a": ["gone"], "apps/b": [failure, "gone"]})
    report = drain(clock, ex).run(Held(["apps/a", "apps/b"], ["apps/b"], []), 30)
    assert clock.slept == [1.0]
    assert report == DrainReport(held=0, passes=3, done=True, stopped=False)


# -- the deadline ---------------------------------------------------------------------------


def test_the_deadline_between_passes_ends_with_one_last_look():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["waiting"], "apps/b": ["waiting"], "apps/c": ["waiting"]})
    held = watched(Held(["apps/a", "apps/b", "apps/c"]), clock)
    report = drain(clock, ex, poll=2.0).run(held, 5)
    assert clock.slept == [2.0, 2.0, 1.0]
    assert [t for *_, t in ex.calls] == [0.0] * 3 + [2.0] * 3 + [4.0] * 3
    assert held.asked == [0.0, 2.0, 4.0, 5.0]  # the last look reports a current count
    assert report == DrainReport(held=3, passes=3, done=False, stopped=False)


def test_the_last_look_finding_nothing_held_is_done():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["waiting"]})
    held = watched(Held(["apps/a"], ["apps/a"], []), clock)
    report = drain(clock, ex, poll=2.0).run(held, 3)
    assert held.asked == [0.0, 2.0, 3.0]
    assert report == DrainReport(held=0, passes=2, done=True, stopped=False)


def test_the_last_look_reports_how_many_are_still_held():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["waiting"]})
    held = watched(Held(["apps/a"], ["apps/a"], ["apps/a", "apps/b"], []), clock)
    report = drain(clock, ex, poll=2.0).run(held, 3)
    assert report == DrainReport(held=2, passes=2, done=False, stopped=False)


def test_a_failing_last_look_reports_the_count_of_the_last_pass():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["waiting"], "apps/b": ["waiting"]})
    held = watched(Held(["apps/a", "apps/b"], unavailable()), clock)
    report = drain(clock, ex, poll=2.0).run(held, 1)
    assert held.asked == [0.0, 1.0]
    assert report == DrainReport(held=2, passes=1, done=False, stopped=False)


def test_a_wait_ending_exactly_at_the_deadline_is_the_end():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["waiting"]})
    held = watched(Held(["apps/a"], []), clock)
    report = drain(clock, ex, poll=2.0).run(held, 2)
    assert clock.slept == [2.0]
    assert len(ex.calls) == 1  # no second pass at the deadline
    assert report == DrainReport(held=0, passes=1, done=True, stopped=False)


def test_the_deadline_interrupts_a_pass():
    clock = Clock()
    ex = Executor(clock, {f"apps/r{i}": ["waiting"] for i in range(4)}, cost=2.0)
    held = watched(Held([f"apps/r{i}" for i in range(4)]), clock)
    report = drain(clock, ex).run(held, 3)
    assert ex.keys == ["apps/r0", "apps/r1"]  # r2 would start past the deadline
    assert held.asked == [0.0]  # ended by the pass: no last look
    assert report == DrainReport(held=4, passes=1, done=False, stopped=False)


def test_a_pass_reaching_the_deadline_exactly_starts_no_further_release():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["gone"], "apps/b": ["gone"]}, cost=2.0)
    held = watched(Held(["apps/a", "apps/b"], []), clock)
    report = drain(clock, ex).run(held, 2)
    assert ex.keys == ["apps/a"]
    assert held.asked == [0.0]
    assert clock.slept == []
    assert report == DrainReport(held=2, passes=1, done=False, stopped=False)


def test_a_settled_pass_ending_at_the_deadline_does_not_look_again():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["gone"]}, cost=2.0)
    held = watched(Held(["apps/a"], []), clock)
    report = drain(clock, ex).run(held, 2)
    assert held.asked == [0.0] and clock.slept == []
    assert report == DrainReport(held=1, passes=1, done=False, stopped=False)


def test_a_settled_pass_just_before_the_deadline_looks_again():
    clock = Clock()
    ex = Executor(clock, {"apps/a": ["gone"]}, cost=1.5)
    held = watched(Held(["apps/a"], []), clock)
    report = drain(clock, ex).run(held, 2)
    assert held.asked == [0.0, 1.5]
    assert report == DrainReport(held=0, passes=2, done=True, stopped=False)


def test_the_deadline_counts_from_the_start_of_the_run():
    clock = Clock()
    clock.now = 100.0
    ex = Executor(clock, {"apps/a": ["waiting"]})
    held = watched(Held(["apps/a"]), clock)
    report = drain(clock, ex, poll=2.0).run(held, 3)
    assert clock.slept == [2.0, 1.0]
    assert [t for *_, t in ex.calls] == [100.0, 102.0]
    assert report == DrainReport(held=1, passes=2, done=False, stopped=False)
