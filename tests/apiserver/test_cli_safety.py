"""Issue 8 §1 through the real CLI: a running controller's Lease stops the writing one-shot
verbs on the releases its recorded scope covers (issue 28: and only on those),
release-fence finishes inside its deadline, status shows what decide decides."""
from __future__ import annotations

import json
import time

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core.ownership import owns_suspend
from testplane.cluster import SimulatedHelmController, eventually

from .conftest import hold, stuck_release
from .test_serve_support import FAST, serve  # noqa: F401 - the serve fixture


# -- one-shot verbs against a running controller ------------------------------------------

def test_recover_and_resume_owned_leave_what_a_running_controller_covers_alone(
        cli, cluster, kube, ns, serve):  # noqa: F811
    lease_ns = cluster.namespace("lease")
    # the controller watches ns and holds demo mid-recovery: no helm-controller answers
    # its handshake, so it waits with the release suspended and fenced
    ctl = serve("-n", ns, "--leader-election-namespace", lease_ns, *FAST,
                "--handshake-timeout", "120s", name="ctl")
    eventually(ctl.leads, 30, "the controller leads")
    stuck_release(cluster, ns)
    eventually(lambda: (cluster.get(ns, "demo")["spec"].get("suspend") is True
                        and owns_suspend(cluster.get(ns, "demo"))), 30, "the controller holds demo")
    before = cluster.get(ns, "demo")["metadata"]["resourceVersion"]

    for verb in ("recover", "resume-owned"):
        r = cli(verb, "-n", ns, "demo", "--lease-namespace", lease_ns)
        assert r.code == 1, r
        (line,) = [ln for ln in r.out.splitlines() if " deferred: " in ln]
        assert ctl.identity in line and f"Lease {lease_ns}/{C.LEASE_NAME}" in line, r
        assert f"(watching -n {ns})" in line and "--force" in line, r
        hr = cluster.get(ns, "demo")
        assert hr["metadata"]["resourceVersion"] == before            # not a single write
        assert len(cluster.secret_names(ns, "demo")) == 2
    doc = json.loads(cli("resume-owned", "-n", ns, "demo", "--lease-namespace", lease_ns,
                         "-o", "json").out)
    assert [(i["result"], i["controller"]) for i in doc["items"]] == [("deferred", C.LEASE_NAME)]

    status = cli("status", "-n", ns, "--lease-namespace", lease_ns)
    assert status.code == 0, status
    assert f"controller {ctl.identity} holds Lease {lease_ns}/{C.LEASE_NAME} (running" in \
        status.err, status
    assert "last renewed" in status.err
    assert "recovering" in status.out                 # a controller runs: in flight

    r = cli("resume-owned", "-n", ns, "demo", "--lease-namespace", lease_ns, "--force")
    assert r.code == 0, r
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE not in hr["metadata"]["finalizers"]
    ctl.stop()


def test_a_running_controller_that_watches_elsewhere_does_not_stop_the_verbs(
        cli, cluster, kube, ns, serve):  # noqa: F811
    """Its Lease records its scope: a release outside it is acted on (a crash leftover)."""
    lease_ns = cluster.namespace("lease")
    watched = cluster.namespace("elsewhere")
    ctl = serve("-n", watched, "--leader-election-namespace", lease_ns, *FAST, name="ctl")
    eventually(ctl.leads, 30, "the controller leads")
    cluster.create_hr(ns, "demo")
    hold(cluster, ns, "demo")                        # as a crashed one-shot run leaves it
    r = cli("resume-owned", "-n", ns, "demo", "--lease-namespace", lease_ns)
    assert r.code == 0 and "demo relinquished" in r.out, r
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE not in hr["metadata"]["finalizers"]
    ctl.stop()


def test_with_no_controller_running_recover_acts_and_status_says_so(cli, cluster, ns):
    lease_ns = cluster.namespace("lease")
    stuck_release(cluster, ns)
    with SimulatedHelmController(cluster, ns):
        r = cli("recover", "-n", ns, "demo", "--lease-namespace", lease_ns)
    assert r.code == 0, r
    status = cli("status", "-n", ns, "--lease-namespace", lease_ns)
    assert f"no flux-plunger controller holds Lease {lease_ns}/{C.LEASE_NAME}" in status.err


def test_a_suspension_left_by_a_gone_process_is_not_shown_as_recovering(cli, cluster, ns):
    lease_ns = cluster.namespace("lease")
    cluster.create_hr(ns, "demo")
    hold(cluster, ns, "demo")
    r = cli("status", "-n", ns, "demo", "-o", "json", "--lease-namespace", lease_ns)
    assert r.code == 0, r
    (item,) = json.loads(r.out)["items"]
    # young: a one-shot recover may still be at work on it
    assert item["state"] == "recovering", item
    assert item["suspendOwners"] == [{"manager": "flux-plunger", "operation": "Apply"}]


# -- status is derived from decide ---------------------------------------------------------

def test_status_of_a_terminating_unfenced_stuck_release_is_terminating(cli, cluster, ns):
    stuck_release(cluster, ns)                       # helm-controller's finalizer only
    cluster.delete_hr(ns, "demo")
    r = cli("status", "-n", ns, "demo", "-o", "json")
    (item,) = json.loads(r.out)["items"]
    assert item["state"] == "terminating", item      # nothing will act on it
    assert item["suspendOwners"] == []


def test_status_of_a_stuck_release_suspended_by_another_manager_shows_both(cli, cluster, ns):
    stuck_release(cluster, ns)
    cluster.suspend(ns, "demo", True, manager="operator")
    other = cluster.namespace()
    cluster.create_hr(other, "resumed")
    cluster.suspend(other, "resumed", True, manager="operator")
    cluster.suspend(other, "resumed", False, manager="operator")   # owner of false
    cluster.make_stuck(other, "resumed")
    r = cli("status", "-n", ns, "demo", "-o", "json")
    (item,) = json.loads(r.out)["items"]
    assert item["state"] == "suspended-by-other,stuck" and item["stuck"] is True, item
    assert item["suspendOwners"] == [{"manager": "operator", "operation": "Update"}]
    r = cli("status", "-n", other, "resumed", "-o", "json")
    (item,) = json.loads(r.out)["items"]
    assert item["state"] == "stuck" and item["suspendOwners"] == [], item   # not suspended


# -- release-fence finishes inside its deadline ---------------------------------------------

DENY = "flux-plunger-test-deny"


def _deny_patches_of_labelled_releases(kube, ns):
    """An admission policy refusing every update of a release labelled ``deny=yes`` in ``ns``:
    those releases fail forever."""
    name = f"{DENY}-{ns}"
    base = "/apis/admissionregistration.k8s.io/v1"
    kube.request("CREATE", "POST", f"{base}/validatingadmissionpolicies", content_type="application/json", body={
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": [C.HR_GROUP], "apiVersions": [C.HR_VERSION],
                     "operations": ["UPDATE"], "resources": ["helmreleases"]}]},
                 "validations": [{"expression":
                                  "!has(object.metadata.labels) || "
                                  "!('deny' in object.metadata.labels)",
                                  "message": "this release may not change"}]}})
    kube.request("CREATE", "POST", f"{base}/validatingadmissionpolicybindings", content_type="application/json", body={
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": ns}}}}})
    return name


def test_release_fence_with_four_releases_failing_forever_prints_the_summary_in_time(
        cli, cluster, kube, ns):
    for i in range(10):
        name = f"r{i}"
        cluster.create_hr(ns, name, labels={"deny": "yes"} if i % 3 == 0 else {})
        hold(cluster, ns, name)                      # suspended by us and fenced
    policy = _deny_patches_of_labelled_releases(kube, ns)

    def denied():
        try:
            cluster.merge(ns, "r0", {"metadata": {"annotations": {"probe": str(time.time())}}})
        except Exception:  # noqa: BLE001 - the policy answers
            return True
        return False
    eventually(denied, 30, "the admission policy denies updates")
    started = time.monotonic()
    r = cli("release-fence", "-n", ns, "--deadline", "40s", "--retry-window", "60s",
            timeout=120)
    elapsed = time.monotonic() - started
    try:
        assert r.code == 1, r
        assert "released 6 of 10 fenced HelmReleases" in r.out, r
        assert elapsed < 40, (elapsed, r)
        not_released = [line for line in r.err.splitlines() if " NOT released: " in line]
        assert sorted(line.split()[0] for line in not_released) == [
            f"helmrelease.helm.toolkit.fluxcd.io/r{i}" for i in (0, 3, 6, 9)], r
    finally:
        base = "/apis/admissionregistration.k8s.io/v1"
        kube.request("DELETE", "DELETE", f"{base}/validatingadmissionpolicybindings/{policy}")
        kube.request("DELETE", "DELETE", f"{base}/validatingadmissionpolicies/{policy}")
