"""controller/chart is deployable by Flux itself: the real helm-controller installs the
chart from a HelmRelease (served on loopback like any chart), rendering the shipped
objects. No kubelet runs here, so the Deployment never gets pods; the objects are what
is checked."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

from kubectl_flux_plunger.kube import KubeError
from testplane.helmctl import helmrelease, publish_chart

from .conftest import wait_ready

CHART = Path(__file__).resolve().parents[2] / "controller" / "chart" / "flux-plunger"


def package(directory: Path) -> Path:
    """``helm package``: one top-level directory holding the chart."""
    out = directory / "flux-plunger-chart.tgz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(CHART.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=f"flux-plunger/{path.relative_to(CHART)}")
    out.write_bytes(buf.getvalue())
    return out


def get(cluster, path):
    try:
        return cluster.kube.request("GET", "GET", path)
    except KubeError as exc:
        if exc.not_found:
            return None
        raise


def test_helm_controller_installs_the_controller_chart(helm_controller, chart_server, cluster,
                                                       ns):
    chart = package(chart_server.directory)
    publish_chart(cluster.kube, ns, "flux-plunger-chart", chart, chart_server)
    cluster.apply(helmrelease(ns, "flux-plunger", "flux-plunger-chart",
                              releaseName="flux-plunger"), manager="kustomize-controller")
    wait_ready(cluster, ns, "flux-plunger", 90,
               f" (helm-controller log: {helm_controller.process.log})")
    dep = get(cluster, f"/apis/apps/v1/namespaces/{ns}/deployments/flux-plunger")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 90
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "serve" and "--shutdown-drain-timeout=65s" in args
    # cluster-scoped: named after the release namespace too (unique per install)
    assert get(cluster, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{ns}-flux-plunger")
    assert get(cluster, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/"
                        "flux-plunger-leader-election")
    assert get(cluster, f"/api/v1/namespaces/{ns}/serviceaccounts/flux-plunger")
