"""serve's worker between the executor and the queue, on a stand-in executor: where a pass
settled the release reaches the queue, and what is queued again after which outcome."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kubectl_flux_plunger.executor import Outcome, Result
from kubectl_flux_plunger.core.plan import Row
from kubectl_flux_plunger.serve.controller import Controller, ServeConfig

pytestmark = pytest.mark.unit


class Passes:
    """Executor stand-in: each reconcile returns the next scripted Outcome."""

    def __init__(self, *outcomes: Outcome) -> None:
        self.outcomes = list(outcomes)

    def reconcile(self, namespace: str, name: str) -> Outcome:
        return self.outcomes.pop(0)


def controller(*outcomes: Outcome) -> Controller:
    kube = SimpleNamespace(stats=SimpleNamespace(), dry_run=False, request_timeout=30.0)
    c = Controller(kube, ServeConfig(leader_elect=False, metrics_addr=None,  # type: ignore[arg-type]
                                     probe_addr=None, backoff_base=1.0))
    c.executor = Passes(*outcomes)  # type: ignore[assignment]
    return c


def one_pass(c: Controller) -> str | None:
    key = c.queue.get(timeout=0)
    assert key == "apps/demo"
    settled = None
    try:
        settled = c._process(key)
    finally:
        c.queue.done(key, settled)
    return settled


def outcome(result: Result, row: Row, **kw) -> Outcome:
    return Outcome("apps", "demo", result, "", row=row, **kw)


def test_a_recovery_settles_the_release_where_its_relinquish_left_it():
    c = controller(outcome(Result.RECOVERED, Row.LIVE_STUCK, revision=2, settled="254"))
    c.queue.add("apps/demo", "248")
    c.queue.add("apps/demo", "251")          # queued while it is taken: stays one key
    assert one_pass(c) == "254"
    c.queue.add("apps/demo", "250")          # its own writes' events, delivered late
    c.queue.add("apps/demo", "254")
    assert c.queue.get(timeout=0) is None and c.queue.skipped == 2


@pytest.mark.parametrize("row", [Row.LIVE_SUSPENDED_OWNED, Row.LIVE_FENCED])
@pytest.mark.parametrize("result", [Result.RELINQUISHED, Result.FENCE_REMOVED])
def test_lifting_a_leftover_on_a_live_release_decides_again_at_once(row, result):
    c = controller(outcome(result, row, settled="300"),
                   outcome(Result.RECOVERED, Row.LIVE_STUCK, settled="310"))
    c.queue.add("apps/demo", "290")
    assert one_pass(c) == "300"
    c.queue.add("apps/demo", "300")          # its own write's event: judged, not a third pass
    assert one_pass(c) == "310"              # the release was still stuck: recovered
    assert c.queue.get(timeout=0) is None


@pytest.mark.parametrize("row", [Row.TERMINATING_FENCED_UNINSTALLED,
                                 Row.LIVE_SUSPENDED_FOREIGN])
def test_removing_a_fence_elsewhere_needs_no_second_pass(row):
    c = controller(outcome(Result.FENCE_REMOVED, row, settled="300"))
    c.queue.add("apps/demo", "290")
    assert one_pass(c) == "300"
    assert c.queue.get(timeout=0) is None


@pytest.mark.parametrize("ending", [dict(result=Result.FAILED, failed=True),
                                    dict(result=Result.DEFERRED)])
def test_a_failed_or_deferred_pass_backs_off_and_settles_nothing(ending):
    ending = dict(ending)                    # the parameter itself stays whole: rerunnable
    result = ending.pop("result")
    c = controller(outcome(result, Row.LIVE_STUCK, **ending))
    c.queue.add("apps/demo", "290")
    assert one_pass(c) is None
    assert c.queue.failures("apps/demo") == 1 and c.queue.waiting() == 1


def test_a_release_backing_off_is_queued_again_when_its_wait_is_out():
    """The recovery budget's backoff (issue 57): a deferral with its own requeue is armed
    for then, not rate-limited (no pass every second while the wait runs)."""
    c = controller(outcome(Result.DEFERRED, Row.LIVE_STUCK, requeue_after=45.0))
    c.queue.add("apps/demo")
    assert one_pass(c) is None
    assert c.queue.failures("apps/demo") == 0          # not a failure backoff
    assert c.queue.get(timeout=0) is None              # nothing due before the wait is out
    due = c.queue._due["apps/demo"]
    assert 44.0 < due - c.queue._clock() <= 45.0
