"""Renderers and flag parsing: kubectl-style tables, json/yaml/name output and outcome
lines, checked against golden files (regenerate with UPDATE_GOLDEN=1)."""
from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from kubectl_flux_plunger.cli import parse_duration, render
from kubectl_flux_plunger.executor import Outcome
from kubectl_flux_plunger.verbs.release_fence import FenceResult, summary
from kubectl_flux_plunger.verbs.status import Row, _age

pytestmark = pytest.mark.unit
GOLDEN = Path(__file__).parent / "golden"

ROWS = [
    Row("apps", "stuck-one", "stuck", False, "-", 2, "uninstalling", "-", False, "5m", "stuck-one",
        "apps", "newest revision 2 has status uninstalling and no revision is deployed"),
    Row("team-b", "paused", "suspended-by-other", True, "operator(Update)", 1, "deployed", "3",
        False, "2d", "team-b-paused", "helm", "newest revision 1 is deployed"),
    Row("apps", "going", "delete-held", False, "-", None, "-", "4", True, "90s", "going", "apps",
        "no Helm storage Secrets"),
    Row("tenants", "t1-app", "stuck", False, "-", 3, "uninstalling", "-", False, "1m", "app",
        "apps", "newest revision 3 has status uninstalling and no revision is deployed",
        cluster="https://t1.example:6443"),
]


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text + "\n")
    assert text + "\n" == path.read_text()


def test_status_table():
    golden("status.txt", render.status_table(ROWS, all_namespaces=False, wide=False))


def test_status_table_all_namespaces_wide():
    out = render.status_table(ROWS, all_namespaces=True, wide=True)
    assert out.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    golden("status-all-wide.txt", out)


def test_status_json_and_yaml_and_name():
    items = [r.as_dict() for r in ROWS]
    golden("status.json", render.as_json(items, "HelmReleaseStatus"))
    golden("status.yaml", render.as_yaml(items, "HelmReleaseStatus"))
    golden("status-name.txt", render.names(items))


def test_outcome_lines():
    outcomes = [
        Outcome("apps", "stuck-one", "recovered", "deleted revision 2 (uninstalling) of release "
                "stuck-one; helm-controller will reconcile it again", row="live-stuck", revision=2),
        Outcome("apps", "x", "planned", "", row="live-stuck", steps=["step one", "step two"]),
        Outcome("apps", "y", "deferred", "spec.suspend was taken by another manager"),
    ]
    text = "\n".join(render.outcome_line(o, all_namespaces=True) for o in outcomes)
    golden("outcomes.txt", text)


def test_release_fence_lines_and_summary():
    results = [FenceResult("a", "live", True, False, ""),
               FenceResult("a", "orphan", True, True, ""),
               FenceResult("b", "stuck", False, False, "the fence could not be removed: Forbidden")]
    golden("release-fence.txt", "\n".join([r.line() for r in results] + [summary(results)]))


def test_table_cells():
    assert render.table(["A", "LONGER"], [[True, None], ["x", 10]]) == \
        "A      LONGER\ntrue   -\nx      10"


@pytest.mark.parametrize("text,seconds", [
    ("0", 0.0), ("10", 10.0), ("30s", 30.0), ("1m", 60.0), ("1m30s", 90.0), ("2h", 7200.0),
    ("500ms", 0.5), ("1h1m1s", 3661.0), ("1.5s", 1.5),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text, flag="--x") == seconds


@pytest.mark.parametrize("text", ["", "soon", "1d", "-5s", "5 s", "m"])
def test_parse_duration_rejects(text):
    with pytest.raises(click.BadParameter):
        parse_duration(text, flag="--x")


@pytest.mark.parametrize("seconds,text", [(None, "<unknown>"), (5, "5s"), (119, "119s"),
                                          (120, "2m"), (7199, "119m"), (7200, "2h"),
                                          (3 * 86400, "3d"), (-3, "0s")])
def test_age(seconds, text):
    assert _age(seconds) == text
