"""The handshake (``Handshake.await_handshake``) on a fake client, a fake pre-opened watch
and a fake clock: it returns as soon as helm-controller has observed our suspended
generation, the release is going, gone or no longer suspended by us; it waits in windows
of ``handshake_window`` (the stop flag is checked between them) up to
``handshake_timeout``, from the rv it last saw; an ERROR event or a failing watch re-reads
the release.  On the watch opened before the acquire, states older than our acquire are
skipped and an early end of that stream is carried on by a watch of its own.

The apiserver tier waits on a simulated helm-controller (tests/apiserver/test_saga_safety.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_flux_plunger.executor import Options
from kubectl_flux_plunger.executor import handshake as hs
from kubectl_flux_plunger.executor.handshake import Handshake, watch_timeout
from kubectl_flux_plunger.executor.outcome import Stopped
from kubectl_flux_plunger.kube import kube_error

from .builders import OURS, hr
from .fakes import Clock

pytestmark = pytest.mark.unit




@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(1000.0)  # ``time`` as the handshake module sees it
    monkeypatch.setattr(hs, "time", c)
    return c


def held(rv: str = "100", *, generation: int = 2, observed: int | None = 1, **kw: Any) -> dict:
    """The release as our acquire left it: suspended by us, generation bumped."""
    kw.setdefault("suspend", True)
    kw.setdefault("managed", [OURS])
    return hr(rv=rv, generation=generation, observed_generation=observed, **kw)


def modified(obj: dict) -> dict:
    return {"type": "MODIFIED", "object": obj}


class FakeKube:
    """watch_hrs from a script: one list of events per watch opened (or an exception to
    raise); a window that ends without a decisive event takes its whole timeout on the
    clock."""

    def __init__(self, clock: Clock, windows: list[list[dict] | Exception] | None = None,
                 dry_run: bool = False):
        self.clock = clock
        self.windows = list(windows or [])
        self.dry_run = dry_run
        self.watches: list[dict] = []

    def watch_hrs(self, namespace, label_selector, resource_version, *, timeout_seconds,
                  field_selector=None, **kw):
        assert len(self.watches) < 50, "watching on and on"
        self.watches.append({"namespace": namespace, "selector": label_selector,
                             "rv": resource_version, "timeout": timeout_seconds,
                             "field_selector": field_selector, **kw})
        script = self.windows.pop(0) if self.windows else []
        if isinstance(script, Exception):
            raise script
        yield from script
        self.clock.now += timeout_seconds


class Fresh:
    """``Primitives.fresh``: records what it was asked to re-read, answers a script."""

    def __init__(self, answer: dict | None = None):
        self.answer = answer
        self.asked: list[dict] = []

    def __call__(self, obj: dict) -> dict | None:
        self.asked.append(obj)
        return self.answer


def handshake(kube: FakeKube, *, timeout: float = 30.0, window: float = 5.0,
              stop=lambda: False, fresh: Fresh | None = None) -> Handshake:
    return Handshake(kube, Options(handshake_timeout=timeout, handshake_window=window),  # type: ignore[arg-type]
                     stop, fresh or Fresh())


# -- decided without waiting -------------------------------------------------------------


def test_a_dry_run_returns_the_acquire_as_is_without_watching(clock):
    kube = FakeKube(clock, dry_run=True)
    state = held()
    assert handshake(kube).await_handshake(state) is state
    assert kube.watches == []


@pytest.mark.parametrize("state", [
    held(observed=2),                                            # observed already
    held(deletion_timestamp="2026-11-30T11:59:00Z"),             # going
    held(suspend=False),                                         # resumed by someone
    held(managed=[]),                                            # suspended, not by us
], ids=["observed", "terminating", "resumed", "not-ours"])
def test_nothing_is_awaited_when_there_is_nothing_to_wait_for(clock, state):
    kube = FakeKube(clock)
    assert handshake(kube).await_handshake(state) == state
    assert kube.watches == []


# -- waiting on a watch of its own -------------------------------------------------------


def test_the_wait_watches_this_release_from_the_acquire_and_returns_the_observed_state(clock):
    caught_up = held("102", observed=2)
    kube = FakeKube(clock, [[modified(held("101")), modified(caught_up),
                             modified(held("103", observed=2))]])
    assert handshake(kube).await_handshake(held("100")) == caught_up
    assert kube.watches == [{"namespace": "default", "selector": None, "rv": "100",
                             "timeout": 5, "field_selector": "metadata.name=demo"}]


def test_a_release_that_starts_going_ends_the_wait_with_that_state(clock):
    going = held("101", deletion_timestamp="2026-11-30T11:59:00Z")
    kube = FakeKube(clock, [[modified(going), modified(held("102", observed=2))]])
    assert handshake(kube).await_handshake(held()) == going


def test_a_deleted_release_ends_the_wait_with_none(clock):
    kube = FakeKube(clock, [[modified(held("101")), {"type": "DELETED", "object": held("102")}]])
    assert handshake(kube).await_handshake(held()) is None


def test_another_release_under_the_same_name_ends_the_wait_with_none(clock):
    kube = FakeKube(clock, [[modified(held("101", uid="uid-2", observed=2))]])
    assert handshake(kube).await_handshake(held()) is None


def test_an_added_event_counts_as_a_change_of_the_release(clock):
    caught_up = held("101", observed=2)
    kube = FakeKube(clock, [[{"type": "ADDED", "object": caught_up}]])
    assert handshake(kube).await_handshake(held()) == caught_up


def test_other_event_kinds_change_nothing(clock):
    bookmark = {"type": "BOOKMARK", "object": held("101", observed=2)}
    kube = FakeKube(clock, [[bookmark]])
    state = handshake(kube, timeout=5).await_handshake(held())
    assert state == held()
    assert len(kube.watches) == 1


def test_an_error_event_re_reads_the_release_from_the_last_state_seen(clock):
    lagging = held("101")
    fresh = Fresh(held("105", observed=2))
    kube = FakeKube(clock, [[modified(lagging), {"type": "ERROR", "object": {"code": 410}},
                             modified(held("106", observed=2))]])
    assert handshake(kube, fresh=fresh).await_handshake(held()) == held("105", observed=2)
    assert fresh.asked == [lagging]


def test_a_failing_watch_re_reads_the_release_after_a_pause(clock, caplog):
    fresh = Fresh(held("105", observed=2))
    kube = FakeKube(clock, [kube_error(503, "ServiceUnavailable", "try later")])
    assert handshake(kube, fresh=fresh).await_handshake(held()) == held("105", observed=2)
    assert fresh.asked == [held()]
    assert clock.slept == [0.2]
    assert [r.getMessage() for r in caplog.records if r.name == hs.__name__] == [
        "watching default/demo for helm-controller's handshake failed (try later); "
        "re-reading instead"]


@pytest.mark.parametrize("timeout,windows", [(12, [5, 5, 2]), (11, [5, 5, 1])])
def test_the_wait_goes_on_from_the_last_state_seen_window_after_window(clock, timeout,
                                                                       windows):
    kube = FakeKube(clock, [[modified(held("101"))], [modified(held("102"))], []])
    state = handshake(kube, timeout=timeout, window=5).await_handshake(held("100"))
    # three windows fill the timeout, each from the rv the previous one ended on; then the
    # last state seen (still lagging) is the answer
    assert [w["rv"] for w in kube.watches] == ["100", "101", "102"]
    assert [w["timeout"] for w in kube.watches] == windows
    assert state == held("102")


@pytest.mark.parametrize("window,seconds", [(2.5, 3), (0.2, 1), (1.0, 1)])
def test_a_window_is_watched_for_its_seconds_rounded_up_and_at_least_one(clock, window,
                                                                          seconds):
    kube = FakeKube(clock, [[modified(held("101", observed=2))]])
    handshake(kube, window=window).await_handshake(held())
    assert kube.watches[0]["timeout"] == seconds


def test_the_stop_flag_is_heeded_before_each_window(clock):
    kube = FakeKube(clock, [[modified(held("101"))], [modified(held("102", observed=2))]])
    asked: list[int] = []

    def stop() -> bool:
        asked.append(len(kube.watches))
        return len(kube.watches) >= 1

    with pytest.raises(Stopped):
        handshake(kube, stop=stop).await_handshake(held())
    assert asked == [0, 1] and len(kube.watches) == 1


def test_the_handshake_bound_gives_the_watch_a_margin_for_the_acquire(clock):
    assert watch_timeout(Options(handshake_timeout=30.0)) == 37.0
    assert watch_timeout(Options(handshake_timeout=1.5)) == 8.5


# -- on the watch opened before the acquire ----------------------------------------------


class FakeWatch:
    """A ReleaseWatch as ``_await_on`` sees it: ``latest``, ``ended``, ``next``; each call
    of next takes the next state from a script (a state, or None for a deleted release),
    or, the script run out, waits its whole timeout and returns False."""

    def __init__(self, clock: Clock, latest: dict | None, states: list[dict | None] = (),
                 ends: bool = False):
        self.clock = clock
        self.latest = latest
        self.states = list(states)
        self.ends = ends
        self.ended = False
        self.timeouts: list[float] = []

    def next(self, timeout: float) -> bool:
        assert not self.ended and len(self.timeouts) < 50, "waiting on a stream that ended"
        self.timeouts.append(timeout)
        if self.states:
            self.latest = self.states.pop(0)
            return True
        if self.ends:
            self.ended = True
        else:
            self.clock.now += timeout
        return False


def test_on_the_opened_watch_the_observed_state_is_returned_without_another_watch(clock):
    caught_up = held("102", observed=2)
    watch = FakeWatch(clock, held("100"), [held("101"), caught_up])
    kube = FakeKube(clock)
    assert handshake(kube).await_handshake(held("100"), watch) == caught_up  # type: ignore[arg-type]
    assert kube.watches == [] and watch.timeouts == [5.0, 5.0]


def test_on_the_opened_watch_a_state_older_than_the_acquire_is_skipped(clock):
    # the stream still carries the state before our suspend (generation 1, observed): it
    # says nothing about our generation
    before = hr(rv="99", generation=1, observed_generation=1)
    caught_up = held("101", observed=2)
    watch = FakeWatch(clock, before, [caught_up])
    assert handshake(FakeKube(clock)).await_handshake(held("100"), watch) == caught_up  # type: ignore[arg-type]
    assert watch.timeouts == [5.0]


def test_on_the_opened_watch_a_state_of_the_acquired_generation_counts(clock):
    caught_up = held("101", observed=2)
    watch = FakeWatch(clock, caught_up)
    kube = FakeKube(clock)
    assert handshake(kube).await_handshake(held("100"), watch) == caught_up  # type: ignore[arg-type]
    assert watch.timeouts == [] and kube.watches == []


def test_on_the_opened_watch_a_deleted_release_is_none(clock):
    watch = FakeWatch(clock, held("100"), [None])
    kube = FakeKube(clock)
    assert handshake(kube).await_handshake(held("100"), watch) is None  # type: ignore[arg-type]
    assert kube.watches == []


@pytest.mark.parametrize("state", [
    held("101", deletion_timestamp="2026-11-30T11:59:00Z"),
    held("101", suspend=False),
    held("101", managed=[]),
], ids=["terminating", "resumed", "not-ours"])
def test_on_the_opened_watch_a_release_no_longer_ours_to_wait_on_ends_it(clock, state):
    watch = FakeWatch(clock, held("100"), [state])
    kube = FakeKube(clock)
    assert handshake(kube).await_handshake(held("100"), watch) == state  # type: ignore[arg-type]
    assert kube.watches == [] and watch.timeouts == [5.0]  # at once: no window waited out


def test_an_opened_watch_that_ends_early_is_carried_on_by_a_watch_from_its_last_state(clock):
    watch = FakeWatch(clock, held("100"), [held("101")], ends=True)
    caught_up = held("102", observed=2)
    kube = FakeKube(clock, [[modified(caught_up)]])
    assert handshake(kube).await_handshake(held("100"), watch) == caught_up  # type: ignore[arg-type]
    assert [w["rv"] for w in kube.watches] == ["101"]
    assert clock.now == 1000.0  # nothing waited a window out


@pytest.mark.parametrize("timeout,windows", [(12, [5.0, 5.0, 2.0]), (11, [5.0, 5.0, 1.0])])
def test_on_the_opened_watch_the_wait_is_bounded_in_windows(clock, timeout, windows):
    watch = FakeWatch(clock, held("100"))
    kube = FakeKube(clock)
    state = handshake(kube, timeout=timeout, window=5).await_handshake(held("100"), watch)  # type: ignore[arg-type]
    assert state == held("100")
    assert watch.timeouts == windows
    assert kube.watches == []  # the time is up: no watch of its own


def test_on_the_opened_watch_the_stop_flag_is_heeded_between_windows(clock):
    watch = FakeWatch(clock, held("100"))
    calls: list[int] = []

    def stop() -> bool:
        calls.append(len(watch.timeouts))
        return len(watch.timeouts) >= 2

    with pytest.raises(Stopped):
        handshake(FakeKube(clock), stop=stop).await_handshake(held("100"), watch)  # type: ignore[arg-type]
    assert calls == [0, 1, 2] and watch.timeouts == [5.0, 5.0]


def test_on_the_opened_watch_a_release_without_a_generation_takes_every_state(clock):
    # no generation to tell older states from: whatever the stream carries is the newest
    bare = held("100")
    del bare["metadata"]["generation"]
    going = held("101", deletion_timestamp="2026-11-30T11:59:00Z")
    del going["metadata"]["generation"]
    watch = FakeWatch(clock, going, ends=True)
    kube = FakeKube(clock, [[modified(held("102", observed=2))]])
    assert handshake(kube).await_handshake(bare, watch) == going  # type: ignore[arg-type]
    assert kube.watches == []


def test_on_the_opened_watch_a_state_without_a_generation_is_not_our_acquire(clock):
    # the acquire is generation 1 (first suspend of a fresh release); a state without a
    # generation cannot be shown to be at least as new
    acquired = held("100", generation=1, observed=None)
    bare = held("101", deletion_timestamp="2026-11-30T11:59:00Z")
    del bare["metadata"]["generation"]
    caught_up = held("102", generation=1, observed=1)
    watch = FakeWatch(clock, bare, ends=True)
    kube = FakeKube(clock, [[modified(caught_up)]])
    assert handshake(kube).await_handshake(acquired, watch) == caught_up  # type: ignore[arg-type]
    assert [w["rv"] for w in kube.watches] == ["100"]
