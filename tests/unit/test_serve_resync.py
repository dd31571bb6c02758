"""serve's catch-all (serve/resync.py, issue 58): the keys the whole predicate selected at
their last sight, kept from the syncs and the watch events (``Candidates``), queued again
every ``--resync-period`` with no stream (``CatchAll``) — what the periodic re-sync's
watch-list guaranteed, now without ending the watch: a release the event filter passed over
(Ready Unknown, awaiting helm-controller's retry, given up) is passed over again, a repaired
or deleted one is not, a LeftStuck entry a stale pass left is dropped.  Scripted streams
(tests/unit/test_serve_watch.py's), no cluster."""

from __future__ import annotations

import logging
import threading

import pytest

from kubectl_flux_plunger.core.plan import Row, Stuck
from kubectl_flux_plunger.executor import Outcome, Result
from kubectl_flux_plunger.serve.metrics import Metrics, collector
from kubectl_flux_plunger.serve.queue import WorkQueue
from kubectl_flux_plunger.serve.resync import Candidates, CatchAll

from .test_serve_watch import awaiting, end_bookmark, event, mid_action, queued, release, run_wl

pytestmark = pytest.mark.unit


def test_candidates_follow_the_sync_and_every_event():
    streams = [[event("ADDED", release("a", "5", stuck=True)),
                event("ADDED", release("b", "6")),
                event("ADDED", mid_action("m", "7")),
                end_bookmark("10"),
                event("MODIFIED", release("a", "11")),                 # repaired
                event("MODIFIED", release("b", "12", stuck=True)),     # stuck now
                event("MODIFIED", awaiting("w", "13")),               # filtered, a candidate
                event("ADDED", release("f", "14", fenced=True)),
                event("DELETED", release("f", "15", fenced=True))]]
    w, _, _, queue = run_wl([], streams)
    assert w.candidates.snapshot() == {"apps/b": "12", "apps/m": "7", "apps/w": "13"}
    # what the events queued: the sync's a and m, then b and f; not w (awaiting a retry)
    assert queued(queue) == ["apps/a", "apps/m", "apps/b", "apps/f"]


def test_a_pass_queues_every_candidate_the_event_filter_passed_over_and_nothing_else():
    streams = [[end_bookmark("10"),
                event("MODIFIED", mid_action("m", "11")),
                event("MODIFIED", awaiting("w", "12")),
                event("MODIFIED", release("ok", "13"))]]
    metrics = Metrics()
    w, _, _, queue = run_wl([], streams, metrics=metrics)
    assert queued(queue) == []                    # the filter: helm-controller writes again
    assert w.catch_all.pass_once() == 2           # ... should it never, the catch-all
    assert sorted(queued(queue)) == ["apps/m", "apps/w"]
    snap = metrics.snapshot()
    assert snap["catch_alls"] == 1 and snap["caught"] == 2
    assert snap["relists"] == {"initial": 1}      # no stream for it
    families = {s.name: s.value for f in collector(metrics).collect() for s in f.samples}
    assert families["flux_plunger_catch_all_passes_total"] == 1
    assert families["flux_plunger_catch_all_queued_total"] == 2


def test_nothing_is_queued_before_the_first_sync():
    candidates = Candidates()
    candidates.saw("apps/a", True, "5")
    queue = WorkQueue()
    catch_all = CatchAll(candidates, queue, period=1, synced=threading.Event())
    assert catch_all.pass_once() == 0
    assert queued(queue) == []


def test_a_candidate_a_pass_has_just_settled_at_its_state_is_folded_a_newer_one_is_not():
    """As a sync's item was: the state a pass settled the release at (the watch has not
    delivered that pass's writes yet) is one it judged."""
    queue = WorkQueue()
    queue.caught_up("10")
    for key in ("apps/a", "apps/b"):
        queue.add(key, "9")
        assert queue.get(timeout=0) == key
        queue.done(key, settled="20")             # settled ahead of the watch
    candidates = Candidates()
    candidates.saw("apps/a", True, "20")          # the state the pass settled at
    candidates.saw("apps/b", True, "21")          # changed since
    synced = threading.Event()
    synced.set()
    assert CatchAll(candidates, queue, period=1, synced=synced).pass_once() == 2
    assert queued(queue) == ["apps/b"]


def test_a_live_change_after_a_pass_is_taken_before_the_candidates_it_queued():
    """However many candidates a pass queued, the next free worker takes a live change."""
    candidates = Candidates()
    for name in ("c1", "c2", "c3"):
        candidates.saw(f"apps/{name}", True, "5")
    synced = threading.Event()
    synced.set()
    queue = WorkQueue()
    assert CatchAll(candidates, queue, period=1, synced=synced).pass_once() == 3
    queue.add("apps/live", "9")                   # the watch: a release just became stuck
    assert queued(queue) == ["apps/live", "apps/c1", "apps/c2", "apps/c3"]


def test_a_release_given_up_and_announced_is_passed_over_once_more_by_the_catch_all():
    """issue 57: the watch queues no pass for it; a sync passed over it once more (its
    Event's count goes up, folded) — the catch-all does the same."""
    from .test_serve_left_stuck import given_up_release

    metrics = Metrics()
    w, _, _, queue = run_wl([], [[event("ADDED", given_up_release("5")), end_bookmark("10")]],
                            metrics=metrics)
    assert queued(queue) == ["apps/g"]            # the sync's pass: it announces, counted
    metrics.observe(Outcome("apps", "g", Result.SKIPPED, "", row=Row.LIVE_STUCK,
                            left_stuck=Stuck.GIVEN_UP))
    w._seen(given_up_release("11"))
    assert queued(queue) == []                    # helm-controller's retry: no pass
    assert w.catch_all.pass_once() == 1
    assert queued(queue) == ["apps/g"]


def test_a_pass_keeps_left_stuck_to_the_candidates():
    """A pass that read the release before the watch saw it repaired counts it after the
    watch forgot it: nothing passes over a repaired release again, the catch-all drops it."""
    metrics = Metrics()
    w, _, _, _ = run_wl([], [[event("ADDED", release("a", "5", stuck=True)),
                              event("ADDED", release("b", "6", stuck=True)),
                              end_bookmark("10"),
                              event("MODIFIED", release("a", "11"))]], metrics=metrics)
    for name in ("a", "b"):                       # a: the stale pass, after the watch
        metrics.observe(Outcome("apps", name, Result.SKIPPED, "", row=Row.LIVE_STUCK,
                                left_stuck=Stuck.CORRUPT_PAYLOAD))
    assert metrics.left_stuck.counts()[Stuck.CORRUPT_PAYLOAD] == 2
    w.catch_all.pass_once()
    assert metrics.left_stuck.cause("apps/a") is None
    assert metrics.left_stuck.cause("apps/b") is Stuck.CORRUPT_PAYLOAD


def test_a_410_sync_replaces_the_candidates():
    streams = [[event("ADDED", release("a", "5", stuck=True)), end_bookmark("10"),
                event("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                                "message": "too old"})],
               [event("ADDED", release("b", "20", stuck=True)), end_bookmark("30")]]
    metrics = Metrics()
    w, script, _, _ = run_wl([], streams, metrics=metrics)
    assert script.calls[:2] == [("WATCH-LIST",), ("WATCH-LIST",)]
    assert metrics.snapshot()["relists"] == {"initial": 1, "expired": 1}
    assert w.candidates.snapshot() == {"apps/b": "20"}   # a went while the watch was down


def test_the_loop_passes_every_period_survives_a_failure_and_ends_with_stop(caplog):
    candidates = Candidates()
    candidates.saw("apps/a", True, "5")
    synced, stop = threading.Event(), threading.Event()
    synced.set()
    passes = threading.Semaphore(0)

    class Flaky(WorkQueue):
        calls = 0

        def add_behind(self, key, resource_version=None):
            Flaky.calls += 1
            passes.release()
            if Flaky.calls == 1:
                raise RuntimeError("boom")
            super().add_behind(key, resource_version)

    queue = Flaky()
    thread = threading.Thread(target=CatchAll(candidates, queue, period=0.01,
                                              synced=synced).run, args=(stop,))
    with caplog.at_level(logging.ERROR, logger="kubectl_flux_plunger.serve.resync"):
        thread.start()
        for _ in range(3):
            assert passes.acquire(timeout=30), "the catch-all did not pass again"
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert "catch-all: unexpected failure" in caplog.text
    assert queued(queue) == ["apps/a"]
