"""The chart's alert rules proven by Prometheus's own `promtool test rules` (promtool built
from github.com/prometheus/prometheus, cmd/promtool), on the PrometheusRule the real Helm
renders — for the main install (default values) and for a shard beside it in the same
namespace (``shard=shard1``, the layout of docs/INSTALL.md "Sharding").

Each install's rules watch that install only (its namespace and its Lease, the ``lease``
label serve puts on every sample), so the same scenarios run on both renders, the install
the rule belongs to ("own") next to the other one ("other"): when each alert fires and when
it stays silent — the ``for:`` durations, a leader lost and one recovering within the
window, one install losing its leader while the other leads, failures that stop, a fence
held past its threshold and released, a release left stuck and repaired, an install not
scraped (``absent()``) and one that never existed.  A mutation test takes the per-install
grouping out again (``by (namespace)`` as before this change) and shows the two-shard case
then fires nothing.  The dashboard's queries are checked here too: each one, its variables
given values, must parse as PromQL (``promtool check rules`` of them as recording rules).

No cluster: Helm and promtool only (the apiserver tier is where the chart's renders live)."""
from __future__ import annotations

import copy
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from testplane import binaries, promrules
from tests.apiserver.test_deploy_manifests import find, helm, helm_template  # noqa: F401

NS = "flux-plunger"
INTERVAL = "30s"


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return binaries.ensure("promtool")
    except binaries.BuildError as exc:
        pytest.fail(f"cannot build promtool: {exc}", pytrace=False)


@dataclass(frozen=True)
class Install:
    release: str
    sets: tuple[str, ...]
    name: str     # the objects' name (flux-plunger.name)
    lease: str    # its Lease (flux-plunger.leaseName), the lease label of its samples


MAIN = Install("flux-plunger", ('selector="!sharding.fluxcd.io/key"',), "flux-plunger",
               "flux-plunger.cozystack.io")
SHARD = Install("flux-plunger-shard1", ('shard="shard1"',), "flux-plunger-shard1",
                "flux-plunger-shard1.flux-plunger.cozystack.io")


def rendered_rule(helm, install: Install, *sets: str) -> dict:  # noqa: F811
    proc = helm_template(helm, NS, "prometheusRule.enabled=true", *install.sets, *sets,
                         release=install.release)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    return find(docs, "PrometheusRule", install.name)


def rule_file(rule: dict, path: Path) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file (what the Prometheus Operator
    hands Prometheus)."""
    path.write_text(yaml.safe_dump(promrules.rule_groups(rule), sort_keys=False))
    return path


def rules_of(rule: dict) -> dict[str, dict]:
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def run_promtool(promtool: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, timeout=120)


# -- the scenarios, in promtool's unit-test format ------------------------------------------

def s(metric: str, install: Install, values: str, **labels: str) -> dict:
    """One input series of ``install``, labelled as a PodMonitor scrape labels it."""
    labels = {"namespace": NS, "lease": install.lease, "pod": f"{install.name}-a", **labels}
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{text}}}", "values": values}


def healthy(install: Install, minutes: int = 40, pod: str = "") -> list[dict]:
    """What an install's leader exports while all is well (every reason of the stuck gauge
    at 0, as serve exports them)."""
    n = minutes * 2
    kw = {"pod": pod} if pod else {}
    out = [s("flux_plunger_leader", install, f"1x{n}", **kw),
           s("flux_plunger_ready", install, f"1x{n}", **kw),
           s("flux_plunger_recoveries_total", install, f"0x{n}", result="failed", **kw),
           s("flux_plunger_fence_held_delete_seconds", install, f"0x{n}", **kw),
           s("flux_plunger_scope_overlaps", install, f"0x{n}", **kw)]
    out += [s("flux_plunger_releases_left_stuck", install, f"0x{n}", reason=r, **kw)
            for r in ("corrupt-payload", "no-storage")]
    return out


def replace(series: list[dict], metric: str, values: str, **match: str) -> list[dict]:
    """``series`` with the values of the one series of ``metric`` (with ``match`` labels)
    replaced."""
    out, hit = [], 0
    for item in series:
        if item["series"].startswith(metric + "{") and all(
                f'{k}="{v}"' in item["series"] for k, v in match.items()):
            item = {**item, "values": values}
            hit += 1
        out.append(item)
    assert hit == 1, (metric, match)
    return out


ALERTS = ("FluxPlungerRecoveriesFailing", "FluxPlungerFenceHeldTooLong", "FluxPlungerNoLeader",
          "FluxPlungerNotReady", "FluxPlungerReleasesLeftStuck", "FluxPlungerScopeOverlap")


class Expect:
    """The alerts expected of the rule of ``own`` — exact labels and annotations (the rule's
    own annotation text, its templates expanded as Prometheus expands them)."""

    def __init__(self, rule: dict, own: Install):
        self.rules, self.own = rules_of(rule), own

    def alert(self, name: str, value: str = "", **labels: str) -> dict:
        r = self.rules[name]
        exp_labels = {"namespace": NS, "lease": self.own.lease, **r["labels"], **labels}
        annotations = {}
        for key, text in r["annotations"].items():
            text = text.replace("{{ $labels.reason }}", exp_labels.get("reason", ""))
            annotations[key] = text.replace("{{ $value }}", value)
        return {"exp_labels": exp_labels, "exp_annotations": annotations}

    def at(self, minutes: float, name: str, *alerts: dict) -> dict:
        return {"eval_time": f"{int(minutes * 60)}s", "alertname": name,
                "exp_alerts": list(alerts)}

    def silent(self, minutes: float, *names: str) -> list[dict]:
        return [self.at(minutes, n) for n in (names or ALERTS)]


def scenarios(rule: dict, own: Install, other: Install) -> list[dict]:
    """Test groups for the rule of ``own``, with ``other`` beside it in the namespace."""
    e = Expect(rule, own)
    both = healthy(own) + healthy(other, pod=f"{other.name}-a")
    groups = []

    def group(name: str, series: list[dict], tests: list[dict]) -> None:
        groups.append({"name": name, "interval": INTERVAL, "input_series": series,
                       "alert_rule_test": tests})

    group("all well: nothing fires", both, e.silent(1) + e.silent(20) + e.silent(39))

    # no leader: the own leader's gauge drops at 1m30 and stays; the other install leads
    lost = replace(both, "flux_plunger_leader", "1x2 0x80", lease=own.lease)
    group("the own install lost its leader while the other leads: fires after 2m", lost,
          [e.at(3, "FluxPlungerNoLeader"),                       # pending: 1m30 of 2m
           e.at(4, "FluxPlungerNoLeader", e.alert("FluxPlungerNoLeader")),
           e.at(30, "FluxPlungerNoLeader", e.alert("FluxPlungerNoLeader"))])
    theirs = replace(both, "flux_plunger_leader", "1x2 0x80", lease=other.lease)
    group("the other install lost its leader: silent here", theirs, e.silent(10))

    # a new leader within the window: the leading pod killed (its series end), a second
    # pod (a follower until then) takes the Lease 1m later
    handover = [x for x in both if not (x["series"].startswith("flux_plunger_leader{")
                                        and f'lease="{own.lease}"' in x["series"])]
    handover += [s("flux_plunger_leader", own, "1x4 stale"),      # killed at 2m30
                 s("flux_plunger_leader", own, "0x7 1x80", pod=f"{own.name}-b")]  # 3m30
    group("a leader lost and back within the window: silent", handover,
          e.silent(2.5, "FluxPlungerNoLeader") + e.silent(4, "FluxPlungerNoLeader")
          + e.silent(30, "FluxPlungerNoLeader"))

    # not ready for 10m, and an install not scraped at all (absent), but not the other one
    unready = replace(both, "flux_plunger_ready", "0x80", lease=own.lease)
    group("the own install not ready: fires after 10m", unready,
          [e.at(9.5, "FluxPlungerNotReady"),
           e.at(10.5, "FluxPlungerNotReady", e.alert("FluxPlungerNotReady"))])
    only_other = healthy(other, pod=f"{other.name}-a")
    group("the own install not scraped: absent() fires for it after 10m", only_other,
          [e.at(9.5, "FluxPlungerNotReady"),
           e.at(10.5, "FluxPlungerNotReady", e.alert("FluxPlungerNotReady"))])
    group("an install that never existed (the other): silent here", healthy(own),
          e.silent(20))

    # recoveries failing: two failures in the first 2m, then none
    failing = replace(both, "flux_plunger_recoveries_total", "0 0 1 1 2x80",
                      lease=own.lease, result="failed")
    group("recoveries failing fire at once and stop once the failures stop", failing,
          [e.at(1.5, "FluxPlungerRecoveriesFailing", e.alert("FluxPlungerRecoveriesFailing")),
           e.at(16, "FluxPlungerRecoveriesFailing", e.alert("FluxPlungerRecoveriesFailing")),
           e.at(18, "FluxPlungerRecoveriesFailing"),
           e.at(30, "FluxPlungerRecoveriesFailing")])
    group("the other install's failures: silent here",
          replace(both, "flux_plunger_recoveries_total", "0 0 1 1 2x80",
                  lease=other.lease, result="failed"), e.silent(1.5, "FluxPlungerRecoveriesFailing"))

    # a delete held by the fence: its age grows by 30s a scrape; the fence goes at 35m
    held = replace(both, "flux_plunger_fence_held_delete_seconds", "0+30x70 0x10",
                   lease=own.lease)
    group("a fence held past 30 minutes fires, and stops once released", held,
          [e.at(29.5, "FluxPlungerFenceHeldTooLong"),
           e.at(31, "FluxPlungerFenceHeldTooLong", e.alert("FluxPlungerFenceHeldTooLong")),
           e.at(36, "FluxPlungerFenceHeldTooLong")])

    # a release left stuck (corrupt payload) for 15m, then repaired at 20m
    stuck = replace(both, "flux_plunger_releases_left_stuck", "0 1x39 0x40",
                    lease=own.lease, reason="corrupt-payload")
    stuck_alert = e.alert("FluxPlungerReleasesLeftStuck", "1", reason="corrupt-payload")
    group("a release left stuck fires after 15m, and stops once repaired", stuck,
          [e.at(15, "FluxPlungerReleasesLeftStuck"),
           e.at(16, "FluxPlungerReleasesLeftStuck", stuck_alert),
           e.at(21, "FluxPlungerReleasesLeftStuck")])

    # another running install overlaps this one's scope from 1m to 12m (one check a minute):
    # pending for 5m, firing, then silent once the other one goes; a blip shorter than 5m
    # never fires; the other install's overlap is its own alert
    overlap = replace(both, "flux_plunger_scope_overlaps", "0 0 1x22 0x60", lease=own.lease)
    overlap_alert = e.alert("FluxPlungerScopeOverlap", "1")
    group("an overlapping install fires after 5m, and stops once it is gone", overlap,
          [e.at(5, "FluxPlungerScopeOverlap"),
           e.at(6.5, "FluxPlungerScopeOverlap", overlap_alert),
           e.at(13, "FluxPlungerScopeOverlap")])
    blip = replace(both, "flux_plunger_scope_overlaps", "0 0 1x6 0x80", lease=own.lease)
    group("an overlap shorter than 5m: silent", blip, e.silent(2, "FluxPlungerScopeOverlap")
          + e.silent(5, "FluxPlungerScopeOverlap") + e.silent(8, "FluxPlungerScopeOverlap"))
    group("the other install's overlap: silent here",
          replace(both, "flux_plunger_scope_overlaps", "0 0 1x60", lease=other.lease),
          e.silent(10, "FluxPlungerScopeOverlap"))
    return groups


def unit_test_file(tmp_path: Path, rules: Path, groups: list[dict]) -> Path:
    path = tmp_path / f"{rules.stem}.test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": INTERVAL,
                                    "tests": groups}, sort_keys=False))
    return path


@pytest.mark.parametrize(("own", "other"), [(MAIN, SHARD), (SHARD, MAIN)],
                         ids=["default-values", "sharded-values"])
def test_every_alert_fires_and_stays_silent_when_it_should(helm, promtool, tmp_path,  # noqa: F811
                                                          own, other):
    rule = rendered_rule(helm, own)
    assert list(rules_of(rule)) == list(ALERTS)
    for r in rules_of(rule).values():   # the messages name the install and its Lease
        assert own.name in r["annotations"]["summary"] and own.lease in r["annotations"]["summary"]
        assert own.lease in r["annotations"]["description"]
    rules = rule_file(rule, tmp_path / "rules.yaml")
    check = run_promtool(promtool, "check", "rules", str(rules))
    assert check.returncode == 0, check.stdout + check.stderr
    groups = scenarios(rule, own, other)
    tested = {t["alertname"] for g in groups for t in g["alert_rule_test"] if t["exp_alerts"]}
    assert tested == set(ALERTS)        # every alert is seen firing somewhere
    proc = run_promtool(promtool, "test", "rules", str(unit_test_file(tmp_path, rules, groups)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def without_install_grouping(rule: dict) -> dict:
    """The rule as it was before this change: grouped by namespace only, no Lease."""
    out = copy.deepcopy(rule)
    for r in rules_of(out).values():
        r["expr"] = re.sub(r",?lease=\"[^\"]*\"", "", r["expr"].replace("lease, ", ""))
        r["expr"] = r["expr"].replace("by (namespace, lease)", "by (namespace)")
    return out


def test_without_the_per_install_grouping_one_shard_losing_its_leader_fires_nothing(
        helm, promtool, tmp_path):  # noqa: F811
    rule = without_install_grouping(rendered_rule(helm, SHARD))
    assert "lease" not in rules_of(rule)["FluxPlungerNoLeader"]["expr"]
    rules = rule_file(rule, tmp_path / "ungrouped.yaml")
    group = next(g for g in scenarios(rendered_rule(helm, SHARD), SHARD, MAIN)
                 if g["name"].startswith("the own install lost its leader"))
    proc = run_promtool(promtool, "test", "rules",
                        str(unit_test_file(tmp_path, rules, [group])))
    assert proc.returncode != 0, proc.stdout
    # the main install still leads: max by (namespace) hides the shard's 0
    assert "alertname: FluxPlungerNoLeader" in proc.stderr + proc.stdout
    assert re.search(r"got:\s*\[\]", proc.stderr + proc.stdout), proc.stderr


def test_rule_values_reach_the_rules(helm):  # noqa: F811
    rule = rendered_rule(helm, MAIN, "prometheusRule.fenceHeldMinutes=5",
                         'prometheusRule.noLeaderFor="5m"', 'prometheusRule.leftStuckFor="1h"',
                         'prometheusRule.failureWindow="30m"', 'prometheusRule.notReadyFor="20m"',
                         'prometheusRule.scopeOverlapFor="1m"',
                         'prometheusRule.labels={"release":"kube-prometheus-stack"}')
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = rules_of(rule)
    assert rules["FluxPlungerFenceHeldTooLong"]["expr"].endswith("> 300")
    assert rules["FluxPlungerRecoveriesFailing"]["expr"].count("[30m]") == 1
    assert (rules["FluxPlungerNoLeader"]["for"], rules["FluxPlungerNotReady"]["for"],
            rules["FluxPlungerReleasesLeftStuck"]["for"], rules["FluxPlungerScopeOverlap"]["for"]
            ) == ("5m", "20m", "1h", "1m")
    assert f'namespace="{NS}",lease="{MAIN.lease}"' in rules["FluxPlungerNoLeader"]["expr"]
    half = rules_of(rendered_rule(helm, MAIN, "prometheusRule.fenceHeldMinutes=0.5"))
    assert half["FluxPlungerFenceHeldTooLong"]["expr"].endswith("> 30")  # fractions of minutes


# -- the dashboard -------------------------------------------------------------------------

def dashboard(helm) -> tuple[dict, dict]:  # noqa: F811
    proc = helm_template(helm, NS, "dashboard.enabled=true",
                         'dashboard.annotations={"grafana_folder":"Flux"}')
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    return find(docs, "ConfigMap", "flux-plunger-dashboard"), promrules.dashboard(docs)


def test_two_installs_ship_two_dashboards_that_never_collide(helm):  # noqa: F811
    """Each install's dashboard has its own uid and title (issue 36: two installs that
    enabled it shipped one uid, and Grafana keeps one dashboard per uid); the same install
    renders the same ones on every upgrade."""
    def board(namespace: str, release: str) -> dict:
        proc = helm_template(helm, namespace, "dashboard.enabled=true", release=release)
        assert proc.returncode == 0, proc.stderr
        return promrules.dashboard([d for d in yaml.safe_load_all(proc.stdout) if d])

    boards = {(ns, rel): board(ns, rel) for ns, rel in (
        (NS, "flux-plunger"), (NS, "flux-plunger-shard1"), ("flux-system", "flux-plunger"))}
    uids = {b["uid"] for b in boards.values()}
    titles = {b["title"] for b in boards.values()}
    assert len(uids) == len(titles) == 3, boards
    assert all(len(u) <= 40 and u.startswith("flux-plunger-") for u in uids)   # Grafana's limit
    assert boards[NS, "flux-plunger"]["title"] == f"flux-plunger ({NS}/flux-plunger)"
    assert board(NS, "flux-plunger")["uid"] == boards[NS, "flux-plunger"]["uid"]
    # nothing else differs: the panels and variables are the one dashboard's
    a, b = (dict(x, uid="", title="") for x in list(boards.values())[:2])
    assert a == b


PANELS = {"Recoveries by result", "Deferrals", "Queue depth", "Fences held",
          "Leader per install", "Ready instances per install", "API requests",
          "Releases left stuck"}


def test_the_dashboard_ships_behind_its_value_and_every_query_parses(helm, promtool,  # noqa: F811
                                                                    tmp_path):
    cm, board = dashboard(helm)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Flux"}
    assert PANELS <= {p["title"] for p in board["panels"]}
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "namespace",
                                                                "lease"}
    queries = promrules.panel_queries(board)
    for name, expr in queries.items():  # every panel follows the install variables
        assert 'namespace=~".*",lease=~".*"' in expr, name
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(promrules.recording_rules(queries)))
    check = run_promtool(promtool, "check", "rules", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(queries)} rules found" in check.stdout
    # a query that does not parse fails the same check (it can fail)
    path.write_text(yaml.safe_dump(promrules.recording_rules({"x": "sum by (verb (flux_plunger_x)"})))
    assert run_promtool(promtool, "check", "rules", str(path)).returncode != 0
    # off by default
    plain = helm_template(helm, NS)
    assert plain.returncode == 0 and "grafana_dashboard" not in plain.stdout
