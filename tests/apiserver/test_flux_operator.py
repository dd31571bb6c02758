"""Issue 38: the Flux Operator's Web UI and MCP server against a recovery, on the real
apiserver, with the exact requests they send (testplane/fluxoperator.py: merge patches under
the field managers flux-operator-web and flux-operator-mcp).

* flux-plunger's suspension carries ``fluxcd.controlplane.io/suspendedBy: flux-plunger`` — the
  UI shows "Suspended by flux-plunger" — set by the acquire's apply and removed by the
  relinquish's, owned through server-side apply; another suspender's name is never taken
  over (also not by a forced acquire) and never removed while a suspension stands;
* mid-recovery each Suspend and Resume is handled safely: storage intact unless the
  recovery went through, nothing left suspended, fenced or marked by flux-plunger, an
  operator's resume never reversed; a resume is reported as `flux resume`'s is (deferred),
  and a release still stuck afterwards is recovered afresh by the next pass;
* ``status`` names the UI's user next to its manager.
"""
from __future__ import annotations

import json

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import ownership
from kubectl_flux_plunger.executor.outcome import TAKEN_DETAIL
from kubectl_flux_plunger.verbs import status
from testplane.cluster import SimulatedHelmController
from testplane.fluxoperator import MCP, REQUESTED_AT, WEB, FluxOperator

from .conftest import hold, recover_holding, stuck_release

SB = C.SUSPENDED_BY_ANNOTATION
BLOCKING = "sh.helm.release.v1.demo.v2"


def during_handshake(executor, action):
    """Run ``action(held)`` once, right after our acquire's apply answered (``held``: its
    answer), while the executor waits for helm-controller to observe the suspension."""
    fired: list[dict] = []
    apply_hr = executor.kube.apply_hr

    def apply_then_act(body, **kwargs):
        out = apply_hr(body, **kwargs)
        if not fired and (body.get("spec") or {}).get("suspend") is True:
            fired.append(out)
            action(out)
        return out
    executor.kube.apply_hr = apply_then_act
    return fired


def before_the_acquire(executor, action):
    """Run ``action()`` once, right before our acquire's APPLY is sent."""
    fired: list[int] = []

    def hook(verb, path):
        if not fired and verb == "APPLY":
            fired.append(1)
            action()
    executor.kube.before_request = hook
    return fired


def annotations(hr: dict) -> dict:
    return hr["metadata"].get("annotations") or {}


def writers_of_suspended_by(hr: dict) -> list[tuple[str, str]]:
    """(manager, operation) of every managedFields entry listing the suspendedBy key."""
    return [(e["manager"], e["operation"]) for e in hr["metadata"].get("managedFields") or []
            if f"f:{SB}" in (((e.get("fieldsV1") or {}).get("f:metadata") or {})
                             .get("f:annotations") or {})]


def assert_nothing_of_ours(hr: dict) -> None:
    """No suspension, fence, mark or managedFields entry of flux-plunger's is left."""
    assert C.FENCE not in (hr["metadata"].get("finalizers") or []), hr["metadata"]
    assert annotations(hr).get(SB) != C.SUSPENDED_BY, annotations(hr)
    assert not [e for e in hr["metadata"].get("managedFields") or []
                if e.get("manager") == C.FIELD_MANAGER], hr["metadata"]["managedFields"]


# -- the mark -------------------------------------------------------------------------------

def test_a_recovery_shows_suspended_by_flux_plunger_and_takes_it_away_with_the_suspension(
        executor, cluster, ns, hc):
    stuck_release(cluster, ns)
    seen: list[dict] = []
    fired = during_handshake(executor, lambda held: seen.append(cluster.get(ns, "demo")))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "recovered", out
    (held,) = seen
    # what the Web UI reads: spec.suspend and "Suspended by flux-plunger", owned by our apply
    assert held["spec"]["suspend"] is True and annotations(held)[SB] == "flux-plunger"
    assert writers_of_suspended_by(held) == [(C.FIELD_MANAGER, "Apply")]
    assert ownership.owns_suspended_by(held)
    hr = cluster.get(ns, "demo")
    assert "suspend" not in hr["spec"] and SB not in annotations(hr), hr["metadata"]
    assert_nothing_of_ours(hr)
    counts = executor.kube.stats.snapshot()
    assert (counts["APPLY"], counts["PATCH"]) == (2, 1), counts      # no request of its own


def test_another_suspenders_name_is_never_taken_over_even_by_a_forced_acquire(
        executor, cluster, ns, hc):
    """alice suspended the release in the Web UI; a backup restore then set spec.suspend
    false (an Update owner at false, which the acquire forces over).  The forced apply must
    not take alice's name: it never lists the key.  Her name stays hers, through the
    recovery and after it."""
    ui = FluxOperator(cluster)
    stuck_release(cluster, ns)
    assert ui.web_suspend(ns, "demo", "alice") is not None
    cluster.suspend(ns, "demo", False, manager="velero")
    cluster.make_stuck(ns, "demo")
    seen: list[dict] = []
    during_handshake(executor, lambda held: seen.append(cluster.get(ns, "demo")))
    out = executor.reconcile(ns, "demo")
    assert out.result == "recovered", out
    assert executor.kube.stats.snapshot()["APPLY"] == 3   # unforced 409, forced, relinquish
    for hr in (seen[0], cluster.get(ns, "demo")):
        assert annotations(hr)[SB] == "alice", annotations(hr)
        assert writers_of_suspended_by(hr) == [(WEB, "Update")], hr["metadata"]["managedFields"]
    assert seen[0]["spec"]["suspend"] is True                 # it was ours meanwhile
    assert_nothing_of_ours(cluster.get(ns, "demo"))


def test_a_co_owner_keeps_the_suspension_and_the_first_suspenders_name(executor, cluster, ns,
                                                                        hc):
    """GitOps applies `suspend: true` (kustomize-controller's server-side apply) while we
    hold the release: after our relinquish the release stays suspended by it, and
    "Suspended by flux-plunger" stays with it, as the UI keeps the first suspender's name —
    it goes with that suspension (the UI's Resume deletes it)."""
    stuck_release(cluster, ns)
    during_handshake(executor, lambda held: cluster.apply(
        {"apiVersion": C.HR_API_VERSION, "kind": C.HR_KIND,
         "metadata": {"name": "demo", "namespace": ns}, "spec": {"suspend": True}},
        manager="kustomize-controller"))
    out = executor.reconcile(ns, "demo")
    assert out.result == "recovered", out
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is True
    assert ownership.suspend_owners(hr) == [("kustomize-controller", "Apply")]
    assert annotations(hr)[SB] == "flux-plunger" and ownership.owns_suspended_by(hr)
    assert C.FENCE not in hr["metadata"]["finalizers"]
    FluxOperator(cluster).web_resume(ns, "demo")
    assert SB not in annotations(cluster.get(ns, "demo"))


def test_resume_owned_and_release_fence_take_the_mark_with_the_suspension(executor, cluster,
                                                                           ns, cli):
    cluster.create_hr(ns, "crashed")
    cluster.create_hr(ns, "uninstalled")
    for name in ("crashed", "uninstalled"):
        hold(cluster, ns, name)      # what a crashed recovery leaves: suspension, fence, mark
        assert annotations(cluster.get(ns, name))[SB] == "flux-plunger"
    assert executor.reconcile(ns, "crashed").result == "relinquished"
    res = cli("release-fence", "-n", ns, "uninstalled")
    assert res.code == 0, res
    for name in ("crashed", "uninstalled"):
        hr = cluster.get(ns, name)
        assert not hr["spec"].get("suspend") and SB not in annotations(hr), hr
        assert C.FENCE not in hr["metadata"]["finalizers"]


# -- the Web UI mid-recovery ------------------------------------------------------------------

def test_the_web_uis_resume_mid_recovery_defers_it_and_the_next_pass_recovers_afresh(
        executor, cluster, ns, hc):
    ui = FluxOperator(cluster)
    stuck_release(cluster, ns)
    fired = during_handshake(executor, lambda held: ui.web_resume(ns, "demo"))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "deferred", out
    assert TAKEN_DETAIL in out.detail or "changed under us" in out.detail, out
    # exactly what the UI sends: suspend and our name dropped, a reconcile requested
    ((manager, body),) = ui.sent
    assert manager == WEB and body["spec"] == {"suspend": None}, body
    assert body["metadata"]["annotations"][SB] is None and REQUESTED_AT in \
        body["metadata"]["annotations"], body
    assert BLOCKING in cluster.secret_names(ns, "demo")                   # storage intact
    hr = cluster.get(ns, "demo")
    assert "suspend" not in hr["spec"] and REQUESTED_AT in annotations(hr)  # resume stands
    assert_nothing_of_ours(hr)
    # helm-controller's requested reconcile fails again: still stuck, recovered afresh
    cluster.make_stuck(ns, "demo")
    again = executor.reconcile(ns, "demo")
    assert again.result == "recovered", again
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    hr = cluster.get(ns, "demo")
    assert "suspend" not in hr["spec"]
    assert_nothing_of_ours(hr)


def test_the_web_uis_suspend_mid_recovery_writes_nothing_and_the_recovery_completes(
        executor, cluster, ns, hc):
    """The UI skips a release that is already suspended (to keep the first suspender's name):
    it still shows "Suspended by flux-plunger", and the recovery finishes and lifts it."""
    ui = FluxOperator(cluster)
    stuck_release(cluster, ns)
    seen: list[tuple[dict, dict | None, dict]] = []

    def click_suspend(held):
        before = cluster.get(ns, "demo")
        seen.append((before, ui.web_suspend(ns, "demo", "alice"), cluster.get(ns, "demo")))
    fired = during_handshake(executor, click_suspend)
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "recovered", out
    (before, answer, after) = seen[0]
    assert answer is None and ui.sent == [(WEB, None)]                   # nothing sent
    # what the UI could have written is as it was (helm-controller, running, may write the
    # status in between: the resourceVersion is no measure of the UI's writes)
    assert after["spec"] == before["spec"] and annotations(after) == annotations(before)
    assert WEB not in [f.get("manager") for f in after["metadata"].get("managedFields") or []]
    assert annotations(after)[SB] == "flux-plunger"
    hr = cluster.get(ns, "demo")
    assert "suspend" not in hr["spec"] and SB not in annotations(hr)
    assert_nothing_of_ours(hr)


def test_the_web_uis_suspend_before_the_acquire_keeps_alices_suspension(executor, cluster, ns,
                                                                          hc):
    ui = FluxOperator(cluster)
    stuck_release(cluster, ns)
    fired = before_the_acquire(executor, lambda: ui.web_suspend(ns, "demo", "alice"))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "deferred", out
    assert BLOCKING in cluster.secret_names(ns, "demo")
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is True and annotations(hr)[SB] == "alice"
    assert ownership.suspend_owners(hr) == [(WEB, "Update")]
    assert_nothing_of_ours(hr)
    row = status.row(executor.kube, hr)
    assert row.suspend_owner == "flux-operator-web (alice)", row
    assert row.state == "suspended-by-other,stuck", row


# -- the MCP server mid-recovery ------------------------------------------------------------

def test_the_mcp_servers_resume_mid_recovery_defers_it_and_our_mark_goes_with_the_fence(
        executor, cluster, ns, hc):
    """Unlike the UI, the MCP server's resume leaves the annotation: flux-plunger removes
    its own in the patch that removes its fence (the release is suspended by nobody)."""
    mcp = FluxOperator(cluster)
    stuck_release(cluster, ns)
    fired = during_handshake(executor, lambda held: mcp.mcp_resume(ns, "demo"))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "deferred", out
    assert mcp.sent == [(MCP, {"spec": {"suspend": None}})]
    assert BLOCKING in cluster.secret_names(ns, "demo")
    hr = cluster.get(ns, "demo")
    assert "suspend" not in hr["spec"] and SB not in annotations(hr), hr["metadata"]
    assert_nothing_of_ours(hr)
    cluster.make_stuck(ns, "demo")
    again = executor.reconcile(ns, "demo")
    assert again.result == "recovered", again
    assert_nothing_of_ours(cluster.get(ns, "demo"))


def test_the_mcp_servers_suspend_mid_recovery_is_an_empty_patch_and_the_recovery_completes(
        executor, cluster, ns, hc):
    mcp = FluxOperator(cluster)
    stuck_release(cluster, ns)
    seen: list[tuple[dict, dict]] = []

    def suspend(held):
        before = cluster.get(ns, "demo")
        seen.append((before, mcp.mcp_suspend(ns, "demo")))
    fired = during_handshake(executor, suspend)
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "recovered", out
    # a no-op: the empty patch changes neither spec nor annotations and leaves the MCP
    # server no field (not the resourceVersion: the running helm-controller may write the
    # status in between)
    before, after = seen[0]
    assert mcp.sent == [(MCP, {})]
    assert after["spec"] == before["spec"] and annotations(after) == annotations(before)
    assert MCP not in [f.get("manager") for f in after["metadata"].get("managedFields") or []]
    hr = cluster.get(ns, "demo")
    assert "suspend" not in hr["spec"]
    assert_nothing_of_ours(hr)


def test_the_mcp_servers_suspend_before_the_acquire_is_never_taken(executor, cluster, ns, hc):
    mcp = FluxOperator(cluster)
    stuck_release(cluster, ns)
    fired = before_the_acquire(executor, lambda: mcp.mcp_suspend(ns, "demo"))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "deferred", out
    assert BLOCKING in cluster.secret_names(ns, "demo")
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is True and ownership.suspend_owners(hr) == [(MCP, "Update")]
    assert SB not in annotations(hr)
    assert_nothing_of_ours(hr)


# -- through the command line ------------------------------------------------------------------

def test_recover_shows_flux_plunger_in_the_ui_and_a_ui_resume_is_reported_as_deferred(
        plane, cluster, cli):
    """`recover` holds the release (no helm-controller answers its handshake): the UI reads
    "Suspended by flux-plunger" and `status` shows it recovering.  alice clicks Resume: the
    run ends deferred as after `flux resume`, exit 1, storage intact; the release, still
    stuck, is recovered by the next run."""
    ns, lease_ns = cluster.namespace("ui"), cluster.namespace("lease")
    stuck_release(cluster, ns)
    with recover_holding(plane, cluster, ns, lease_ns) as recover:
        # the name comes in the apply that suspends: there as soon as the hold is
        assert annotations(cluster.get(ns, "demo")).get(SB) == "flux-plunger"
        shown = cli("status", "-n", ns, "demo", "-o", "json", "--lease-namespace", lease_ns)
        assert shown.code == 0, shown
        (item,) = json.loads(shown.out)["items"]
        assert item["state"] == "recovering" and item["metadata"]["annotations"][SB] == \
            "flux-plunger", item
        assert item["suspendOwners"] == [{"manager": "flux-plunger", "operation": "Apply"}]
        FluxOperator(cluster).web_resume(ns, "demo")
        out, err = recover.communicate(timeout=60)
    assert recover.returncode == 1, (out, err)
    assert f"deferred: {TAKEN_DETAIL}" in out, (out, err)
    assert BLOCKING in cluster.secret_names(ns, "demo")
    assert_nothing_of_ours(cluster.get(ns, "demo"))
    cluster.make_stuck(ns, "demo")    # helm-controller's requested reconcile failed again
    with SimulatedHelmController(cluster, ns):
        again = cli("recover", "-n", ns, "demo", "--lease-namespace", lease_ns)
    assert again.code == 0 and "recovered: deleted revision 2" in again.out, again
    assert BLOCKING not in cluster.secret_names(ns, "demo")
    assert_nothing_of_ours(cluster.get(ns, "demo"))


def test_status_names_the_web_uis_user_next_to_its_manager(cluster, ns, cli):
    cluster.create_hr(ns, "paused")
    FluxOperator(cluster).web_suspend(ns, "paused", "alice")
    table = cli("status", "-n", ns)
    assert table.code == 0, table
    header, line = table.out.splitlines()
    assert "flux-operator-web (alice)" in line, table.out
    assert line.split()[:2] == ["paused", "suspended-by-other"], table.out
    wide = cli("status", "-n", ns, "-o", "wide")
    assert "flux-operator-web (alice)" in wide.out, wide.out
    doc = json.loads(cli("status", "-n", ns, "-o", "json").out)
    (item,) = doc["items"]
    assert item["suspendOwners"] == [{"manager": WEB, "operation": "Update",
                                      "suspendedBy": "alice"}], item


def test_the_dry_run_plan_says_when_the_ui_will_show_flux_plunger(cluster, ns, cli):
    stuck_release(cluster, ns)
    stuck_release(cluster, ns, "named", annotations={SB: "alice"})   # left by the UI
    res = cli("recover", "-n", ns, "--dry-run=client")
    assert res.code == 0, res
    plans: dict[str, list[str]] = {}
    for line in res.out.splitlines():
        if line.startswith("helmrelease."):
            steps = plans.setdefault(line.split()[0].rsplit("/", 1)[1], [])
        elif line.startswith("  - "):
            steps.append(line[4:])
    assert plans["demo"][0].endswith(f", with annotation {SB}=flux-plunger"), plans
    assert plans["demo"][-1].endswith(f", and without annotation {SB}"), plans
    assert not [s for s in plans["named"] if SB in s], plans
    assert annotations(cluster.get(ns, "named"))[SB] == "alice"
