"""The chart's optional PrometheusRule (controller/chart/flux-plunger, prometheusRule.enabled)
against a real ``serve``: rendered with the real Helm, every metric its rules and the
dashboard's panels name is one a real serve exports at /metrics under that name; and a real
scrape — two serves (a leader and a follower on one Lease) scraped every second while a
recovery fails (remote storage unreachable), a delete is held by the fence, a release is
left stuck (corrupt payload) and the leader is killed — turned into promtool's input series as
Prometheus would have stored them, on which every rule evaluates without an error and exactly
the alerts that scenario brings about go pending or firing.  Also: the chart's notifications
value becomes serve's --events-addr (and nothing when off)."""
from __future__ import annotations

import datetime as dt
import re
import threading
import time

import pytest
import yaml

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import JSON
from kubectl_flux_plunger.core.plan import RECOVERY_FAILED, RECOVERY_SKIPPED, Stuck
from tests.apiserver.conftest import corrupt_revision, hold, stuck_release
from tests.apiserver.test_deploy_manifests import find, helm, render_chart  # noqa: F401
from tests.apiserver.test_serve_support import FAST, serve  # noqa: F401 - fixture
from testplane import binaries, promrules
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
                                           "FluxPlungerNoLeader", "FluxPlungerNotReady",
                                           "FluxPlungerReleasesLeftStuck",
                                           "FluxPlungerScopeOverlap"]
    assert "> 1800" in rules[1]["expr"]  # fenceHeldMinutes 30
    named = {name: r["alert"] for r in rules for name in metric_names(r["expr"])}
    assert len(named) >= 5, named
    # ... and every metric the dashboard's panels name
    board = promrules.dashboard(render_chart(helm, "flux-plunger", "dashboard.enabled=true"))
    for panel, expr in promrules.panel_queries(board).items():
        named.update({name: f"dashboard: {panel}" for name in metric_names(expr)})
    assert {"flux_plunger_api_requests_total", "flux_plunger_queue_depth"} <= set(named)

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


# -- a real scrape, evaluated by promtool --------------------------------------------------

STEP = 2.0  # seconds between the grid points of the series (a 2s scrape interval)
# leader election slow enough that the follower is seen without a leader after the kill
LEASE = ("--lease-duration", "8s", "--renew-deadline", "6s", "--retry-period", "1s")
TIMINGS = LEASE + tuple(FAST[6:])  # FAST without its lease timings
assert FAST[:6] == ("--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period",
                    "500ms")


@pytest.fixture(scope="module")
def promtool():
    try:
        return binaries.ensure("promtool")
    except binaries.BuildError as exc:
        pytest.fail(f"cannot build promtool: {exc}", pytrace=False)


class Scraper:
    """Scrapes /metrics of every live serve once a second (as Prometheus would), on a
    background thread, and remembers when one was killed."""

    def __init__(self) -> None:
        self.scrapes: list[tuple[float, str, str]] = []
        self.targets: dict[str, object] = {}
        self.deaths: dict[str, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, s) -> None:
        with self._lock:
            self.targets[s.name] = s

    def start(self) -> None:
        self._thread.start()

    def scraped(self, name: str, since: float = 0.0) -> int:
        """How many scrapes of ``name`` began after ``since`` (monotonic)."""
        with self._lock:
            return sum(1 for at, target, _ in self.scrapes if target == name and at > since)

    def span(self) -> float:
        """Seconds from the first scrape to the last."""
        with self._lock:
            ats = [at for at, _, _ in self.scrapes]
        return max(ats) - min(ats) if ats else 0.0

    def kill(self, s) -> None:
        with self._lock:
            self.deaths[s.name] = time.monotonic()
            del self.targets[s.name]
        s.stop()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                live = list(self.targets.items())
            for name, s in live:
                at = time.monotonic()
                try:
                    text = s.metrics()
                except (OSError, AssertionError):
                    continue   # killed meanwhile
                with self._lock:
                    if name in self.targets:
                        self.scrapes.append((at, name, text))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _events(cluster, ns, name, reason):
    return [e for e in cluster.events(ns, name) if e["reason"] == reason]


def test_every_rule_evaluates_on_a_real_serves_series_and_its_alerts_go_off(
        helm, promtool, serve, cluster, ns, tmp_path):  # noqa: F811
    rule = find(render_chart(helm, ns, "prometheusRule.enabled=true",
                             "prometheusRule.fenceHeldMinutes=0.25"),  # 15s
                "PrometheusRule", "flux-plunger")
    # a delete held by the fence (helm-controller's finalizer stays: the uninstall never
    # happens), first: its age is what FluxPlungerFenceHeldTooLong needs past 15s
    cluster.create_hr(ns, "held")
    hold(cluster, ns, "held", suspend=False)
    cluster.delete_hr(ns, "held")
    scraper = Scraper()
    leader = serve("-n", ns, "--leader-elect", "--leader-election-namespace", ns, *TIMINGS,
                   name="leader")
    eventually(leader.leads, 30, "the first serve leads")
    follower = serve("-n", ns, "--leader-elect", "--leader-election-namespace", ns, *TIMINGS,
                     name="follower")
    eventually(follower.ready, 30, "the follower ready")
    for s in (leader, follower):
        scraper.add(s)
    scraper.start()
    try:
        eventually(lambda: scraper.scraped("leader") and scraper.scraped("follower"), 10,
                   "a scrape of both before anything fails")
        # a recovery that fails (its remote cluster's kubeconfig Secret does not exist) and
        # a release left stuck (its newest revision's payload is corrupt)
        stuck_release(cluster, ns, "remote", spec={"kubeConfig": {"secretRef": {
            "name": "no-such-kubeconfig"}}})
        # (its storage whole before it is reported stuck: the serve watches HelmReleases,
        # not Secrets, so a corrupt revision written after the report waits for the resync)
        cluster.create_hr(ns, "corrupt")
        cluster.storage(ns, "corrupt", [(1, "superseded")])
        corrupt_revision(cluster, ns, "corrupt")
        cluster.make_stuck(ns, "corrupt")
        eventually(lambda: (leader.metric("flux_plunger_recoveries_total", result="failed")
                            or 0) >= 1, 30, "a failed recovery")
        eventually(lambda: leader.metric("flux_plunger_releases_left_stuck",
                                         reason="corrupt-payload") == 1, 30,
                   "the corrupt release left stuck")
        seen = time.monotonic()
        eventually(lambda: scraper.scraped("leader", since=seen), 10, "a scrape with both")
        scraper.kill(leader)   # SIGKILL: the Lease stays held until it expires (8s)
        killed = time.monotonic()
        eventually(lambda: scraper.scraped("follower", since=killed) >= 2, 5,
                   "scrapes of the follower after the kill")
        assert follower.metric("flux_plunger_leader") == 0.0   # the Lease has not expired
        eventually(follower.leads, 30, "the follower taking the Lease over")
        eventually(lambda: follower.metric("flux_plunger_releases_left_stuck",
                                           reason="corrupt-payload") == 1, 30,
                   "the new leader leaves the corrupt release stuck too")
        eventually(lambda: (follower.metric("flux_plunger_fence_held_delete_seconds") or 0)
                   > 17, 60, "the held delete's age past the threshold (15s)")
        past = time.monotonic()
        eventually(lambda: scraper.scraped("follower", since=past), 10, "a scrape with it")
        # a quick scenario (the held delete's age was past the threshold early) can end
        # inside 8 grid points: scrape on until the series hold that many
        eventually(lambda: scraper.span() >= 7 * STEP, 30, "8 grid points of scrapes")
    finally:
        scraper.stop()
        cluster.remove_finalizer(ns, "held", C.FENCE)
        cluster.remove_finalizer(ns, "held", C.HELM_CONTROLLER_FINALIZER)
    # the Events the operator's Alerts hear: the failure (remote unreachable is a failure,
    # retried) and the release left stuck
    assert [e["message"] for e in _events(cluster, ns, "remote", "RecoveryFailed")] == [
        RECOVERY_FAILED.message]
    assert [e["message"] for e in _events(cluster, ns, "corrupt", "RecoverySkipped")] == [
        RECOVERY_SKIPPED[Stuck.CORRUPT_PAYLOAD].message]
    assert "sh.helm.release.v1.corrupt.v2" in cluster.secret_names(ns, "corrupt")

    # the scrapes as Prometheus would have stored them: target labels of a PodMonitor
    targets = {s.name: {"namespace": ns, "pod": s.name, "job": f"{ns}/flux-plunger",
                        "instance": f"127.0.0.1:{s.metrics_port}"} for s in (leader, follower)}
    series, points = promrules.input_series(scraper.scrapes, targets, scraper.deaths, STEP)
    assert points >= 8 and any("lease=" in x["series"] for x in series)
    end = f"{int((points - 1) * STEP)}s"
    brought_about = ["FluxPlungerFenceHeldTooLong", "FluxPlungerNoLeader",
                     "FluxPlungerRecoveriesFailing", "FluxPlungerReleasesLeftStuck"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(promrules.rule_groups(rule)))
    unit = {"rule_files": [rules.name], "evaluation_interval": f"{int(STEP)}s", "tests": [{
        "name": "a real serve's scrapes", "interval": f"{int(STEP)}s", "input_series": series,
        "promql_expr_test": [{
            # every alert that was pending or firing at any time of the scenario
            "expr": f'group by (alertname) (max_over_time(ALERTS{{namespace="{ns}",'
                    f'lease="{C.LEASE_NAME}"}}[1h]))',
            "eval_time": end,
            "exp_samples": [{"labels": f'{{alertname="{a}"}}', "value": 1}
                            for a in brought_about]}]}]}
    path = tmp_path / "real.test.yaml"
    path.write_text(yaml.safe_dump(unit, sort_keys=False))
    proc = promrules.run_tests(promtool, path)
    # promtool stops at the first rule that does not evaluate ("rule: ..., err: ...")
    assert proc.returncode == 0, proc.stdout + proc.stderr + path.read_text()[:4000]
    assert "SUCCESS" in proc.stdout
