"""The e2e tier: the real control plane plus the real Flux helm-controller (built from its
Go module) running as a local process, with a chart served on loopback."""
from __future__ import annotations

import pytest

from testplane.binaries import BuildError
from testplane.cluster import eventually
from testplane.helmctl import (ChartServer, HelmController, build_chart, helmrelease, is_ready,
                               publish_chart, ready)
from testplane.plane import PlaneError
from testplane.verdicts import CELL_LABEL


@pytest.fixture(scope="session")
def chart_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("charts")
    chart = build_chart(d)
    server = ChartServer(d).start()
    server.chart = chart
    yield server
    server.stop()


@pytest.fixture(scope="session")
def helm_controller(plane, tmp_path_factory):
    # the verdict table's cells (test_verdict_table_e2e.py) have a helm-controller of their own
    hc = HelmController(plane.kubeconfig, tmp_path_factory.mktemp("helm-controller"),
                        label_selector=f"!{CELL_LABEL}")
    try:
        hc.start()
    except (BuildError, PlaneError, TimeoutError) as exc:
        hc.stop()
        pytest.fail(f"cannot start the real helm-controller: {exc}", pytrace=False)
    yield hc
    hc.stop()


@pytest.fixture
def installed(helm_controller, chart_server, cluster, ns):
    """``installed(name)``: a HelmRelease helm-controller installed to Ready=True."""
    def _install(name="demo", **spec):
        publish_chart(cluster.kube, ns, name, chart_server.chart, chart_server)
        body = helmrelease(ns, name, name, **spec)
        cluster.apply(body, manager="kustomize-controller")
        wait_ready(cluster, ns, name, 90,
                   f" (helm-controller log: {helm_controller.process.log})")
        return cluster.get(ns, name)
    return _install


def wait_stuck(cluster, ns, name="demo", timeout=60):
    def stuck():
        r = ready(cluster.get(ns, name))
        return r and r[0] == "False" and "has no deployed releases" in r[2]
    eventually(stuck, timeout, f"{ns}/{name} stuck with 'has no deployed releases'")


def wait_ready(cluster, ns, name="demo", timeout=90, hint=""):
    eventually(lambda: is_ready(cluster.get(ns, name)), timeout, f"{ns}/{name} Ready=True{hint}")
