"""The real helm-controller managing a release in another cluster through spec.kubeConfig
(a second real control plane): broken the way the e2e tier breaks releases, `recover` and
`serve` heal it — Ready=True — deleting exactly the stuck revision in the remote cluster."""
from __future__ import annotations

import base64

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import JSON, core_path
from testplane.cluster import Cluster, eventually
from testplane.helmctl import break_release, helmrelease, publish_chart, ready, request_reconcile
from testplane.rbac import ensure_namespace

from tests.apiserver.test_serve_support import FAST, serve  # noqa: F401 - fixture

from .conftest import wait_ready, wait_stuck
from .test_helm_controller_facts import configmap

SECRET = "tenant-kubeconfig"


@pytest.fixture
def remote(remote_plane):
    k = remote_plane.kube()
    yield Cluster(k)
    k.close()


@pytest.fixture
def installed_remote(helm_controller, chart_server, cluster, remote, remote_plane, ns):
    """A HelmRelease in the local cluster that helm-controller installed into the remote
    one (kubeconfig Secret key ``value``), Ready=True."""
    ensure_namespace(remote.kube, ns)
    cluster.kube.request("CREATE", "POST", core_path("secrets", ns), content_type=JSON, body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": ns},
        "data": {"value": base64.b64encode(remote_plane.self_contained_kubeconfig()).decode()}})
    publish_chart(cluster.kube, ns, "demo", chart_server.chart, chart_server)
    body = helmrelease(ns, "demo", "demo", kubeConfig={"secretRef": {"name": SECRET}})
    cluster.apply(body, manager="kustomize-controller")
    wait_ready(cluster, ns, "demo", 90, f" (helm-controller log: {helm_controller.process.log})")
    # the release lives in the remote cluster, and only there
    assert configmap(remote, ns, "demo-cm") is not None
    assert configmap(cluster, ns, "demo-cm") is None
    assert remote.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    assert cluster.secret_names(ns, "demo") == []


def break_remote(cluster, remote, ns):
    """helm upgrade once more (revision 2 deployed), then leave revision 2 'uninstalling' as an
    interrupted uninstall does; helm-controller then reports 'has no deployed releases'."""
    cluster.merge(ns, "demo", {"spec": {"values": {"value": "two"}}})
    eventually(lambda: len(remote.secret_names(ns, "demo")) == 2 and
               ready(cluster.get(ns, "demo"))[0] == "True", 60, "revision 2 deployed")
    broken = break_release(remote.kube, ns, "demo")
    request_reconcile(cluster.kube, ns, "demo")
    wait_stuck(cluster, ns, "demo")
    return broken


def assert_healed(cluster, remote, ns, broken):
    wait_ready(cluster, ns, "demo", 120)
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE not in hr["metadata"]["finalizers"]
    assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "2"
    statuses = {s["metadata"]["name"]: s["metadata"]["labels"]["status"]
                for s in remote.kube.list_secrets(ns, "owner=helm,name=demo")}
    # the broken v2 went; helm-controller then upgraded from v1 to a new v2
    assert broken == "sh.helm.release.v1.demo.v2"
    assert statuses["sh.helm.release.v1.demo.v1"] in ("superseded", "deployed")
    assert "deployed" in statuses.values(), statuses
    assert cluster.secret_names(ns, "demo") == []


def _secret_requests(plane, mark):
    """(verb, namespace, name) of every Secret request flux-plunger sent to ``plane``."""
    return [(e["verb"], e["objectRef"].get("namespace"), e["objectRef"].get("name"))
            for e in plane.audit_events(mark, user_agent="kubectl-flux-plunger/")
            if (e.get("objectRef") or {}).get("resource") == "secrets"]


def test_recover_heals_a_release_in_a_remote_cluster(installed_remote, cluster, remote, ns, cli,
                                                     remote_plane, plane):
    broken = break_remote(cluster, remote, ns)
    res = cli("status", "-n", ns, "-o", "wide")
    assert res.code == 0 and "uninstalling" in res.out and remote_plane.server in res.out, res
    before = remote.kube.list_secrets(ns, "owner=helm,name=demo")
    broken_uid = next(s["metadata"]["uid"] for s in before if s["metadata"]["name"] == broken)
    local_mark, remote_mark = plane.audit_mark(), remote_plane.audit_mark()
    res = cli("recover", "-n", ns)
    assert res.code == 0, res
    assert "demo recovered" in res.out and f"in cluster {remote_plane.server}" in res.out, res
    # counted by the apiservers: storage is listed and exactly the broken revision deleted
    # in the remote cluster; locally only the kubeconfig Secret is read
    # (an audit line may land just after the response: wait for it, the CLI has exited)
    eventually(lambda: _secret_requests(remote_plane, remote_mark) == [("list", ns, None),
                                                                      ("delete", ns, broken)],
               10, f"remote audit log: {_secret_requests(remote_plane, remote_mark)}")
    eventually(lambda: _secret_requests(plane, local_mark) == [("get", ns, SECRET)], 10,
               f"local audit log: {_secret_requests(plane, local_mark)}")
    after = remote.kube.list_secrets(ns, "owner=helm,name=demo")
    assert broken_uid not in {s["metadata"]["uid"] for s in after}
    assert_healed(cluster, remote, ns, broken)


def test_serve_heals_a_release_in_a_remote_cluster(installed_remote, cluster, remote, ns,
                                                   serve):  # noqa: F811
    broken = break_remote(cluster, remote, ns)
    serve("-n", ns, "--no-leader-elect", *FAST)
    assert_healed(cluster, remote, ns, broken)
