"""Issue 56's faces with the real helm-controller, from real failures.

* ``name-in-use``: an uninstall that kept its history (``spec.uninstall.keepHistory``, a
  remediation's uninstall) leaves the newest revision ``uninstalled``; helm-controller installs
  and Helm refuses the name ("cannot reuse a name that is still in use") for ever, a fixed
  chart or not.  ``status`` names the face and ``spec.install.replace`` as the operator's way
  out; ``recover`` and ``serve`` bring it back to Ready=True once the chart is good.
* ``state-error`` over a legacy snapshot: a release last written by helm-controller <= v1.4
  (its ``status.history`` without ``apiVersion: v2``) whose revision an interrupted ``helm
  uninstall`` left ``uninstalling``: helm-controller v1.5+ verifies the snapshot against
  nothing and reports StateError for ever; v1.4.3 finds the digest changed and reports "has
  no deployed releases".  Either way flux-plunger recovers it.

Runs on every helm-controller version the suite runs (v1.6.4, and v1.4.3 in the
compatibility stage)."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants as C
from testplane import binaries
from testplane.cluster import eventually
from testplane.helmctl import (FIXED_VERSION, break_release, latest_snapshot, legacy_snapshot,
                               publish_version, ready, release_statuses, request_reconcile,
                               stuck_keep_history, wait_name_in_use, wait_released)

from tests.apiserver.test_serve_support import FAST, serve  # noqa: F401 - fixture
from tests.e2e.test_state_error_e2e import _left_clean
from tests.e2e.test_state_error_e2e import _status_item as _item


def _helm_v4() -> bool:
    """helm-controller v1.5+ (Helm v4, v2 snapshots) rather than v1.4.x (Helm v3)."""
    major, minor = (int(p) for p in binaries.version("helm-controller").lstrip("v").split(".")[:2])
    return (major, minor) >= (1, 5)


def test_a_kept_history_after_a_failed_install_is_listed_and_recovered_by_recover(
        helm_controller, chart_server, cluster, ns, cli):
    """The issue's reproduction: before issue 56 `status` said `failing … InstallFailed;
    flux-plunger does not repair it` and `recover` `unchanged: nothing to do`."""
    name = "kept"
    stuck_keep_history(cluster.kube, ns, name, chart_server)
    assert release_statuses(cluster.kube, ns, name) == {1: "uninstalled"}
    item = _item(cli, ns, name)
    assert (item["state"], item["stuck"], item["face"]) == ("stuck", True, "name-in-use"), item
    assert (item["storage"]["latestRevision"], item["storage"]["helmStatus"]) == \
        (1, "uninstalled"), item
    assert "spec.install.replace: true is the operator's own way out" in item["message"], item
    # a fixed chart changes nothing: helm-controller never gets past Helm's name check
    publish_version(cluster.kube, ns, name, chart_server, FIXED_VERSION)
    wait_name_in_use(cluster.kube, ns, name, 1, chart=f"{name}@{FIXED_VERSION}")
    plan = cli("recover", "-n", ns, "--dry-run")
    assert plan.code == 0 and "would recover 1 of 1 stuck" in plan.out, plan
    res = cli("recover", "-n", ns, name)
    assert res.code == 0, res
    assert f"{name} recovered: deleted revision 1 (uninstalled)" in res.out, res
    hr = wait_released(cluster.kube, ns, name, 1, FIXED_VERSION)
    _left_clean(hr)
    assert release_statuses(cluster.kube, ns, name) == {1: "deployed"}
    assert _item(cli, ns, name)["state"] == "healthy"


def test_a_kept_history_after_an_uninstall_remediated_upgrade_is_recovered_by_serve(
        helm_controller, chart_server, cluster, ns, serve):  # noqa: F811
    """``upgrade.remediation.strategy: uninstall`` with keepHistory: v2 `uninstalled` over v1
    `superseded` (Helm v4's uninstall supersedes every deployed revision; helm-controller
    v1.4.3's Helm v3.19 leaves v1 `deployed`: a failed upgrade supersedes nothing).  serve, running, deletes v2 by itself once the chart is good (selected by
    label only then); helm-controller upgrades from v1 (Helm's upgrade takes a superseded newest)."""
    name = "kept-upgrade"
    s = serve("-n", ns, "--no-leader-elect", *FAST, "-l", "recover=yes")
    stuck_keep_history(cluster.kube, ns, name, chart_server, upgrade=True)
    under = "superseded" if _helm_v4() else "deployed"
    assert release_statuses(cluster.kube, ns, name) == {1: under, 2: "uninstalled"}
    publish_version(cluster.kube, ns, name, chart_server, FIXED_VERSION)
    cluster.merge(ns, name, {"metadata": {"labels": {"recover": "yes"}}})
    hr = wait_released(cluster.kube, ns, name, 2, FIXED_VERSION)
    _left_clean(hr)
    assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "2"
    assert release_statuses(cluster.kube, ns, name) == {1: "superseded", 2: "deployed"}
    eventually(lambda: (s.metric("flux_plunger_recoveries_total", result="recovered") or 0)
               >= 1, 20, "the recovery to be counted")


def test_install_replace_is_left_to_helm_controller(helm_controller, chart_server, cluster, ns,
                                                    cli):
    """The operator's own way out: with ``spec.install.replace: true`` helm-controller's next
    install reuses the name; flux-plunger deletes nothing."""
    name = "replaced"
    stuck_keep_history(cluster.kube, ns, name, chart_server)
    publish_version(cluster.kube, ns, name, chart_server, FIXED_VERSION)
    cluster.merge(ns, name, {"spec": {"install": {"replace": True}}})
    hr = wait_released(cluster.kube, ns, name, 2, FIXED_VERSION)
    assert C.PROCESSED_ANNOTATION not in (hr["metadata"].get("annotations") or {})
    assert _item(cli, ns, name)["state"] == "healthy"


@pytest.mark.parametrize("by", ["recover", "serve"])
def test_an_interrupted_uninstall_under_a_legacy_snapshot_is_recovered(
        helm_controller, chart_server, cluster, ns, cli, serve, by):  # noqa: F811
    """The upgrade of Flux: the release's history as helm-controller <= v1.4 wrote it, then
    an interrupted `helm uninstall` (revision 1 rewritten `uninstalling` in place); recovered
    by `recover`, or by a running serve on its own (it selects the release by label once
    helm-controller reported)."""
    name = f"legacy-{by}"
    s = serve("-n", ns, "--no-leader-elect", *FAST, "-l", "recover=yes") if by == "serve" \
        else None
    publish_version(cluster.kube, ns, name, chart_server, "0.1.0")
    from testplane.cluster import Cluster
    from testplane.helmctl import helmrelease
    Cluster(cluster.kube).apply(helmrelease(ns, name, name), manager="kustomize-controller")
    wait_released(cluster.kube, ns, name, 1, "0.1.0")
    history = legacy_snapshot(cluster.kube, ns, name)
    assert "apiVersion" not in history[0]
    break_release(cluster.kube, ns, name)
    request_reconcile(cluster.kube, ns, name)
    v15 = _helm_v4()
    if v15:   # verified against nothing: the status itself cannot be placed
        want = ("False", "StateError", "unable to determine state for release with status "
                "'uninstalling'")
    else:     # the digest no longer matches: unmanaged, upgraded, no deployed release
        want = ("False", "UpgradeFailed", "has no deployed releases")

    def reported():
        status, reason, message = ready(cluster.get(ns, name)) or ("", "", "")
        return status == want[0] and reason == want[1] and want[2] in message
    eventually(reported, 120, f"helm-controller to report {want}")
    item = _item(cli, ns, name)
    assert (item["state"], item["face"]) == \
        ("stuck", "state-error" if v15 else "no-deployed-releases"), item
    assert "apiVersion" not in latest_snapshot(cluster.get(ns, name)), "the snapshot was rewritten"
    if s is None:
        res = cli("recover", "-n", ns, name)
        assert res.code == 0 and f"{name} recovered: deleted revision 1 (uninstalling)" in res.out, res
    else:
        cluster.merge(ns, name, {"metadata": {"labels": {"recover": "yes"}}})
    _left_clean(wait_released(cluster.kube, ns, name, 1, "0.1.0"))
    assert release_statuses(cluster.kube, ns, name) == {1: "deployed"}
    if s is not None:
        eventually(lambda: (s.metric("flux_plunger_recoveries_total", result="recovered") or 0)
                   >= 1, 20, "the recovery to be counted")


def test_a_legacy_snapshot_over_a_superseded_revision_is_refused_and_its_way_out_works(
        helm_controller, chart_server, cluster, ns, cli):
    """Found in review: a release upgraded before the upgrade of Flux (v1 `superseded`, v2
    `deployed`), its history legacy, then an interrupted `helm uninstall` (v2 `uninstalling`).
    On helm-controller v1.5+ deleting v2 would leave StateError 'superseded' for ever: nothing
    is deleted (`legacy-history`, announced), and the way out the skip names — clearing
    `status.history` — leads to the "has no deployed releases" face, which is recovered.
    helm-controller v1.4.3 shows that face at once (the snapshot no longer verifies)."""
    from testplane.cluster import Cluster
    from testplane.helmctl import helmrelease

    from kubectl_flux_plunger.kube import JSON_PATCH, hr_path

    name = "legacy-upgraded"
    publish_version(cluster.kube, ns, name, chart_server, "0.1.0")
    Cluster(cluster.kube).apply(helmrelease(ns, name, name), manager="kustomize-controller")
    wait_released(cluster.kube, ns, name, 1, "0.1.0")
    publish_version(cluster.kube, ns, name, chart_server, "0.2.0")
    wait_released(cluster.kube, ns, name, 2, "0.2.0")
    legacy_snapshot(cluster.kube, ns, name)
    break_release(cluster.kube, ns, name)
    request_reconcile(cluster.kube, ns, name)
    assert release_statuses(cluster.kube, ns, name) == {1: "superseded", 2: "uninstalling"}

    def says(reason: str, words: str):
        def check():
            status, why, message = ready(cluster.get(ns, name)) or ("", "", "")
            return status == "False" and why == reason and words in message
        return check
    no_deployed = says("UpgradeFailed", "has no deployed releases")
    if _helm_v4():
        eventually(says("StateError", "with status 'uninstalling'"), 120, "StateError")
        item = _item(cli, ns, name)
        assert (item["state"], item["face"]) == ("stuck", "state-error"), item
        assert "clear the HelmRelease's status.history" in item["message"], item
        res = cli("recover", "-n", ns, name)
        assert res.code == 1 and "skipped" in res.out + res.err, res
        assert release_statuses(cluster.kube, ns, name) == {1: "superseded", 2: "uninstalling"}
        _left_clean(cluster.get(ns, name))
        # the way out: clear helm-controller's history, as the skip says
        cluster.kube.request("PATCH", "PATCH", hr_path(ns, name) + "/status",
                             content_type=JSON_PATCH,
                             body=[{"op": "remove", "path": "/status/history"}])
        request_reconcile(cluster.kube, ns, name)
    eventually(no_deployed, 120, '"has no deployed releases"')
    res = cli("recover", "-n", ns, name)
    assert res.code == 0 and f"{name} recovered: deleted revision 2 (uninstalling)" in res.out, res
    _left_clean(wait_released(cluster.kube, ns, name, 2, "0.2.0"))
    assert release_statuses(cluster.kube, ns, name) == {1: "superseded", 2: "deployed"}
