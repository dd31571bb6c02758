"""What ``recover -n NS NAME`` really sends, end to end, read from the apiserver's audit log
(not from the client's own counters): no discovery round trip, one read of the release."""
from __future__ import annotations

from testplane.cluster import Cluster, SimulatedHelmController

from .conftest import stuck_release

UA = "kubectl-flux-plunger"


def test_recover_one_named_release_sends_seven_recovery_requests(cli, plane, cluster, ns):
    lease_ns = cluster.namespace("lease")
    stuck_release(cluster, ns)
    hc_kube = plane.kube(user_agent="simulated-helm-controller")   # not counted
    mark = plane.audit_mark()
    with SimulatedHelmController(Cluster(hc_kube), ns):
        r = cli("recover", "-n", ns, "demo", "--lease-namespace", lease_ns)
    hc_kube.close()
    assert r.code == 0 and "recovered" in r.out, r
    events = sorted(plane.audit_events(since=mark, user_agent=UA),      # by arrival: a watch
                    key=lambda ev: ev["requestReceivedTimestamp"])      # is logged at its end
    verbs = [(ev["verb"], (ev.get("objectRef") or {}).get("resource")) for ev in events]
    # the controller check and the trace in `kubectl describe` are one request each ...
    assert verbs.count(("get", "leases")) == 1, verbs
    assert verbs.count(("create", "events")) == 1, verbs
    recovery = [v for v in verbs if v not in (("get", "leases"), ("create", "events"))]
    # ... the recovery itself is seven: GET, LIST, WATCH (opened before the acquire: the
    # acquire goes out on the newest state and the handshake waits on the same stream),
    # APPLY, PATCH, DELETE, APPLY
    assert recovery == [("get", "helmreleases"), ("list", "secrets"),
                        ("watch", "helmreleases"), ("patch", "helmreleases"),
                        ("patch", "helmreleases"), ("delete", "secrets"),
                        ("patch", "helmreleases")], verbs
    assert len(recovery) <= 7
    assert not any(v == "get" and r is None for v, r in verbs), verbs   # no discovery
