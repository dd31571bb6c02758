"""LeaderElector's state machine on a fake Lease store and a fake clock: acquire, renew, a
Lease held by another, stealing only after it expired on *our* clock, conflicts, losing the
Lease after the renew deadline, giving up on stop, and releasing it on a clean stop.

The apiserver tier runs the same elector against a real Lease (tests/apiserver/test_serve_leader.py);
these tests pin the timing rules without waiting for real time."""

from __future__ import annotations

import copy
import datetime as dt
import threading

import pytest

from kubectl_flux_plunger.kube import KubeError
from kubectl_flux_plunger.serve.leader import LeaderElector
from kubectl_flux_plunger.serve.options import LeaseConfig, LeaseTimings

pytestmark = pytest.mark.unit

NS, NAME = "flux-system", "flux-plunger.cozystack.io"
LEASE, RENEW, RETRY = 15.0, 10.0, 2.0
WALL = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Leases:
    """One namespace's Leases as the apiserver keeps them: a resourceVersion per write, a PUT
    with a stale resourceVersion is a 409, a create of an existing name is a 409."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.rv = 0
        self.writes = 0
        self.fail: KubeError | None = None  # raised by every call while set

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def _stored(self, body: dict) -> dict:
        self.rv += 1
        self.writes += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[stored["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def get_lease(self, namespace: str, name: str) -> dict | None:
        self._check()
        obj = self.objects.get(name)
        return copy.deepcopy(obj) if obj is not None else None

    def create_lease(self, namespace: str, body: dict) -> dict:
        self._check()
        if body["metadata"]["name"] in self.objects:
            raise KubeError(409, "AlreadyExists", "leases already exists")
        return self._stored(body)

    def update_lease(self, namespace: str, name: str, body: dict) -> dict:
        self._check()
        current = self.objects.get(name)
        if current is None:
            raise KubeError(404, "NotFound", "leases not found", {"details": {"name": name}})
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise KubeError(409, "Conflict", "the object has been modified")
        return self._stored(body)

    # -- what another instance does ----------------------------------------------------

    def held_by(self, holder: str, renew: str = "2026-11-30T11:59:59.000000Z",
                duration: int = 15) -> None:
        body = {"metadata": {"name": NAME, "namespace": NS},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                         "acquireTime": renew, "renewTime": renew, "leaseTransitions": 3}}
        if NAME in self.objects:
            body["metadata"]["resourceVersion"] = self.objects[NAME]["metadata"]["resourceVersion"]
            Leases.update_lease(self, NS, NAME, body)   # not a test's stand-in
        else:
            Leases.create_lease(self, NS, body)

    def spec(self) -> dict:
        return self.objects[NAME]["spec"]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def leases() -> Leases:
    return Leases()


def elector(leases: Leases, clock: Clock, ident: str = "me", **kw) -> LeaderElector:
    annotations = kw.pop("annotations", None) or {}
    lease = LeaseConfig(NS, NAME, ident, LeaseTimings(LEASE, RENEW, RETRY), annotations)
    return LeaderElector(leases, lease, clock=clock, wall=lambda: WALL, **kw)


def lead(e: LeaderElector) -> None:
    """What run() does once an attempt succeeded."""
    assert e.try_acquire_or_renew()
    e.leading.set()


def test_acquires_a_missing_lease_by_creating_it(leases, clock):
    e = elector(leases, clock)
    assert e.try_acquire_or_renew()
    spec = leases.spec()
    assert spec["holderIdentity"] == "me"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["acquireTime"] == spec["renewTime"] == "2026-11-30T12:00:00.000000Z"
    assert spec["leaseTransitions"] == 0
    assert e.holder() == "me"


def test_acquires_a_released_lease_at_once_and_counts_a_transition(leases, clock):
    leases.held_by("", duration=1)
    e = elector(leases, clock)
    assert e.try_acquire_or_renew()
    assert leases.spec()["holderIdentity"] == "me"
    assert leases.spec()["leaseTransitions"] == 4


def test_renewing_moves_renew_time_and_keeps_acquire_time(leases, clock):
    e = elector(leases, clock)
    lead(e)
    first = copy.deepcopy(leases.spec())
    later = WALL + dt.timedelta(seconds=2)
    e.wall = lambda: later
    clock.advance(RETRY)
    assert e.try_acquire_or_renew()
    spec = leases.spec()
    assert spec["acquireTime"] == first["acquireTime"]
    assert spec["renewTime"] == "2026-11-30T12:00:02.000000Z"
    assert spec["leaseTransitions"] == 0
    assert e.is_leader()


def test_a_lease_held_by_another_is_not_taken_before_it_expires_on_our_clock(leases, clock):
    leases.held_by("other")
    e = elector(leases, clock)
    assert not e.try_acquire_or_renew()          # first sight: the expiry clock starts now
    clock.advance(LEASE - 0.1)
    assert not e.try_acquire_or_renew()
    assert leases.spec()["holderIdentity"] == "other"
    assert e.holder() == "other"
    clock.advance(0.1)                           # LEASE seconds without a change: expired
    assert e.try_acquire_or_renew()
    assert leases.spec()["holderIdentity"] == "me"
    assert leases.spec()["leaseTransitions"] == 4


def test_a_renewing_holder_restarts_the_expiry_clock(leases, clock):
    leases.held_by("other")
    e = elector(leases, clock)
    assert not e.try_acquire_or_renew()
    clock.advance(LEASE - 1)
    leases.held_by("other", renew="2026-11-30T12:00:14.000000Z")   # the holder renewed
    assert not e.try_acquire_or_renew()
    clock.advance(LEASE - 1)                     # 2*LEASE-2 since first sight, LEASE-1 since renewal
    assert not e.try_acquire_or_renew()
    clock.advance(1)
    assert e.try_acquire_or_renew()


def test_the_holder_s_lease_duration_counts_not_ours(leases, clock):
    leases.held_by("other", duration=40)
    e = elector(leases, clock)
    assert not e.try_acquire_or_renew()
    clock.advance(LEASE)
    assert not e.try_acquire_or_renew()          # our 15 s are not its 40 s
    clock.advance(40 - LEASE)
    assert e.try_acquire_or_renew()


def test_a_write_landing_in_between_is_a_lost_attempt_not_an_error(leases, clock):
    leases.held_by("", duration=1)
    e = elector(leases, clock)
    real_update = leases.update_lease

    def racing_update(namespace, name, body):
        leases.held_by("other")                  # someone else wrote after our read
        return real_update(namespace, name, body)

    leases.update_lease = racing_update
    assert not e.try_acquire_or_renew()
    assert leases.spec()["holderIdentity"] == "other"


def test_a_create_race_is_a_lost_attempt(leases, clock):
    e = elector(leases, clock)
    real_create = leases.create_lease

    def racing_create(namespace, body):
        leases.held_by("other")
        return real_create(namespace, body)

    leases.create_lease = racing_create
    assert not e.try_acquire_or_renew()
    assert leases.spec()["holderIdentity"] == "other"


def test_an_api_failure_is_a_failed_attempt(leases, clock):
    e = elector(leases, clock)
    leases.fail = KubeError(503, "ServiceUnavailable", "etcdserver: leader changed")
    assert not e.try_acquire_or_renew()
    assert not leases.objects


def test_a_leader_whose_copy_is_stale_re_reads_and_keeps_the_lease(leases, clock):
    e = elector(leases, clock)
    lead(e)
    leases.objects[NAME]["metadata"]["resourceVersion"] = "999"   # e.g. a label added by a user
    clock.advance(RETRY)
    assert e.try_acquire_or_renew()
    assert leases.spec()["holderIdentity"] == "me"


def test_the_renew_deadline_counts_from_when_the_renewal_was_sent(leases, clock):
    e = elector(leases, clock)
    lead(e)
    real_update = leases.update_lease

    def slow(namespace, name, body):      # the answer arrives 3 s after the write went out
        clock.advance(3.0)
        return real_update(namespace, name, body)

    leases.update_lease = slow
    clock.advance(RETRY)
    sent = clock()
    assert e.try_acquire_or_renew()
    clock.now = sent + RENEW - 0.1
    assert e.is_leader()
    clock.now = sent + RENEW              # not sent + 3 s + RENEW: a follower saw the write
    assert not e.is_leader()


def test_a_deleted_lease_is_created_again_by_its_leader(leases, clock):
    e = elector(leases, clock)
    lead(e)
    del leases.objects[NAME]              # the fast path's PUT answers 404
    clock.advance(RETRY)
    assert e.try_acquire_or_renew()
    assert leases.spec()["holderIdentity"] == "me" and e.is_leader()


def test_run_stops_leading_at_once_when_another_instance_holds_the_lease(leases, clock):
    started, lost = threading.Event(), threading.Event()
    e = LeaderElector(leases, LeaseConfig(NS, NAME, "me", LeaseTimings(LEASE, RENEW, 0.001)),
                      clock=clock, wall=lambda: WALL,
                      on_started=started.set, on_lost=lost.set)
    t = threading.Thread(target=e.run, args=(threading.Event(),), daemon=True)
    t.start()
    assert started.wait(5)
    # the Lease deleted and created again by another instance, between two renewals
    del leases.objects[NAME]
    leases.held_by("other")
    assert lost.wait(5), "kept leading while another instance held the Lease"
    t.join(5)
    assert not t.is_alive()
    assert e.lost.is_set() and not e.leading.is_set() and not e.is_leader()
    assert leases.spec()["holderIdentity"] == "other"    # and it never wrote over the other


def test_is_leader_turns_false_once_the_renew_deadline_passed(leases, clock):
    e = elector(leases, clock)
    lead(e)
    clock.advance(RENEW - 0.1)
    assert e.is_leader()
    clock.advance(0.1)
    assert not e.is_leader()


def test_run_loses_the_lease_when_no_renewal_succeeds_within_the_deadline(leases, clock):
    started, lost = threading.Event(), threading.Event()
    e = LeaderElector(leases, LeaseConfig(NS, NAME, "me", LeaseTimings(LEASE, RENEW, 0.001)),
                      clock=clock, wall=lambda: WALL,
                      on_started=started.set, on_lost=lost.set)
    attempts: list[float] = []
    real_check = leases._check

    def failing(*_):
        # once leadership began every request fails, and each costs 1 s on the fake clock
        if started.is_set():
            attempts.append(clock())
            clock.advance(1.0)
            raise KubeError(0, "Unreachable", "connection refused")
        real_check()

    leases._check = failing
    stop = threading.Event()
    t = threading.Thread(target=e.run, args=(stop,))
    t.start()
    assert lost.wait(5), "never lost the Lease"
    t.join(5)
    assert not t.is_alive()
    assert e.lost.is_set() and not e.leading.is_set() and e.ever_led
    assert not e.is_leader()
    # it kept trying until the renew deadline had passed, and stopped right there
    assert attempts[-1] - attempts[0] == pytest.approx(RENEW - 1.0)
    assert not e.release()                       # a lost Lease is never written again


def test_run_gives_up_on_stop_while_another_instance_holds_the_lease(leases, clock):
    leases.held_by("other")
    e = elector(leases, clock)
    e.retry_period = 0.001
    tried = threading.Event()
    real_get = leases.get_lease

    def get(namespace, name):
        tried.set()
        return real_get(namespace, name)

    leases.get_lease = get
    stop = threading.Event()
    t = threading.Thread(target=e.run, args=(stop,))
    t.start()
    assert tried.wait(5)
    stop.set()
    t.join(5)
    assert not t.is_alive()
    assert not e.ever_led and not e.leading.is_set()
    assert leases.spec()["holderIdentity"] == "other"
    assert not e.release()                       # never led: nothing to release


def test_release_gives_the_lease_up_for_an_immediate_successor(leases, clock):
    started = threading.Event()
    e = LeaderElector(leases, LeaseConfig(NS, NAME, "me", LeaseTimings(LEASE, RENEW, 0.001)),
                      clock=clock, wall=lambda: WALL, on_started=started.set)
    t = threading.Thread(target=e.run, args=(threading.Event(),))
    t.start()
    assert started.wait(5)
    assert e.release()
    t.join(5)
    assert not t.is_alive()
    spec = leases.spec()
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    writes = leases.writes
    assert not e.try_acquire_or_renew()          # released: never writes again
    assert leases.writes == writes
    successor = elector(leases, clock, ident="next")
    assert successor.try_acquire_or_renew()      # no waiting for expiry
    assert leases.spec()["holderIdentity"] == "next"


def test_release_does_not_touch_a_lease_someone_else_took(leases, clock):
    started = threading.Event()
    e = LeaderElector(leases, LeaseConfig(NS, NAME, "me", LeaseTimings(LEASE, RENEW, 0.001)),
                      clock=clock, wall=lambda: WALL, on_started=started.set)
    t = threading.Thread(target=e.run, args=(threading.Event(),))
    t.start()
    assert started.wait(5)
    leases.held_by("other")                      # e.g. after a long pause of this process
    assert not e.release()
    t.join(5)
    assert not t.is_alive()
    assert leases.spec()["holderIdentity"] == "other"


def test_the_lease_records_what_this_instance_watches_on_create_and_takeover(leases, clock):
    """Sharding: serve writes its selector and namespace scope on its Lease (status reads
    them to say which controller covers a release); renewals keep them."""
    scope = {"flux-plunger.cozystack.io/selector": "sharding.fluxcd.io/key in (a,b)",
             "flux-plunger.cozystack.io/watch-namespace": ""}
    e = elector(leases, clock, annotations=scope)
    lead(e)
    assert leases.objects[NAME]["metadata"]["annotations"] == scope
    assert e.try_acquire_or_renew()  # a renewal
    assert leases.objects[NAME]["metadata"]["annotations"] == scope
    # a Lease another shard configuration wrote first: taken over with our scope
    other = Leases()
    other.held_by("")
    other.objects[NAME]["metadata"]["annotations"] = {"keep": "me",
                                                      "flux-plunger.cozystack.io/selector": "x"}
    e2 = elector(other, clock, annotations=scope)
    lead(e2)
    assert other.objects[NAME]["metadata"]["annotations"] == {"keep": "me", **scope}


def test_a_release_that_keeps_failing_stops_within_one_retry_period(leases, clock):
    e = LeaderElector(leases, LeaseConfig(NS, NAME, "me", LeaseTimings(LEASE, RENEW, 0.001)),
                      clock=clock, wall=lambda: WALL)
    lead(e)
    e._renew_done.set()                          # run() never started: nothing in flight
    tries: list[float] = []

    def unreachable(namespace, name):
        tries.append(clock())
        clock.advance(0.6)                       # each try costs 0.6 s of its 1 s bound
        raise KubeError(0, "Unreachable", "connection refused")

    leases.get_lease = unreachable
    assert not e.release()
    assert tries == [100.0, 100.6]               # the third would start past the bound
    assert leases.spec()["holderIdentity"] == "me"
