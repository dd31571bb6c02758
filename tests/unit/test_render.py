"""Renderers and flag parsing: kubectl-style tables, json/yaml/name output and outcome
lines, checked against golden files (regenerate with UPDATE_GOLDEN=1)."""
from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import click
import pytest
import yaml

from kubectl_flux_plunger.cli import parse_duration, render
from kubectl_flux_plunger.executor import Outcome
from kubectl_flux_plunger.verbs.release_fence import FenceResult, summary
from kubectl_flux_plunger.verbs.status import Row, _age

pytestmark = pytest.mark.unit
GOLDEN = Path(__file__).parent / "golden"
SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "output-schema.json"

def hr_metadata(ns: str, name: str, *, managers: list[dict] | None = None, **extra) -> dict:
    md = {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "4711",
          "generation": 3, "creationTimestamp": "2026-11-30T10:00:00Z",
          "labels": {"app": name}, "finalizers": ["finalizers.fluxcd.io"],
          "managedFields": managers or [
              {"manager": "kustomize-controller", "operation": "Apply",
               "apiVersion": "helm.toolkit.fluxcd.io/v2", "time": "2026-11-30T10:00:00Z",
               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:interval": {}}}}]}
    md.update(extra)
    return md


ROWS = [
    Row("apps", "stuck-one", "stuck", False, "-", 2, "uninstalling", "-", False, "5m", "stuck-one",
        "apps", "newest revision 2 has status uninstalling and no revision is deployed",
        controller="flux-plunger-shard1.flux-plunger.cozystack.io",
        metadata=hr_metadata("apps", "stuck-one")),
    Row("team-b", "paused", "suspended-by-other", True, "operator(Update)", 1, "deployed", "3",
        False, "2d", "team-b-paused", "helm", "newest revision 1 is deployed",
        stuck=True, metadata=hr_metadata("team-b", "paused", annotations={
            "flux-plunger.cozystack.io/last-processed-version": "3"}),
        suspend_owners=[("operator", "Update")]),
    Row("apps", "going", "delete-held", False, "-", None, "-", "4", True, "90s", "going", "apps",
        "no Helm storage Secrets",
        metadata=hr_metadata("apps", "going", deletionTimestamp="2026-12-01T04:00:00Z",
                             finalizers=["finalizers.fluxcd.io",
                                         "flux-plunger.cozystack.io/uninstall-fence"])),
    Row("tenants", "t1-app", "stuck", False, "-", 3, "uninstalling", "-", False, "1m", "app",
        "apps", "newest revision 3 has status uninstalling and no revision is deployed",
        cluster="https://t1.example:6443", metadata=hr_metadata("tenants", "t1-app")),
    # issue 38: suspended through the Flux Operator's Web UI by alice
    Row("team-b", "ui-paused", "suspended-by-other,stuck", True, "flux-operator-web (alice)",
        2, "uninstalling", "-", False, "3h", "ui-paused", "team-b",
        "newest revision 2 has status uninstalling and no revision is deployed", stuck=True,
        metadata=hr_metadata("team-b", "ui-paused", annotations={
            "fluxcd.controlplane.io/suspendedBy": "alice"}),
        suspend_owners=[("flux-operator-web", "Update")],
        suspended_by={"flux-operator-web": "alice"}),
    # issue 47: the StateError face, and a release failing for a reason flux-plunger leaves
    Row("r", "hooked", "stuck", False, "-", 1, "uninstalling", "-", False, "2m", "hooked", "r",
        "newest revision 1 has status uninstalling, recorded in helm-controller's history, "
        "which it cannot place (StateError)", stuck=True, face="state-error",
        ready_reason="StateError", metadata=hr_metadata("r", "hooked")),
    Row("r", "broken-values", "failing", False, "-", 1, "failed", "-", False, "7m",
        "broken-values", "r", "helm-controller reports InstallFailed; flux-plunger does not "
        "repair it", ready_reason="InstallFailed", metadata=hr_metadata("r", "broken-values")),
]

OUTCOMES = [
    Outcome("apps", "stuck-one", "recovered", "deleted revision 2 (uninstalling) of release "
            "stuck-one; helm-controller will reconcile it again", row="live-stuck", revision=2,
            steps=["acquired", "annotated", "deleted", "relinquished"]),
    Outcome("apps", "y", "deferred", "spec.suspend was taken by another manager",
            row="live-stuck"),
    Outcome("apps", "broken", "failed", "Forbidden: secrets is forbidden", row="live-stuck",
            failed=True),
]
PLANNED = [
    Outcome("apps", "x", "planned", "stuck: recover", row="live-stuck", revision=2,
            steps=["step one", "step two"]),
    Outcome("apps", "left", "planned", "ours: relinquish", row="live-suspended-owned",
            steps=["apply (flux-plunger) without spec.suspend and without the fence"]),
    Outcome("apps", "other", "planned", "suspended by another manager",
            row="live-suspended-foreign"),
]
FENCES = [FenceResult("a", "live", True, False, ""),
          FenceResult("a", "orphan", True, True, ""),
          FenceResult("b", "stuck", False, False, "the fence could not be removed: Forbidden")]


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text + "\n")
    assert text + "\n" == path.read_text()


def test_state_counts_most_first():
    assert render.state_counts(["stuck", "failing", "stuck", "healthy"]) == \
        "2 stuck, 1 failing, 1 healthy"
    assert render.state_counts(["b", "a"]) == "1 a, 1 b"
    assert render.state_counts([]) == ""


def test_status_table():
    golden("status.txt", render.status_table(ROWS, all_namespaces=False, wide=False))
    assert render.status_table(ROWS, all_namespaces=False, wide=False, no_headers=True) == \
        "\n".join(render.status_table(ROWS, all_namespaces=False, wide=False).splitlines()[1:])


def test_status_table_all_namespaces_wide():
    out = render.status_table(ROWS, all_namespaces=True, wide=True)
    assert out.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert "STORAGE-REV" in out.splitlines()[0].split()   # not flux's REVISION (chart version)
    golden("status-all-wide.txt", out)


@functools.cache
def checked_schema() -> dict:
    """docs/output-schema.json, checked against the JSON Schema 2020-12 meta-schema (once:
    checking it is what takes the time, ~0.15 s)."""
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def schema_validator(kind: str):
    import jsonschema

    schema = checked_schema()
    jsonschema.Draft202012Validator(schema)  # the whole schema: one of the documents
    only = {k: v for k, v in schema.items() if k != "oneOf"}
    return jsonschema.Draft202012Validator({**only, "$ref": f"#/$defs/{kind}List"},
                                           format_checker=jsonschema.FormatChecker())


def test_status_documents_are_versioned_camel_case_and_match_the_schema():
    doc = render.document("HelmReleaseStatus", [render.status_item(r) for r in ROWS])
    golden("status.json", render.dump(doc, "json"))
    golden("status.yaml", render.dump(doc, "yaml"))
    assert yaml.safe_load(render.dump(doc, "yaml")) == doc
    schema_validator("HelmReleaseStatus").validate(doc)
    import jsonschema
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(doc)
    item = doc["items"][0]
    assert doc["apiVersion"] == item["apiVersion"] == "flux-plunger.cozystack.io/v1alpha1"
    assert item["metadata"]["creationTimestamp"] == "2026-11-30T10:00:00Z"  # RFC 3339, as read
    assert "managedFields" not in item["metadata"]          # hidden, as kubectl hides them
    assert item["processedRevision"] is None and item["storage"]["latestRevision"] == 2
    assert doc["items"][2]["storage"]["helmStatus"] is None
    assert [k for k in _keys(doc) if "_" in k or "-" in k] == []       # camelCase
    assert '"-"' not in json.dumps(doc)                                   # null, never "-"


def _keys(value, skip=("labels", "annotations")):
    """Every key of the document, but those of labels/annotations (any text is allowed there)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            if k not in skip:
                yield from _keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from _keys(v)


def test_recover_and_release_fence_documents_match_the_schema():
    doc = render.document("RecoveryResult", [render.outcome_item(o, "none") for o in OUTCOMES],
                          dryRun="none", summary={"recovered": 1, "deferred": 1, "failed": 1})
    golden("recover.json", render.dump(doc, "json"))
    schema_validator("RecoveryResult").validate(doc)
    planned = render.document("RecoveryResult",
                              [render.outcome_item(o, "client") for o in PLANNED],
                              dryRun="client", summary={"planned": 3})
    schema_validator("RecoveryResult").validate(planned)
    fences = render.document("FenceRelease", [render.fence_item(r, "none") for r in FENCES],
                             dryRun="none")
    golden("release-fence.json", render.dump(fences, "json"))
    schema_validator("FenceRelease").validate(fences)
    bad = json.loads(json.dumps(doc))
    bad["items"][0]["revision"] = "2"
    import jsonschema
    with pytest.raises(jsonschema.ValidationError):
        schema_validator("RecoveryResult").validate(bad)


def test_names():
    golden("status-name.txt", render.names((r.namespace, r.name) for r in ROWS))


def test_outcome_lines_are_kubectl_references_under_all_namespaces():
    text = "\n".join(render.outcome_line(o, all_namespaces=True) for o in OUTCOMES)
    golden("outcomes.txt", text)
    for line in text.splitlines():
        assert re.match(r"-n [a-z0-9-]+ helmrelease\.helm\.toolkit\.fluxcd\.io/[a-z0-9-]+ ", line)
    one = render.outcome_line(OUTCOMES[0], all_namespaces=False)
    assert one.startswith("helmrelease.helm.toolkit.fluxcd.io/stuck-one recovered: ")


def test_dry_run_says_so_on_every_line():
    client = [render.outcome_line(o, all_namespaces=False, dry_run="client") for o in PLANNED]
    golden("outcomes-dry-run.txt", "\n".join(client))
    assert [c.splitlines()[0] for c in client] == [
        "helmrelease.helm.toolkit.fluxcd.io/x would recover (dry run)",
        "helmrelease.helm.toolkit.fluxcd.io/left would lift flux-plunger's suspension (dry run)",
        "helmrelease.helm.toolkit.fluxcd.io/other unchanged: suspended by another manager "
        "(dry run)"]
    server = render.outcome_line(OUTCOMES[0], all_namespaces=False, dry_run="server")
    assert server.endswith(" (server dry run)")


def test_release_fence_lines_and_summary():
    golden("release-fence.txt", "\n".join(
        [render.fence_line(r, all_namespaces=True) for r in FENCES] + [summary(FENCES)]))


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


def test_a_recovering_row_carries_its_hold_and_matches_the_schema():
    """Issue 19: -o json shows since when and by which process flux-plunger holds a
    recovering release; no other row has the key (the goldens above are unchanged)."""
    held = Row("apps", "held", "recovering", True, "flux-plunger", 2, "uninstalling", "-", True,
               "5m", "held", "apps",
               "held by flux-plunger since 2026-12-01T21:05:03Z (controller pod-1)",
               metadata=hr_metadata("apps", "held"), suspend_owners=[("flux-plunger", "Apply")],
               hold={"since": "2026-12-01T21:05:03Z", "by": "controller pod-1"})
    doc = render.document("HelmReleaseStatus", [render.status_item(r) for r in (held, ROWS[0])])
    schema_validator("HelmReleaseStatus").validate(doc)
    assert doc["items"][0]["hold"] == {"since": "2026-12-01T21:05:03Z", "by": "controller pod-1"}
    assert "hold" not in doc["items"][1]
    bad = json.loads(json.dumps(doc))
    bad["items"][0]["hold"]["pid"] = 1
    import jsonschema
    with pytest.raises(jsonschema.ValidationError):
        schema_validator("HelmReleaseStatus").validate(bad)
