"""Events from ``serve``: the held-fence Warning after its threshold, and repeats folded into
one counted Event (also across recorders, as after a restart or in the drain)."""
from __future__ import annotations

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import plan
from kubectl_flux_plunger.core.detect import parse_timestamp
from kubectl_flux_plunger.report.events import Recorder
from testplane.cluster import eventually

from .test_serve_support import FAST, hold, serve  # noqa: F401

WARN_AFTER = 4


def _fence_held(cluster, ns, name):
    return [e for e in cluster.events(ns, name) if e["reason"] == "UninstallFenceHeld"]


def test_held_fence_warning_after_the_threshold(cluster, ns, serve):  # noqa: F811
    # fenced and deleted before serve starts: a live fenced release would have its fence
    # removed (row live-fenced) if serve saw it before the delete
    cluster.create_hr(ns, "held")
    hold(cluster, ns, "held", suspend=False)
    cluster.delete_hr(ns, "held")      # no helm-controller: the fence holds the delete
    deleted = parse_timestamp(cluster.get(ns, "held")["metadata"]["deletionTimestamp"])
    s = serve("-n", ns, "--leader-election-namespace", ns, *FAST,
              "--fence-held-warn-after", f"{WARN_AFTER}s")
    eventually(s.leads, 30, "leading")
    eventually(lambda: s.logged(rf"waiting: .*release={ns}/held"), 15, "the held delete seen")
    events = eventually(lambda: _fence_held(cluster, ns, "held"), 20,
                        "an UninstallFenceHeld event")
    assert len(events) == 1
    ev = events[0]
    assert ev["type"] == "Warning" and ev["source"]["component"] == C.EVENT_COMPONENT
    assert ev["message"] == plan.UNINSTALL_FENCE_HELD.message
    # not before the threshold (timestamps have one-second granularity)
    assert (parse_timestamp(ev["firstTimestamp"]) - deleted).total_seconds() >= WARN_AFTER - 1
    # re-checked every 500ms: the same Event counts up, no new objects
    eventually(lambda: (_fence_held(cluster, ns, "held")[0].get("count") or 0) >= 3, 15,
               "the Warning counted up on re-checks")
    assert len(_fence_held(cluster, ns, "held")) == 1
    assert cluster.get(ns, "held")["metadata"]["finalizers"].count(C.FENCE) == 1
    s.stop()
    cluster.remove_finalizer(ns, "held", C.FENCE)


def test_a_hundred_repeats_stay_one_event(cluster, kube, ns, plane):
    hr = cluster.create_hr(ns, "noisy")
    first = Recorder(kube, instance="one")
    for _ in range(60):
        first.record(hr, "RecoveryDeferred", "Normal", plan.RECOVERY_DEFERRED.message)
    other = plane.kube()       # a second recorder with no memory: a restart, or the drain
    try:
        second = Recorder(other, instance="two")
        for _ in range(40):
            second.record(hr, "RecoveryDeferred", "Normal", plan.RECOVERY_DEFERRED.message)
    finally:
        other.close()
    events = [e for e in cluster.events(ns, "noisy") if e["reason"] == "RecoveryDeferred"]
    assert len(events) == 1, [e["metadata"]["name"] for e in events]
    assert events[0]["count"] >= 100
    assert events[0]["involvedObject"]["uid"] == hr["metadata"]["uid"]
