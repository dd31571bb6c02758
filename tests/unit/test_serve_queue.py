"""The serve work queue: de-duplication, serial per key, requeue-after timers, exponential
backoff, shutdown — on a fake clock (plus the pure start-up checks of the serve flags)."""
from __future__ import annotations

import threading
import time

import pytest

from kubectl_flux_plunger.serve.queue import Backoff, WorkQueue

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def q(clock):
    return WorkQueue(backoff=Backoff(1.0, 8.0), clock=clock)


def drain(q) -> list[str]:
    out = []
    while (key := q.get(timeout=0)) is not None:
        out.append(key)
        q.done(key)
    return out


def test_a_key_is_queued_once(q):
    for _ in range(5):
        q.add("ns/a")
    q.add("ns/b")
    assert len(q) == 2
    assert drain(q) == ["ns/a", "ns/b"]
    assert q.get(timeout=0) is None


def test_a_key_in_processing_is_not_handed_out_twice_but_requeued_after_done(q):
    q.add("ns/a")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/a")                        # changed while being processed
    assert q.get(timeout=0) is None      # serial per key: no second worker gets it
    assert q.contains("ns/a")
    q.done("ns/a")
    assert q.get(timeout=0) == "ns/a"    # processed again afterwards
    q.done("ns/a")
    assert q.get(timeout=0) is None


def test_keys_are_parallel_across_keys(q):
    q.add("ns/a")
    q.add("ns/b")
    assert {q.get(timeout=0), q.get(timeout=0)} == {"ns/a", "ns/b"}
    assert q.processing() == 2


def test_add_after_fires_when_due_and_the_earliest_timer_wins(q, clock):
    q.add_after("ns/a", 60)
    q.add_after("ns/a", 10)              # earlier: replaces
    q.add_after("ns/a", 30)              # later: ignored
    assert q.waiting() == 1 and len(q) == 0
    clock.advance(9.9)
    assert q.get(timeout=0) is None
    clock.advance(0.2)
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a")
    clock.advance(100)
    assert q.get(timeout=0) is None      # the replaced 60s timer does not fire again
    assert q.waiting() == 0


def test_add_after_zero_is_an_add(q):
    q.add_after("ns/a", 0)
    assert q.get(timeout=0) == "ns/a"


def test_a_timer_for_a_queued_key_does_not_duplicate_it(q, clock):
    q.add("ns/a")
    q.add_after("ns/a", 1)
    clock.advance(2)
    assert drain(q) == ["ns/a"]


def test_exponential_backoff_is_capped_and_forget_resets_it(q, clock):
    delays = []
    for _ in range(6):
        delays.append(q.add_rate_limited("ns/a"))
        clock.advance(delays[-1])
        assert q.get(timeout=0) == "ns/a"
        q.done("ns/a")
    assert delays == [1, 2, 4, 8, 8, 8]
    assert q.failures("ns/a") == 6
    q.forget("ns/a")
    assert q.failures("ns/a") == 0
    assert q.add_rate_limited("ns/a") == 1


def test_backoff_is_per_key(q):
    q.add_rate_limited("ns/a")
    q.add_rate_limited("ns/a")
    assert q.add_rate_limited("ns/b") == 1
    assert q.failures("ns/a") == 2


def test_backoff_refuses_a_nonsense_configuration():
    with pytest.raises(ValueError):
        Backoff(0, 1)
    with pytest.raises(ValueError):
        Backoff(5, 1)


def test_a_backoff_timer_does_not_postpone_an_earlier_requeue(q, clock):
    q.add_after("ns/a", 2)
    for _ in range(4):
        q.add_rate_limited("ns/a")       # 1, 2, 4, 8: only the 1s one counts
    clock.advance(1)
    assert q.get(timeout=0) == "ns/a"


def test_shutdown_stops_handing_out_work(q, clock):
    q.add("ns/a")
    q.add_after("ns/b", 1)
    q.shutdown()
    clock.advance(5)
    assert q.get(timeout=0) is None
    q.add("ns/c")                        # ignored once shut down
    assert len(q) == 1 and not q.contains("ns/c")
    assert q.shutting_down


class WaitCountingCondition(threading.Condition):
    """The queue's condition, counting the workers blocked in ``wait``."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting += 1                  # the lock is held here
        try:
            return super().wait(timeout)
        finally:
            self.waiting -= 1


def blocking_queue() -> tuple[WorkQueue, WaitCountingCondition]:
    q = WorkQueue()
    q._cond = cond = WaitCountingCondition()
    return q, cond


def wait_blocked(cond: WaitCountingCondition, n: int) -> None:
    """Until ``n`` workers are blocked in ``get`` (deadline 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        with cond:
            if cond.waiting >= n:
                return
        assert time.monotonic() < deadline, f"only {cond.waiting} of {n} workers blocked"
        time.sleep(0.001)


def test_shutdown_wakes_blocked_workers():
    q, cond = blocking_queue()
    got = []
    workers = [threading.Thread(target=lambda: got.append(q.get())) for _ in range(3)]
    for w in workers:
        w.start()
    wait_blocked(cond, 3)
    q.shutdown()
    for w in workers:
        w.join(10)
        assert not w.is_alive()
    assert got == [None, None, None]


def test_a_blocked_worker_wakes_for_a_timer_on_the_real_clock():
    q = WorkQueue()
    q.add_after("ns/a", 0.05)
    started = time.monotonic()
    # a worker that did not wake for the timer would sleep until its 30 s timeout (and
    # then still find the key due): the bound tells the two apart on any machine
    assert q.get(timeout=30) == "ns/a"
    assert time.monotonic() - started < 15


def test_a_blocked_worker_wakes_for_an_add():
    q, cond = blocking_queue()
    got = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=30)))
    t.start()
    wait_blocked(cond, 1)
    q.add("ns/a")
    t.join(10)                         # without the notify it would sleep its 30 s
    assert got == ["ns/a"]


def test_get_with_a_timeout_returns_none(q):
    assert q.get(timeout=0) is None


def test_many_workers_never_process_one_key_at_once():
    q = WorkQueue()
    active: dict[str, int] = {}
    overlap = []
    lock = threading.Lock()
    stop = threading.Event()

    def worker():
        while (key := q.get()) is not None:
            with lock:
                active[key] = active.get(key, 0) + 1
                if active[key] > 1:
                    overlap.append(key)
            time.sleep(0.001)
            with lock:
                active[key] -= 1
            q.done(key)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(400):
        q.add(f"ns/{i % 5}")
    deadline = time.monotonic() + 5
    while (len(q) or q.processing()) and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    q.shutdown()
    for t in threads:
        t.join(2)
    assert overlap == []


# -- the serve flags' start-up checks (pure) ---------------------------------------------

# the short names of these tests -> ServeConfig's fields
_FIELDS = dict(drain="drain_timeout", stop="stop_timeout", lease="lease_duration",
               renew="renew_deadline", retry="retry_period", grace="termination_grace_period",
               resync="resync_period", recheck="fence_recheck", warn_after="fence_warn_after",
               handshake="handshake_timeout", leader_elect="leader_elect")


def _timings(**over):
    """The usage error ServeConfig refuses these timings with, or None."""
    from kubectl_flux_plunger.serve.options import Invalid, ServeConfig
    base = dict(drain=60, stop=10, lease=15, renew=10, retry=2, grace=None, resync=600,
                recheck=60, warn_after=600, handshake=30, leader_elect=True)
    base.update(over)
    try:
        ServeConfig(**{_FIELDS[k]: v for k, v in base.items()})
    except Invalid as exc:
        return str(exc)
    return None


def test_default_timings_are_accepted():
    assert _timings() is None
    assert _timings(grace=75) is None


@pytest.mark.parametrize("over,needle", [
    ({"drain": 0}, "--shutdown-drain-timeout must be positive"),
    ({"stop": -1}, "--shutdown-stop-timeout must be positive"),
    ({"renew": 15}, "--renew-deadline (15s) must be shorter"),
    ({"retry": 9}, "times 1.2"),
    ({"grace": 74}, "exceeds --termination-grace-period (74s)"),
    ({"grace": 0}, "--termination-grace-period must be positive"),
])
def test_impossible_timings_are_named(over, needle):
    assert needle in (_timings(**over) or "")


def test_lease_relations_do_not_matter_without_leader_election():
    assert _timings(renew=20, leader_elect=False) is None


@pytest.mark.parametrize("value,expected", [
    (":8080", ("", 8080)), ("127.0.0.1:9000", ("127.0.0.1", 9000)), ("0", None),
    ("[::1]:8081", ("::1", 8081)),
])
def test_bind_addresses(value, expected):
    from kubectl_flux_plunger.serve.health import parse_bind_address
    assert parse_bind_address(value, "--x") == expected


@pytest.mark.parametrize("value", ["8080", "host:port", ":70000", ""])
def test_bad_bind_addresses(value):
    from kubectl_flux_plunger.serve.health import parse_bind_address
    with pytest.raises(ValueError):
        parse_bind_address(value, "--x")


def test_events_during_a_backoff_wait_for_the_armed_retry():
    """A failed pass's own writes re-trigger the watch; that must not defeat the backoff."""
    now = [0.0]
    q = WorkQueue(backoff=Backoff(1.0, 60.0), clock=lambda: now[0])
    q.add("ns/a")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/a")                       # event while processing: dirty
    assert q.add_rate_limited("ns/a") == 1.0
    q.done("ns/a")
    assert q.get(timeout=0) is None     # not re-queued at once
    q.add("ns/a")                       # another event during the backoff
    assert q.get(timeout=0) is None
    now[0] = 1.0
    assert q.get(timeout=0) == "ns/a"   # the armed retry
    q.forget("ns/a")
    q.done("ns/a")
    q.add("ns/a")                       # after a success, events queue at once again
    assert q.get(timeout=0) == "ns/a"


# -- resourceVersion expectations -----------------------------------------------------------

def test_changes_during_a_pass_that_it_settled_past_do_not_queue_the_key_again(q):
    q.add("ns/a", "100")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/a", "101")                  # the pass's own acquire, helm-controller's handshake
    q.add("ns/a", "103")
    q.done("ns/a", settled="104")         # its relinquish answered at 104: all judged
    assert q.get(timeout=0) is None
    assert not q.contains("ns/a")


@pytest.mark.parametrize("rv", ["105", None, "not-a-number"])
def test_a_change_during_a_pass_newer_than_it_settled_at_or_unordered_queues_it_again(q, rv):
    q.add("ns/a", "100")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/a", "101")
    q.add("ns/a", rv)                     # newer than 104, or not comparable: not judged
    q.done("ns/a", settled="104")
    assert q.get(timeout=0) == "ns/a"


def test_a_pass_that_settled_nothing_is_followed_by_the_changes_it_saw(q):
    q.add("ns/a", "100")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/a", "101")
    q.done("ns/a", settled=None)          # failed, deferred, or wants another pass
    assert q.get(timeout=0) == "ns/a"


def test_a_late_change_the_pass_already_judged_is_skipped_until_the_watch_catches_up(q):
    q.add("ns/a", "100")
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a", settled="104")
    q.add("ns/a", "101")                  # delivered after the pass ended, but older
    q.add("ns/a", "104")                  # the pass's own last write: caught up
    assert q.get(timeout=0) is None and q.skipped == 2
    q.add("ns/a", "103")                  # (out of order: after catching up nothing is skipped)
    assert q.get(timeout=0) == "ns/a"


def test_a_newer_change_after_the_pass_queues_the_key_and_ends_the_expectation(q):
    q.add("ns/a", "100")
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a", settled="104")
    q.add("ns/a", "107")
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a")
    q.add("ns/a", "102")
    assert q.get(timeout=0) == "ns/a"     # the expectation ended with 107


def test_the_watch_catching_up_ends_the_expectation(q):
    q.add("ns/a", "100")
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a", settled="104")
    q.caught_up("105")                    # e.g. helm-controller's Ready=True, not queued
    q.add("ns/a", "103")
    assert q.get(timeout=0) == "ns/a" and q.skipped == 0


def test_no_expectation_is_kept_when_the_watch_is_already_past_the_pass(q):
    q.add("ns/a", "100")
    assert q.get(timeout=0) == "ns/a"
    q.caught_up("104")                    # the pass's last write, already delivered
    q.done("ns/a", settled="104")
    q.add("ns/a", "102")
    assert q.get(timeout=0) == "ns/a" and q.skipped == 0


def test_a_no_write_pass_settled_at_its_read_keeps_no_expectation(q):
    q.add("ns/a", "100")                  # the event the pass reads is already delivered
    q.caught_up("100")
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a", settled="100")
    assert q._settled == {}               # nothing left to skip, nothing kept


def test_a_sync_starting_drops_every_expectation(q):
    for key in ("ns/a", "ns/b"):
        q.add(key, "100")
        assert q.get(timeout=0) == key
        q.done(key, settled="104")
    q.caught_up("103")                    # still behind both
    assert set(q._settled) == {"ns/a", "ns/b"}
    q.relisting()                         # a new stream (its rvs may not follow: a restore)
    q.add("ns/a", "101")
    assert q.get(timeout=0) == "ns/a" and q._settled == {}


def test_a_pass_during_a_sync_folds_the_syncs_copy_and_outlives_its_end(q):
    """A start-up hint's pass settles (its relinquish at 120) while the sync still streams:
    the sync's copy of the release (read before, at 90) is the older state, folded; the
    sync ends at 100 and the stream then delivers the pass's own writes (110, 120): judged,
    not queued; a change after them is."""
    q.relisting()
    assert q.add_first("ns/hinted")
    assert q.get(timeout=0) == "ns/hinted"
    q.add("ns/hinted", "90")              # the sync reaches it mid-pass
    q.done("ns/hinted", settled="120")
    assert q.get(timeout=0) is None
    q.add("ns/hinted", "90")              # (or after the pass)
    q.caught_up("100")                    # the initial-events bookmark
    q.add("ns/hinted", "110")
    q.add("ns/hinted", "120")
    assert q.get(timeout=0) is None and q.skipped == 3
    q.add("ns/hinted", "130")
    assert q.get(timeout=0) == "ns/hinted"


def test_a_sync_item_newer_than_the_pass_is_queued(q):
    q.relisting()
    q.add_first("ns/a")
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a", settled="120")
    q.add("ns/a", "121")                  # changed since the pass: a new state
    assert q.get(timeout=0) == "ns/a"


def test_add_first_goes_ahead_of_every_queued_key_and_moves_a_waiting_one(q):
    for key in ("ns/a", "ns/b", "ns/c"):
        q.add(key)
    assert q.add_first("ns/z") and q.add_first("ns/c")      # c moves up, z stays first
    assert q.add_first("ns/z")                              # already ahead: stays put
    assert len(q) == 4
    assert [q.get(timeout=0) for _ in range(4)] == ["ns/z", "ns/c", "ns/a", "ns/b"]
    assert q.adds == 4                                      # c moved, not added twice


def test_add_first_leaves_a_key_the_sync_queued_to_it_once_its_pass_began(q):
    q.relisting()
    q.add("ns/a", "5", listed=True)
    q.add("ns/b", "6", listed=True)
    assert q.add_first("ns/b")            # still waiting: it moves up, nothing more
    assert q.get(timeout=0) == "ns/b"
    q.done("ns/b", settled="9")
    assert not q.add_first("ns/b")        # the sync got there first and its pass is over
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a")
    q.relisting()                         # the next sync forgets what the last one queued
    assert q.add_first("ns/b") and q.get(timeout=0) == "ns/b"


def test_add_first_leaves_a_key_in_a_pass_or_backing_off_alone(q, clock):
    q.add("ns/a")
    assert q.get(timeout=0) == "ns/a"
    assert not q.add_first("ns/a")        # its pass is running: not queued again
    q.done("ns/a")
    assert q.get(timeout=0) is None
    q.add_rate_limited("ns/b")            # failed before: its retry is armed
    assert not q.add_first("ns/b") and q.get(timeout=0) is None
    clock.advance(1)
    assert q.get(timeout=0) == "ns/b"
    q.shutdown()
    assert not q.add_first("ns/c")


def test_add_behind_waits_behind_every_live_key_even_those_queued_after_it(q, clock):
    """issue 58: the catch-all's candidates never hold up a live change."""
    for key in ("ns/c1", "ns/c2", "ns/c3"):
        q.add_behind(key, "5")
    q.add("ns/live")                       # a release becomes stuck while they wait
    q.add_after("ns/timer", 1)
    clock.advance(1)
    assert q.add_first("ns/hint")
    assert len(q) == q.sizes()["ready"] == 5 and q.adds == 5
    assert drain(q) == ["ns/hint", "ns/live", "ns/timer", "ns/c1", "ns/c2", "ns/c3"]


def test_a_live_change_moves_a_key_waiting_behind_up_and_behind_leaves_a_queued_key_alone(q):
    for key in ("ns/c1", "ns/c2", "ns/c3"):
        q.add_behind(key)
    q.add("ns/a")
    q.add("ns/c3", "7")                    # a live change of a candidate: up with the others
    q.add("ns/c3", "8")                    # and another: it is already up
    q.add_behind("ns/a")                   # already queued live: stays where it is
    assert q.add_first("ns/c2")            # a hint moves a candidate ahead of all
    assert len(q) == 4 and q.adds == 4
    assert drain(q) == ["ns/c2", "ns/a", "ns/c3", "ns/c1"]


def test_a_key_waiting_behind_is_handed_out_only_while_no_live_key_is_processed(q):
    q.add("ns/live")
    q.add_behind("ns/c1")
    q.add_behind("ns/c2")
    assert q.get(timeout=0) == "ns/live"
    assert q.get(timeout=0) is None        # a free worker waits: nothing runs beside it
    assert len(q) == 2 and q.sizes()["live"] == 1
    q.done("ns/live")
    assert q.get(timeout=0) == "ns/c1"
    assert q.get(timeout=0) is None        # one candidate at a time: a worker stays free
    assert q.sizes()["behind_taken"] == 1
    q.add("ns/new")                        # a live change while a candidate runs: at once
    assert q.get(timeout=0) == "ns/new"
    q.done("ns/c1")
    assert q.get(timeout=0) is None        # the live pass runs: the next candidate waits
    q.done("ns/new")
    assert q.get(timeout=0) == "ns/c2"
    q.done("ns/c2")
    assert q.sizes()["live"] == q.sizes()["behind_taken"] == q.processing() == 0
    q.add("ns/c1")                         # a candidate that was taken is no longer behind
    q.add("ns/c1")
    assert q.add_first("ns/c1") and drain(q) == ["ns/c1"]


def woken(q: WorkQueue, cond: WaitCountingCondition, change) -> list:
    """What a worker blocked in ``get`` (30 s timeout) takes once ``change()`` ran: without
    the notify that change owes it, it would sleep its 30 s and the join would time out."""
    got = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=30)))
    t.start()
    wait_blocked(cond, 1)
    assert got == []
    change()
    t.join(10)
    return got


def test_a_worker_waiting_for_a_key_behind_wakes_when_the_live_pass_ends():
    q, cond = blocking_queue()
    q.add("ns/live")
    assert q.get(timeout=0) == "ns/live"
    q.add_behind("ns/c")
    assert woken(q, cond, lambda: q.done("ns/live")) == ["ns/c"]


def test_a_worker_waiting_for_the_next_key_behind_wakes_when_the_candidate_ends():
    q, cond = blocking_queue()
    q.add_behind("ns/c1")
    q.add_behind("ns/c2")
    assert q.get(timeout=0) == "ns/c1"
    assert woken(q, cond, lambda: q.done("ns/c1")) == ["ns/c2"]


def test_a_live_change_of_a_key_waiting_behind_wakes_a_free_worker():
    q, cond = blocking_queue()
    q.add("ns/live")
    assert q.get(timeout=0) == "ns/live"   # a long pass (a slow acknowledgement)
    q.add_behind("ns/c")                   # the free worker does not take it beside live
    assert woken(q, cond, lambda: q.add("ns/c", "9")) == ["ns/c"]   # the watch: it changed


def test_a_due_timer_moves_a_key_waiting_behind_up(q, clock):
    q.add("ns/k")
    assert q.get(timeout=0) == "ns/k"
    q.add_after("ns/k", 5)                 # deferred: its retry armed, no failure counted
    q.done("ns/k")
    q.add_behind("ns/k")                   # still stuck: a candidate of the next pass
    q.add("ns/live")
    assert q.get(timeout=0) == "ns/live"
    clock.advance(5)
    assert q.get(timeout=0) == "ns/k"      # its own time came: a live key now


def test_a_key_the_catch_all_queues_during_its_pass_goes_behind_again_a_live_one_up(q):
    q.add("ns/k")
    q.add("ns/j")
    assert [q.get(timeout=0), q.get(timeout=0)] == ["ns/k", "ns/j"]
    q.add_behind("ns/k", "5")              # the catch-all, while k's pass runs
    q.add_behind("ns/j", "5")
    q.add("ns/j", "6")                     # and a live change of j
    q.add("ns/live")
    q.done("ns/k")
    q.done("ns/j")
    assert q.sizes()["dirty_behind"] == 0
    assert drain(q) == ["ns/live", "ns/j", "ns/k"]


def test_add_behind_folds_what_a_pass_judged_and_leaves_a_backoff_or_a_pass_to_itself(q, clock):
    q.caught_up("10")
    q.add("ns/a", "9")
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a", settled="20")           # settled ahead of the watch
    q.add_behind("ns/a", "20")             # the state that pass judged: folded
    assert q.skipped == 1 and q.get(timeout=0) is None
    q.add_rate_limited("ns/b")             # failed before: its retry is armed
    q.add_behind("ns/b")
    assert q.get(timeout=0) is None
    q.add("ns/c")
    assert q.get(timeout=0) == "ns/c"
    q.add_behind("ns/c")                   # its pass runs: once more after it, not twice
    assert q.get(timeout=0) is None
    q.done("ns/c")
    assert q.get(timeout=0) == "ns/c"
    q.done("ns/c")
    q.shutdown()
    q.add_behind("ns/d")
    assert q.sizes()["dirty"] == 0


def test_keys_without_a_resource_version_and_timers_are_never_skipped(q, clock):
    q.add("ns/a", "100")
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a", settled="104")
    q.add("ns/a")                         # an explicit requeue
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a", settled="104")
    q.add_after("ns/a", 5)
    clock.advance(5)
    assert q.get(timeout=0) == "ns/a"
    q.done("ns/a")

