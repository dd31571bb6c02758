"""``serve`` as a real process: it recovers a stuck release on its own, answers its probes and
metrics, logs JSON lines, and refuses impossible flags."""
from __future__ import annotations

import yaml

from kubectl_flux_plunger.core import constants as C
from testplane.cluster import SimulatedHelmController, eventually

from .conftest import hold
from .test_serve_support import FAST, json_lines, recovered, serve, stuck  # noqa: F401



def test_serve_recovers_a_stuck_release_and_reports_it(cluster, ns, serve):  # noqa: F811
    healthy = cluster.create_hr(ns, "healthy")
    assert healthy
    s = serve("-n", ns, "--leader-election-namespace", ns, "--log-format", "json", *FAST)
    eventually(s.ready, 30, "readyz 200")
    assert s.http(s.probe_port, "/healthz") == (200, "ok")
    eventually(s.leads, 15, "leader gauge 1")
    with SimulatedHelmController(cluster, ns):
        stuck(cluster, ns, "demo")
        eventually(lambda: recovered(cluster, ns, "demo"), 30, "the stuck release recovered")
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    hr = cluster.get(ns, "demo")
    assert "suspend" not in hr["spec"]
    # metrics: one recovery, API requests by verb, nothing queued, no fence held
    eventually(lambda: s.metric("flux_plunger_recoveries_total", result="recovered") == 1.0,
               10, "recoveries_total{result=recovered} == 1")
    assert (s.metric("flux_plunger_api_requests_total", verb="DELETE") or 0) >= 1
    assert (s.metric("flux_plunger_api_requests_total", verb="APPLY") or 0) >= 2
    assert (s.metric("flux_plunger_api_requests_total", verb="WATCH") or 0) >= 1
    assert s.metric("flux_plunger_queue_depth") == 0.0
    eventually(lambda: s.metric("flux_plunger_fences_held") == 0.0, 10, "fences_held 0")
    assert s.metric("flux_plunger_errors_total") == 0.0
    assert s.http(s.metrics_port, "/nothing")[0] == 404
    # the healthy release was never touched
    assert cluster.get(ns, "healthy")["metadata"]["resourceVersion"] == \
        healthy["metadata"]["resourceVersion"]
    s.signal()
    assert s.wait(30) == 0
    lines = json_lines(s.logs())
    assert all({"ts", "level", "msg"} <= set(line) for line in lines)
    done = [line for line in lines if line.get("result") == "recovered"]
    assert done and done[0]["release"] == f"{ns}/demo" and done[0]["revision"] == 2


def test_readyz_is_503_until_the_list_succeeds(plane, tmp_path, serve):  # noqa: F811
    """A kubeconfig that reaches no apiserver: alive (healthz) but never ready."""
    cfg = yaml.safe_load(plane.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    bad = tmp_path / "unreachable.kubeconfig"
    bad.write_text(yaml.safe_dump(cfg))
    s = serve("--kubeconfig", str(bad), "--no-leader-elect", *FAST)
    eventually(lambda: s.http(s.probe_port, "/healthz")[0] == 200, 30, "healthz 200")
    eventually(lambda: s.logged("watch: cannot reach"), 15, "a logged retry")
    code, body = s.http(s.probe_port, "/readyz")
    assert code == 503 and "not synced" in body
    assert s.alive()


def test_serve_finishes_a_recovery_a_crash_left_between_the_record_and_the_delete(
        cluster, ns, serve):  # noqa: F811
    """A crashed recovery left its suspension and fence, and had recorded revision 2 without
    deleting it.  serve lifts the leftover and decides again at once: revision 2 is deleted
    with no write of helm-controller's in between (the simulated one never attempts a
    release).  The change its own relinquish makes does not start that pass — it is one
    the pass judged, and a release awaiting helm-controller's retry is no event worth a
    pass — the worker's re-decision after lifting a live leftover does."""
    stuck(cluster, ns, "demo")
    hold(cluster, ns)
    cluster.merge(ns, "demo", {"metadata": {"annotations": {C.PROCESSED_ANNOTATION: "2"}}},
                  manager=C.CLIENT_SIDE_MANAGER)
    with SimulatedHelmController(cluster, ns):
        s = serve("-n", ns, "--no-leader-elect", *FAST)
        eventually(lambda: recovered(cluster, ns, "demo"), 30, "the leftover lifted and v2 gone")
    eventually(lambda: s.metric("flux_plunger_reconciles_total", result="relinquished") == 1.0
               and s.metric("flux_plunger_reconciles_total", result="recovered") == 1.0,
               10, "one relinquish, then one recovery")
