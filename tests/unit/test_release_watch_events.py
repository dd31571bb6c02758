"""``ReleaseWatch`` on a stream the test feeds event by event: what the watch asks the
server for, how each kind of event folds into ``latest`` (a change, a deletion, a
replacement under the same name, a bookmark, an error, the end of the stream), what
``next``/``newer_than``/``settle`` answer, and closing the stream from either side.

The fresh read as a watch-list has its own file (tests/unit/test_release_watch.py)."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from kubectl_flux_plunger.executor import handshake as hs
from kubectl_flux_plunger.executor.handshake import InitialStateUnknown, ReleaseWatch
from kubectl_flux_plunger.kube import INITIAL_EVENTS_END, Unreachable, kube_error

pytestmark = pytest.mark.unit

NS, NAME = "apps", "demo"
STOP = object()


def _hr(rv: str, uid: str = "u1") -> dict:
    return {"metadata": {"namespace": NS, "name": NAME, "uid": uid, "resourceVersion": rv,
                         "generation": 2}, "spec": {}}


def ev(kind: str, obj: dict) -> dict:
    return {"type": kind, "object": obj}


def bookmark(end: str | None = None) -> dict:
    md: dict = {"resourceVersion": "9"}
    if end is not None:
        md["annotations"] = {INITIAL_EVENTS_END: end}
    return ev("BOOKMARK", {"metadata": md})


class Resp:
    """The streaming response: close() (or shutdown(), when it has one) ends the stream."""

    def __init__(self, feed: queue.Queue, fail: bool = False) -> None:
        self.feed = feed
        self.fail = fail
        self.calls: list[str] = []

    def close(self) -> None:
        self.calls.append("close")
        self.feed.put(STOP)
        if self.fail:
            raise OSError("already closed")


class ShutdownResp(Resp):
    def shutdown(self) -> None:
        self.calls.append("shutdown")
        self.feed.put(STOP)


class FeedKube:
    """watch_hrs serving what the test puts on ``feed`` (an exception is raised, STOP ends
    the stream); records each watch's arguments."""

    def __init__(self, resp_class: type[Resp] = Resp, fail_close: bool = False,
                 open_first: threading.Event | None = None):
        self.feed: queue.Queue = queue.Queue()
        self.resp = resp_class(self.feed, fail_close)
        self.watches: list[dict] = []
        self.open_first = open_first
        self.yielded = 0

    def watch_hrs(self, namespace, label_selector, resource_version, *, timeout_seconds,
                  field_selector=None, opened=None, send_initial_events=False):
        self.watches.append({"namespace": namespace, "selector": label_selector,
                             "rv": resource_version, "timeout": timeout_seconds,
                             "field_selector": field_selector,
                             "send_initial_events": send_initial_events})
        if self.open_first is not None:
            self.open_first.wait(10)
        if opened is not None:
            opened(self.resp)
        while True:
            item = self.feed.get(timeout=10)
            if item is STOP:
                return
            if isinstance(item, BaseException):
                raise item
            self.yielded += 1
            yield item


@pytest.fixture
def opened_watches():
    made: list[ReleaseWatch] = []
    yield made
    for watch in made:
        watch.close()


def watch_on(kube: FeedKube, hr: dict | None, made: list, timeout: float = 30.0,
             **kw) -> ReleaseWatch:
    watch = ReleaseWatch(kube, hr, timeout, **kw)  # type: ignore[arg-type]
    made.append(watch)
    return watch


def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


# -- what is asked ----------------------------------------------------------------------------


@pytest.mark.parametrize("timeout,seconds", [(30.0, 30), (2.5, 3), (0.2, 1)])
def test_the_watch_is_of_this_release_from_the_deciding_read(opened_watches, timeout,
                                                            seconds):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches, timeout)
    assert wait_for(lambda: kube.watches)
    assert kube.watches == [{"namespace": NS, "selector": None, "rv": "5", "timeout": seconds,
                             "field_selector": f"metadata.name={NAME}",
                             "send_initial_events": False}]
    assert watch.latest == _hr("5") and watch.uid == "u1" and not watch.initial_pending


def test_the_reader_never_keeps_the_process_alive(opened_watches):
    watch = watch_on(FeedKube(), _hr("5"), opened_watches)
    assert watch._thread.daemon and watch._thread.name == f"watch-{NAME}"


# -- how events fold into latest ----------------------------------------------------------


def test_a_change_of_the_release_is_its_newest_state(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(ev("MODIFIED", _hr("6")))
    assert watch.next(5) is True and watch.latest == _hr("6")
    kube.feed.put(ev("ADDED", _hr("7")))
    assert watch.next(5) is True and watch.latest == _hr("7")


def test_a_bookmark_is_no_change(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(bookmark())
    kube.feed.put(bookmark("true"))  # not a watch-list: the end-of-initial mark means nothing
    kube.feed.put(ev("MODIFIED", _hr("6")))
    assert watch.next(5) is True and watch.latest == _hr("6") and not watch.ended


def test_only_bookmarks_are_no_change_at_all(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(bookmark())
    assert watch.next(0.2) is False
    assert watch.latest == _hr("5") and not watch.ended and kube.yielded == 1


def test_a_deleted_release_is_none_and_stays_none(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(ev("DELETED", _hr("6")))
    assert watch.next(5) is True and watch.latest is None
    kube.feed.put(ev("ADDED", _hr("7")))  # re-created under the same uid, hypothetically
    assert watch.next(5) is True and watch.latest is None


def test_another_release_under_the_same_name_is_none(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(ev("MODIFIED", _hr("6", uid="u2")))
    assert watch.next(5) is True and watch.latest is None


def test_an_event_without_an_object_changes_nothing(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put({"type": "MODIFIED", "object": None})
    assert watch.next(5) is True and watch.latest is None  # no uid: not our release


@pytest.mark.parametrize("end", [
    ev("ERROR", {"kind": "Status", "code": 410}),
    STOP,
], ids=["error-event", "stream-ends"])
def test_the_end_of_the_stream_ends_the_watch(opened_watches, end):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(end)
    assert watch.next(5) is False and watch.ended and watch.latest == _hr("5")
    # ended: nothing more is waited for
    started = time.monotonic()
    assert watch.next(5) is False and watch._pull(5) is None
    assert time.monotonic() - started < 2


def test_a_failing_stream_keeps_its_error_and_ends_the_watch(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    boom = kube_error(500, "InternalError", "boom")
    kube.feed.put(boom)
    assert watch.next(5) is False and watch.ended and watch.error is boom


def test_next_with_no_time_left_does_not_wait(opened_watches):
    watch = watch_on(FeedKube(), _hr("5"), opened_watches)
    started = time.monotonic()
    assert watch.next(-3) is False
    assert time.monotonic() - started < 0.5


# -- the watch-list's initial state --------------------------------------------------------


def test_a_watch_list_starts_with_no_state_until_its_added_event(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, None, opened_watches, key=(NS, NAME))
    assert watch.initial_pending and watch.latest is None and watch.uid is None
    assert wait_for(lambda: kube.watches)
    assert kube.watches[0]["rv"] == "" and kube.watches[0]["send_initial_events"] is True
    kube.feed.put(ev("MODIFIED", _hr("4")))  # not the initial state: ignored
    kube.feed.put(bookmark("false"))
    kube.feed.put(ev("ADDED", _hr("5", uid="u7")))
    assert watch._initial(5) == _hr("5", uid="u7")
    assert watch.uid == "u7" and not watch.initial_pending


def test_a_bookmark_that_does_not_end_the_initial_events_leaves_the_state_unknown():
    kube = FeedKube()
    for item in (bookmark(), bookmark("false")):
        kube.feed.put(item)
    started = time.monotonic()
    with pytest.raises(InitialStateUnknown, match=f"{NS}/{NAME} gave no initial state$"):
        ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=0.3)  # type: ignore[arg-type]
    assert time.monotonic() - started < 5  # the first wait bounds it, not the stream
    assert kube.resp.calls  # closed on the way out


def test_an_unreachable_server_leaves_the_state_unknown_for_a_get_to_read():
    kube = FeedKube()
    kube.feed.put(Unreachable(0, "", "connection refused"))
    with pytest.raises(InitialStateUnknown, match=r"gave no initial state \(connection refused\)"):
        ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=5)  # type: ignore[arg-type]


def test_a_stream_that_ends_before_its_initial_state_leaves_it_unknown():
    kube = FeedKube()
    kube.feed.put(STOP)
    with pytest.raises(InitialStateUnknown, match="no initial state$"):
        ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=5)  # type: ignore[arg-type]


def test_a_server_error_before_the_initial_state_is_raised_as_it_is():
    kube = FeedKube()
    refused = kube_error(403, "Forbidden", "cannot watch")
    kube.feed.put(refused)
    with pytest.raises(type(refused)) as caught:
        ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=5)  # type: ignore[arg-type]
    assert caught.value is refused


# -- closing ----------------------------------------------------------------------------------


def test_closing_shuts_the_stream_down_where_the_response_can(opened_watches):
    kube = FeedKube(ShutdownResp)
    watch = watch_on(kube, _hr("5"), opened_watches)
    assert watch._open.wait(5)
    watch.close()
    assert kube.resp.calls == ["shutdown"]
    watch._thread.join(5)
    assert not watch._thread.is_alive()


def test_a_response_that_fails_to_close_is_closed_all_the_same(opened_watches):
    kube = FeedKube(fail_close=True)
    watch = watch_on(kube, _hr("5"), opened_watches)
    assert watch._open.wait(5)
    watch.close()  # does not raise
    assert kube.resp.calls == ["close"]


def test_a_watch_closed_before_its_stream_opened_closes_the_stream_once_it_opens():
    gate = threading.Event()
    kube = FeedKube(open_first=gate)
    watch = ReleaseWatch(kube, _hr("5"), 30)  # type: ignore[arg-type]
    watch.close()
    assert kube.resp.calls == []
    gate.set()
    watch._thread.join(5)
    assert not watch._thread.is_alive() and kube.resp.calls == ["close"]


def test_events_arriving_after_close_are_not_taken(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    assert watch._open.wait(5)
    watch._closed.set()  # closed, the stream not shut yet
    kube.feed.put(ev("MODIFIED", _hr("6")))
    kube.feed.put(ev("MODIFIED", _hr("7")))
    watch._thread.join(5)
    assert not watch._thread.is_alive() and kube.yielded == 1
    assert watch.next(5) is False and watch.latest == _hr("5")


def test_an_error_of_a_closed_stream_is_kept_quietly(opened_watches, caplog):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    assert watch._open.wait(5)
    caplog.set_level("DEBUG", logger="kubectl_flux_plunger.executor.handshake")
    watch._closed.set()
    kube.feed.put(OSError("reset by the close"))
    watch._thread.join(5)
    assert isinstance(watch.error, OSError) and caplog.records == []


def test_an_error_of_an_open_stream_is_logged(opened_watches, caplog):
    caplog.set_level("DEBUG", logger="kubectl_flux_plunger.executor.handshake")
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(OSError("reset"))
    watch._thread.join(5)
    assert [r.getMessage() for r in caplog.records] == [f"watch of {NS}/{NAME} ended: reset"]


# -- newer_than: after a 409 ------------------------------------------------------------------


def test_newer_than_waits_for_the_newer_state_and_takes_the_writes_right_behind_it(
        opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(bookmark())
    kube.feed.put(ev("MODIFIED", _hr("6")))
    kube.feed.put(ev("MODIFIED", _hr("7")))
    assert watch.newer_than(_hr("5"), 5) == _hr("7")


def test_newer_than_is_the_state_already_carried_when_it_is_newer(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("6"), opened_watches)
    started = time.monotonic()
    assert watch.newer_than(_hr("5"), 5) == _hr("6")
    assert time.monotonic() - started < 2


def test_newer_than_cannot_tell_when_nothing_came(opened_watches):
    watch = watch_on(FeedKube(), _hr("5"), opened_watches)
    started = time.monotonic()
    assert watch.newer_than(_hr("5"), 0.2) is None
    assert time.monotonic() - started < 5  # its timeout, not the stream's end (10 s)


def test_newer_than_cannot_tell_once_the_stream_ended_on_that_state(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("6"), opened_watches)
    kube.feed.put(STOP)
    assert watch.newer_than(_hr("6"), 5) is None
    assert watch.ended


def test_newer_than_keeps_a_newer_state_the_stream_carried_before_it_ended(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(ev("MODIFIED", _hr("6")))
    kube.feed.put(STOP)
    assert watch.newer_than(_hr("5"), 5) == _hr("6")
    assert watch.ended


def test_newer_than_cannot_tell_once_the_stream_ended_on_the_409ed_state(opened_watches):
    # the stream was behind: it catches up to the state the 409 was about, then ends
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(ev("MODIFIED", _hr("6")))
    kube.feed.put(STOP)
    assert watch.newer_than(_hr("6"), 5) is None
    assert watch.ended and watch.latest == _hr("6")


def test_newer_than_a_release_deleted_before_the_stream_ended_is_none(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(ev("DELETED", _hr("6")))
    kube.feed.put(STOP)
    assert watch.newer_than(_hr("5"), 5) is None and watch.ended


def test_newer_than_a_deleted_release_is_none(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    kube.feed.put(ev("DELETED", _hr("6")))
    assert watch.newer_than(_hr("5"), 5) is None and not watch.ended


# -- settle: before the acquire ---------------------------------------------------------------


def test_settle_takes_the_replay_since_the_read(opened_watches):
    kube = FeedKube()
    for rv in ("6", "7", "8"):
        kube.feed.put(ev("MODIFIED", _hr(rv)))
    watch = watch_on(kube, _hr("5"), opened_watches)
    assert wait_for(lambda: watch._q.qsize() >= 3)  # the replay is in
    assert watch.settle() == _hr("8")


def test_settle_on_a_quiet_release_is_the_read(opened_watches):
    watch = watch_on(FeedKube(), _hr("5"), opened_watches)
    assert watch.settle() == _hr("5")


def _first_wait_of_settle(watch: ReleaseWatch) -> float:
    """settle() on ``watch``, returning how long its first look at the stream could wait."""
    asked: list[float] = []
    real_next = watch.next

    def spy(timeout: float) -> bool:
        asked.append(timeout)
        return real_next(timeout)

    watch.next = spy  # type: ignore[method-assign]
    watch.settle()
    return asked[0]


def test_settle_after_a_gets_read_waits_for_the_replay(opened_watches):
    # a watch opened from the GET's resourceVersion replays what happened since: it
    # arrives right after the stream opens, so settle waits a moment for it
    watch = watch_on(FeedKube(), _hr("5"), opened_watches)
    assert _first_wait_of_settle(watch) == pytest.approx(hs.REPLAY_WAIT, abs=0.005)


def test_settle_after_a_watch_lists_read_takes_what_is_queued_without_waiting(opened_watches):
    # the watch-list's stream is the read: the changes since it are queued already
    kube = FeedKube()
    for item in (ev("ADDED", _hr("5")), bookmark("true")):
        kube.feed.put(item)
    hr, watch = ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=10)  # type: ignore[arg-type]
    opened_watches.append(watch)
    assert hr == _hr("5")
    assert _first_wait_of_settle(watch) == 0.0
    kube.feed.put(ev("MODIFIED", _hr("6")))  # a write after the read is still taken
    assert wait_for(lambda: any(e.get("type") == "MODIFIED" for e in list(watch._q.queue)))
    assert watch.settle() == _hr("6")


def test_settle_after_a_watch_lists_read_waits_out_a_burst_it_finds(opened_watches, monkeypatch):
    # a write queued behind the read: helm-controller is writing, so settle waits for a pause
    monkeypatch.setattr(hs, "SETTLE_QUIET", 2.0)
    monkeypatch.setattr(hs, "SETTLE_BOUND", 10.0)
    kube = FeedKube()
    for item in (ev("ADDED", _hr("5")), bookmark("true"), ev("MODIFIED", _hr("6"))):
        kube.feed.put(item)
    hr, watch = ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=10)  # type: ignore[arg-type]
    opened_watches.append(watch)
    assert hr == _hr("5")
    assert wait_for(lambda: any(e.get("type") == "MODIFIED" for e in list(watch._q.queue)))
    later(kube, ev("MODIFIED", _hr("7")), after=0.1)  # the burst goes on
    assert watch.settle() == _hr("7")


# -- waiting for what comes later ------------------------------------------------------------


def later(kube: FeedKube, *items, after: float = 0.1) -> threading.Timer:
    """Feed ``items`` once ``after`` seconds have passed (the waits below are far longer)."""
    timer = threading.Timer(after, lambda: [kube.feed.put(item) for item in items])
    timer.start()
    return timer


def test_next_waits_for_a_change_that_comes_later(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    later(kube, ev("MODIFIED", _hr("6")))
    assert watch.next(10) is True and watch.latest == _hr("6")


def test_the_initial_state_may_come_later_within_the_first_wait():
    kube = FeedKube()
    later(kube, ev("ADDED", _hr("5")), bookmark("true"))
    hr, watch = ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=10)  # type: ignore[arg-type]
    watch.close()
    assert hr == _hr("5")


def test_newer_than_waits_for_a_newer_state_that_comes_later(opened_watches):
    kube = FeedKube()
    watch = watch_on(kube, _hr("5"), opened_watches)
    later(kube, ev("MODIFIED", _hr("6")))
    assert watch.newer_than(_hr("5"), 10) == _hr("6")


def test_settle_waits_out_a_burst_of_writes_only_up_to_its_bound(opened_watches, monkeypatch):
    monkeypatch.setattr(hs, "SETTLE_BOUND", 0.3)
    kube = FeedKube()
    stop = threading.Event()
    fed: list[str] = []

    def writer() -> None:  # helm-controller writing every 20 ms, for far longer than the bound
        for n in range(6, 400):
            fed.append(str(n))
            kube.feed.put(ev("MODIFIED", _hr(str(n))))
            if stop.wait(0.02):
                return

    thread = threading.Thread(target=writer, daemon=True)
    watch = watch_on(kube, _hr("5"), opened_watches)
    thread.start()
    assert wait_for(lambda: watch._q.qsize() >= 1)  # the burst is under way
    started = time.monotonic()
    try:
        settled = watch.settle()
        took = time.monotonic() - started
    finally:
        stop.set()
        thread.join(5)
    assert settled is not None and settled["metadata"]["resourceVersion"] in fed
    assert took < 3  # the writer goes on for 8 s


def test_settle_waits_no_longer_than_its_bound_for_a_pause(opened_watches, monkeypatch):
    # a pause is waited for only as long as the bound leaves
    monkeypatch.setattr(hs, "SETTLE_BOUND", 0.2)
    monkeypatch.setattr(hs, "SETTLE_QUIET", 30.0)
    kube = FeedKube()
    kube.feed.put(ev("MODIFIED", _hr("6")))
    watch = watch_on(kube, _hr("5"), opened_watches)
    assert wait_for(lambda: watch._q.qsize() >= 1)  # the replay is in
    started = time.monotonic()
    assert watch.settle() == _hr("6")
    assert time.monotonic() - started < 0.9


def test_settle_on_a_stream_that_never_opens_is_the_read_within_its_bound(monkeypatch):
    monkeypatch.setattr(hs, "SETTLE_BOUND", 0.2)
    gate = threading.Event()
    kube = FeedKube(open_first=gate)
    watch = ReleaseWatch(kube, _hr("5"), 30)  # type: ignore[arg-type]
    started = time.monotonic()
    try:
        assert watch.settle() == _hr("5")
        assert time.monotonic() - started < 5  # the stream would open after 10 s
    finally:
        watch.close()
        gate.set()


def test_settle_under_writes_that_never_pause_is_their_newest_at_the_bound(opened_watches,
                                                                          monkeypatch):
    monkeypatch.setattr(hs, "SETTLE_BOUND", 0.05)
    kube = FeedKube()
    events = [ev("MODIFIED", _hr(str(n))) for n in range(6, 16)]
    for _ in range(20000):  # a flood: the stream always has the next write ready
        for item in events:
            kube.feed.put(item)
    watch = watch_on(kube, _hr("5"), opened_watches)
    assert wait_for(lambda: watch._q.qsize() >= 1000)
    settled = watch.settle()
    assert settled is not None and settled in [item["object"] for item in events]
