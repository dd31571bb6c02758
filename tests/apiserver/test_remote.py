"""Releases whose Helm storage is in another cluster (spec.kubeConfig), against two real
control planes: the storage list and the DELETE go to the remote cluster, everything else
stays on the local HelmRelease; remote faults give one-line reasons and leave nothing
suspended."""
from __future__ import annotations

import base64
import socket
import threading
import time

import pytest
import yaml

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import JSON, core_path
from testplane.cluster import Cluster, eventually
from testplane.rbac import ensure_namespace, service_account_kubeconfig

from .conftest import stuck_release

REVISIONS = ((1, "superseded"), (2, "uninstalling"))


@pytest.fixture
def remote(remote_plane):
    k = remote_plane.kube()
    yield Cluster(k)
    k.close()


def kubeconfig_secret(cluster, ns, data: bytes, *, name="tenant-kubeconfig", key="value"):
    cluster.kube.request("CREATE", "POST", core_path("secrets", ns), content_type=JSON, body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
        "data": {key: base64.b64encode(data).decode()}})


def remote_release(cluster, remote, ns, kubeconfig: bytes | None, *, key=None, sa=None,
                   secret="tenant-kubeconfig"):
    """A stuck local HelmRelease whose storage (v1 superseded, v2 uninstalling) is in the
    remote cluster, plus a decoy: the same storage in the local cluster, which must stay."""
    if kubeconfig is not None:
        kubeconfig_secret(cluster, ns, kubeconfig, name=secret, key=key or "value")
    ref = {"name": secret, **({"key": key} if key else {})}
    spec = {"kubeConfig": {"secretRef": ref}, **({"serviceAccountName": sa} if sa else {})}
    ensure_namespace(remote.kube, ns)
    remote.storage(ns, "demo", list(REVISIONS))
    return stuck_release(cluster, ns, revisions=REVISIONS, spec=spec)


def assert_untouched(cluster, remote, ns):
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE not in hr["metadata"]["finalizers"]
    assert len(remote.secret_names(ns, "demo")) == 2
    assert len(cluster.secret_names(ns, "demo")) == 2


def test_recover_deletes_the_remote_revision_and_leaves_local_storage(
        remote_plane, cluster, remote, ns, hc, cli):
    remote_release(cluster, remote, ns, remote_plane.self_contained_kubeconfig())
    res = cli("recover", "-n", ns)
    assert res.code == 0, res
    assert "demo recovered" in res.out and f"in cluster {remote_plane.server}" in res.out, res
    assert remote.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    # the decoy in the local cluster is exactly as it was
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1",
                                                "sh.helm.release.v1.demo.v2"]
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE not in hr["metadata"]["finalizers"]
    assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "2"
    [event] = [e for e in cluster.events(ns, "demo") if e["reason"] == "Recovered"]
    assert event["message"].endswith(
        f"Secret {ns}/sh.helm.release.v1.demo.v2 in cluster {remote_plane.server}"), event


def test_status_wide_shows_the_remote_storage_and_its_cluster(
        remote_plane, cluster, remote, ns, cli):
    remote_release(cluster, remote, ns, remote_plane.self_contained_kubeconfig(),
                   key="config.yaml")
    remote.storage(ns, "demo", [(3, "uninstalled")])
    res = cli("status", "-n", ns, "-o", "wide")
    assert res.code == 0, res
    row = res.out.splitlines()[1].split()
    assert row[:5] == ["demo", "stuck", "-", "3", "uninstalled"], res
    assert remote_plane.server in row, res


def test_an_impersonated_service_account_that_cannot_delete(
        remote_plane, cluster, remote, ns, hc, cli):
    """spec.serviceAccountName is impersonated in the remote cluster as helm-controller does:
    the admin kubeconfig could delete, the impersonated account only read."""
    ensure_namespace(remote.kube, ns)
    service_account_kubeconfig(remote_plane, "deployer", namespace=ns, namespace_rules={
        ns: [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]})
    remote_release(cluster, remote, ns, remote_plane.self_contained_kubeconfig(), sa="deployer")
    mark = remote_plane.audit_mark()
    res = cli("recover", "-n", ns)
    assert res.code == 1, res
    line = next(line for line in res.out.splitlines() if "demo failed" in line)
    assert f"system:serviceaccount:{ns}:deployer" in line and "cannot delete" in line, res
    # read before this test's own client (same user agent) lists anything; an audit line
    # may land just after its response, so wait for both (the CLI has exited)

    def sent_now():
        return remote_plane.audit_events(mark, user_agent="kubectl-flux-plunger/")
    eventually(lambda: len(sent_now()) >= 2, 10, "the audit lines of the LIST and DELETE")
    sent = sent_now()
    assert_untouched(cluster, remote, ns)
    assert [(e["verb"], e["responseStatus"]["code"]) for e in sent] == [("list", 200),
                                                                       ("delete", 403)]
    assert {e["user"]["username"] for e in sent} == {"admin"}
    assert {e["impersonatedUser"]["username"] for e in sent} == \
        {f"system:serviceaccount:{ns}:deployer"}


def test_an_identity_allowed_to_delete_recovers(remote_plane, cluster, remote, ns, hc, cli):
    ensure_namespace(remote.kube, ns)
    path = service_account_kubeconfig(remote_plane, "plunger", namespace=ns, namespace_rules={
        ns: [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "delete"]}]})
    token = yaml.safe_load(path.read_text())["users"][0]["user"]["token"]
    remote_release(cluster, remote, ns,
                   remote_plane.self_contained_kubeconfig({"token": token}, user="plunger"))
    res = cli("recover", "-n", ns)
    assert res.code == 0 and "demo recovered" in res.out, res
    assert remote.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]


@pytest.mark.parametrize("case,expected", [
    ("missing", "kubeconfig Secret {ns}/tenant-kubeconfig not found"),
    ("malformed", "invalid kubeconfig: not a mapping"),
    ("file-reference", "references a certificate-authority file"),
    ("wrong-key", "does not contain a 'value' or 'value.yaml' key"),
])
def test_an_unusable_kubeconfig_secret_is_one_line_and_nothing_is_suspended(
        remote_plane, cluster, remote, ns, hc, cli, case, expected):
    data = {"missing": None, "malformed": b"just a string\n",
            "file-reference": remote_plane.kubeconfig.read_bytes(),
            "wrong-key": remote_plane.self_contained_kubeconfig()}[case]
    if case == "wrong-key":
        kubeconfig_secret(cluster, ns, data, key="kubeconfig")
        data = None
    remote_release(cluster, remote, ns, data)
    res = cli("recover", "-n", ns)
    assert res.code == 1, res
    line = next(line for line in res.out.splitlines() if "demo failed" in line)
    assert expected.format(ns=ns) in line, res
    assert "BEGIN" not in res.out + res.err and "client-key" not in res.out + res.err
    assert_untouched(cluster, remote, ns)


def test_config_map_reference_is_skipped_with_the_reason(cluster, ns, hc, cli):
    stuck_release(cluster, ns, spec={"kubeConfig": {"configMapRef": {"name": "aws-eks"}}})
    res = cli("recover", "-n", ns)
    assert res.code == 1, res
    assert "demo skipped: spec.kubeConfig.configMapRef (aws-eks)" in res.out, res
    assert "1 skipped" in res.out + res.err
    assert len(cluster.secret_names(ns, "demo")) == 2


def _kubeconfig_for(server_port: int, remote_plane) -> bytes:
    cfg = yaml.safe_load(remote_plane.self_contained_kubeconfig())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{server_port}"
    return yaml.safe_dump(cfg).encode()


def test_an_unreachable_remote_fails_in_one_line_and_nothing_is_suspended(
        remote_plane, cluster, remote, ns, hc, cli):
    with socket.socket() as s:          # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    remote_release(cluster, remote, ns, _kubeconfig_for(port, remote_plane))
    res = cli("recover", "-n", ns)
    assert res.code == 1, res
    line = next(line for line in res.out.splitlines() if "demo failed" in line)
    assert "cannot reach the Kubernetes API at https://127.0.0.1" in line, res
    assert f"remote cluster of kubeconfig Secret {ns}/tenant-kubeconfig" in line, res
    assert_untouched(cluster, remote, ns)


@pytest.fixture
def black_hole():
    """A TCP port that accepts connections and never answers (a hung remote apiserver)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


def test_a_hung_remote_costs_status_one_bounded_wait_not_one_per_release(
        remote_plane, cluster, remote, ns, black_hole, cli):
    """Five releases on a remote that never answers, one healthy local stuck release:
    status shows them all, within one request timeout plus overhead."""
    kubeconfig_secret(cluster, ns, _kubeconfig_for(black_hole, remote_plane), name="hung")
    for i in range(5):
        cluster.create_hr(ns, f"r{i}", spec={"kubeConfig": {"secretRef": {"name": "hung"}}})
        cluster.make_stuck(ns, f"r{i}")
    stuck_release(cluster, ns, "local")
    started = time.monotonic()
    res = cli("status", "-n", ns, "-o", "wide", "--request-timeout", "3s")
    took = time.monotonic() - started
    assert res.code == 0, res
    lines = res.out.splitlines()[1:]
    assert len(lines) == 6, res
    assert any(line.startswith("local ") and "uninstalling" in line for line in lines), res
    hung = [line for line in lines if line.startswith("r")]
    assert all("<unreadable>" in line for line in hung), res
    assert sum("timed out" in line or "Read timed out" in line for line in hung) == 1, res
    assert sum("did not answer a moment ago" in line for line in hung) == 4, res
    assert took < 3 * 2 + 8, f"status took {took:.1f}s"


def test_a_remote_revision_is_backed_up_and_restored_into_the_remote_cluster(
        remote_plane, cluster, remote, ns, hc, cli, tmp_path):
    remote_release(cluster, remote, ns, remote_plane.self_contained_kubeconfig())
    res = cli("recover", "-n", ns, "--backup-dir", str(tmp_path))
    assert res.code == 0 and "(backup: file " in res.out, res
    [path] = tmp_path.iterdir()
    assert remote.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    cluster.suspend(ns, "demo", True, manager="operator")
    res = cli("restore", str(path))
    assert res.code == 0, res
    assert res.out.strip() == (f"created Secret {ns}/sh.helm.release.v1.demo.v2 (revision 2 of "
                               f"release demo) in cluster {remote_plane.server} from {path}"), res
    assert len(remote.secret_names(ns, "demo")) == 2
    assert len(cluster.secret_names(ns, "demo")) == 2          # the local decoy, unchanged


def test_server_dry_run_reaches_the_remote_and_deletes_nothing(
        remote_plane, cluster, remote, ns, hc, cli):
    remote_release(cluster, remote, ns, remote_plane.self_contained_kubeconfig())
    mark = remote_plane.audit_mark()
    res = cli("recover", "-n", ns, "--dry-run=server")
    assert res.code == 0 and "(server dry run)" in res.out + res.err, res
    eventually(lambda: [e["verb"] for e in remote_plane.audit_events(
        mark, user_agent="kubectl-flux-plunger/")] == ["list", "delete"], 10,
        "the remote LIST and the dry-run DELETE in the audit log")
    assert_untouched(cluster, remote, ns)


def test_status_names_an_unusable_kubeconfig_and_still_lists_the_rest(cluster, ns, cli):
    cluster.create_hr(ns, "gone-kc", spec={"kubeConfig": {"secretRef": {"name": "nope"}}})
    cluster.make_stuck(ns, "gone-kc")
    stuck_release(cluster, ns, "local")
    res = cli("status", "-n", ns, "-o", "wide")
    assert res.code == 0, res
    rows = {line.split()[0]: line for line in res.out.splitlines()[1:]}
    assert "<unreadable>" in rows["gone-kc"] and "<remote>" in rows["gone-kc"], res
    assert f"kubeconfig Secret {ns}/nope not found" in rows["gone-kc"], res
    assert "uninstalling" in rows["local"] and " local " in rows["local"], res
