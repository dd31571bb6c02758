"""serve running on a ServiceAccount token bound to exactly the shipped ClusterRole and
Lease Role (rendered from controller/kustomize), against the real helm-controller: a full
recovery and a delete of a held release reaching the uninstall, with zero Forbidden."""
from __future__ import annotations

import signal

from kubectl_flux_plunger.core import constants as C
from testplane.cluster import eventually
from testplane.helmctl import ready
from testplane.rbac import service_account_kubeconfig

from tests.apiserver.conftest import hold
from tests.conftest import no_watch_lists_lines
from tests.apiserver.test_deploy_manifests import find, render_kustomize
from tests.apiserver.test_serve_support import FAST, Serve

from .conftest import wait_ready
from .test_helm_controller_facts import configmap
from .test_recover_e2e import make_stuck


class _Plane:
    """The plane, seen through another kubeconfig (what Serve needs of it)."""

    def __init__(self, kubeconfig):
        self.kubeconfig = kubeconfig


def test_serve_with_exactly_the_shipped_rbac_against_helm_controller(
        installed, cluster, ns, plane, helm_controller, tmp_path):
    docs = render_kustomize()
    kc = service_account_kubeconfig(
        plane, "flux-plunger", namespace=ns,
        cluster_rules=find(docs, "ClusterRole", "flux-plunger-flux-plunger")["rules"],
        namespace_rules={ns: find(docs, "Role", "flux-plunger-leader-election")["rules"]})
    make_stuck(installed, cluster, ns, "demo")
    installed("held")
    args = ("-n", ns, "--leader-elect", "--leader-election-namespace", ns, *FAST)
    runs = [Serve(_Plane(kc), tmp_path, "serve-sa-1", args)]
    try:
        wait_ready(cluster, ns, "demo", timeout=120)           # the full recovery
        assert ready(cluster.get(ns, "demo"))[1] == "InstallSucceeded"
        runs[0].signal(signal.SIGTERM)
        assert runs[0].wait(30) == 0

        # while no serve runs: a crash left our hold, then the release is deleted while
        # helm-controller is paused; the next serve must carry it through the uninstall
        with helm_controller.paused():
            hold(cluster, ns, "held")
            cluster.delete_hr(ns, "held")
            runs.append(Serve(_Plane(kc), tmp_path, "serve-sa-2", args))
            eventually(lambda: cluster.get(ns, "held")["spec"].get("suspend") is None, 30,
                       "serve to lift its suspension")
            assert C.FENCE in cluster.get(ns, "held")["metadata"]["finalizers"]
        eventually(lambda: cluster.get(ns, "held") is None, 60, "the held release to go")
        assert configmap(cluster, ns, "held-cm") is None        # uninstalled
        runs[1].signal(signal.SIGTERM)
        assert runs[1].wait(30) == 0
    finally:
        for r in runs:
            r.stop()
    for i, r in enumerate(runs):
        # a server without watch-lists: the first serve logs the refusal (whose 422 says
        # "Forbidden") once; the second remembers the server and sends none
        fallback = no_watch_lists_lines(r.logs())
        assert len(fallback) == (0 if plane.watch_lists or i else 1), r.logs()
        logs = "\n".join(line for line in r.logs().splitlines() if line not in fallback).lower()
        assert "forbidden" not in logs and " 403" not in logs, r.logs()
    assert not cluster.get(ns, "demo")["metadata"].get("deletionTimestamp")
