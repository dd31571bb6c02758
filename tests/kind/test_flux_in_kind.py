"""Scenario 1: Flux's CRDs, source-controller and helm-controller run in the kind cluster as
Deployments; a chart served from a pod (a Helm repository over HTTP) is installed by a
HelmRelease through a HelmRepository and the HelmChart source-controller makes of it."""
from __future__ import annotations

import pytest

from testplane.cluster import Cluster
from testplane.helmctl import ready
from testplane.kind import CHARTS_IP, FLUX_NS, SOURCE_CONTROLLER_IP, KindFlux

from .conftest import install_release, skip_reason

pytestmark = pytest.mark.skipif(bool(skip_reason()), reason=skip_reason())


def test_flux_controllers_run_as_deployments(kind_flux: KindFlux) -> None:
    for name in ("source-controller", "helm-controller"):
        dep = kind_flux.get_json("-n", FLUX_NS, "deployment", name)
        assert dep is not None, name
        assert dep["status"].get("readyReplicas") == 1, (name, dep["status"])
        assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == kind_flux.setup.flux[name]
    crds = kind_flux.get_json("crd")["items"]
    names = {c["metadata"]["name"] for c in crds}
    assert {"helmreleases.helm.toolkit.fluxcd.io", "helmrepositories.source.toolkit.fluxcd.io",
            "helmcharts.source.toolkit.fluxcd.io"} <= names


def test_helmrelease_installs_a_chart_served_from_a_pod(kind_flux: KindFlux, kcluster: Cluster) -> None:
    ns = kcluster.namespace("k1")
    hr = install_release(kind_flux, kcluster, ns)
    assert ready(hr)[1] == "InstallSucceeded", ready(hr)
    repo = kind_flux.get_json("-n", ns, "helmrepository", "charts")
    assert repo["spec"]["url"] == f"http://{CHARTS_IP}:8080"
    chart = kind_flux.get_json("-n", ns, "helmchart", f"{ns}-demo")
    artifact = chart["status"]["artifact"]
    assert artifact["url"].startswith(f"http://{SOURCE_CONTROLLER_IP}/"), artifact
    assert artifact["revision"] == "0.1.0"
    cm = kind_flux.get_json("-n", ns, "configmap", "demo-cm")
    assert cm["data"]["release"] == "demo"
    secrets = kcluster.kube.list_secrets(ns, "owner=helm,name=demo")
    assert [s["metadata"]["labels"]["status"] for s in secrets] == ["deployed"]
