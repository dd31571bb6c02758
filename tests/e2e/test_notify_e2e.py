"""Flux notifications against the real notification-controller (built from its Go module,
run as a local process with its Alert/Provider CRDs) and the real helm-controller: a
``generic`` Provider posts to a loopback receiver in the test, an Alert covers every
HelmRelease in the test's namespace.

* a recovery by ``serve --events-addr`` is exactly one notification, naming the release and
  the revision deleted;
* a recovery that fails (``recover --events-addr`` on an identity that cannot list Helm
  storage) is one notification of severity ``error``, posted before the CLI exits;
* notification-controller stopped: the recoveries still happen and serve logs one warning;
* a stuck release whose newest revision's payload is corrupt (Helm itself skips it and stays
  stuck on the revision below): serve leaves the Secret alone and announces it — one Warning
  ``RecoverySkipped`` Event and one notification of severity ``error`` naming the cause.

notification-controller's own duplicate filter is turned off (``--rate-limit-interval``
1ms): a duplicate flux-plunger posted would reach the receiver."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from testplane import binaries
from testplane.binaries import BuildError
from testplane.cluster import eventually
from testplane.notifyctl import NotificationController, Receiver, apply_route, ready_route
from testplane.plane import PlaneError
from testplane.rbac import service_account_kubeconfig

from tests.apiserver.test_deploy_manifests import find, render_kustomize
from tests.apiserver.test_serve_support import FAST, serve  # noqa: F401 - fixture

from kubectl_flux_plunger.core import constants as C

from testplane.helmctl import request_reconcile

from .conftest import wait_ready, wait_stuck
from .test_recover_e2e import make_stuck


def _start_nc(plane, workdir) -> NotificationController:
    nc = NotificationController(plane.kubeconfig, workdir)
    try:
        plane.install_crds(binaries.notification_crd_dir())
        nc.start()
    except (BuildError, PlaneError, TimeoutError) as exc:
        nc.stop()
        pytest.fail(f"cannot start the real notification-controller: {exc}", pytrace=False)
    return nc


@pytest.fixture(scope="module")
def nc(plane, tmp_path_factory):
    nc = _start_nc(plane, tmp_path_factory.mktemp("notification-controller"))
    yield nc
    nc.stop()


@pytest.fixture
def receiver(request):
    r = Receiver()
    yield r
    r.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\n--- receiver got ---\n{r.received(probes=True)}")


@pytest.fixture
def routed(nc, receiver, cluster, ns, request):
    """The namespace's HelmReleases routed to ``receiver`` (proven by a probe event)."""
    apply_route(cluster.kube, ns, receiver.url)
    ready_route(nc, receiver, ns)
    yield receiver
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\n--- notification-controller log (tail) ---\n{nc.log()[-6000:]}")


def _warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if re.search(r"\bWARNING\b", line)]


def test_a_recovery_by_serve_is_exactly_one_notification(
        installed, cluster, ns, nc, routed, serve):  # noqa: F811
    make_stuck(installed, cluster, ns)
    s = serve("-n", ns, "--no-leader-elect", "--events-addr", nc.address, *FAST)
    wait_ready(cluster, ns, timeout=120)
    eventually(lambda: routed.received(), 30, "a notification at the receiver")
    # what serve posted and what arrived are the same count: a duplicate would show
    eventually(lambda: s.metric("flux_plunger_notifications_total", result="sent")
               == len(routed.received()), 20, "serve's sent count to match the receiver")
    got = routed.received()
    assert [b["reason"] for b in got] == ["Recovered"], got
    event = got[0]
    assert event["involvedObject"]["kind"] == "HelmRelease"
    assert event["involvedObject"]["namespace"] == ns
    assert event["involvedObject"]["name"] == "demo"
    assert event["involvedObject"]["uid"] == cluster.get(ns, "demo")["metadata"]["uid"]
    assert event["severity"] == "info"
    assert event["reportingController"] == "flux-plunger"
    assert event["reportingInstance"] == s.identity
    assert "revision 1" in event["message"]
    # notification-controller stripped the group prefix and dropped the token
    assert event["metadata"] == {"releaseName": "demo", "deletedRevision": "1",
                                 "storageSecret": f"{ns}/sh.helm.release.v1.demo.v1"}
    assert s.metric("flux_plunger_notifications_total", result="unreachable") == 0


def test_a_failed_recovery_is_one_notification_of_severity_error(
        installed, cluster, ns, nc, routed, plane, cli):
    """The shipped ClusterRole without `list` on Secrets: the recovery cannot read Helm
    storage, fails before writing anything, and says so through the Alert."""
    rules = []
    for rule in find(render_kustomize(), "ClusterRole", "flux-plunger-flux-plunger")["rules"]:
        rule = dict(rule)
        if "secrets" in rule.get("resources", []):
            rule["verbs"] = [v for v in rule["verbs"] if v != "list"]
        rules.append(rule)
    kc = service_account_kubeconfig(plane, "no-storage-list", namespace=ns,
                                    cluster_rules=rules)
    make_stuck(installed, cluster, ns)
    res = cli("recover", "demo", "-n", ns, "--events-addr", nc.address, kubeconfig=kc)
    assert res.code == 1 and "cannot list Helm storage" in res.out + res.err, res
    # posted before the CLI exited (its bounded flush); dispatch by NC is asynchronous
    eventually(lambda: routed.received(), 30, "a notification at the receiver")
    got = routed.received()
    assert [(b["reason"], b["severity"]) for b in got] == [("RecoveryFailed", "error")], got
    assert got[0]["involvedObject"]["name"] == "demo"
    assert got[0]["metadata"]["releaseName"] == "demo"
    assert "forbidden" in got[0]["metadata"]["error"].lower(), got[0]
    # nothing was touched
    hr = cluster.get(ns, "demo")
    assert not hr["spec"].get("suspend")
    assert "sh.helm.release.v1.demo.v1" in cluster.secret_names(ns, "demo")


def test_notification_controller_stopped_recoveries_go_on_with_one_warning(
        installed, cluster, ns, plane, tmp_path, serve):  # noqa: F811
    gone = _start_nc(plane, tmp_path)
    address = gone.address
    gone.stop()
    make_stuck(installed, cluster, ns, "demo")
    make_stuck(installed, cluster, ns, "other")
    s = serve("-n", ns, "--no-leader-elect", "--events-addr", address, *FAST)
    wait_ready(cluster, ns, "demo", timeout=120)
    wait_ready(cluster, ns, "other", timeout=120)
    eventually(lambda: s.metric("flux_plunger_notifications_total", result="unreachable")
               == 2, 30, "both notifications to be given up")
    assert s.metric("flux_plunger_recoveries_total", result="recovered") == 2
    warnings = _warnings(s.logs())
    assert len(warnings) == 1, warnings
    assert f"cannot post Flux events to {address}" in warnings[0]


def test_a_corrupt_newest_revision_under_serve_is_a_warning_and_an_error_notification(
        installed, cluster, ns, nc, routed, serve):  # noqa: F811
    from kubectl_flux_plunger.core import storage
    from kubectl_flux_plunger.kube import JSON, core_path
    from kubectl_flux_plunger.core.plan import RECOVERY_SKIPPED, Stuck

    make_stuck(installed, cluster, ns)   # revision 1 uninstalling: "has no deployed releases"
    bad = storage.make_storage_secret("demo", ns, 2, "uninstalling")
    bad["data"]["release"] = "bm90IGd6aXAgbm9yIGpzb24="   # base64("not gzip nor json")
    cluster.kube.request("CREATE", "POST", core_path("secrets", ns), body=bad, content_type=JSON)
    s = serve("-n", ns, "--no-leader-elect", "--events-addr", nc.address, *FAST)
    eventually(lambda: routed.received(), 60, "a notification at the receiver")
    eventually(lambda: s.metric("flux_plunger_releases_left_stuck", reason="corrupt-payload")
               == 1, 30, "the release counted as left stuck")
    got = routed.received()
    assert [(b["reason"], b["severity"]) for b in got] == [("RecoverySkipped", "error")], got
    note = got[0]
    assert note["involvedObject"]["name"] == "demo"
    assert note["message"] == RECOVERY_SKIPPED[Stuck.CORRUPT_PAYLOAD].message
    assert note["metadata"]["cause"] == "corrupt-payload"
    assert "newest revision 2 has a corrupt payload" in note["metadata"]["detail"], note
    events = [e for e in cluster.events(ns, "demo") if e["reason"] == "RecoverySkipped"]
    assert [(e["type"], e["message"]) for e in events] == [
        ("Warning", RECOVERY_SKIPPED[Stuck.CORRUPT_PAYLOAD].message)]
    # nothing was touched: both revisions are there, the release was never suspended
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1",
                                                "sh.helm.release.v1.demo.v2"]
    hr = cluster.get(ns, "demo")
    assert not hr["spec"].get("suspend") and C.FENCE not in hr["metadata"]["finalizers"]
    # helm-controller, asked again, still reports the release stuck (Helm skips the revision
    # it cannot decode: the one below blocks it); serve's pass after it folds into the same
    # Event and posts nothing new
    request_reconcile(cluster.kube, ns, "demo")
    asked = cluster.get(ns, "demo")["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
    eventually(lambda: (cluster.get(ns, "demo").get("status") or {}).get(
        "lastHandledReconcileAt") == asked, 60, "helm-controller to handle the reconcile request")
    wait_stuck(cluster, ns)
    def folded() -> bool:
        counts = [e.get("count") or 1 for e in cluster.events(ns, "demo")
                  if e["reason"] == "RecoverySkipped"]
        return len(counts) == 1 and counts[0] >= 2
    eventually(folded, 30, "serve's pass after helm-controller's retry, folded into the Event")
    assert len(routed.received()) == 1, routed.received()


def _documented_route() -> list[dict]:
    """The Provider + Alert docs/INSTALL.md shows."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "INSTALL.md").read_text()
    section = text.split("### Flux notifications (Alert + Provider)", 1)[1]
    block = section.split("```yaml", 1)[1].split("```", 1)[0]
    return [d for d in yaml.safe_load_all(block) if d]


def test_the_documented_alert_routes_flux_plungers_events_only(nc, receiver, cluster, ns):
    """The INSTALL.md Provider + Alert, applied as shown (address and namespace changed):
    the real notification-controller accepts them and passes the recovery, failure, skip
    (each cause), held fence and unsuspend-failure events; its inclusionList keeps
    helm-controller's out."""
    from kubectl_flux_plunger.core import plan
    from kubectl_flux_plunger.kube import APPLY_PATCH

    docs = _documented_route()
    assert [d["kind"] for d in docs] == ["Provider", "Alert"]
    for doc in docs:
        doc["metadata"]["namespace"] = ns
        if doc["kind"] == "Provider":
            doc["spec"]["address"] = receiver.url
        plural = doc["kind"].lower() + "s"
        cluster.kube.request("APPLY", "PATCH", f"/apis/{doc['apiVersion']}/namespaces/{ns}/"
                             f"{plural}/{doc['metadata']['name']}", body=doc,
                             content_type=APPLY_PATCH, query={"fieldManager": "test"})
    pattern = re.compile(docs[1]["spec"]["inclusionList"][0])
    assert not pattern.search("Helm upgrade succeeded for release apps/web.v3 with chart demo")
    wanted = {plan.RECOVERED.message + ": revision 3, Secret apps/sh.helm.release.v1.web.v3",
              plan.RECOVERY_FAILED.message, plan.UNINSTALL_FENCE_HELD.message,
              plan.UNSUSPEND_FAILED.message,
              *(spec.message for spec in plan.RECOVERY_SKIPPED.values())}
    hr = {"metadata": {"name": "web", "namespace": ns, "uid": "u-1"}, "spec": {}}
    from kubectl_flux_plunger.report.notify import Notifier
    notifier = Notifier(nc.address, instance="test")

    def arrived() -> bool:
        got = {b["message"] for b in receiver.received()}
        if wanted <= got:
            return True
        for i, message in enumerate(sorted(wanted - got)):
            # posted again until notification-controller's cache holds the Alert
            notifier.folder = type(notifier.folder)()
            notifier.notify(hr, f"Probe{i}", "Warning", message)
        notifier.flush(5)
        return False
    eventually(arrived, 60, "the kinds of flux-plunger Warning events at the receiver")
    notifier.close()
    assert all(pattern.search(m) for m in wanted)


def test_a_release_given_up_is_one_error_notification(
        helm_controller, chart_server, cluster, ns, nc, routed, serve):  # noqa: F811
    """issue 57: a chart whose hooks never finish, serve with --max-failed-recoveries 1:
    one recovery (its notification), the release stuck again, given up — one Warning
    ``RecoverySkipped`` delivered as one notification of severity ``error``, cause
    ``given-up``; then `flux reconcile` ends the run and serve recovers it again."""
    from kubectl_flux_plunger.core.plan import RECOVERY_SKIPPED, Stuck
    from testplane.cluster import Cluster
    from testplane.helmctl import hooked_release, publish_version

    name = "failing"
    s = serve("-n", ns, "--no-leader-elect", "--events-addr", nc.address, *FAST,
              "--max-failed-recoveries", "1")
    publish_version(cluster.kube, ns, name, chart_server, "0.1.0", ("post-install", "pre-delete"))
    Cluster(cluster.kube).apply(hooked_release(ns, name, install={"retries": 3}),
                                manager="kustomize-controller")
    eventually(lambda: [b for b in routed.received() if b["reason"] == "RecoverySkipped"],
               240, "the given-up notification")
    eventually(lambda: s.metric("flux_plunger_notifications_total", result="sent")
               == len(routed.received()), 20, "serve's sent count to match the receiver")
    got = routed.received()
    assert [(b["reason"], b["severity"]) for b in got] == [
        ("Recovered", "info"), ("RecoverySkipped", "error")], got
    note = got[1]
    assert note["involvedObject"]["name"] == name
    assert note["message"] == RECOVERY_SKIPPED[Stuck.GIVEN_UP].message
    assert note["metadata"]["cause"] == "given-up"
    assert note["metadata"]["detail"].startswith("given up: 1 failed recovery in a row"), note
    # `flux reconcile` ends the run: serve recovers it again (a new run), one more
    # notification
    request_reconcile(cluster.kube, ns, name)
    eventually(lambda: [b["reason"] for b in routed.received()].count("Recovered") == 2,
               120, "a recovery after the reconcile request")
    hr = cluster.get(ns, name)
    record = json.loads(hr["metadata"]["annotations"][C.BUDGET_ANNOTATION])
    asked = hr["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
    assert record["recoveries"] == 1 and record["asked"].startswith(asked + "|"), record
