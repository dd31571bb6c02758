"""The recovery sequence against the real apiserver: ownership dynamics, writes landing
between a read and its write, deletes during recovery (helm-controller's delete handling
simulated step by step, both orders), storage guards, naming variants, request cost."""
from __future__ import annotations

import hashlib
import threading

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import storage
from kubectl_flux_plunger.kube import JSON, KubeError
from kubectl_flux_plunger.core.ownership import owns_suspend
from testplane.cluster import SimulatedHelmController

from .conftest import hold, read_counts, stuck_release


def inject(executor, when, action):
    """Run ``action()`` once, right before the first request matching ``when(verb, path)``."""
    fired = []

    def hook(verb, path):
        if not fired and when(verb, path):
            fired.append((verb, path))
            action()
    executor.kube.before_request = hook
    return fired


# -- ownership dynamics ----------------------------------------------------------------

def test_forced_acquire_over_a_stale_update_owner_at_false(executor, cluster, ns, hc):
    stuck_release(cluster, ns)
    cluster.suspend(ns, "demo", True, manager="velero")
    cluster.suspend(ns, "demo", False, manager="velero")   # restore left an Update owner at false
    cluster.make_stuck(ns, "demo")
    out = executor.reconcile(ns, "demo")
    assert out.result == "recovered", out
    assert executor.kube.stats.snapshot()["APPLY"] == 3    # unforced 409, forced, relinquish


def test_an_active_foreign_suspension_is_never_taken(executor, cluster, ns, hc):
    stuck_release(cluster, ns)
    fired = inject(executor, lambda v, p: v == "APPLY",
                   lambda: cluster.suspend(ns, "demo", True, manager="operator"))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "deferred", out
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is True and not owns_suspend(hr)
    assert C.FENCE not in hr["metadata"]["finalizers"]
    assert len(cluster.secret_names(ns, "demo")) == 2
    assert {e["reason"] for e in cluster.events(ns, "demo")} == {"RecoveryDeferred"}


def test_a_client_side_apply_suspension_is_never_claimed(executor, cluster, ns, hc):
    stuck_release(cluster, ns)
    cluster.suspend(ns, "demo", True, manager=C.CLIENT_SIDE_MANAGER)
    out = executor.reconcile(ns, "demo")
    assert out.row == "live-suspended-foreign" and out.result == "unchanged"
    assert cluster.get(ns, "demo")["spec"]["suspend"] is True
    assert len(cluster.secret_names(ns, "demo")) == 2


def test_other_fields_survive_acquire_and_relinquish(executor, cluster, ns, hc):
    stuck_release(cluster, ns, spec={"interval": "7m", "timeout": "3m",
                                     "values": {"a": 1}})
    out = executor.reconcile(ns, "demo")
    assert out.result == "recovered"
    spec = cluster.get(ns, "demo")["spec"]
    assert (spec["interval"], spec["timeout"], spec["values"]) == ("7m", "3m", {"a": 1})
    assert "suspend" not in spec


# -- a write between read and write is rejected and re-decided -----------------------------

def test_a_label_write_before_the_record_is_re_decided_and_recovery_completes(executor, cluster,
                                                                                ns, hc):
    stuck_release(cluster, ns)
    fired = inject(executor, lambda v, p: v == "PATCH",
                   lambda: cluster.merge(ns, "demo", {"metadata": {"labels": {"x": "y"}}}))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "recovered", out
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]


def test_a_foreign_resume_during_recovery_stops_it_before_the_delete(executor, cluster, ns, hc):
    stuck_release(cluster, ns)
    fired = inject(executor, lambda v, p: v == "PATCH",
                   lambda: cluster.suspend(ns, "demo", False, manager="operator"))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "deferred" and "changed under us" in out.detail, out
    assert len(cluster.secret_names(ns, "demo")) == 2            # nothing deleted
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is False
    assert C.FENCE not in hr["metadata"]["finalizers"]      # our fence did not outlive us


def test_a_recreated_secret_of_the_same_name_is_not_deleted(executor, cluster, ns, hc):
    stuck_release(cluster, ns)
    name = "sh.helm.release.v1.demo.v2"

    def recreate():
        cluster.kube.request("DELETE", "DELETE", f"/api/v1/namespaces/{ns}/secrets/{name}")
        cluster.storage(ns, "demo", [(2, "uninstalling")])
    fired = inject(executor, lambda v, p: v == "DELETE", recreate)
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "deferred", out
    assert name in cluster.secret_names(ns, "demo")
    assert cluster.get(ns, "demo")["spec"].get("suspend") is None


def test_no_apply_recreates_a_deleted_release(executor, cluster, ns):
    cluster.create_hr(ns, finalizers=[])
    held = hold(cluster, ns, fence=False)
    cluster.merge(ns, "demo", {"metadata": {"finalizers": None}})
    cluster.delete_hr(ns, "demo")
    assert cluster.get(ns, "demo") is None
    assert executor.relinquish(held) is None
    with pytest.raises(KubeError):
        executor.kube.apply_hr({**held, "metadata": {
            k: held["metadata"][k] for k in ("name", "namespace", "uid")}})
    assert cluster.get(ns, "demo") is None


# -- delete during recovery: helm-controller's delete handling simulated, both orders -----

def during_handshake(executor, action):
    """Run ``action()`` once, right after our acquire's apply answered: while the
    executor waits for helm-controller to observe the suspension (no request of ours is
    sent then, so a request hook cannot time it)."""
    fired = []
    apply_hr = executor.kube.apply_hr

    def apply_then_act(body, **kwargs):
        out = apply_hr(body, **kwargs)
        if not fired and (body.get("spec") or {}).get("suspend") is True:
            fired.append(1)
            action()
        return out
    executor.kube.apply_hr = apply_then_act
    return fired


def _delete_during_handshake(executor, cluster, ns):
    return during_handshake(executor, lambda: cluster.delete_hr(ns, "demo"))


def test_delete_during_recovery_helm_controller_first_still_uninstalls(make_executor, cluster, ns):
    """helm-controller sees the delete while we hold the suspension: it drops its finalizer
    without uninstalling. Our fence keeps the object; once we lift the suspension it
    reconciles the unsuspended generation, uninstalls, and only then the fence goes."""
    stuck_release(cluster, ns)
    sim = SimulatedHelmController(cluster, ns)
    ex = make_executor(handshake_timeout=0.5)

    def delete_then_helm_controller():
        cluster.delete_hr(ns, "demo")
        sim.step()                        # suspended: finalizer dropped, no uninstall
    fired = during_handshake(ex, delete_then_helm_controller)
    out = ex.reconcile(ns, "demo")
    assert fired and out.result == "deferred" and "terminating" in out.detail, out
    assert sim.dropped_without_uninstall == ["demo"]
    hr = cluster.get(ns, "demo")
    assert hr is not None and hr["metadata"]["finalizers"] == [C.FENCE]
    assert hr["spec"].get("suspend") is None
    assert len(cluster.secret_names(ns, "demo")) == 2     # storage intact for the uninstall
    assert ex.reconcile(ns, "demo").result == "waiting"    # not reached yet
    sim.step()                                             # unsuspended + terminating → uninstall
    assert sim.uninstalled == ["demo"]
    assert ex.reconcile(ns, "demo").result == "fence-removed"
    assert cluster.get(ns, "demo") is None
    assert cluster.secret_names(ns, "demo") == []


def test_delete_during_recovery_we_first_then_helm_controller_uninstalls(make_executor, cluster,
                                                                          ns):
    stuck_release(cluster, ns)
    sim = SimulatedHelmController(cluster, ns)
    ex = make_executor(handshake_timeout=0.5)
    fired = _delete_during_handshake(ex, cluster, ns)
    out = ex.reconcile(ns, "demo")
    assert fired and out.result == "deferred", out
    hr = cluster.get(ns, "demo")
    assert sorted(hr["metadata"]["finalizers"]) == sorted([C.HELM_CONTROLLER_FINALIZER, C.FENCE])
    assert hr["spec"].get("suspend") is None
    sim.step()                                             # unsuspended: uninstall + finalizer
    assert sim.uninstalled == ["demo"] and sim.dropped_without_uninstall == []
    assert ex.reconcile(ns, "demo").result == "fence-removed"
    assert cluster.get(ns, "demo") is None


# -- storage guards and payload checks ------------------------------------------------------

@pytest.mark.parametrize("revisions,why", [
    ([(1, "superseded"), (2, "failed")], "failed"),
    ([(1, "deployed"), (2, "uninstalling")], "deployed"),
    ([(1, "pending-upgrade")], "pending"),
    ([], "no Helm storage"),
])
def test_storage_that_does_not_cause_the_error_is_left(executor, cluster, ns, revisions, why, hc):
    stuck_release(cluster, ns, revisions=revisions)
    out = executor.reconcile(ns, "demo")
    assert out.result == "skipped" and why in out.detail, out
    assert len(cluster.secret_names(ns, "demo")) == len(revisions)
    assert cluster.get(ns, "demo")["spec"].get("suspend") is None


def test_a_corrupt_payload_is_reported_not_deleted(executor, cluster, ns, hc):
    stuck_release(cluster, ns, revisions=[(1, "superseded")])
    bad = storage.make_storage_secret("demo", ns, 2, "uninstalling")
    bad["data"]["release"] = "bm90IGd6aXAgbm9yIGpzb24="   # base64("not gzip nor json")
    cluster.kube.request("CREATE", "POST", f"/api/v1/namespaces/{ns}/secrets", body=bad,
                         content_type=JSON)
    out = executor.reconcile(ns, "demo")
    assert out.result == "skipped" and "corrupt payload" in out.detail, out
    assert len(cluster.secret_names(ns, "demo")) == 2


def test_odd_secret_names_never_crash_and_are_never_chosen(executor, cluster, ns, hc):
    stuck_release(cluster, ns)
    odd = storage.make_storage_secret("demo", ns, 3, "uninstalling")
    odd["metadata"]["name"] = "sh.helm.release.v1.demo.vx"
    odd["metadata"]["labels"]["version"] = "x"
    cluster.kube.request("CREATE", "POST", f"/api/v1/namespaces/{ns}/secrets", body=odd,
                         content_type=JSON)
    bare = storage.make_storage_secret("demo", ns, 4, "uninstalling")
    bare["metadata"]["name"] = "sh.helm.release.v1.demo"
    del bare["metadata"]["labels"]["version"]
    cluster.kube.request("CREATE", "POST", f"/api/v1/namespaces/{ns}/secrets", body=bare,
                         content_type=JSON)
    out = executor.reconcile(ns, "demo")
    assert out.result == "recovered" and out.revision == 2, out
    assert sorted(cluster.secret_names(ns, "demo")) == ["sh.helm.release.v1.demo",
                                                        "sh.helm.release.v1.demo.v1",
                                                        "sh.helm.release.v1.demo.vx"]


def test_already_processed_guard_stops_a_second_deletion_until_helm_controller_retried(
        executor, cluster, ns, hc):
    stuck_release(cluster, ns, revisions=[(1, "uninstalling"), (2, "uninstalling")])
    assert executor.reconcile(ns, "demo").result == "recovered"
    # the old condition is still there; helm-controller has not retried the new generation
    again = executor.reconcile(ns, "demo")
    assert again.result == "awaiting-retry" and "not retried" in again.detail, again
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    # helm-controller retries the bumped generation and is still stuck on v1: delete it too
    hr = cluster.get(ns, "demo")
    cluster.make_stuck(ns, "demo")
    assert cluster.get(ns, "demo")["status"]["lastAttemptedGeneration"] == hr["metadata"]["generation"]
    third = executor.reconcile(ns, "demo")
    assert third.result == "recovered" and third.revision == 1, third
    assert cluster.secret_names(ns, "demo") == []


def test_helm_controller_not_acknowledging_the_suspension_defers(make_executor, cluster, ns):
    stuck_release(cluster, ns)          # no (simulated) helm-controller running
    out = make_executor(handshake_timeout=0.3).reconcile(ns, "demo")
    assert out.result == "deferred" and "acknowledge" in out.detail, out
    assert len(cluster.secret_names(ns, "demo")) == 2
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE not in hr["metadata"]["finalizers"]


# -- release name and storage namespace variants ----------------------------------------------

@pytest.mark.parametrize("spec,release,storage_in", [
    ({"releaseName": "custom"}, "custom", None),
    ({"targetNamespace": "apps"}, "apps-demo", None),
    ({"storageNamespace": "helm-store"}, "demo", "helm-store"),
    # helm-controller's shortening, spelled out (not storage.shorten_name, the code under test)
    ({"targetNamespace": "t" * 50}, "t" * 40 + "-" + hashlib.sha256(
        ("t" * 50 + "-demo").encode()).hexdigest()[:12], None),
])
def test_release_name_and_storage_namespace_variants(executor, cluster, ns, hc, spec, release,
                                                     storage_in):
    store = None
    if storage_in:
        store = cluster.namespace(storage_in)
        spec = {**spec, "storageNamespace": store}
    stuck_release(cluster, ns, release=release, storage_ns=store, spec=spec)
    out = executor.reconcile(ns, "demo")
    assert out.result == "recovered", out
    assert cluster.secret_names(store or ns, release) == [f"sh.helm.release.v1.{release}.v1"]


def test_a_remote_release_whose_kubeconfig_secret_is_missing_fails_before_acquiring(
        executor, cluster, ns, hc):
    """Its storage is in the cluster of spec.kubeConfig (tests/apiserver/test_remote.py); with
    no kubeconfig Secret nothing is touched, locally or anywhere."""
    stuck_release(cluster, ns, spec={"kubeConfig": {"secretRef": {"name": "remote"}}})
    out = executor.reconcile(ns, "demo")
    assert out.result == "failed" and out.row == "live-stuck", out
    assert f"kubeconfig Secret {ns}/remote not found" in out.detail
    assert len(cluster.secret_names(ns, "demo")) == 2
    assert cluster.get(ns, "demo")["spec"].get("suspend") is None


# -- cost -----------------------------------------------------------------------------------

def test_a_recovery_costs_six_requests_and_its_event(executor, cluster, ns, hc, plane):
    """The WATCH whose initial event is the fresh read (a watch-list), LIST Secrets, APPLY
    acquire, PATCH record, DELETE, APPLY relinquish — and the CREATE of the ``Recovered``
    Event.  No GET: the handshake waits on the same stream.  (A server without
    watch-lists, met for the first time: the refused watch-list, a GET and a WATCH from
    its resourceVersion instead of the one WATCH — 8.)"""
    stuck_release(cluster, ns)
    out = executor.reconcile(ns, "demo")
    assert out.result == "recovered"
    counts = executor.kube.stats.snapshot()
    read = read_counts(plane)
    assert counts.pop("CREATE") == 1, counts                # the Recovered Event
    assert sum(counts.values()) == 5 + read["WATCH"] + read["GET"], counts
    assert (counts["WATCH"], counts.get("GET", 0), counts["LIST"], counts["APPLY"],
            counts["PATCH"], counts["DELETE"]) == (read["WATCH"], read["GET"], 1, 2, 1, 1), counts


# -- found in review: every exit keeps the safety rules -----------------------------------

def _after(executor, first_verb, action, then=lambda v, p: True):
    """Run ``action()`` once, before the first request matching ``then`` that comes after
    a ``first_verb`` request."""
    state = {"seen": False, "fired": False}

    def hook(verb, path):
        if state["fired"]:
            return
        if state["seen"] and then(verb, path):
            state["fired"] = True
            action()
        elif verb == first_verb:
            state["seen"] = True
    executor.kube.before_request = hook
    return state


def test_a_foreign_resume_observed_during_the_handshake_stops_the_delete(executor, cluster,
                                                                          ns, hc):
    """An operator resumes the release while we wait for helm-controller, and
    helm-controller observes that generation: the handshake is satisfied, but the
    suspension is no longer ours — nothing is deleted."""
    stuck_release(cluster, ns)

    def resume_and_helm_controller_observes_it():
        gen = cluster.suspend(ns, "demo", False, manager="operator")["metadata"]["generation"]
        cluster.set_status(ns, "demo", {"observedGeneration": gen})
    fired = during_handshake(executor, resume_and_helm_controller_observes_it)
    out = executor.reconcile(ns, "demo")
    # depending on which state the watch ended on, the record's rv lock or the ownership
    # check stops it: either way nothing is deleted
    assert fired and out.result == "deferred", out
    assert "another manager" in out.detail or "changed under us" in out.detail, out
    assert len(cluster.secret_names(ns, "demo")) == 2
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is False and C.FENCE not in hr["metadata"]["finalizers"]


def test_a_stale_read_never_forces_a_second_deletion(executor, make_executor, cluster, ns, hc):
    stuck_release(cluster, ns, revisions=[(1, "uninstalling"), (2, "uninstalling")])
    stale = cluster.get(ns, "demo")                       # e.g. from recover -A's LIST
    assert make_executor().reconcile(ns, "demo").result == "recovered"   # e.g. serve
    out = executor.apply_decision(ns, "demo", stale)      # the 409 path re-decides
    assert out.result == "deferred", out
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    assert cluster.get(ns, "demo")["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "2"


def test_an_acquire_whose_answer_is_lost_is_still_relinquished(executor, cluster, ns, hc):
    stuck_release(cluster, ns)
    fired = []

    def land_then_lose_the_answer(verb, path):
        if verb == "APPLY" and not fired:
            fired.append(1)
            hold(cluster, ns)                               # the apply lands ...
            raise KubeError(0, "Unreachable", "read timed out")   # ... its answer is lost
    executor.kube.before_request = land_then_lose_the_answer
    out = executor.reconcile(ns, "demo")
    assert fired and out.failed and "could not suspend" in out.detail, out
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and not owns_suspend(hr)
    assert C.FENCE not in hr["metadata"]["finalizers"]
    assert len(cluster.secret_names(ns, "demo")) == 2


def test_a_foreign_resume_before_the_final_relinquish_still_drops_our_fence(executor, cluster,
                                                                            ns, hc):
    stuck_release(cluster, ns)
    state = _after(executor, "DELETE",
                   lambda: cluster.suspend(ns, "demo", False, manager="operator"))
    out = executor.reconcile(ns, "demo")
    assert state["fired"] and out.result == "recovered", out
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is False
    assert C.FENCE not in hr["metadata"]["finalizers"]


def test_a_delete_landing_at_the_record_stops_before_the_delete(executor, cluster, ns):
    stuck_release(cluster, ns)
    with SimulatedHelmController(cluster, ns, handle_deletes=False):
        fired = inject(executor, lambda v, p: v == "PATCH",
                       lambda: cluster.delete_hr(ns, "demo"))
        out = executor.reconcile(ns, "demo")
    assert fired and out.result == "deferred" and "terminating" in out.detail, out
    assert len(cluster.secret_names(ns, "demo")) == 2
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE in hr["metadata"]["finalizers"]


def test_status_writes_racing_both_acquire_attempts_are_re_decided(executor, cluster, ns, hc):
    """helm-controller patches status several times per retry: a write before the unforced
    apply and another before the forced one still end in a recovery."""
    stuck_release(cluster, ns)
    applies = []

    def status_write_before_each_acquire(verb, path):
        if verb == "APPLY" and len(applies) < 2:
            applies.append(1)
            cluster.set_status(ns, "demo", {            # a status write: new resourceVersion
                "lastAttemptedConfigDigest": f"sha256:{len(applies)}"})
    executor.kube.before_request = status_write_before_each_acquire
    out = executor.reconcile(ns, "demo")
    assert len(applies) == 2 and out.result == "recovered", out
    assert executor.kube.stats.snapshot()["APPLY"] == 4     # 409, 409, acquired, relinquish


def test_a_relinquish_outlasts_an_apiserver_outage_after_its_write_failed(plane, executor,
                                                                          cluster, ns):
    """The apiserver goes away right before the relinquish: the write and the re-reads
    fail (status 0) until it is back ~2 s later — the retry window still lifts the
    suspension instead of giving up at the first failed re-read."""
    stuck_release(cluster, ns)
    held = hold(cluster, ns)
    back = threading.Thread(target=lambda: (threading.Event().wait(2), plane._start_apiserver()))

    def outage(verb, path):
        if verb == "APPLY" and not back.is_alive() and back.ident is None:
            plane.stop_apiserver()
            back.start()
    executor.kube.before_request = outage
    try:
        out = executor.relinquish(held)
    finally:
        if back.ident is not None:
            back.join()
    assert back.ident is not None and out is not None
    hr = cluster.get(ns, "demo")
    assert not owns_suspend(hr) and hr["spec"].get("suspend") is None
    assert C.FENCE not in hr["metadata"].get("finalizers", [])


def test_a_suspension_taken_over_before_the_relinquish_is_not_reported_lifted(executor,
                                                                              cluster, ns):
    """resume-owned: another manager takes spec.suspend between the read that decided and
    our relinquish (409, re-read: not ours any more) — nothing of ours was lifted, only
    our fence on the live release is dropped."""
    from kubectl_flux_plunger.verbs.recover import RESUME_ROWS
    cluster.create_hr(ns)
    hold(cluster, ns)
    fired = inject(executor, lambda v, p: v == "APPLY",
                   lambda: cluster.suspend(ns, "demo", False, manager="operator"))
    out = executor.reconcile(ns, "demo", only_rows=RESUME_ROWS)
    assert fired and out.result == "fence-removed" and not out.failed, out
    assert "no longer ours" in out.detail, out
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is False and not owns_suspend(hr)
    assert C.FENCE not in hr["metadata"]["finalizers"]


def test_settle_re_decides_only_rows_on_the_fresh_read(executor, cluster, ns):
    """resume-owned chose the listed copy (our suspension); by the fresh read another
    manager resumed the release: its row is no longer one resume-owned acts on."""
    from kubectl_flux_plunger.verbs.recover import RESUME_ROWS
    cluster.create_hr(ns)
    listed = hold(cluster, ns)
    cluster.suspend(ns, "demo", False, manager="operator")
    out = executor.settle(listed, only_rows=RESUME_ROWS)
    assert out.result == "unchanged" and out.row == "live-fenced", out
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is False and C.FENCE in hr["metadata"]["finalizers"]
