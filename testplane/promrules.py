"""The chart's Prometheus side as promtool reads it: the PrometheusRule rendered by the real
Helm as a Prometheus rule file, and the Grafana dashboard's panel queries as recording rules
(their Grafana variables given values, so each is plain PromQL).

``python -m testplane.promrules`` is the lint step (hack/lint.sh): `promtool check rules` on
the rules of the main install and of a shard, and on the dashboard's queries.  It uses the
helm and promtool hack/setup.sh built and never builds one itself (lint stays fast): a
missing binary is an error naming the command that builds it.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART_DIR = ROOT / "controller" / "chart" / "flux-plunger"
# Grafana's variables, given values of their kind so a panel's query is plain PromQL
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$namespace": ".*",
                     "$lease": ".*"}
# the renders the lint checks: (release, values) -- the main install and a shard beside it
RENDERS = (("flux-plunger", ('selector="!sharding.fluxcd.io/key"',)),
           ("flux-plunger-shard1", ('shard="shard1"',)))


def helm_template(helm: Path, release: str, namespace: str, *sets: str) -> list[dict]:
    """The chart's documents as ``helm template`` renders them (``sets``: --set-json)."""
    argv = [str(helm), "template", release, str(CHART_DIR), "--namespace", namespace]
    for s in sets:
        argv += ["--set-json", s]
    with tempfile.TemporaryDirectory(prefix="fp-helm-") as home:
        env = dict(os.environ, HELM_CACHE_HOME=f"{home}/cache", HELM_CONFIG_HOME=f"{home}/config",
                   HELM_DATA_HOME=f"{home}/data")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"helm template {release} failed: {proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def only(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d.get("kind") == kind]
    if len(found) != 1:
        raise RuntimeError(f"{len(found)} {kind} rendered, expected one")
    return found[0]


def rule_groups(rule: dict) -> dict:
    """A PrometheusRule's groups as a Prometheus rule file (what the Prometheus Operator
    hands Prometheus)."""
    return {"groups": rule["spec"]["groups"]}


def dashboard(docs: list[dict]) -> dict:
    """The dashboard JSON of the rendered ConfigMap."""
    boards = [d for d in docs if d.get("kind") == "ConfigMap"
              and (d["metadata"].get("labels") or {}).get("grafana_dashboard") == "1"]
    if len(boards) != 1:
        raise RuntimeError(f"{len(boards)} dashboard ConfigMaps rendered, expected one")
    return json.loads(boards[0]["data"]["flux-plunger.json"])


def panel_queries(board: dict) -> dict[str, str]:
    """Every panel's query, its Grafana variables replaced (keyed "<panel title> <refId>")."""
    out = {}
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for var, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(var, value)
            if "$" in expr:
                raise RuntimeError(f"panel {panel['title']!r}: a variable left in {expr!r}")
            out[f'{panel["title"]} {target["refId"]}'] = expr
    return out


def recording_rules(queries: dict[str, str]) -> dict:
    """``queries`` as one group of recording rules, so `promtool check rules` parses them."""
    return {"groups": [{"name": "flux-plunger-dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": expr}
        for i, expr in enumerate(queries.values())]}]}


def check_rules(promtool: Path, files: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool), "check", "rules", *map(str, files)],
                          capture_output=True, text=True, timeout=120)


def main() -> int:
    from testplane import binaries

    tools = {}
    for name in ("helm", "promtool"):
        path = binaries.cached(name)
        if path is None:
            print(f"error: {name} is not built; run ./hack/setup.sh (or "
                  f"python -m testplane.binaries {name})", file=sys.stderr)
            return 1
        tools[name] = path
    with tempfile.TemporaryDirectory(prefix="fp-rules-") as tmp:
        files = []
        for release, sets in RENDERS:
            docs = helm_template(tools["helm"], release, "flux-plunger",
                                 "prometheusRule.enabled=true", *sets)
            path = Path(tmp) / f"{release}.rules.yaml"
            path.write_text(yaml.safe_dump(rule_groups(only(docs, "PrometheusRule"))))
            files.append(path)
        docs = helm_template(tools["helm"], "flux-plunger", "flux-plunger",
                             "dashboard.enabled=true")
        path = Path(tmp) / "dashboard.rules.yaml"
        path.write_text(yaml.safe_dump(recording_rules(panel_queries(dashboard(docs)))))
        files.append(path)
        proc = check_rules(tools["promtool"], files)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr, file=sys.stderr, end="")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())


# -- real scrapes as promtool input ----------------------------------------------------------

def _series_text(name: str, labels: dict[str, str]) -> str:
    def quoted(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"')
    return name + "{" + ",".join(f'{k}="{quoted(v)}"' for k, v in sorted(labels.items())) + "}"


def input_series(scrapes: list[tuple[float, str, str]], targets: dict[str, dict[str, str]],
                 deaths: dict[str, float], step: float,
                 prefix: str = "flux_plunger_") -> tuple[list[dict], int]:
    """promtool input series of real /metrics scrapes, as Prometheus scraping each target
    every ``step`` seconds would have stored them: ``scrapes`` are (monotonic time, target,
    exposition text), ``targets`` the labels Prometheus adds to each target's samples
    (namespace, pod, instance, job), ``deaths`` when a target was killed (its series end
    with a stale marker, as Prometheus writes one for a target that went away).  Each grid
    point takes the target's newest scrape at or before it.  Returns the series (only
    metric names starting with ``prefix``) and the number of grid points."""
    from prometheus_client.parser import text_string_to_metric_families

    t0 = min(at for at, _, _ in scrapes)
    last = max(at for at, _, _ in scrapes)
    points = int((last - t0) // step) + 1
    parsed: dict[str, list[tuple[float, dict[str, float]]]] = {}
    for at, target, text in sorted(scrapes, key=lambda x: x[0]):
        values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith(prefix):
                    labels = {**sample.labels, **targets[target]}
                    values[_series_text(sample.name, labels)] = float(sample.value)
        parsed.setdefault(target, []).append((at, values))
    out = []
    for target, seen in parsed.items():
        keys = sorted({k for _, values in seen for k in values})
        grid: dict[str, list[str]] = {k: [] for k in keys}
        died = deaths.get(target)
        for i in range(points):
            now = t0 + i * step
            if died is not None and now >= died:
                gone_at = math.ceil((died - t0) / step)  # the first point after the kill
                for k in keys:
                    grid[k].append("stale" if i == gone_at else "_")
                continue
            current = [values for at, values in seen if at <= now]
            for k in keys:
                grid[k].append(repr(current[-1][k]) if current and k in current[-1] else "_")
        out += [{"series": k, "values": " ".join(v)} for k, v in grid.items()]
    return out, points


def run_tests(promtool: Path, test_file: Path) -> subprocess.CompletedProcess:
    """`promtool test rules` of ``test_file``."""
    return subprocess.run([str(promtool), "test", "rules", str(test_file)],
                          capture_output=True, text=True, timeout=300)
