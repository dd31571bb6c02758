"""The watcher on scripted LIST pages and event streams, no cluster: what it enqueues, the
resourceVersion it resumes from after a BOOKMARK or a dropped connection, a 410 (ERROR event
or HTTP status) turning into a fresh LIST, a malformed line, and the fenced-release count —
on the paged LIST (a server without watch-lists: ``Script.watch_list`` is False) — and the
sync as one watch-list (``WatchListScript``): each initial event queued as it is decoded,
the initial-events-end bookmark as the sync, the fallbacks to the LIST.

The apiserver tier runs it against a real watch (tests/apiserver/test_serve_watch.py)."""

from __future__ import annotations

import json

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import KubeError, WatchLists
from kubectl_flux_plunger.kube.read import WATCH_LIST_PAUSE
from kubectl_flux_plunger.core.scope import Scope
from kubectl_flux_plunger.serve.metrics import Metrics
from kubectl_flux_plunger.serve.queue import WorkQueue
from kubectl_flux_plunger.serve.watch import BACKOFF_BASE, Watcher

from .builders import OURS, WatchListOf, hr, ready_condition, stuck_condition

pytestmark = pytest.mark.unit


def release(name: str, rv: str, *, stuck: bool = False, fenced: bool = False) -> dict:
    return hr(name, namespace="apps", rv=rv,
              conditions=[stuck_condition() if stuck else ready_condition()],
              finalizers=[C.FENCE] if fenced else [])


def event(kind: str, obj: dict) -> dict:
    return {"type": kind, "object": obj}


def bookmark(rv: str) -> dict:
    return event("BOOKMARK", {"kind": "HelmRelease", "metadata": {"resourceVersion": rv}})


def expired_event() -> dict:
    return event("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                           "message": "too old resource version: 5 (20)"})


class Stop:
    """The watcher's stop event: records each backoff wait instead of sleeping, and is set
    once the script has run out."""

    def __init__(self) -> None:
        self.set_ = False
        self.waits: list[float] = []

    def is_set(self) -> bool:
        return self.set_

    def set(self) -> None:
        self.set_ = True

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        if len(self.waits) > 20:  # a watcher failing in a loop: end the test, not hang it
            self.set_ = True
        return self.set_


class Script:
    """A kube stand-in for a server without watch-lists: each LIST answers the next scripted
    pages, each watch request replays the next scripted stream (a list of events, possibly
    ending in an exception)."""

    watch_list = False

    def __init__(self, stop: Stop, lists: list, watches: list) -> None:
        self.stop, self.lists, self.watches = stop, list(lists), list(watches)
        self.calls: list[tuple] = []

    def iter_hr_pages(self, namespace, selector, limit):
        self.calls.append(("LIST",))
        if not self.lists:
            self.stop.set()
            return
        yield from self.lists.pop(0)

    def watch_hrs(self, namespace, selector, rv, timeout_seconds=300):
        self.calls.append(("WATCH", rv))
        if not self.watches:
            self.stop.set()
            return
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


def run(lists: list, watches: list, **kw) -> tuple[Watcher, Script, Stop, WorkQueue]:
    stop = Stop()
    script = Script(stop, lists, watches)
    queue = WorkQueue()
    w = Watcher(script, queue, Scope(), resync_period=3600, **kw)
    w.run(stop)  # type: ignore[arg-type]
    return w, script, stop, queue


def queued(queue: WorkQueue) -> list[str]:
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def test_the_list_enqueues_what_the_predicate_selects_and_the_watch_resumes_from_its_rv():
    pages = [([release("a", "5", stuck=True), release("b", "6")], "10"),
             ([release("c", "7", fenced=True)], "10")]
    w, script, _, queue = run([pages], [])
    assert script.calls[:2] == [("LIST",), ("WATCH", "10")]
    assert queued(queue) == ["apps/a", "apps/c"]      # b is healthy: not queued
    assert w.fences_held() == 1
    assert w.synced.is_set()


def test_events_enqueue_and_a_bookmark_only_moves_the_resource_version():
    stream = [event("ADDED", release("a", "11", stuck=True)),
              event("MODIFIED", release("b", "12")),       # healthy: not queued
              bookmark("15")]
    w, script, _, queue = run([[([], "10")]], [stream])
    assert script.calls == [("LIST",), ("WATCH", "10"), ("WATCH", "15")]
    assert queued(queue) == ["apps/a"]
    assert w.resource_version == "15"


def test_a_410_error_event_relists_instead_of_re_watching():
    metrics = Metrics()
    stream = [bookmark("12"), expired_event()]
    _, script, stop, queue = run([[([], "10")], [([release("a", "30", stuck=True)], "30")]],
                                 [stream], metrics=metrics)
    assert script.calls == [("LIST",), ("WATCH", "10"), ("LIST",), ("WATCH", "30")]
    assert queued(queue) == ["apps/a"]
    assert metrics.snapshot()["relists"] == {"initial": 1, "expired": 1}
    assert stop.waits == []                                 # no backoff for a 410


def test_a_410_status_relists_too():
    gone = KubeError(410, "Expired", "too old resource version")
    _, script, stop, _ = run([[([], "10")], [([], "40")]], [[gone]])
    assert script.calls == [("LIST",), ("WATCH", "10"), ("LIST",), ("WATCH", "40")]
    assert stop.waits == []


def test_a_dropped_connection_re_watches_from_the_last_rv_after_a_backoff():
    metrics = Metrics()
    drop = KubeError(0, "Unreachable", "watch interrupted: connection reset")
    streams = [[event("MODIFIED", release("a", "11", stuck=True)), drop],
               [drop],
               [event("MODIFIED", release("b", "13", stuck=True))]]
    _, script, stop, queue = run([[([], "10")]], streams, metrics=metrics)
    assert script.calls == [("LIST",), ("WATCH", "10"), ("WATCH", "11"), ("WATCH", "11"),
                            ("WATCH", "13")]                  # never a relist for a drop
    assert stop.waits == [BACKOFF_BASE, 2 * BACKOFF_BASE]    # exponential, reset by success
    assert queued(queue) == ["apps/a", "apps/b"]
    assert metrics.snapshot()["errors"] == 2
    assert metrics.snapshot()["relists"] == {"initial": 1}


def test_another_error_event_is_a_failure_that_re_watches():
    err = event("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError",
                          "message": "etcd: request timed out"})
    _, script, stop, _ = run([[([], "10")]], [[err]])
    assert script.calls == [("LIST",), ("WATCH", "10"), ("WATCH", "10")]
    assert stop.waits == [BACKOFF_BASE]


def test_a_malformed_line_relists_after_a_backoff():
    try:
        json.loads('{"type": "MODIFIED", "object": {')
    except ValueError as exc:
        malformed = exc                                      # what kube.watch_hrs raises
    _, script, stop, queue = run(
        [[([], "10")], [([release("a", "20", stuck=True)], "20")]],
        [[event("ADDED", release("z", "11")), malformed]])
    assert script.calls == [("LIST",), ("WATCH", "10"), ("LIST",), ("WATCH", "20")]
    assert stop.waits == [BACKOFF_BASE]
    assert queued(queue) == ["apps/a"]


def test_a_failing_first_list_is_retried_with_backoff_and_not_synced_before():
    down = KubeError(0, "Unreachable", "connection refused")

    class Failing(Script):
        def iter_hr_pages(self, namespace, selector, limit):
            if len(self.calls) < 2:
                self.calls.append(("LIST",))
                raise down
            return super().iter_hr_pages(namespace, selector, limit)

    stop = Stop()
    script = Failing(stop, [[([], "10")]], [])
    w = Watcher(script, WorkQueue(), Scope(), resync_period=3600)
    w.run(stop)  # type: ignore[arg-type]
    assert [c[0] for c in script.calls] == ["LIST", "LIST", "LIST", "WATCH"]
    assert stop.waits == [BACKOFF_BASE, 2 * BACKOFF_BASE]
    assert w.synced.is_set()


def test_deleted_and_unfenced_releases_leave_the_fenced_count():
    stream = [event("MODIFIED", release("b", "11")),                 # fence removed
              event("DELETED", release("c", "12", fenced=True)),     # deleted with it
              event("ADDED", release("d", "13", fenced=True))]
    pages = [([release("b", "5", fenced=True), release("c", "6", fenced=True)], "10")]
    w, _, _, queue = run([pages], [stream])
    assert w.fences_held() == 1                                    # d only
    assert queued(queue) == ["apps/b", "apps/c", "apps/d"]


def test_the_keys_the_drain_starts_from_are_the_fenced_and_the_suspended_by_us():
    def suspended(name: str, rv: str, managed: tuple) -> dict:
        return hr(name, namespace="apps", rv=rv, suspend=True, managed=[managed])

    foreign = ("velero", "Update", True)
    pages = [([release("a", "5", fenced=True), suspended("b", "6", OURS),
               suspended("c", "7", foreign), suspended("e", "8", OURS)], "10")]
    stream = [event("ADDED", suspended("d", "11", OURS)),          # suspended by us: held
              event("MODIFIED", release("b", "12")),               # resumed: let go
              event("DELETED", suspended("e", "13", OURS))]        # deleted: gone
    w, _, _, _ = run([pages], [stream])
    assert w.held_keys() == {"apps/a", "apps/d"}   # c: another manager's suspension
    assert w.fences_held() == 1


def test_a_relist_replaces_the_held_keys():
    pages = [([hr("b", namespace="apps", rv="6", suspend=True, managed=[OURS])], "10")]
    w, _, _, _ = run([pages, [([], "20")]], [[expired_event()]])
    assert w.held_keys() == set()


def test_a_deleted_release_is_not_enqueued():
    w, _, _, queue = run([[([], "10")]], [[event("DELETED", release("a", "11", stuck=True))]])
    assert queued(queue) == []
    assert w.resource_version == "11"


def mid_action(name: str, rv: str) -> dict:
    """Stuck, but helm-controller is running an action on it (Ready Unknown)."""
    return hr(name, namespace="apps", rv=rv, conditions=[
        {"type": "Ready", "status": "Unknown", "reason": "Progressing"},
        dict(stuck_condition(), type="Released")])


def awaiting(name: str, rv: str) -> dict:
    """Recovered; helm-controller has not attempted the new generation yet."""
    return hr(name, namespace="apps", rv=rv, conditions=[stuck_condition()], generation=3,
              last_attempted_generation=2, annotations={C.PROCESSED_ANNOTATION: "2"})


def test_events_helm_controller_writes_again_after_are_not_queued_but_listed_ones_are():
    pages = [([mid_action("listed-mid", "5"), awaiting("listed-awaiting", "6")], "10")]
    stream = [event("MODIFIED", mid_action("mid", "11")),
              event("MODIFIED", awaiting("awaiting", "12")),
              event("MODIFIED", release("stuck", "13", stuck=True))]
    _, _, _, queue = run([pages], [stream])
    # the LIST is the catch-all (helm-controller may never write again); an event of
    # a write after which helm-controller writes again is not worth a pass
    assert queued(queue) == ["apps/listed-mid", "apps/listed-awaiting", "apps/stuck"]


class Recording(WorkQueue):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def add(self, key, resource_version=None, *, listed=False):
        self.calls.append(("add", key, resource_version) + (("listed",) if listed else ()))
        super().add(key, resource_version, listed=listed)

    def relisting(self):
        self.calls.append(("relisting",))
        super().relisting()

    def caught_up(self, resource_version):
        self.calls.append(("caught_up", resource_version))
        super().caught_up(resource_version)


def test_watch_events_and_listed_items_reach_the_queue_with_their_resource_version():
    pages = [([release("a", "5", stuck=True), release("b", "6")], "10")]
    stream = [event("MODIFIED", release("a", "11", stuck=True)),
              event("MODIFIED", awaiting("a", "12")),
              event("DELETED", release("a", "13", stuck=True)),
              bookmark("15")]
    stop = Stop()
    queue = Recording()
    Watcher(Script(stop, [pages], [stream]), queue, Scope(),
            resync_period=3600).run(stop)  # type: ignore[arg-type]
    # the LIST is the catch-all: it queues what the whole predicate selects, with the
    # item's rv (a pass that settled it there or later has judged that state); it starts a
    # new stream, and its rv is how far that stream has got
    assert queue.calls == [("relisting",), ("add", "apps/a", "5", "listed"), ("caught_up", "10"),
                           ("add", "apps/a", "11"), ("caught_up", "11"),
                           ("caught_up", "12"), ("caught_up", "13"),
                           ("caught_up", "15")]


def test_a_change_a_finished_pass_already_judged_is_not_queued_again():
    """A pass (worker thread) ends after the LIST, settled at its relinquish's 12; the
    watch then delivers 11 (helm-controller's handshake, still suspended by us: wanted on
    its own) late, then 12 (the relinquish) and Ready True at 14."""
    queue = WorkQueue()
    stop = Stop()
    stream = [event("MODIFIED", hr("a", namespace="apps", rv="11", suspend=True,
                                   managed=[OURS], conditions=[stuck_condition()])),
              event("MODIFIED", awaiting("a", "12")),
              event("MODIFIED", release("a", "14"))]

    class PassEndsFirst(Script):
        def watch_hrs(self, namespace, selector, rv, timeout_seconds=300):
            if self.watches:
                queue.add("apps/a")
                assert queue.get(timeout=0) == "apps/a"
                queue.done("apps/a", settled="12")
            yield from super().watch_hrs(namespace, selector, rv, timeout_seconds)

    Watcher(PassEndsFirst(stop, [[([], "10")]], [stream]), queue, Scope(),
            resync_period=3600).run(stop)  # type: ignore[arg-type]
    assert queued(queue) == [] and queue.skipped == 1 and queue._settled == {}


# -- the sync as one watch-list --------------------------------------------------------


def end_bookmark(rv: str) -> dict:
    """The BOOKMARK that ends a watch-list's initial events."""
    return event("BOOKMARK", {"kind": "HelmRelease", "metadata": {
        "resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}}})


class WatchListScript(WatchListOf, Script):
    """A server with watch-lists: a watch request with ``send_initial_events`` is logged as
    ("WATCH-LIST",) and replays the next scripted stream like any watch; a callable in a
    stream is called when the watcher asks for the event after it (a probe of what the
    watcher did with the events before)."""

    def __init__(self, stop: Stop, lists: list, watches: list,
                 clock=lambda: 0.0) -> None:
        super().__init__(stop, lists, watches)
        self.watch_lists = WatchLists(clock=clock)

    def watch_hrs(self, namespace, selector, rv, timeout_seconds=300, *,
                  send_initial_events=False):
        assert send_initial_events == (rv == "")  # a watch-list starts from no rv
        self.calls.append(("WATCH-LIST",) if send_initial_events else ("WATCH", rv))
        if not self.watches:
            self.stop.set()
            return
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            if callable(item):
                item()
                continue
            yield item


def run_wl(lists: list, watches: list, queue: WorkQueue | None = None, **kw):
    stop = Stop()
    script = WatchListScript(stop, lists, watches)
    queue = queue if queue is not None else WorkQueue()
    kw.setdefault("resync_period", 3600)
    w = Watcher(script, queue, Scope(), **kw)
    w.run(stop)  # type: ignore[arg-type]
    return w, script, stop, queue


def test_a_watch_list_queues_each_initial_event_as_it_comes_and_is_synced_at_its_bookmark():
    seen: list[tuple] = []
    queue = WorkQueue()
    holder: list[Watcher] = []

    def probe() -> None:
        seen.append((queue.contains("apps/a"), holder[0].synced.is_set()))

    stream = [event("ADDED", release("a", "5", stuck=True)),
              probe,                                   # a queued, the sync not done
              event("ADDED", release("b", "6")),
              event("ADDED", release("c", "7", fenced=True)),
              end_bookmark("10"),
              probe,
              event("MODIFIED", release("d", "11", stuck=True))]

    class Capture(Watcher):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            holder.append(self)

    stop = Stop()
    script = WatchListScript(stop, [], [stream])
    w = Capture(script, queue, Scope(), resync_period=3600)
    w.run(stop)  # type: ignore[arg-type]
    assert seen == [(True, False), (True, True)]
    # one request for the sync and the watch; it resumes from the last event's rv
    assert script.calls == [("WATCH-LIST",), ("WATCH", "11")]
    assert queued(queue) == ["apps/a", "apps/c", "apps/d"]     # b is healthy
    assert w.fences_held() == 1 and w.synced.is_set()
    assert script.watch_list is True


def test_a_watch_list_hands_the_queue_what_a_list_would_and_its_bookmark_as_the_relist():
    stream = [event("ADDED", release("a", "5", stuck=True)),
              event("ADDED", release("b", "6")),
              end_bookmark("10"),
              event("MODIFIED", release("a", "11", stuck=True)),
              bookmark("15")]
    queue = Recording()
    run_wl([], [stream], queue)
    # initial events are the catch-all (with their rv, as LIST items); the end bookmark is
    # the LIST's rv; the stream goes on as the watch
    assert queue.calls == [("relisting",), ("add", "apps/a", "5", "listed"), ("caught_up", "10"),
                           ("add", "apps/a", "11"), ("caught_up", "11"),
                           ("caught_up", "15")]


def test_initial_events_get_the_whole_predicate_later_ones_the_event_filter():
    stream = [event("ADDED", mid_action("listed-mid", "5")),
              event("ADDED", awaiting("listed-awaiting", "6")),
              end_bookmark("10"),
              event("MODIFIED", mid_action("mid", "11")),
              event("MODIFIED", awaiting("awaiting", "12"))]
    _, _, _, queue = run_wl([], [stream])
    assert queued(queue) == ["apps/listed-mid", "apps/listed-awaiting"]


def test_the_held_keys_are_replaced_at_the_bookmark_not_before():
    held: list[set] = []
    holder: list[Watcher] = []
    first = [event("ADDED", release("old", "5", fenced=True)), end_bookmark("10"),
             expired_event()]
    second = [event("ADDED", release("new", "20", fenced=True)),
              lambda: held.append(holder[0].held_keys()),
              end_bookmark("30"),
              lambda: held.append(holder[0].held_keys())]

    class Capture(Watcher):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            holder.append(self)

    stop = Stop()
    Capture(WatchListScript(stop, [], [first, second]), WorkQueue(), Scope(),
            resync_period=3600).run(stop)  # type: ignore[arg-type]
    assert held == [{"apps/old"}, {"apps/new"}]


def test_a_410_after_the_sync_syncs_with_a_watch_list_again():
    metrics = Metrics()
    streams = [[end_bookmark("10"), bookmark("12"), expired_event()],
               [event("ADDED", release("a", "30", stuck=True)), end_bookmark("30")]]
    _, script, stop, queue = run_wl([], streams, metrics=metrics)
    assert script.calls == [("WATCH-LIST",), ("WATCH-LIST",), ("WATCH", "30")]
    assert queued(queue) == ["apps/a"]
    assert metrics.snapshot()["relists"] == {"initial": 1, "expired": 1}
    assert stop.waits == []                                 # no backoff for a 410


def test_a_410_on_a_later_watch_syncs_with_a_watch_list_too():
    gone = KubeError(410, "Expired", "too old resource version")
    streams = [[end_bookmark("10")], [gone], [end_bookmark("40")]]
    _, script, stop, _ = run_wl([], streams)
    assert script.calls == [("WATCH-LIST",), ("WATCH", "10"), ("WATCH-LIST",),
                            ("WATCH", "40")]
    assert stop.waits == []


@pytest.mark.parametrize("status", [422, 400])
def test_a_server_refusing_the_watch_list_is_listed_from_then_on(status):
    refused = KubeError(status, "Invalid", "sendInitialEvents is forbidden for watch unless "
                                           "the WatchList feature gate is enabled")
    metrics = Metrics()
    gone = KubeError(410, "Expired", "too old resource version")
    _, script, stop, queue = run_wl(
        [[([release("a", "5", stuck=True)], "10")], [([], "20")]], [[refused], [gone]],
        metrics=metrics)
    # refused once: the LIST, the watch from its rv; the 410's relist is a LIST as well
    assert script.calls == [("WATCH-LIST",), ("LIST",), ("WATCH", "10"), ("LIST",),
                            ("WATCH", "20")]
    assert script.watch_list is False
    assert queued(queue) == ["apps/a"]
    assert stop.waits == []                                  # no backoff: listed at once
    assert metrics.snapshot()["relists"] == {"initial": 1, "expired": 1}


def test_a_watch_list_that_fails_before_its_bookmark_is_retried_after_a_backoff():
    metrics = Metrics()
    drop = KubeError(0, "Unreachable", "watch interrupted: connection reset")
    streams = [[event("ADDED", release("a", "5", stuck=True)), drop],
               [event("ADDED", release("a", "5", stuck=True)), end_bookmark("10")]]
    w, script, stop, _ = run_wl([], streams, metrics=metrics)
    assert script.calls == [("WATCH-LIST",), ("WATCH-LIST",), ("WATCH", "10")]
    assert stop.waits == [BACKOFF_BASE]
    assert metrics.snapshot()["relists"] == {"error": 1}     # as after a failed LIST
    assert w.synced.is_set() and script.watch_list is True


def test_a_dropped_watch_list_after_its_bookmark_re_watches_from_the_last_rv():
    drop = KubeError(0, "Unreachable", "watch interrupted: connection reset")
    streams = [[end_bookmark("10"), event("MODIFIED", release("a", "11", stuck=True)), drop],
               [event("MODIFIED", release("b", "12", stuck=True))]]
    _, script, stop, queue = run_wl([], streams)
    assert script.calls == [("WATCH-LIST",), ("WATCH", "11"), ("WATCH", "12")]
    assert stop.waits == [BACKOFF_BASE]
    assert queued(queue) == ["apps/a", "apps/b"]


def test_watch_lists_that_keep_ending_before_their_bookmark_give_way_to_the_list():
    plain = bookmark("7")              # not the end of the initial events: nothing synced
    streams = [[event("ADDED", release("a", "5")), plain]] * 3
    w, script, stop, _ = run_wl([[([], "10")]], streams)
    assert script.calls[:5] == [("WATCH-LIST",), ("WATCH-LIST",), ("WATCH-LIST",),
                                ("LIST",), ("WATCH", "10")]
    assert stop.waits == [BACKOFF_BASE, 2 * BACKOFF_BASE]   # between the three
    assert script.watch_list is False and w.synced.is_set()
    assert script.watch_lists.refused is False              # a pause, not for good


def test_after_the_pause_the_next_sync_is_a_watch_list_again():
    """The run of misses an apiserver restart causes is not the server's nature: once the
    pause is over, the next sync is a watch-list (and a LIST at once if that one misses
    too, without the three tries)."""
    now = [0.0]
    plain = bookmark("7")
    missed = [event("ADDED", release("a", "5")), plain]
    expired = [KubeError(410, "Expired", "too old resource version")]

    def pause_over():
        now[0] += WATCH_LIST_PAUSE

    stop = Stop()
    script = WatchListScript(stop, [[([], "10")], [([], "30")]], [
        missed, missed, missed,                       # the restart: three misses, a LIST
        [pause_over, *expired],                       # its watch: a 410 after the pause
        missed,                                       # one miss pauses again: a LIST
        [pause_over, *expired],
        [event("ADDED", release("b", "20", stuck=True)), end_bookmark("40")],
    ], clock=lambda: now[0])
    queue = WorkQueue()
    Watcher(script, queue, Scope(), resync_period=3600).run(stop)  # type: ignore[arg-type]
    assert script.calls == [("WATCH-LIST",)] * 3 + [("LIST",), ("WATCH", "10"),
                                                    ("WATCH-LIST",), ("LIST",), ("WATCH", "30"),
                                                    ("WATCH-LIST",), ("WATCH", "40")]
    assert stop.waits == [BACKOFF_BASE, 2 * BACKOFF_BASE]   # only between the first three
    assert queued(queue) == ["apps/b"]
    assert script.watch_list is True and script.watch_lists.misses == 0


def test_the_watch_never_ends_for_a_resync_it_resumes_from_its_resource_version():
    """Issue 58: however short the resync period, the only stream of every release is the
    first (and a 410's); each watch after it resumes where the last one ended and asks the
    server for its whole timeout, not the time left to a resync."""
    metrics = Metrics()
    timeouts: list[int] = []

    class Timed(WatchListScript):
        def watch_hrs(self, namespace, selector, rv, timeout_seconds=300, **kw):
            timeouts.append(timeout_seconds)
            return super().watch_hrs(namespace, selector, rv, timeout_seconds, **kw)

    stop = Stop()
    script = Timed(stop, [], [
        [event("ADDED", release("a", "5", stuck=True)), end_bookmark("10")],
        [event("MODIFIED", release("b", "12", stuck=True)), bookmark("20")],
        [bookmark("30")]])
    queue = WorkQueue()
    Watcher(script, queue, Scope(), resync_period=0.001, metrics=metrics,  # type: ignore[arg-type]
            watch_seconds=277).run(stop)  # type: ignore[arg-type]
    assert script.calls == [("WATCH-LIST",), ("WATCH", "10"), ("WATCH", "20"), ("WATCH", "30")]
    assert timeouts == [277] * 4
    assert metrics.snapshot()["relists"] == {"initial": 1}
    assert queued(queue) == ["apps/a", "apps/b"]


def test_a_watch_list_error_event_before_the_bookmark_is_a_failure():
    err = event("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError",
                          "message": "etcd: request timed out"})
    _, script, stop, _ = run_wl([], [[err], [end_bookmark("10")]])
    assert script.calls == [("WATCH-LIST",), ("WATCH-LIST",), ("WATCH", "10")]
    assert stop.waits == [BACKOFF_BASE]
