"""Every deletion can be undone: the backup written before the DELETE (a 0600 file or a copy
Secret), what a failed backup write prevents, and `restore` (create-only, guarded)."""
from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import stat

import pytest

from kubectl_flux_plunger.executor import backup
from kubectl_flux_plunger.core import storage
from kubectl_flux_plunger.executor.backup import SecretBackup
from kubectl_flux_plunger.kube import core_path

from .conftest import stuck_release
from .test_serve_support import serve  # noqa: F401 - fixture

NAME = re.compile(r"(?P<ns>[a-z0-9-]+)_demo_v00000002_\d{8}T\d{12}Z\.json")


def newest(cluster, ns, release="demo"):
    secrets = cluster.kube.list_secrets(ns, storage.label_selector(release))
    return max(secrets, key=lambda s: int(s["metadata"]["labels"]["version"]))


def test_recover_backs_up_the_exact_secret_before_deleting_it(cluster, ns, hc, cli, tmp_path):
    stuck_release(cluster, ns)
    before = newest(cluster, ns)
    res = cli("recover", "-n", ns, "--backup-dir", str(tmp_path / "b"))
    assert res.code == 0, res
    files = sorted((tmp_path / "b").iterdir())
    assert len(files) == 1 and NAME.fullmatch(files[0].name), files
    assert files[0].name.startswith(f"{ns}_")
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert f"(backup: file {files[0]})" in res.out, res
    doc = json.loads(files[0].read_bytes())
    # the whole object as it was, minus server-set fields; data byte for byte
    assert backup.original(doc) == backup.strip(before)
    for key, value in before["data"].items():
        assert base64.b64decode(doc["data"][key]) == base64.b64decode(value)
    assert "uid" not in doc["metadata"] and "resourceVersion" not in doc["metadata"]
    assert backup.provenance(doc) == (ns, "demo", "local")
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    [event] = [e for e in cluster.events(ns, "demo") if e["reason"] == "Recovered"]
    assert event["message"].endswith(f"Secret {ns}/sh.helm.release.v1.demo.v2; backup: file "
                                     f"{files[0]}"), event["message"]


def test_a_failed_backup_write_deletes_nothing(cluster, ns, hc, cli, tmp_path):
    stuck_release(cluster, ns)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    res = cli("recover", "-n", ns, "--backup-dir", str(blocker / "backups"))
    assert res.code == 1, res
    line = next(line for line in res.out.splitlines() if "demo failed" in line)
    assert "cannot write backup" in line and "nothing deleted" in line, res
    assert len(cluster.secret_names(ns, "demo")) == 2
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None
    assert "flux-plunger.cozystack.io/uninstall-fence" not in hr["metadata"]["finalizers"]


def test_dry_run_writes_no_backup(cluster, ns, hc, cli, tmp_path):
    stuck_release(cluster, ns)
    res = cli("recover", "-n", ns, "--backup-dir", str(tmp_path / "b"), "--dry-run=client")
    assert res.code == 0 and f"save the Secret first to a file in {tmp_path / 'b'}" in res.out, res
    res = cli("recover", "-n", ns, "--backup-dir", str(tmp_path / "b"), "--dry-run=server")
    assert res.code == 0, res
    assert not (tmp_path / "b").exists()
    assert len(cluster.secret_names(ns, "demo")) == 2


def _recovered_with_backup(cluster, ns, cli, tmp_path):
    stuck_release(cluster, ns)
    before = newest(cluster, ns)
    res = cli("recover", "-n", ns, "--backup-dir", str(tmp_path))
    assert res.code == 0, res
    return before, next(tmp_path.iterdir())


def test_restore_puts_the_revision_back_and_never_overwrites(cluster, ns, hc, cli, tmp_path):
    before, path = _recovered_with_backup(cluster, ns, cli, tmp_path)
    # refused while the release is not suspended by its caller
    res = cli("restore", str(path))
    assert res.code == 1 and "is not suspended" in res.err, res
    assert len(cluster.secret_names(ns, "demo")) == 1
    cluster.suspend(ns, "demo", True, manager="operator")
    res = cli("restore", str(path), "--dry-run")
    assert res.code == 0, res
    assert res.out.strip() == (f"would create Secret {ns}/sh.helm.release.v1.demo.v2 "
                               f"(revision 2) from {path} (dry run)"), res
    assert len(cluster.secret_names(ns, "demo")) == 1
    res = cli("restore", str(path), "--dry-run=server")
    assert res.code == 0, res
    assert res.out.strip() == (f"would create Secret {ns}/sh.helm.release.v1.demo.v2 (revision "
                               f"2 of release demo) from {path} (server dry run)"), res
    res = cli("restore", str(path), "--dry-run=server", "-o", "json")
    assert res.code == 0, res
    assert json.loads(res.out)["items"][0]["action"] == "would-create", res
    assert len(cluster.secret_names(ns, "demo")) == 1
    res = cli("restore", str(path))
    assert res.code == 0, res
    assert res.out.strip() == (f"created Secret {ns}/sh.helm.release.v1.demo.v2 (revision 2 of "
                               f"release demo) from {path}"), res
    restored = newest(cluster, ns)
    assert storage.decode_payload(restored) == storage.decode_payload(before)
    assert backup.strip(restored) == backup.strip(before)
    assert restored["metadata"]["uid"] != before["metadata"]["uid"]
    again = cli("restore", str(path), "--force")
    assert again.code == 1 and "already exists; restore never overwrites" in again.err, again
    assert newest(cluster, ns)["metadata"]["resourceVersion"] == \
        restored["metadata"]["resourceVersion"]


def test_restore_refuses_while_flux_plunger_holds_the_suspension(cluster, ns, hc, cli, tmp_path):
    from .conftest import hold
    _, path = _recovered_with_backup(cluster, ns, cli, tmp_path)
    hold(cluster, ns)
    res = cli("restore", str(path))
    assert res.code == 1 and "suspended by flux-plunger" in res.err, res
    res = cli("restore", str(path), "--force")
    assert res.code == 0 and res.out.startswith("created Secret"), res


@pytest.mark.parametrize("content,message", [
    ("{not json", "is not a JSON or YAML document"),
    ('{"kind": "ConfigMap"}', "does not hold a Helm storage Secret"),
])
def test_restore_of_a_bad_file_is_one_line(cli, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    res = cli("restore", str(path))
    assert res.code == 1 and res.err.strip().splitlines() == [f"error: {path} {message}"], res


def test_backup_secret_is_labelled_restorable_and_pruned(cluster, ns, hc, make_executor, cli):
    """serve --backup-secret-namespace: a copy Secret in the controller's namespace."""
    own = cluster.namespace("ctl")
    stuck_release(cluster, ns)
    before = newest(cluster, ns)
    store = SecretBackup(cluster.kube, own)
    out = make_executor(backup=store).reconcile(ns, "demo")
    assert out.result == "recovered" and f"(backup: Secret {own}/flux-plunger-backup-" in \
        out.detail, out
    items = cluster.kube.request("LIST", "GET", core_path("secrets", own),
                                 query={"labelSelector": "flux-plunger.cozystack.io/backup=true"})
    [copy] = items["items"]
    assert copy["metadata"]["labels"]["flux-plunger.cozystack.io/release"] == "demo"
    assert copy["metadata"]["labels"]["flux-plunger.cozystack.io/revision"] == "2"
    doc = json.loads(base64.b64decode(copy["data"]["secret.json"]))
    assert backup.original(doc) == backup.strip(before)
    cluster.suspend(ns, "demo", True, manager="operator")
    res = cli("restore", f"{own}/{copy['metadata']['name']}")
    assert res.code == 0 and res.out.startswith(
        f"created Secret {ns}/sh.helm.release.v1.demo.v2"), res
    # retention: nothing is pruned before it, the copy is after it
    assert store.prune() == []
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=8)
    assert store.prune(now=later) == [copy["metadata"]["name"]]


def test_serve_refuses_a_non_positive_backup_retention(cli):
    res = cli("serve", "--no-leader-elect", "--backup-secret-namespace", "x",
              "--backup-retention", "0s")
    assert res.code == 2 and "--backup-retention must be positive" in res.err, res


def test_backup_files_sort_by_release_then_revision(tmp_path):
    store = backup.DirectoryBackup(tmp_path)
    hr = {"metadata": {"namespace": "apps", "name": "demo"}}
    for rev in (10, 9, 100):
        store.save(storage.make_storage_secret("demo", "apps", rev, "uninstalling"), hr, "local")
    names = sorted(os.listdir(tmp_path))
    assert [n.split("_")[2] for n in names] == ["v00000009", "v00000010", "v00000100"]


def test_chart_widens_the_role_only_when_backups_are_on():
    from testplane import binaries
    from .test_deploy_manifests import find, render_chart
    helm = binaries.ensure("helm")
    off = render_chart(helm, "fp")
    assert not [d for d in off if d["metadata"]["name"] == "flux-plunger-backups"]
    args = find(off, "Deployment", "flux-plunger")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--backup")]
    on = render_chart(helm, "fp", "backups.enabled=true", "backups.retention=\"24h\"")
    role = find(on, "Role", "flux-plunger-backups")
    assert role["metadata"]["namespace"] == "fp"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "verbs": ["create", "get", "list", "delete"]}]
    binding = find(on, "RoleBinding", "flux-plunger-backups")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "flux-plunger",
                                    "namespace": "fp"}]
    args = find(on, "Deployment", "flux-plunger")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--backup-secret-namespace=fp" in args and "--backup-retention=24h" in args


def test_serve_keeps_a_backup_secret_of_what_it_deletes(cluster, ns, hc, serve):  # noqa: F811
    from testplane.cluster import eventually
    from .test_serve_support import FAST, recovered
    own = cluster.namespace("ctl")
    stuck_release(cluster, ns)
    before = newest(cluster, ns)
    serve("-n", ns, "--no-leader-elect", "--backup-secret-namespace", own, *FAST)
    eventually(lambda: recovered(cluster, ns, "demo"), 30, "the stuck release recovered")
    items = cluster.kube.request("LIST", "GET", core_path("secrets", own),
                                 query={"labelSelector": "flux-plunger.cozystack.io/revision=2"})
    [copy] = items["items"]
    doc = json.loads(base64.b64decode(copy["data"]["secret.json"]))
    assert backup.original(doc) == backup.strip(before)
    assert backup.provenance(doc) == (ns, "demo", "local")
