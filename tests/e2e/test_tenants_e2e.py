"""Holding a release among tenants (issue 55, SPEC §6), with the real helm-controller run the
way Flux's multi-tenancy lockdown runs it (``--default-service-account=default
--no-cross-namespace-refs=true``): it acts for each HelmRelease as the ServiceAccount
``default`` of the HelmRelease's namespace.

Two tenants, each a namespace whose ``default`` ServiceAccount may do anything there (what
Flux's layout gets by binding ``admin``; this control plane runs no ClusterRole aggregation,
so the Role grants it directly).  Tenant B's release is stuck for real; tenant A's
HelmRelease names B's release (``spec.storageNamespace``/``spec.releaseName``) with a Ready
condition written to look stuck.  Neither ``recover`` nor ``serve`` writes anything of B's
storage or of either HelmRelease (``claimed-twice``); with B's HelmRelease gone, A's alone is
``outside-authority`` (A's ServiceAccount may not delete Secrets in B's namespace); B's own
release is recovered as before, by ``recover`` and by ``serve``, helm-controller
impersonating B's ServiceAccount."""
from __future__ import annotations

import json
import time

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core.ownership import owns_suspend
from kubectl_flux_plunger.kube import JSON, core_path
from testplane.cluster import eventually, unique
from testplane.helmctl import (HelmController, break_release, helmrelease, publish_chart,
                               request_reconcile)

from tests.apiserver.test_serve_support import FAST, serve  # noqa: F401 - fixture

from .conftest import wait_ready, wait_stuck

LOCKDOWN = ("--default-service-account=default", "--no-cross-namespace-refs=true")
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def tenant(cluster, prefix: str) -> str:
    """A tenant namespace whose ``default`` ServiceAccount may do anything in it."""
    ns = cluster.namespace(prefix)
    k = cluster.kube
    k.request("CREATE", "POST", core_path("serviceaccounts", ns), content_type=JSON,
              body={"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": ns}})
    k.request("CREATE", "POST", f"{RBAC}/namespaces/{ns}/roles", content_type=JSON,
              body={"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": "tenant-admin", "namespace": ns},
                    "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
    k.request("CREATE", "POST", f"{RBAC}/namespaces/{ns}/rolebindings", content_type=JSON,
              body={"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "tenant-admin", "namespace": ns},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                "name": "tenant-admin"},
                    "subjects": [{"kind": "ServiceAccount", "name": "default",
                                  "namespace": ns}]})
    return ns


@pytest.fixture
def locked(plane, helm_controller, tmp_path):
    """The real helm-controller with Flux's lockdown flags, the session's own paused."""
    hc = HelmController(plane.kubeconfig, tmp_path, extra_args=LOCKDOWN)
    with helm_controller.paused():
        try:
            yield hc.start()
        finally:
            hc.stop()


def storage_of(cluster, ns: str, release: str) -> list[tuple[str, str, str]]:
    """(name, status, resourceVersion) of every storage Secret: any write shows."""
    return sorted((s["metadata"]["name"], s["metadata"]["labels"]["status"],
                   s["metadata"]["resourceVersion"])
                  for s in cluster.kube.list_secrets(ns, f"owner=helm,name={release}"))


def released(cluster, ns: str, name: str) -> dict:
    """Nothing of ours holds ``ns/name``: not suspended by us, no fence."""
    hr = cluster.get(ns, name)
    assert not hr["spec"].get("suspend") and not owns_suspend(hr), hr["spec"]
    assert C.FENCE not in (hr["metadata"].get("finalizers") or []), hr["metadata"]
    return hr


def untouched(cluster, ns: str, name: str) -> None:
    """Released, and never recorded either: nothing of ours was ever written."""
    hr = released(cluster, ns, name)
    assert C.PROCESSED_ANNOTATION not in (hr["metadata"].get("annotations") or {})


def look_stuck(cluster, ns: str, name: str, release_ns: str, release: str) -> None:
    """helm-controller's 'has no deployed releases' written onto ``ns/name``."""
    gen = cluster.get(ns, name)["metadata"]["generation"]
    cluster.set_status(ns, name, {
        "observedGeneration": gen, "lastAttemptedGeneration": gen,
        "conditions": [{"type": "Ready", "status": "False", "reason": "UpgradeFailed",
                        "observedGeneration": gen,
                        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "message": f"Helm upgrade failed for release {release_ns}/{release} "
                                   f"with chart app@0.1.0: \"{release}\" has no deployed "
                                   "releases"}]})


def warnings(cluster, ns: str, name: str) -> list[str]:
    return [e["message"] for e in cluster.events(ns, name)
            if e["reason"] == "RecoverySkipped" and e["type"] == "Warning"]


def test_tenants_claimed_twice_outside_authority_and_the_tenants_own_recovery(
        locked, plane, cluster, chart_server, cli, serve):  # noqa: F811
    a, b = tenant(cluster, "team-a"), tenant(cluster, "team-b")
    publish_chart(cluster.kube, b, "app", chart_server.chart, chart_server)
    cluster.apply(helmrelease(b, "app", "app"), manager="kustomize-controller")
    wait_ready(cluster, b, "app", 90, f" (helm-controller log: {locked.process.log})")
    # helm-controller installed it as B's ServiceAccount: the storage is B's
    assert [s[1] for s in storage_of(cluster, b, "app")] == ["deployed"]
    break_release(cluster.kube, b, "app")
    request_reconcile(cluster.kube, b, "app")
    wait_stuck(cluster, b, "app")

    # tenant A's HelmRelease pointed at B's release, never reconciled (helm-controller
    # paused while it exists), its Ready condition written to look stuck
    with locked.paused():
        publish_chart(cluster.kube, a, "copy", chart_server.chart, chart_server)
        cluster.create_hr(a, "copy", finalizers=[],
                          spec={"releaseName": "app", "storageNamespace": b,
                                "chartRef": {"kind": "ExternalArtifact", "name": "copy"}})
        look_stuck(cluster, a, "copy", b, "app")
        before = storage_of(cluster, b, "app")

        for ns, name in ((b, "app"), (a, "copy")):
            r = cli("recover", "-n", ns, name, "--default-service-account", "default",
                    "--lease-namespace", ns)
            assert "claimed twice" in r.out, r
        st = cli("status", "-A", "-o", "json", "--default-service-account", "default",
                 "--lease-namespace", a)
        rows = {(i["metadata"]["namespace"], i["metadata"]["name"]): i
                for i in json.loads(st.out)["items"]}
        assert rows[b, "app"]["state"] == "claimed-twice", rows[b, "app"]
        assert rows[b, "app"]["claimants"] == [f"{a}/copy"]
        assert rows[a, "copy"]["claimants"] == [f"{b}/app"]

        selector = f"flux-plunger-test={unique('tenants')}"
        for ns, name in ((b, "app"), (a, "copy")):
            cluster.merge(ns, name, {"metadata": {"labels": {"flux-plunger-test":
                                                             selector.split("=")[1]}}})
        look_stuck(cluster, a, "copy", b, "app")  # the label bumped nothing, but be sure
        s = serve("-l", selector, "--no-leader-elect", "--default-service-account",
                  "default", *FAST)
        eventually(lambda: (s.metric("flux_plunger_releases_left_stuck",
                                     reason="claimed-twice") or 0) >= 2, 60,
                   "serve to count both claimants left stuck")
        s.stop()
        assert storage_of(cluster, b, "app") == before       # not a byte of B's storage
        untouched(cluster, b, "app")
        untouched(cluster, a, "copy")
        assert warnings(cluster, b, "app") and warnings(cluster, a, "copy")

    # A's HelmRelease goes; B's own release is recovered by `recover`, helm-controller
    # acting as B's ServiceAccount
    cluster.delete_hr(a, "copy")
    eventually(lambda: cluster.get(a, "copy") is None, 30, "A's copy gone")
    r = cli("recover", "-n", b, "app", "--default-service-account", "default",
            "--lease-namespace", b)
    assert r.code == 0 and "app recovered" in r.out, r
    wait_ready(cluster, b, "app", 120, f" (helm-controller log: {locked.process.log})")
    assert [x[1] for x in storage_of(cluster, b, "app")] == ["deployed"]

    # … and by serve, the next time it sticks
    break_release(cluster.kube, b, "app")
    request_reconcile(cluster.kube, b, "app")
    wait_stuck(cluster, b, "app")
    s = serve("-n", b, "--no-leader-elect", "--default-service-account", "default", *FAST)
    wait_ready(cluster, b, "app", 120, f" (helm-controller log: {locked.process.log})")
    s.stop()
    hr = cluster.get(b, "app")
    assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "1"

    # B's HelmRelease gone (its finalizer lifted while helm-controller looks away: the
    # storage stays), B's storage stuck again, and A's HelmRelease alone naming it: A's
    # ServiceAccount may not delete Secrets in B's namespace
    with locked.paused():
        break_release(cluster.kube, b, "app")
        cluster.remove_finalizer(b, "app", C.HELM_CONTROLLER_FINALIZER)
        cluster.delete_hr(b, "app")
        eventually(lambda: cluster.get(b, "app") is None, 30, "B's HelmRelease gone")
        cluster.create_hr(a, "copy", finalizers=[],
                          spec={"releaseName": "app", "storageNamespace": b,
                                "chartRef": {"kind": "ExternalArtifact", "name": "copy"}})
        look_stuck(cluster, a, "copy", b, "app")
        before = storage_of(cluster, b, "app")
        r = cli("recover", "-n", a, "copy", "--default-service-account", "default",
                "--lease-namespace", a)
        assert "outside-authority" in r.out or "may not delete Secrets" in r.out, r
        assert f"system:serviceaccount:{a}:default" in r.out, r
        st = cli("status", "-n", a, "copy", "-o", "json", "--default-service-account",
                 "default", "--lease-namespace", a)
        assert json.loads(st.out)["items"][0]["state"] == "outside-authority", st
        assert storage_of(cluster, b, "app") == before
        untouched(cluster, a, "copy")
        assert warnings(cluster, a, "copy")
        cluster.delete_hr(a, "copy")


# -- the races, with the real helm-controller answering the handshake -------------------------


def _executor(plane):
    from kubectl_flux_plunger.executor import Executor, Options
    from kubectl_flux_plunger.kube.claimants import ListedClaimants
    from kubectl_flux_plunger.report.events import Recorder

    k = plane.kube()
    return k, Executor(k, Recorder(k), options=Options(handshake_timeout=30,
                                                       claimants=ListedClaimants(k)))


def test_a_second_claimant_created_during_the_handshake_deletes_nothing(
        installed, plane, cluster, ns):
    from tests.apiserver.test_saga_safety import _on

    from .test_recover_e2e import make_stuck

    make_stuck(installed, cluster, ns)
    other = cluster.namespace("copy")
    before = storage_of(cluster, ns, "demo")
    k, executor = _executor(plane)
    fired = _on(executor, lambda v, p: v == "PATCH",       # the record: after the handshake
                lambda n: cluster.create_hr(other, "copy", finalizers=[], spec={
                    "releaseName": "demo", "storageNamespace": ns, "suspend": True}))
    try:
        out = executor.reconcile(ns, "demo")
    finally:
        k.close()
    assert fired and out.result == "deferred", out
    assert "claimed twice" in out.detail and f"{other}/copy" in out.detail, out
    assert storage_of(cluster, ns, "demo") == before
    released(cluster, ns, "demo")
    copy = cluster.get(other, "copy")
    assert not owns_suspend(copy) and C.FENCE not in (copy["metadata"].get("finalizers") or [])
    cluster.delete_hr(other, "copy")


def test_a_release_name_changed_during_the_handshake_deletes_nothing(
        installed, plane, cluster, ns, helm_controller):
    import threading

    from kubectl_flux_plunger.executor.recover import RETARGETED_DETAIL

    from .test_recover_e2e import make_stuck

    make_stuck(installed, cluster, ns)
    before = storage_of(cluster, ns, "demo")
    k, executor = _executor(plane)
    renamed = threading.Event()

    def rename_while_held() -> None:
        # helm-controller is stopped until the operator has renamed the suspended release:
        # the generation it then acknowledges is the renamed one
        try:
            eventually(lambda: owns_suspend(cluster.get(ns, "demo")), 30, "our suspension")
            cluster.merge(ns, "demo", {"spec": {"releaseName": "renamed"}})
            renamed.set()
        finally:
            helm_controller.resume()

    helper = threading.Thread(target=rename_while_held, daemon=True)
    helm_controller.pause()
    helper.start()
    try:
        out = executor.reconcile(ns, "demo")
    finally:
        helper.join(60)
        k.close()
    assert renamed.is_set()
    assert out.result == "deferred" and out.detail == RETARGETED_DETAIL, out
    assert storage_of(cluster, ns, "demo") == before
    released(cluster, ns, "demo")
