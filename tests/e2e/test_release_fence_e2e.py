"""release-fence --wait-uninstall (what uninstalling the controller runs) with the real
helm-controller: a release flux-plunger still holds is deleted; the command lifts the
suspension, lets helm-controller uninstall it, and only then releases the fence."""
from __future__ import annotations


from kubectl_flux_plunger.core import constants as C
from testplane.cluster import eventually

from tests.apiserver.conftest import hold

from .test_helm_controller_facts import configmap


def test_release_fence_waits_for_the_real_uninstall(installed, cluster, ns, cli,
                                                    helm_controller):
    installed()
    with helm_controller.paused():       # the delete lands while helm-controller is away
        hold(cluster, ns)
        cluster.delete_hr(ns, "demo")
    # helm-controller sees a suspended, deleted release: it drops its finalizer only
    eventually(lambda: C.HELM_CONTROLLER_FINALIZER not in
               cluster.get(ns, "demo")["metadata"]["finalizers"], 30,
               "helm-controller to drop its finalizer from the suspended release")
    assert configmap(cluster, ns, "demo-cm") is not None
    res = cli("release-fence", "-n", ns, "--wait-uninstall", "--timeout=60s")
    assert res.code == 0, res
    assert "helmrelease.helm.toolkit.fluxcd.io/demo uninstall fence released" in res.out
    assert "released 1 of 1 fenced HelmReleases, 0 without an uninstall" in res.out
    eventually(lambda: cluster.get(ns, "demo") is None, 30, "the release to go")
    assert configmap(cluster, ns, "demo-cm") is None          # the Helm uninstall ran
    assert cluster.secret_names(ns, "demo") == []
