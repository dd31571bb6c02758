"""Two ``serve`` processes on one Lease: only the leader acts; SIGTERM hands over at once;
SIGKILL makes the follower wait for the Lease to expire."""
from __future__ import annotations

import signal
import time

from testplane.cluster import SimulatedHelmController, eventually

from .test_serve_support import FAST, holder, recovered, serve, stuck  # noqa: F401

LEASE_SECONDS = 3.0     # FAST's --lease-duration
RETRY_SECONDS = 0.5     # FAST's --retry-period


def _pair(serve, ns, kube, *extra):  # noqa: F811
    a = serve("-n", ns, "--leader-election-namespace", ns, *FAST, *extra, name="first")
    eventually(a.leads, 30, "the first instance leads")
    b = serve("-n", ns, "--leader-election-namespace", ns, *FAST, *extra, name="second")
    eventually(b.ready, 30, "the second instance ready (a synced follower)")
    assert holder(kube, ns) == a.identity
    assert b.metric("flux_plunger_leader") == 0.0
    return a, b


def test_only_the_leader_acts(cluster, kube, ns, serve):  # noqa: F811
    a, b = _pair(serve, ns, kube)
    with SimulatedHelmController(cluster, ns):
        stuck(cluster, ns, "demo")
        eventually(lambda: recovered(cluster, ns, "demo"), 30, "recovered")
    assert a.metric("flux_plunger_recoveries_total", result="recovered") == 1.0
    assert b.metric("flux_plunger_recoveries_total", result="recovered") == 0.0
    # the follower watched but wrote nothing to any HelmRelease or Secret
    for verb in ("APPLY", "PATCH", "DELETE"):
        assert b.metric("flux_plunger_api_requests_total", verb=verb) is None, verb
    assert not b.logged(r"recovered: ")
    assert holder(kube, ns) == a.identity


def test_sigterm_hands_the_lease_over_at_once(cluster, kube, ns, serve):  # noqa: F811
    # a long Lease: a hand-over within the bound cannot come from expiry
    a, b = _pair(serve, ns, kube, "--lease-duration", "15s", "--renew-deadline", "5s")
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0
    assert a.logged("released the Lease")
    # released on stop: the follower takes it on its next retry, well before the 15 s Lease
    # could have expired (the hand-over time itself is measured by bench/serve_bench.py)
    eventually(lambda: holder(kube, ns) == b.identity, 10, "the follower holds the Lease")
    eventually(b.leads, 5, "the follower acts as leader")
    # and it does act
    with SimulatedHelmController(cluster, ns):
        stuck(cluster, ns, "after")
        eventually(lambda: recovered(cluster, ns, "after"), 30, "recovered by the new leader")


def test_sigkill_the_follower_waits_for_the_lease_to_expire(cluster, kube, ns, serve):  # noqa: F811
    a, b = _pair(serve, ns, kube)
    a.signal(signal.SIGKILL)
    a.wait(10)
    killed = time.monotonic()
    eventually(lambda: holder(kube, ns) == b.identity, 20, "the follower holds the Lease")
    took = time.monotonic() - killed
    # The follower counts the Lease duration from the last renewal it saw, which was at
    # most one retry period (with jitter) before the kill.
    assert took >= LEASE_SECONDS - 1.2 * RETRY_SECONDS - 0.2, \
        f"took over after {took:.2f}s, before the {LEASE_SECONDS}s Lease expired"
    assert not a.logged("released the Lease")


def test_a_leader_that_lost_the_lease_stops_without_draining(cluster, kube, ns, serve):  # noqa: F811
    a, b = _pair(serve, ns, kube)
    a.signal(signal.SIGSTOP)            # frozen: no renewals
    try:
        eventually(lambda: holder(kube, ns) == b.identity, 20, "the follower took over")
    finally:
        a.signal(signal.SIGCONT)
    # on waking, its last renewal is older than the renew deadline: it has lost the Lease and
    # must neither act nor drain (the new leader owns the fences now)
    assert a.wait(20) == 1
    assert a.logged("lost the Lease")
    assert not a.logged("drain: ")
    assert holder(kube, ns) == b.identity
