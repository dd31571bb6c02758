"""The second face of a stuck release (issue 47), with the real helm-controller and from
real failures — never a rewritten Secret.  A hook Job that never finishes fails a release
action; helm-controller's remediation runs a Helm uninstall, which records the newest
revision ``uninstalling`` (in storage and in helm-controller's own ``status.history``) and
then fails on its pre-delete hook.  From then on every reconcile ends ``Ready=False``,
reason ``StateError``; a reconcile request, or the hook finishing after all, changes
nothing, and so does deleting that revision while suspended with the chart unchanged (the
same failures again); with the chart fixed, that heals it.

The three ways there (testplane.helmctl): the install remediation, the upgrade remediation
with ``strategy: uninstall``, and the same after a good upgrade (several revisions)."""
from __future__ import annotations

import time

from kubectl_flux_plunger.core import storage
from testplane.cluster import eventually
from testplane.helmctl import (FIXED_VERSION, STATE_ERROR, complete_hook_job, condition,
                               latest_snapshot, publish_version, ready, release_statuses,
                               request_reconcile, stuck_install_remediation,
                               stuck_upgrade_remediation, wait_released, wait_state_error)

NAME = "hooked"


def facts(cluster, ns, hr) -> dict:
    """What a test saw, printed for the table of faces (pytest -rP shows it)."""
    st = hr["status"]
    return {"storage": release_statuses(cluster.kube, ns, NAME),
            "history": [(h.get("version"), h.get("chartVersion"), h.get("status"))
                        for h in st.get("history") or []],
            "conditions": {c["type"]: (c["status"], c.get("reason"), c.get("message"))
                           for c in st.get("conditions") or []},
            "counters": {k: st.get(k) for k in ("failures", "installFailures",
                                                "upgradeFailures", "observedGeneration",
                                                "lastAttemptedGeneration",
                                                "lastAttemptedReleaseAction")},
            "events": [(e["type"], e["reason"]) for e in cluster.events(ns, NAME)]}


def assert_stuck_for_good(cluster, ns, hr) -> dict:
    """A reconcile request is handled (``lastHandledReconcileAt``) and leaves the release as
    it was: the same StateError, storage and history."""
    storage_before, snapshot_before = release_statuses(cluster.kube, ns, NAME), latest_snapshot(hr)
    stamp = request_reconcile(cluster.kube, ns, NAME)

    def handled():
        now = cluster.get(ns, NAME)
        return now if (now["status"].get("lastHandledReconcileAt") == stamp
                       and ready(now) == ("False", "StateError", STATE_ERROR)) else None
    after = eventually(handled, 120, "helm-controller to handle the reconcile request")
    assert release_statuses(cluster.kube, ns, NAME) == storage_before
    assert latest_snapshot(after) == snapshot_before
    assert condition(after, "Stalled") is None          # helm-controller keeps retrying
    # and records no Event for the StateError itself (docs/DESIGN.md: serve's start-up
    # hints, which read helm-controller's Warning Events, cannot see this face; the sync can)
    assert not [e for e in cluster.events(ns, NAME) if e.get("reason") == "StateError"
                or "unable to determine state" in (e.get("message") or "")], facts(cluster, ns, after)
    return after


def delete_newest_while_suspended(cluster, ns, newest: int, chart_server=None) -> None:
    """The manual way out: suspend, wait until helm-controller observed it, publish the
    fixed chart when given ``chart_server`` (before resuming: the resumed generation resets
    helm-controller's failure counts, and it would run the failing action and its
    remediation again), delete the newest revision, resume."""
    cluster.suspend(ns, NAME, True)
    gen = cluster.get(ns, NAME)["metadata"]["generation"]
    eventually(lambda: cluster.get(ns, NAME)["status"].get("observedGeneration") == gen, 60,
               "helm-controller to observe the suspension")
    if chart_server is not None:
        publish_version(cluster.kube, ns, NAME, chart_server, FIXED_VERSION)
    cluster.kube.request("DELETE", "DELETE",
                         f"/api/v1/namespaces/{ns}/secrets/sh.helm.release.v1.{NAME}.v{newest}")
    cluster.suspend(ns, NAME, False)


def heal_by_hand(cluster, chart_server, ns, newest: int, revision: int) -> dict:
    """:func:`delete_newest_while_suspended` with the chart fixed; returns the release once
    ``revision`` of the fixed chart is deployed."""
    delete_newest_while_suspended(cluster, ns, newest, chart_server)
    return wait_released(cluster.kube, ns, NAME, revision, FIXED_VERSION)


def revision_uids(cluster, ns) -> set[str]:
    return {s["metadata"]["uid"] for s in
            cluster.kube.list_secrets(ns, storage.label_selector(NAME))}


def assert_the_face(cluster, ns, hr, *, revision: int, statuses: dict, released: str):
    """Stuck with revision ``revision`` (chart ``0.<revision>.0``) ``uninstalling`` newest
    in storage (``statuses``: every revision's status, payload and label alike) and in
    helm-controller's history; ``Ready=False StateError``; the remediation's uninstall
    failed (``Remediated=False UninstallFailed``), the release action before it too
    (``Released=False <released>``)."""
    assert release_statuses(cluster.kube, ns, NAME) == statuses
    snap = latest_snapshot(hr)
    chart = f"0.{revision}.0"
    assert (snap["version"], snap["chartVersion"], snap["status"]) == (
        revision, chart, "uninstalling")
    assert ready(hr) == ("False", "StateError", STATE_ERROR)
    status, reason, message = condition(hr, "Remediated")
    assert (status, reason) == ("False", "UninstallFailed")
    assert message.startswith(f"Helm uninstall remediation for release {ns}/{NAME}.v{revision} "
                              f"with chart {NAME}@{chart} failed: "), message
    assert condition(hr, "Released")[:2] == ("False", released)


def test_install_remediation_stuck_on_its_pre_delete_hook(helm_controller, chart_server,
                                                          cluster, ns):
    started = time.monotonic()
    hr = stuck_install_remediation(cluster.kube, ns, NAME, chart_server)
    took = time.monotonic() - started
    print(f"install remediation stuck after {took:.1f}s on helm-controller "
          f"{helm_controller.version}:", facts(cluster, ns, hr))
    assert_the_face(cluster, ns, hr, revision=1, statuses={1: "uninstalling"},
                    released="InstallFailed")
    assert len(hr["status"]["history"]) == 1

    hr = assert_stuck_for_good(cluster, ns, hr)
    # the cause gone (the pre-delete hook finishing after all) changes nothing: helm-controller
    # never runs the uninstall again
    complete_hook_job(cluster.kube, ns, f"{NAME}-pre-delete")
    assert_stuck_for_good(cluster, ns, hr)

    # the same way out with the chart still broken: helm-controller installs it again, and
    # its remediation leaves a new revision 1 stuck the same way
    before = revision_uids(cluster, ns)
    started = time.monotonic()
    delete_newest_while_suspended(cluster, ns, 1)
    eventually(lambda: revision_uids(cluster, ns) - before, 120, "a new revision 1")
    hr = wait_state_error(cluster.kube, ns, NAME, 1)
    print(f"stuck again {time.monotonic() - started:.1f}s after the newest revision was "
          f"deleted with the chart unchanged:", facts(cluster, ns, hr))
    assert_the_face(cluster, ns, hr, revision=1, statuses={1: "uninstalling"},
                    released="InstallFailed")

    started = time.monotonic()
    hr = heal_by_hand(cluster, chart_server, ns, newest=1, revision=1)
    print(f"healed by hand in {time.monotonic() - started:.1f}s:", facts(cluster, ns, hr))
    assert ready(hr)[1] == "InstallSucceeded"
    assert release_statuses(cluster.kube, ns, NAME) == {1: "deployed"}


def _upgrade_remediation(helm_controller, chart_server, cluster, ns, good_upgrades: int):
    """Scenarios 2 and 3: the upgrade to revision ``good_upgrades + 2`` fails on its
    post-upgrade hook and its uninstall remediation on the pre-delete hook."""
    failing = good_upgrades + 2
    started = time.monotonic()
    hr = stuck_upgrade_remediation(cluster.kube, ns, NAME, chart_server,
                                   good_upgrades=good_upgrades)
    took = time.monotonic() - started
    print(f"upgrade remediation ({good_upgrades} good upgrades) stuck after {took:.1f}s on "
          f"helm-controller {helm_controller.version}:", facts(cluster, ns, hr))
    older = {r: "superseded" for r in range(1, failing - 1)}
    # an older revision deployed does not make it healthy
    assert_the_face(cluster, ns, hr, revision=failing, released="UpgradeFailed", statuses={
        **older, failing - 1: "deployed", failing: "uninstalling"})

    hr = assert_stuck_for_good(cluster, ns, hr)

    # deleting the uninstalling revision: helm-controller finds the deployed one, which its
    # history does not name, takes the release for unmanaged and upgrades from it
    started = time.monotonic()
    hr = heal_by_hand(cluster, chart_server, ns, newest=failing, revision=failing)
    print(f"healed by hand in {time.monotonic() - started:.1f}s:", facts(cluster, ns, hr))
    assert ready(hr)[1] == "UpgradeSucceeded"
    assert release_statuses(cluster.kube, ns, NAME) == {
        **older, failing - 1: "superseded", failing: "deployed"}


def test_upgrade_remediation_with_strategy_uninstall_stuck_on_its_pre_delete_hook(
        helm_controller, chart_server, cluster, ns):
    _upgrade_remediation(helm_controller, chart_server, cluster, ns, good_upgrades=0)


def test_upgrade_remediation_stuck_after_a_good_upgrade(helm_controller, chart_server,
                                                         cluster, ns):
    _upgrade_remediation(helm_controller, chart_server, cluster, ns, good_upgrades=1)
