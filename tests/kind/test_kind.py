"""The e2e scenarios on a kind cluster with Flux installed (pytest-kind), where Docker and
kind exist.  Elsewhere these are skipped with the reason — never counted as passed."""
from __future__ import annotations

import shutil
import subprocess

import pytest


def _why_not() -> str | None:
    if not shutil.which("kind"):
        return "kind is not installed (the kind tier needs Docker and kind)"
    if not shutil.which("docker"):
        return "docker is not installed (the kind tier needs Docker and kind)"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "no Docker engine is reachable (`docker info` failed)"
    if not shutil.which("flux"):
        return "the flux CLI is not installed (needed to install Flux into kind)"
    return None


WHY = _why_not()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")


@pytest.fixture(scope="module")
def kind_flux(tmp_path_factory):
    from pytest_kind import KindCluster
    cluster = KindCluster("flux-plunger")
    cluster.create()
    subprocess.run(["flux", "install", "--components=source-controller,helm-controller",
                    "--kubeconfig", str(cluster.kubeconfig_path)], check=True)
    yield cluster
    cluster.delete()


def test_recover_on_kind_with_flux(kind_flux):
    """Install podinfo-like chart from a HelmRepository, break its newest revision, recover."""
    from tests.conftest import run_cli
    from testplane.helmctl import break_release, request_reconcile
    from kubectl_flux_plunger.kube import Kube
    kube = Kube.from_kubeconfig(str(kind_flux.kubeconfig_path))
    subprocess.run(["flux", "create", "source", "helm", "podinfo",
                    "--url=https://stefanprodan.github.io/podinfo",
                    "--kubeconfig", str(kind_flux.kubeconfig_path)], check=True)
    subprocess.run(["flux", "create", "hr", "podinfo", "--source=HelmRepository/podinfo",
                    "--chart=podinfo", "--kubeconfig", str(kind_flux.kubeconfig_path)], check=True)
    from testplane.cluster import Cluster
    from tests.e2e.conftest import wait_ready, wait_stuck
    cluster = Cluster(kube)
    wait_ready(cluster, "flux-system", "podinfo", timeout=300)
    break_release(kube, "flux-system", "podinfo")
    request_reconcile(kube, "flux-system", "podinfo")
    wait_stuck(cluster, "flux-system", "podinfo", timeout=120)
    res = run_cli("recover", "-n", "flux-system", "podinfo",
                  kubeconfig=kind_flux.kubeconfig_path)
    assert res.code == 0 and "podinfo recovered" in res.out, res
    wait_ready(cluster, "flux-system", "podinfo", timeout=300)
