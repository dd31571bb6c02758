"""What ``recover -n NS NAME`` really sends, end to end, read from the apiserver's audit log
(not from the client's own counters): no discovery round trip, and the read of the release
and the WATCH the recovery waits on are one request (a watch-list)."""
from __future__ import annotations

from testplane.cluster import Cluster, SimulatedHelmController
from testplane.plane import wait_for

from .conftest import stuck_release

UA = "kubectl-flux-plunger"


def test_recover_one_named_release_sends_eight_requests_end_to_end(cli, plane, cluster, ns):
    lease_ns = cluster.namespace("lease")
    stuck_release(cluster, ns)
    hc_kube = plane.kube(user_agent="simulated-helm-controller")   # not counted
    mark = plane.audit_mark()
    with SimulatedHelmController(Cluster(hc_kube), ns):
        r = cli("recover", "-n", ns, "demo", "--lease-namespace", lease_ns)
    hc_kube.close()
    assert r.code == 0 and "recovered" in r.out, r
    # a WATCH is logged when it ends: wait until the closed stream's line is written
    wait_for(lambda: any(ev["verb"] == "watch" for ev in plane.audit_events(
        since=mark, user_agent=UA)), 10, "the WATCH's audit line")
    events = sorted(plane.audit_events(since=mark, user_agent=UA),      # by arrival: a watch
                    key=lambda ev: ev["requestReceivedTimestamp"])      # is logged at its end
    verbs = [(ev["verb"], (ev.get("objectRef") or {}).get("resource")) for ev in events]
    # everything the process sends: the controller check (SPEC §4: refuse while a
    # controller runs), then the named read as a watch-list — its initial event is the
    # fresh read, and the same stream carries the newest state for the acquire and
    # helm-controller's handshake — LIST, APPLY, PATCH (record), DELETE, the `Recovered`
    # Event (the trace in `kubectl describe`), APPLY (relinquish)
    assert verbs == [("get", "leases"), ("watch", "helmreleases"), ("list", "secrets"),
                     ("patch", "helmreleases"), ("patch", "helmreleases"),
                     ("delete", "secrets"), ("create", "events"),
                     ("patch", "helmreleases")], verbs
    watch = events[1]
    assert "sendInitialEvents=true" in watch["requestURI"], watch["requestURI"]
    assert not any(v == "get" and r is None for v, r in verbs), verbs   # no discovery


def test_one_pass_of_serve_over_a_stuck_release_sends_seven_requests(plane, cluster, ns):
    """What serve's worker sends for one recovery (``Executor.reconcile``, serve holds the
    Lease already): the watch-list read, LIST, APPLY, PATCH, DELETE, Event, APPLY."""
    from kubectl_flux_plunger.events import Recorder
    from kubectl_flux_plunger.executor import Executor, Options, Result

    stuck_release(cluster, ns)
    k = plane.kube(user_agent="flux-plunger-serve-count")
    hc_kube = plane.kube(user_agent="simulated-helm-controller")   # not counted
    mark = plane.audit_mark()
    try:
        with SimulatedHelmController(Cluster(hc_kube), ns):
            out = Executor(k, Recorder(k), options=Options(handshake_timeout=10)).reconcile(
                ns, "demo")
    finally:
        k.close()
        hc_kube.close()
    assert out.result == Result.RECOVERED, out
    # a WATCH is logged when it ends: wait until the closed stream's line is written
    wait_for(lambda: any(ev["verb"] == "watch" for ev in plane.audit_events(
        since=mark, user_agent="flux-plunger-serve-count")), 10, "the WATCH's audit line")
    events = sorted(plane.audit_events(since=mark, user_agent="flux-plunger-serve-count"),
                    key=lambda ev: ev["requestReceivedTimestamp"])
    verbs = [(ev["verb"], (ev.get("objectRef") or {}).get("resource")) for ev in events]
    assert verbs == [("watch", "helmreleases"), ("list", "secrets"),
                     ("patch", "helmreleases"), ("patch", "helmreleases"),
                     ("delete", "secrets"), ("create", "events"),
                     ("patch", "helmreleases")], verbs
