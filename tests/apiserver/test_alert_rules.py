"""The chart's optional PrometheusRule (controller/chart/flux-plunger, prometheusRule.enabled):
rendered with the real Helm, every metric its four rules name is one a real ``serve``
exports at /metrics under that name; the chart's notifications value becomes serve's
--events-addr (and nothing when off)."""
from __future__ import annotations

import datetime as dt
import re

from kubectl_flux_plunger import constants as C
from kubectl_flux_plunger.kube import JSON
from tests.apiserver.conftest import hold
from tests.apiserver.test_deploy_manifests import find, helm, render_chart  # noqa: F401
from tests.apiserver.test_serve_support import FAST, serve  # noqa: F401 - fixture
from testplane.cluster import eventually

# PromQL words that are not metric names
PROMQL = {
    "sum", "min", "max", "avg", "count", "by", "without", "on", "ignoring", "group_left",
    "group_right", "and", "or", "unless", "bool", "offset", "increase", "rate", "irate",
    "absent", "absent_over_time", "max_over_time", "min_over_time", "time", "vector",
    "scalar", "clamp_min", "clamp_max", "delta", "deriv", "changes", "resets",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (label matchers, strings, durations and
    function names taken out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)          # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)                  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)                 # range selectors
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        word = m.group(0)
        after = expr[m.end():].lstrip()
        if word in PROMQL or after.startswith("("):
            continue
        names.add(word)
    return names


def served_names(text: str) -> set[str]:
    return {re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
            for line in text.splitlines() if line and not line.startswith("#")}


def test_metric_names_of_a_promql_expression() -> None:
    assert metric_names(
        'sum by (namespace) (increase(flux_plunger_recoveries_total{result="failed"}[15m])) > 0'
    ) == {"flux_plunger_recoveries_total"}
    assert metric_names("min by (namespace) (a_b) < 1 or absent(c_d)") == {"a_b", "c_d"}


def test_every_metric_the_alert_rules_name_is_served(helm, serve, cluster, ns):  # noqa: F811
    docs = render_chart(helm, "flux-plunger", "prometheusRule.enabled=true",
                        'prometheusRule.labels={"release":"kube-prometheus-stack"}')
    rule = find(docs, "PrometheusRule", "flux-plunger")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert [r["alert"] for r in rules] == ["FluxPlungerRecoveriesFailing",
                                           "FluxPlungerFenceHeldTooLong",
                                           "FluxPlungerNoLeader", "FluxPlungerNotReady"]
    assert "> 1800" in rules[1]["expr"]  # fenceHeldMinutes 30
    named = {name: r["alert"] for r in rules for name in metric_names(r["expr"])}
    assert len(named) >= 4, named

    # a delete held by the fence, seen by a follower (another identity holds the Lease for
    # an hour): nothing acts on it, whatever else runs in this session (a real
    # helm-controller would let a leader lift the fence at once)
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.kube.request("CREATE", "POST", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                         content_type=JSON, body={
                             "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": C.LEASE_NAME, "namespace": ns},
                             "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600,
                                      "acquireTime": now, "renewTime": now}})
    cluster.create_hr(ns, "held", finalizers=[])
    hold(cluster, ns, "held", suspend=False)
    cluster.delete_hr(ns, "held")
    try:
        s = serve("-n", ns, "--leader-elect", "--leader-election-namespace", ns, *FAST)
        eventually(s.ready, 30, "serve /readyz")
        served = served_names(s.metrics())
        missing = {name: alert for name, alert in named.items() if name not in served}
        assert not missing, f"named by the rules but not at /metrics: {missing}"
        assert s.metric("flux_plunger_ready") == 1.0
        assert s.metric("flux_plunger_leader") == 0.0
        eventually(lambda: (s.metric("flux_plunger_fence_held_delete_seconds") or 0) >= 1, 20,
                   "the held delete's age at /metrics")
        assert s.metric("flux_plunger_fences_held") == 1.0
    finally:
        cluster.remove_finalizer(ns, "held", C.FENCE)
    eventually(lambda: s.metric("flux_plunger_fence_held_delete_seconds") == 0.0, 20,
               "the gauge to drop once the delete went through")
    # off by default
    assert not [d for d in render_chart(helm) if d["kind"] == "PrometheusRule"]


def _args(docs: list[dict]) -> list[str]:
    return find(docs, "Deployment", "flux-plunger")["spec"]["template"]["spec"][
        "containers"][0]["args"]


def test_notifications_value_sets_events_addr(helm):  # noqa: F811
    assert not [a for a in _args(render_chart(helm)) if a.startswith("--events-addr")]
    on = _args(render_chart(helm, "flux-plunger", "notifications.enabled=true"))
    assert "--events-addr=http://notification-controller.flux-system.svc.cluster.local./" in on
    other = _args(render_chart(helm, "flux-plunger", "notifications.enabled=true",
                               'notifications.eventsAddr="http://nc.obs:9090/"'))
    assert "--events-addr=http://nc.obs:9090/" in other
    empty = _args(render_chart(helm, "flux-plunger", "notifications.enabled=true",
                               'notifications.eventsAddr=""'))
    assert not [a for a in empty if a.startswith("--events-addr")]
