"""The StateError face of a stuck release (issue 47) with the real helm-controller, from real
failures: its own remediation's uninstall fails part-way on a ``pre-delete`` hook and its
history records the ``uninstalling`` revision, so every reconcile ends ``Ready=False``
``StateError`` for ever.  For each way there (the failed install's remediation, the
uninstall-strategy upgrade remediation, the same with more revisions): ``status`` lists it
stuck with its face, ``recover`` (one-shot) and ``serve`` (the controller) bring it back to
``Ready=True`` once the chart is fixed, nothing is left suspended or fenced, and serve's
recovery costs the same requests as for the other face.  Runs on every helm-controller
version the suite runs (v1.6.4, and v1.4.3 in the compatibility stage)."""
from __future__ import annotations

import json

from kubectl_flux_plunger.core import constants as C
from testplane.cluster import eventually
from testplane.helmctl import (FIXED_VERSION, is_ready, latest_snapshot, publish_version,
                               release_statuses, stuck_install_remediation,
                               stuck_upgrade_remediation, wait_released)

from tests.apiserver.test_request_count import EIGHT_SERVE_WITHOUT_WATCH_LISTS, SEVEN, CountedServe
from tests.apiserver.test_serve_support import FAST, serve  # noqa: F401 - fixture


def _status_item(cli, ns: str, name: str) -> dict:
    res = cli("status", "-n", ns, name, "-o", "json")
    assert res.code == 0, res
    (item,) = json.loads(res.out)["items"]
    return item


def _left_clean(hr: dict) -> None:
    """Nothing of flux-plunger's is left on the release."""
    assert hr["spec"].get("suspend") is None, hr["spec"]
    assert C.FENCE not in (hr["metadata"].get("finalizers") or []), hr["metadata"]
    assert (hr["metadata"].get("annotations") or {}).get(C.SUSPENDED_BY_ANNOTATION) is None


def test_install_remediation_state_error_is_listed_and_recovered_by_recover(
        helm_controller, chart_server, cluster, ns, cli):
    """A failed install whose remediation's uninstall timed out: revision 1 `uninstalling`,
    recorded in the history.  ``status`` said "none needs attention" before issue 47."""
    name = "hooked"
    stuck_install_remediation(cluster.kube, ns, name, chart_server)
    item = _status_item(cli, ns, name)
    assert (item["state"], item["stuck"], item["face"], item["readyReason"]) == \
        ("stuck", True, "state-error", "StateError"), item
    assert (item["storage"]["latestRevision"], item["storage"]["helmStatus"]) == \
        (1, "uninstalling"), item
    table = cli("status", "-n", ns)
    assert table.code == 0 and f"1 HelmRelease in {ns} namespace, 1 listed: 1 stuck." in table.err, table
    plan = cli("recover", "-n", ns, "--dry-run")
    assert plan.code == 0 and "would recover 1 of 1 stuck" in plan.out, plan

    # while the chart still fails, a recovery would only lead to the same failure: fix it
    # (helm-controller's next attempt still ends in StateError: it never gets that far)
    publish_version(cluster.kube, ns, name, chart_server, FIXED_VERSION)
    res = cli("recover", "-n", ns, name)
    assert res.code == 0, res
    assert f"{name} recovered: deleted revision 1 (uninstalling)" in res.out, res
    hr = wait_released(cluster.kube, ns, name, 1, FIXED_VERSION)
    _left_clean(hr)
    assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "1"
    assert release_statuses(cluster.kube, ns, name) == {1: "deployed"}
    after = _status_item(cli, ns, name)
    assert (after["state"], after["face"], after["readyReason"]) == ("healthy", None, None), after


def test_install_remediation_state_error_is_recovered_by_serve_on_its_own(
        helm_controller, chart_server, cluster, ns, serve):  # noqa: F811
    """The same reproduction with ``serve`` running: it recovers the release by itself once
    helm-controller reports StateError, and counts the recovery."""
    name = "hooked"
    s = serve("-n", ns, "--no-leader-elect", *FAST, "-l", "recover=yes")
    stuck_install_remediation(cluster.kube, ns, name, chart_server)
    publish_version(cluster.kube, ns, name, chart_server, FIXED_VERSION)
    # serve watches only releases labelled recover=yes (-l): until the chart is fixed it
    # leaves this one alone (a recovery would only lead to the same failure)
    cluster.merge(ns, name, {"metadata": {"labels": {"recover": "yes"}}})
    hr = wait_released(cluster.kube, ns, name, 1, FIXED_VERSION)
    _left_clean(hr)
    assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "1"
    assert release_statuses(cluster.kube, ns, name) == {1: "deployed"}
    eventually(lambda: (s.metric("flux_plunger_recoveries_total", result="recovered") or 0)
               >= 1, 20, "the recovery to be counted")


def test_upgrade_remediation_state_error_with_a_deployed_older_revision_is_recovered_by_serve(
        helm_controller, chart_server, cluster, ns, plane, tmp_path):
    """``upgrade.remediation.strategy: uninstall``: v1 `deployed`, v2 `uninstalling` (the
    history's), Remediated=False.  The deployed v1 does not make it healthy; serve deletes v2
    and helm-controller upgrades from v1.  Every request serve sent about the release, from
    the audit log: the one recovery pass, as for "has no deployed releases"."""
    name = "remedied"
    stuck_upgrade_remediation(cluster.kube, ns, name, chart_server)
    assert release_statuses(cluster.kube, ns, name) == {1: "deployed", 2: "uninstalling"}
    publish_version(cluster.kube, ns, name, chart_server, FIXED_VERSION)

    def back() -> bool:
        hr = cluster.get(ns, name)
        snap = latest_snapshot(hr)
        return (is_ready(hr) and snap.get("chartVersion") == FIXED_VERSION
                and hr["status"].get("observedGeneration") == hr["metadata"]["generation"]
                and (hr["metadata"].get("annotations") or {}).get(C.PROCESSED_ANNOTATION)
                == "2")

    counted = CountedServe(plane, cluster, ns, tmp_path)
    about = counted.about(name, back, conflicts=False)
    assert about == (SEVEN if plane.watch_lists else EIGHT_SERVE_WITHOUT_WATCH_LISTS), about
    hr = cluster.get(ns, name)
    _left_clean(hr)
    # the deleted v2 is written again by the upgrade from v1
    assert release_statuses(cluster.kube, ns, name) == {1: "superseded", 2: "deployed"}


def test_state_error_after_several_revisions_is_recovered_by_recover(
        helm_controller, chart_server, cluster, ns, cli):
    """v1 `superseded`, v2 `deployed`, v3 `uninstalling` (the history's): only v3 goes."""
    name = "layered"
    stuck_upgrade_remediation(cluster.kube, ns, name, chart_server, good_upgrades=1)
    assert release_statuses(cluster.kube, ns, name) == \
        {1: "superseded", 2: "deployed", 3: "uninstalling"}
    assert _status_item(cli, ns, name)["face"] == "state-error"
    publish_version(cluster.kube, ns, name, chart_server, FIXED_VERSION)
    res = cli("recover", "-n", ns, name)
    assert res.code == 0 and f"{name} recovered: deleted revision 3 (uninstalling)" in res.out, res
    hr = wait_released(cluster.kube, ns, name, 3, FIXED_VERSION)
    _left_clean(hr)
    assert release_statuses(cluster.kube, ns, name) == \
        {1: "superseded", 2: "superseded", 3: "deployed"}
