"""The drain on SIGTERM, as a real ``serve`` process against the real apiserver.

To catch the drain (not the normal loop) acting on a release, the one worker is kept busy by
a recovery that waits for a helm-controller that never acknowledges (its namespace has no
simulated helm-controller); everything else queued behind it is left to the drain.  The
SIGTERM also aborts that in-flight recovery before its delete."""
from __future__ import annotations

import signal
import uuid

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core.detect import is_suspended
from kubectl_flux_plunger.core.ownership import owns_suspend, suspend_owners
from testplane.cluster import OPERATOR, SimulatedHelmController, eventually

from .test_serve_support import FAST, hold, holder, serve, stuck  # noqa: F401


def _fences(hr) -> int:
    return (hr["metadata"].get("finalizers") or []).count(C.FENCE)


def test_drain_on_sigterm(cluster, kube, ns, serve):  # noqa: F811
    quiet = cluster.namespace("quiet")     # no helm-controller answers here
    label = {"fp-drain": uuid.uuid4().hex[:8]}
    sel = f"fp-drain={label['fp-drain']}"
    s = serve("-l", sel, "--workers", "1", "--leader-election-namespace", quiet, *FAST,
              "--handshake-timeout", "120s", "--shutdown-drain-timeout", "8s")
    eventually(s.leads, 30, "leading")

    # 1. keep the one worker busy: a recovery waiting for a handshake that never comes
    stuck(cluster, quiet, "blocker", labels=label)
    eventually(lambda: owns_suspend(cluster.get(quiet, "blocker")), 20,
               "the blocker suspended by flux-plunger (worker in the handshake wait)")

    # 2. releases the drain must handle (queued behind the busy worker)
    cluster.create_hr(ns, "live-held", labels=label)
    hold(cluster, ns, "live-held")                       # a live recovery of ours
    cluster.create_hr(ns, "fence-only", labels=label)
    hold(cluster, ns, "fence-only", suspend=False)       # fence without suspension
    cluster.create_hr(ns, "foreign", labels=label)
    cluster.suspend(ns, "foreign", manager=OPERATOR)
    hold(cluster, ns, "foreign", suspend=False)          # someone else's suspension + our fence
    cluster.create_hr(ns, "deleting", labels=label)
    cluster.storage(ns, "deleting", [(1, "deployed")])
    hold(cluster, ns, "deleting")                        # ours, then deleted
    cluster.delete_hr(ns, "deleting")
    cluster.create_hr(quiet, "never", labels=label)
    hold(cluster, quiet, "never", suspend=False)
    cluster.delete_hr(quiet, "never")                    # helm-controller never answers
    assert s.alive() and s.logged("processing HelmReleases")

    s.signal(signal.SIGTERM)

    # the in-flight recovery was aborted before its delete, and let go
    def blocker_released():
        hr = cluster.get(quiet, "blocker")
        return not is_suspended(hr) and _fences(hr) == 0
    eventually(blocker_released, 10, "the in-flight recovery aborted and relinquished")
    assert "sh.helm.release.v1.blocker.v2" in cluster.secret_names(quiet, "blocker")

    # first pass of the drain: everything not waiting on helm-controller goes at once
    def first_pass():
        live, only = cluster.get(ns, "live-held"), cluster.get(ns, "fence-only")
        foreign, deleting = cluster.get(ns, "foreign"), cluster.get(ns, "deleting")
        return (not is_suspended(live) and _fences(live) == 0 and _fences(only) == 0
                and _fences(foreign) == 0 and deleting is not None
                and not is_suspended(deleting))
    eventually(first_pass, 10, "the drain's first pass")
    assert s.alive(), "the first pass took the whole drain"
    # another manager's suspension stays, with its owner
    foreign = cluster.get(ns, "foreign")
    assert foreign["spec"]["suspend"] is True
    assert suspend_owners(foreign) == [(OPERATOR, "Update")]
    assert any(e["reason"] == "SuspensionNotOwned" for e in cluster.events(ns, "foreign"))
    # the deleted release: our suspension lifted, the fence kept while helm-controller has
    # not reconciled the unsuspended release
    deleting = cluster.get(ns, "deleting")
    assert _fences(deleting) == 1 and deleting["metadata"].get("deletionTimestamp")
    assert C.HELM_CONTROLLER_FINALIZER in deleting["metadata"]["finalizers"]
    # several more drain passes with no answer from helm-controller: still held.  Each pass
    # reads "deleting" and "never" afresh (two results "waiting"); none LISTs — the drain
    # started from the keys the watch knew, and the confirming LIST waits until they are done
    def waiting() -> float:
        return s.metric("flux_plunger_reconciles_total", result="waiting") or 0
    lists = s.metric("flux_plunger_api_requests_total", verb="LIST") or 0
    seen = waiting()
    eventually(lambda: waiting() >= seen + 6, 10, "three more drain passes")
    deleting = cluster.get(ns, "deleting")
    assert deleting is not None and _fences(deleting) == 1
    assert (s.metric("flux_plunger_api_requests_total", verb="LIST") or 0) == lists
    assert s.logged("drain: releasing .*source=watch")

    # helm-controller answers: it uninstalls (the release is no longer suspended), records
    # observedGeneration and drops its finalizer; only then does the fence go
    with SimulatedHelmController(cluster, ns) as hc:
        eventually(lambda: cluster.get(ns, "deleting") is None, 10,
                   "the fence lifted after the uninstall and the object gone")
    assert hc.uninstalled == ["deleting"] and hc.dropped_without_uninstall == []
    assert cluster.secret_names(ns, "deleting") == []

    # the release helm-controller never answered keeps its fence, and the log says so
    assert s.wait(30) == 0
    assert s.logged(r"stopped with 1 uninstall fence\(s\) still held")
    never = cluster.get(quiet, "never")
    assert never is not None and _fences(never) == 1
    assert holder(kube, quiet) == ""          # the Lease given up after the drain
    assert s.logged("released the Lease")
    cluster.remove_finalizer(quiet, "never", C.FENCE)


def test_a_follower_never_drains(cluster, kube, ns, serve):  # noqa: F811
    slow = ("--lease-duration", "30s", "--renew-deadline", "10s")  # no take-over meanwhile
    a = serve("-n", ns, "--leader-election-namespace", ns, *FAST, *slow, name="leader")
    eventually(a.leads, 30, "first leads")
    b = serve("-n", ns, "--leader-election-namespace", ns, *FAST, *slow, name="follower")
    eventually(b.ready, 30, "follower ready")
    a.signal(signal.SIGSTOP)      # the leader freezes: its Lease is still valid for a while
    try:
        cluster.create_hr(ns, "fenced")
        hold(cluster, ns, "fenced", suspend=False)
        b.signal(signal.SIGTERM)
        assert b.wait(20) == 0
        assert b.logged("never became leader; leaving the fences to the leader")
        assert _fences(cluster.get(ns, "fenced")) == 1
    finally:
        a.signal(signal.SIGCONT)


def test_second_signal_exits_at_once(cluster, ns, serve):  # noqa: F811
    quiet = cluster.namespace("quiet")
    # fenced and deleted before serve starts (a live fenced release would lose its fence)
    cluster.create_hr(quiet, "never")
    hold(cluster, quiet, "never", suspend=False)
    cluster.delete_hr(quiet, "never")          # nobody answers: the drain would take 60s
    s = serve("-n", quiet, "--leader-election-namespace", quiet, *FAST,
              "--shutdown-drain-timeout", "60s")
    eventually(s.leads, 30, "leading")
    eventually(lambda: s.logged(r"waiting: .*never"), 15, "the held delete seen")
    s.signal(signal.SIGTERM)
    eventually(lambda: s.logged("drain: releasing"), 15, "draining")
    s.signal(signal.SIGINT)
    assert s.wait(5) == 1
    assert s.logged("again: exiting at once")
    cluster.remove_finalizer(quiet, "never", C.FENCE)
