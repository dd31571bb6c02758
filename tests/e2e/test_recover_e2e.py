"""The product against the real helm-controller: recover heals a stuck release, a delete
during recovery still reaches the Helm uninstall (both orders), and a release suspended by
another manager is left alone."""
from __future__ import annotations


from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.report.events import Recorder
from kubectl_flux_plunger.executor import Executor, Options
from testplane.cluster import eventually
from testplane.helmctl import break_release, ready, request_reconcile

from .conftest import wait_ready, wait_stuck
from .test_helm_controller_facts import configmap


def make_stuck(installed, cluster, ns, name="demo"):
    installed(name)
    break_release(cluster.kube, ns, name)
    request_reconcile(cluster.kube, ns, name)
    wait_stuck(cluster, ns, name)


def test_recover_cli_brings_a_stuck_release_back_to_ready(installed, cluster, ns, cli):
    make_stuck(installed, cluster, ns)
    res = cli("status", "-n", ns)
    assert res.code == 0 and "stuck" in res.out and "uninstalling" in res.out, res
    res = cli("recover", "-n", ns)
    assert res.code == 0, res
    assert "demo recovered" in res.out and "recovered 1 of 1 stuck" in res.out, res
    wait_ready(cluster, ns)
    hr = cluster.get(ns, "demo")
    assert ready(hr)[1] == "InstallSucceeded"
    assert hr["spec"].get("suspend") is None
    assert C.FENCE not in hr["metadata"]["finalizers"]
    secrets = cluster.kube.list_secrets(ns, "owner=helm,name=demo")
    assert [s["metadata"]["labels"]["status"] for s in secrets] == ["deployed"]
    # running it again does nothing: healthy now
    again = cli("recover", "-n", ns)
    assert again.code == 0 and "recovered 0 of 0 stuck" in again.out + again.err, again


def _executor(plane):
    k = plane.kube()
    return Executor(k, Recorder(k), options=Options(handshake_timeout=30))


def _finish(ex, cluster, ns):
    """Passes of the decision table until the release is gone (the drain's loop)."""
    def done():
        return ex.reconcile(ns, "demo").result == "gone"
    eventually(done, 60, "helm-controller to handle the delete and the fence to be released")


def _hold_then_delete(ex, cluster, ns, helm_controller, helm_controller_first: bool):
    """Delete the release while flux-plunger holds its suspension (what a crash mid-recovery
    or a delete racing a recovery leaves), in the given order relative to helm-controller."""
    from tests.apiserver.conftest import hold
    hold(cluster, ns)
    gen = cluster.get(ns, "demo")["metadata"]["generation"]
    eventually(lambda: cluster.get(ns, "demo")["status"].get("observedGeneration") == gen, 30,
               "helm-controller to observe our suspension")
    if helm_controller_first:
        cluster.delete_hr(ns, "demo")
        eventually(lambda: C.HELM_CONTROLLER_FINALIZER not in
                   cluster.get(ns, "demo")["metadata"]["finalizers"], 30,
                   "helm-controller to drop its finalizer from the suspended release")
        assert cluster.get(ns, "demo")["metadata"]["finalizers"] == [C.FENCE]
        assert configmap(cluster, ns, "demo-cm") is not None      # skipped: it was suspended
        _finish(ex, cluster, ns)
    else:
        with helm_controller.paused():
            cluster.delete_hr(ns, "demo")
            out = ex.reconcile(ns, "demo")
            assert out.result == "relinquished", out
        _finish(ex, cluster, ns)


def test_a_delete_while_we_hold_the_suspension_still_uninstalls_helm_controller_first(
        installed, cluster, ns, plane, helm_controller):
    installed()
    _hold_then_delete(_executor(plane), cluster, ns, helm_controller, True)
    assert configmap(cluster, ns, "demo-cm") is None          # the Helm uninstall ran
    assert cluster.secret_names(ns, "demo") == []


def test_a_delete_while_we_hold_the_suspension_still_uninstalls_we_first(
        installed, cluster, ns, plane, helm_controller):
    installed()
    _hold_then_delete(_executor(plane), cluster, ns, helm_controller, False)
    assert configmap(cluster, ns, "demo-cm") is None
    assert cluster.secret_names(ns, "demo") == []


def test_without_the_fence_helm_controller_skips_the_uninstall_of_a_suspended_release(
        installed, cluster, ns):
    """The control experiment: the defect the fence exists for."""
    installed()
    cluster.suspend(ns, "demo", True, manager="operator")
    cluster.delete_hr(ns, "demo")
    eventually(lambda: cluster.get(ns, "demo") is None, 30, "the release to go")
    assert configmap(cluster, ns, "demo-cm") is not None       # orphaned


def _delete_mid_recovery(ex, cluster, ns, helm_controller, helm_controller_first):
    fired = []

    def hook(verb, path):
        if fired or verb != "PATCH":
            return
        fired.append(1)
        if helm_controller_first:
            cluster.delete_hr(ns, "demo")
            eventually(lambda: C.HELM_CONTROLLER_FINALIZER not in
                       cluster.get(ns, "demo")["metadata"]["finalizers"], 30,
                       "helm-controller to drop its finalizer from the suspended release")
        else:
            helm_controller.pause()
            cluster.delete_hr(ns, "demo")
    ex.kube.before_request = hook
    try:
        out = ex.reconcile(ns, "demo")
    finally:
        helm_controller.resume()
        ex.kube.before_request = None
    assert fired and out.result == "deferred" and "terminating" in out.detail, out
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE in hr["metadata"]["finalizers"]
    assert len(cluster.secret_names(ns, "demo")) == 1         # storage left intact
    _finish(ex, cluster, ns)


DELETE_MID_RECOVERY_DOC = """A stuck release deleted mid-recovery: we stop before the Secret delete, lift the
suspension keeping the fence, and release the fence only after helm-controller reconciled
the unsuspended deletion.  helm-controller itself then skips the uninstall: its "unmanaged"
path cleared status.history when the release got stuck — the same happens with no
flux-plunger at all (see the control test below)."""


def test_delete_during_a_recovery_helm_controller_first(installed, cluster, ns, plane,
                                                        helm_controller):
    make_stuck(installed, cluster, ns)
    _delete_mid_recovery(_executor(plane), cluster, ns, helm_controller, True)
    assert cluster.get(ns, "demo") is None


def test_delete_during_a_recovery_we_first(installed, cluster, ns, plane, helm_controller):
    make_stuck(installed, cluster, ns)
    _delete_mid_recovery(_executor(plane), cluster, ns, helm_controller, False)
    assert cluster.get(ns, "demo") is None


test_delete_during_a_recovery_helm_controller_first.__doc__ = DELETE_MID_RECOVERY_DOC
test_delete_during_a_recovery_we_first.__doc__ = DELETE_MID_RECOVERY_DOC


def test_helm_controller_never_uninstalls_a_deleted_stuck_release(installed, cluster, ns):
    """Control: no flux-plunger involved, a stuck release deleted is removed without an
    uninstall (status.history is empty), its resources and bad revision left behind."""
    make_stuck(installed, cluster, ns)
    assert not cluster.get(ns, "demo")["status"].get("history")
    cluster.delete_hr(ns, "demo")
    eventually(lambda: cluster.get(ns, "demo") is None, 30, "the release to go")
    assert configmap(cluster, ns, "demo-cm") is not None
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]


def test_a_release_suspended_by_another_manager_is_left_alone(installed, cluster, ns, cli):
    make_stuck(installed, cluster, ns)
    cluster.suspend(ns, "demo", True, manager="operator")
    res = cli("recover", "-n", ns)
    assert res.code == 0, res
    assert "live-suspended-foreign" not in res.out
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is True
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    assert "Left" in " ".join(e["message"] for e in cluster.events(ns, "demo")
                              if e["reason"] == "SuspensionNotOwned")
