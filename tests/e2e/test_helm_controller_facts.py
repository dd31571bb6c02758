"""What the product rests on, with the real helm-controller: it installs a chart, a newest
revision in status ``uninstalling`` makes it report "has no deployed releases" for good,
and deleting that revision while suspended, then resuming, heals it."""
from __future__ import annotations

from kubectl_flux_plunger.kube import KubeError
from testplane.cluster import eventually
from testplane.helmctl import break_release, ready, request_reconcile

from .conftest import wait_ready, wait_stuck


def configmap(cluster, ns, name):
    try:
        return cluster.kube.request("GET", "GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
    except KubeError as exc:
        if exc.not_found:
            return None
        raise


def test_install_break_and_manual_heal(installed, cluster, ns):
    hr = installed()
    assert ready(hr)[0] == "True"
    assert configmap(cluster, ns, "demo-cm")["data"]["release"] == "demo"
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]

    break_release(cluster.kube, ns, "demo")
    request_reconcile(cluster.kube, ns, "demo")
    wait_stuck(cluster, ns)
    status, reason, message = ready(cluster.get(ns, "demo"))
    assert reason == "UpgradeFailed" and '"demo" has no deployed releases' in message

    # a retry alone does not heal it
    request_reconcile(cluster.kube, ns, "demo")
    wait_stuck(cluster, ns)

    cluster.suspend(ns, "demo", True)
    gen = cluster.get(ns, "demo")["metadata"]["generation"]
    eventually(lambda: cluster.get(ns, "demo")["status"].get("observedGeneration") == gen, 30,
               "helm-controller to observe the suspension")
    cluster.kube.request("DELETE", "DELETE",
                         f"/api/v1/namespaces/{ns}/secrets/sh.helm.release.v1.demo.v1")
    cluster.suspend(ns, "demo", False)
    wait_ready(cluster, ns)
    assert ready(cluster.get(ns, "demo"))[1] == "InstallSucceeded"
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
