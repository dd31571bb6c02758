"""The fresh read as a watch-list (``ReleaseWatch.read`` / ``Executor.read_watched``) on a
scripted stream: the initial ADDED is the read, the end-of-initial-events bookmark with no
ADDED means "no such release", and every way the watch-list can fail falls back to a GET."""
from __future__ import annotations

import gc
import threading
import weakref

import pytest

from kubectl_flux_plunger.executor import Executor, Options
from kubectl_flux_plunger.executor.handshake import InitialStateUnknown, ReleaseWatch
from kubectl_flux_plunger.kube import INITIAL_EVENTS_END, Unreachable, WatchLists, kube_error
from kubectl_flux_plunger.kube.read import WATCH_LIST_PAUSE

from .builders import WatchListOf

NS, NAME = "apps", "demo"


def _hr(rv: str, uid: str = "u1") -> dict:
    return {"metadata": {"namespace": NS, "name": NAME, "uid": uid, "resourceVersion": rv,
                         "generation": 1}, "spec": {}}


def _end_bookmark(rv: str = "9") -> dict:
    return {"type": "BOOKMARK", "object": {"metadata": {
        "resourceVersion": rv, "annotations": {INITIAL_EVENTS_END: "true"}}}}


class _Resp:
    def __init__(self) -> None:
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


class FakeKube(WatchListOf):
    """Serves watch_hrs from a script: a list of events (then the stream stays open until
    closed) or an exception raised when the watch is opened; counts GETs."""

    dry_run = False
    request_timeout = None

    def __init__(self, script: list[dict] | Exception, hr: dict | None = None):
        self.script = script
        self.hr = hr
        self.watch_lists = WatchLists(clock=lambda: self.now)
        self.now = 0.0
        self.watches: list[dict] = []
        self.gets = 0
        self.resps: list[_Resp] = []

    def watch_hrs(self, namespace, label_selector, resource_version, *, timeout_seconds,
                  field_selector=None, opened=None, send_initial_events=False):
        self.watches.append({"namespace": namespace, "rv": resource_version,
                             "field_selector": field_selector,
                             "send_initial_events": send_initial_events})
        if isinstance(self.script, Exception):
            raise self.script
        resp = _Resp()
        self.resps.append(resp)
        if opened is not None:
            opened(resp)
        for ev in self.script:
            if isinstance(ev, Exception):  # the stream breaks, as urllib3's chunked read does
                try:
                    raise ValueError("invalid literal for int() with base 16: b''")
                except ValueError:
                    raise ev  # noqa: B904 - its context, as the transport's error has
            yield ev
        resp.closed.wait(10)  # an open stream: ends when closed

    def get_hr(self, namespace, name):
        self.gets += 1
        return self.hr


def test_the_initial_added_event_is_the_read_and_the_watch_stays_open():
    kube = FakeKube([{"type": "ADDED", "object": _hr("5")}, _end_bookmark("5"),
                     {"type": "MODIFIED", "object": _hr("6")}])
    hr, watch = ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=5)
    try:
        assert hr is not None and hr["metadata"]["resourceVersion"] == "5"
        assert kube.watches == [{"namespace": NS, "rv": "", "send_initial_events": True,
                                 "field_selector": f"metadata.name={NAME}"}]
        # the bookmark is skipped: the next change is the MODIFIED
        assert watch.next(5) is True
        assert watch.latest is not None and watch.latest["metadata"]["resourceVersion"] == "6"
        assert kube.gets == 0
    finally:
        watch.close()
    assert kube.resps[0].closed.is_set()


def test_the_end_bookmark_without_an_added_event_means_no_such_release():
    kube = FakeKube([_end_bookmark()])
    hr, watch = ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=5)
    watch.close()
    assert hr is None and watch.latest is None


def test_a_replacement_under_the_same_name_is_not_the_release_read():
    kube = FakeKube([{"type": "ADDED", "object": _hr("5", uid="u1")},
                     {"type": "DELETED", "object": _hr("6", uid="u1")},
                     {"type": "ADDED", "object": _hr("7", uid="u2")}])
    hr, watch = ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=5)
    try:
        assert hr is not None
        while watch.latest is not None and watch.next(5):
            pass
        assert watch.latest is None
    finally:
        watch.close()


def test_a_refused_watch_list_raises_its_error():
    kube = FakeKube(kube_error(422, "Invalid", "sendInitialEvents is forbidden"))
    with pytest.raises(Exception, match="sendInitialEvents is forbidden"):
        ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=5)


def test_a_silent_stream_is_not_taken_for_a_state():
    kube = FakeKube([])
    with pytest.raises(InitialStateUnknown):
        ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=0.05)
    assert kube.resps[0].closed.wait(5)  # closed on the way out


def _executor(kube: FakeKube, **opts) -> Executor:
    return Executor(kube, options=Options(**opts))  # type: ignore[arg-type]


def test_read_watched_falls_back_to_a_get_for_good_when_the_server_has_no_watch_lists():
    kube = FakeKube(kube_error(422, "Invalid", "sendInitialEvents is forbidden"), hr=_hr("3"))
    ex = _executor(kube)
    hr, watch = ex.read_watched(NS, NAME)
    assert hr == _hr("3") and watch is None and kube.gets == 1
    assert kube.watch_list is False
    hr, watch = ex.read_watched(NS, NAME)  # no second attempt at a watch-list
    assert watch is None and kube.gets == 2 and len(kube.watches) == 1


@pytest.mark.parametrize("script", [
    [],                                                         # silent
    kube_error(503, "ServiceUnavailable", "try later"),         # failing
    kube_error(403, "Forbidden", "cannot watch"),               # not allowed
])
def test_read_watched_reads_with_a_get_when_the_watch_list_gives_no_state(script, monkeypatch):
    monkeypatch.setattr("kubectl_flux_plunger.executor.read.FIRST_WAIT", 0.05)
    kube = FakeKube(script, hr=_hr("4"))
    hr, watch = _executor(kube).read_watched(NS, NAME)
    assert hr == _hr("4") and watch is None and kube.gets == 1
    assert kube.watch_list is True  # a passing failure: the next read tries again


def test_watch_lists_that_keep_giving_no_state_pause_them_and_one_is_tried_after(monkeypatch):
    """A run of misses (an apiserver restarting ends its watches) is GETs for a while, not
    for good: after the pause one watch-list is tried, and a miss then pauses them again."""
    monkeypatch.setattr("kubectl_flux_plunger.executor.read.FIRST_WAIT", 0.05)
    kube = FakeKube([{"type": "ERROR", "object": {"kind": "Status", "code": 500}}], hr=_hr("4"))
    ex = _executor(kube)
    for _ in range(3):
        assert ex.read_watched(NS, NAME) == (_hr("4"), None)
    assert kube.watch_list is False and len(kube.watches) == 3
    ex.read_watched(NS, NAME)
    assert len(kube.watches) == 3 and kube.gets == 4       # GETs during the pause
    assert kube.watch_lists.refused is False               # nothing remembered for good
    kube.now = WATCH_LIST_PAUSE - 1
    ex.read_watched(NS, NAME)
    assert len(kube.watches) == 3                          # still paused
    kube.now = WATCH_LIST_PAUSE
    ex.read_watched(NS, NAME)
    assert len(kube.watches) == 4 and kube.gets == 6       # tried once, missed: paused again
    ex.read_watched(NS, NAME)
    assert len(kube.watches) == 4 and kube.gets == 7


def test_a_watch_list_that_works_again_resets_the_count(monkeypatch):
    kube = FakeKube([{"type": "ADDED", "object": _hr("5")}], hr=_hr("4"))
    kube.watch_lists.misses = 2
    hr, watch = _executor(kube).read_watched(NS, NAME)
    assert watch is not None
    watch.close()
    assert hr == _hr("5") and kube.watch_lists.misses == 0 and kube.watch_list is True


def test_read_watched_says_the_api_is_missing_like_the_get_would():
    kube = FakeKube(kube_error(404, "NotFound", "the server could not find the requested resource"))
    with pytest.raises(Exception, match="could not find the requested resource"):
        _executor(kube).read_watched(NS, NAME)
    assert kube.gets == 0


@pytest.mark.parametrize("opts", [{"dry_run_client": True}, {"allow_recover": False}])
def test_read_watched_is_a_plain_get_where_nothing_can_be_recovered(opts):
    kube = FakeKube([{"type": "ADDED", "object": _hr("5")}], hr=_hr("5"))
    hr, watch = _executor(kube, **opts).read_watched(NS, NAME)
    assert watch is None and kube.gets == 1 and kube.watches == []


def test_closing_the_watch_ends_its_reader_thread():
    kube = FakeKube([{"type": "ADDED", "object": _hr("5")}])
    _, watch = ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=5)
    watch.close()
    # the reader thread ends once its stream is closed, and says so on the queue
    watch._thread.join(5)
    assert not watch._thread.is_alive()


def test_a_watch_that_ended_in_an_error_is_freed_without_the_cyclic_collector():
    """Issue 49's soak: every recovery's watch that ended in an error stayed in serve's heap
    until a rare full collection (the error's traceback held the reader's frame, which held
    the watch).  With the collector off, dropping the watch frees it at once."""
    kube = FakeKube([{"type": "ADDED", "object": _hr("5")}, _end_bookmark("5"),
                     Unreachable(0, "", "connection broken: InvalidChunkLength")])
    gc.collect()
    gc.disable()
    try:
        hr, watch = ReleaseWatch.read(kube, NS, NAME, timeout=30, first_wait=5)
        assert hr is not None
        assert watch.next(5) is False and watch.ended  # the stream ended in the error
        watch._thread.join(5)
        assert "InvalidChunkLength" in str(watch.error)
        gone = weakref.ref(watch)
        del watch
        assert gone() is None
    finally:
        gc.enable()
