"""Every row of SPEC §6, executed by the real executor against real objects in the real
apiserver: what is written, what is left alone, which event is recorded."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core.ownership import owns_suspend

from .conftest import hold, stuck_release


def fins(cluster, ns, name="demo"):
    hr = cluster.get(ns, name)
    return None if hr is None else hr["metadata"].get("finalizers") or []


def reasons(cluster, ns, name="demo"):
    return {(e["reason"], e["type"]) for e in cluster.events(ns, name)}


def test_gone(executor, ns):
    out = executor.reconcile(ns, "nothing-here")
    assert (out.result, out.row) == ("gone", "gone")


def test_terminating_suspended_owned_relinquishes_keeping_the_fence(executor, cluster, ns):
    cluster.create_hr(ns)
    hold(cluster, ns)
    cluster.delete_hr(ns, "demo")
    out = executor.reconcile(ns, "demo")
    assert (out.row, out.result) == ("terminating-suspended-owned", "relinquished")
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None
    assert C.FENCE in hr["metadata"]["finalizers"]
    assert C.HELM_CONTROLLER_FINALIZER in hr["metadata"]["finalizers"]


@pytest.mark.parametrize("recovered_before,event_type", [(False, "Normal"), (True, "Warning")])
def test_terminating_suspended_foreign_drops_only_our_fence(executor, cluster, ns,
                                                            recovered_before, event_type):
    ann = {C.PROCESSED_ANNOTATION: "3"} if recovered_before else {}
    cluster.create_hr(ns, annotations=ann)
    hold(cluster, ns, suspend=False)                 # our fence only
    cluster.suspend(ns, "demo", True, manager="operator")
    cluster.delete_hr(ns, "demo")
    out = executor.reconcile(ns, "demo")
    assert (out.row, out.result) == ("terminating-suspended-foreign", "fence-removed")
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is True
    assert hr["metadata"]["finalizers"] == [C.HELM_CONTROLLER_FINALIZER]
    assert ("TerminatingWhileSuspended", event_type) in reasons(cluster, ns)


def test_terminating_fenced_uninstall_reached_removes_the_fence(executor, cluster, ns):
    cluster.create_hr(ns)
    hold(cluster, ns, suspend=False)
    cluster.delete_hr(ns, "demo")
    cluster.remove_finalizer(ns, "demo", C.HELM_CONTROLLER_FINALIZER)
    gen = cluster.get(ns, "demo")["metadata"]["generation"]
    cluster.set_status(ns, "demo", {"observedGeneration": gen})
    out = executor.reconcile(ns, "demo")
    assert (out.row, out.result) == ("terminating-fenced-uninstalled", "fence-removed")
    assert cluster.get(ns, "demo") is None


def test_terminating_fenced_not_reached_waits_and_warns_after_the_threshold(make_executor,
                                                                             cluster, ns):
    cluster.create_hr(ns)
    hold(cluster, ns, suspend=False)
    cluster.delete_hr(ns, "demo")
    out = make_executor().reconcile(ns, "demo")
    assert (out.row, out.result, out.requeue_after) == ("terminating-fenced-waiting", "waiting", 60)
    assert ("UninstallFenceHeld", "Warning") not in reasons(cluster, ns)
    out = make_executor(fence_warn_after=0, fence_recheck=5).reconcile(ns, "demo")
    assert (out.result, out.requeue_after) == ("waiting", 5)
    assert ("UninstallFenceHeld", "Warning") in reasons(cluster, ns)
    assert C.FENCE in fins(cluster, ns)


def test_terminating_unfenced_is_left_alone(executor, cluster, ns):
    cluster.create_hr(ns)
    cluster.delete_hr(ns, "demo")
    before = cluster.get(ns, "demo")["metadata"]["resourceVersion"]
    out = executor.reconcile(ns, "demo")
    assert (out.row, out.result) == ("terminating-unfenced", "unchanged")
    assert cluster.get(ns, "demo")["metadata"]["resourceVersion"] == before


@pytest.mark.parametrize("manager", ["operator", C.CLIENT_SIDE_MANAGER])
def test_live_suspended_foreign_is_never_touched_but_our_fence_goes(executor, cluster, ns,
                                                                     manager):
    cluster.create_hr(ns)
    hold(cluster, ns, suspend=False)
    cluster.suspend(ns, "demo", True, manager=manager)
    cluster.make_stuck(ns, "demo")
    out = executor.reconcile(ns, "demo")
    assert (out.row, out.result) == ("live-suspended-foreign", "fence-removed")
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is True and not owns_suspend(hr)
    assert C.FENCE not in hr["metadata"]["finalizers"]
    assert ("SuspensionNotOwned", "Normal") in reasons(cluster, ns)


def test_live_suspended_owned_relinquishes_with_the_fence(executor, cluster, ns):
    cluster.create_hr(ns)
    hold(cluster, ns)
    out = executor.reconcile(ns, "demo")
    assert (out.row, out.result) == ("live-suspended-owned", "relinquished")
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None
    assert hr["metadata"]["finalizers"] == [C.HELM_CONTROLLER_FINALIZER]


def test_live_fenced_unsuspended_removes_only_the_fence(executor, cluster, ns):
    cluster.create_hr(ns)
    hold(cluster, ns)
    cluster.suspend(ns, "demo", False, manager="operator")   # someone resumed it
    cluster.make_stuck(ns, "demo")
    out = executor.reconcile(ns, "demo")
    assert (out.row, out.result) == ("live-fenced", "fence-removed")
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is False
    assert hr["metadata"]["finalizers"] == [C.HELM_CONTROLLER_FINALIZER]
    assert len(cluster.secret_names(ns, "demo")) == 0    # no recovery in this pass


def test_live_stuck_recovers(executor, cluster, ns, hc):
    stuck_release(cluster, ns)
    out = executor.reconcile(ns, "demo")
    assert (out.row, out.result, out.revision) == ("live-stuck", "recovered", 2), out
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and not owns_suspend(hr)
    assert hr["metadata"]["finalizers"] == [C.HELM_CONTROLLER_FINALIZER]
    assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "2"


def test_healthy_is_left_alone(executor, cluster, ns):
    cluster.create_hr(ns)
    cluster.storage(ns, "demo", [(1, "deployed")])
    out = executor.reconcile(ns, "demo")
    assert (out.row, out.result) == ("healthy", "unchanged")
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
