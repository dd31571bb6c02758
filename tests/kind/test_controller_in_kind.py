"""flux-plunger's own image as its users run it, in a kind cluster with Flux:

2. installed by `helm install` of the chart's verified digest (and by the kustomize base, the
   image pinned by its verified digest): Ready, leads with its
   in-cluster ServiceAccount, recovers a release broken as the e2e tier breaks them; pod logs
   and /metrics show it.
3. a rolling update: the old pod drains on SIGTERM within its grace period, the new one leads
   within drain + 5 s, the recovery that was in flight leaves nothing suspended or fenced.
5. the leader killed with --grace-period=0 --force mid-recovery: the next pod finishes it
   after the Lease expires.
4. `helm uninstall` runs the real pre-delete hook Job: it stops the Deployment, releases every
   fence (one on a release deleted during recovery, which helm-controller then uninstalls) and
   exits 0; a fence that cannot be removed fails the Job and Helm keeps the release.

The tests run in this order and share one installation of the chart (module fixture)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from kubectl_flux_plunger.core import constants as C
from testplane import images
from testplane.cluster import Cluster
from testplane.helmctl import break_release, is_ready, ready, request_reconcile
from testplane.kind import FLUX_NS, KindFlux, Setup, wait_until

from .conftest import (DRAIN, GRACE, PLUNGER_NS, RELEASE_REPO, ROOT, HRWatch, Plunger,
                       cosign_verify, fenced, fence_lines, helm_install, install_release, scale,
                       skip_reason, start_inflight, stuck, suspended)

pytestmark = pytest.mark.skipif(bool(skip_reason()), reason=skip_reason())


def _clean_and_ready(kcluster: Cluster, ns: str, name: str = "demo", timeout: float = 180) -> dict:
    """Wait until flux-plunger has recorded a recovery of ``ns/name`` and helm-controller
    reports it Ready=True again, with nothing suspended or fenced."""
    def ok() -> dict | None:
        hr = kcluster.get(ns, name)
        if (hr and (hr["metadata"].get("annotations") or {}).get(C.PROCESSED_ANNOTATION)
                and is_ready(hr) and not suspended(hr) and not fenced(hr)):
            return hr
        return None
    return wait_until(ok, timeout, f"{ns}/{name} recovered: Ready=True, not suspended, not fenced",
                      detail=lambda: json.dumps(kcluster.get(ns, name), indent=1)[-2500:])


def _broken(kind_flux: KindFlux, kcluster: Cluster, ns: str, name: str = "demo") -> HRWatch:
    """Break the release as the e2e tier does and ask helm-controller to reconcile; the
    returned watch records every state the release goes through."""
    watch = HRWatch(kind_flux, ns, name)
    wait_until(lambda: watch.states, 30, f"the watch on {ns}/{name} to start")
    break_release(kcluster.kube, ns, name)
    request_reconcile(kcluster.kube, ns, name)
    return watch


def _only_deployed(kcluster: Cluster, ns: str, name: str = "demo") -> list[str]:
    return [s["metadata"]["labels"]["status"]
            for s in kcluster.kube.list_secrets(ns, f"owner=helm,name={name}")]


def _recovered_in_logs(plunger: Plunger, pod: str, ns: str, name: str = "demo") -> list[dict]:
    return [r for r in plunger.log_records(pod)
            if r.get("release") == f"{ns}/{name}" and r.get("result") == "recovered"]


# -- 2: the chart ---------------------------------------------------------------------------

def test_chart_install_leads_and_recovers_a_stuck_release(
        kind_flux: KindFlux, kcluster: Cluster, helm_plunger: Plunger) -> None:
    leader = helm_plunger.leader_pod()
    pod = kind_flux.get_json("-n", PLUNGER_NS, "pod", leader)
    assert pod["spec"]["serviceAccountName"] == "flux-plunger"
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"].get("automountServiceAccountToken", True) is True
    container = pod["spec"]["containers"][0]
    # no other credentials: the pod can only reach the API with its ServiceAccount's token
    assert not any(e["name"] == "KUBECONFIG" for e in container.get("env", []))
    assert {v["name"] for v in pod["spec"]["volumes"]} <= {"tmp"} | {
        v["name"] for v in pod["spec"]["volumes"] if "projected" in v}
    sa = f"system:serviceaccount:{PLUNGER_NS}:flux-plunger"
    assert kind_flux.kubectl("auth", "can-i", "update", "leases", "-n", PLUNGER_NS,
                             f"--as={sa}", check=False).stdout.strip() == "yes"
    assert kind_flux.kubectl("auth", "can-i", "update", "leases", "-n", "default",
                             f"--as={sa}", check=False).stdout.strip() == "no"
    assert helm_plunger.holder().startswith(leader + "_")

    ns = kcluster.namespace("k2")
    install_release(kind_flux, kcluster, ns)
    before = helm_plunger.metric("flux_plunger_recoveries_total", result="recovered") or 0.0
    watch = _broken(kind_flux, kcluster, ns)
    try:
        hr = _clean_and_ready(kcluster, ns)
    finally:
        watch.stop()
    assert any(stuck(o) for _, o in watch.states), "helm-controller never reported it stuck"
    assert ready(hr)[1] in ("InstallSucceeded", "UpgradeSucceeded"), ready(hr)
    assert hr["metadata"]["annotations"].get(C.PROCESSED_ANNOTATION), hr["metadata"]
    assert _only_deployed(kcluster, ns) == ["deployed"]
    records = wait_until(lambda: _recovered_in_logs(helm_plunger, leader, ns), 30,
                         f"a 'recovered' log record for {ns}/demo in pod {leader}")
    assert records[0]["revision"] >= 1
    wait_until(lambda: (helm_plunger.metric("flux_plunger_recoveries_total", result="recovered")
                        or 0.0) >= before + 1, 30, "/metrics to count the recovery")


# -- 3: a rolling update ----------------------------------------------------------------------

def test_rolling_update_drains_the_old_pod_and_the_new_one_leads(
        kind_flux: KindFlux, kcluster: Cluster, helm_plunger: Plunger) -> None:
    ns = kcluster.namespace("k3")
    install_release(kind_flux, kcluster, ns)
    flight = start_inflight(kind_flux, kcluster, helm_plunger, ns)
    old = flight.leader
    watch = HRWatch(kind_flux, ns, "demo")
    logs = subprocess.Popen([str(kind_flux.setup.kubectl), "-n", PLUNGER_NS, "logs", "-f", old],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={"KUBECONFIG": str(kind_flux.kubeconfig), "PATH": "/usr/bin:/bin",
                                 "HOME": str(kind_flux.workdir / "home"),
                                 "KUBECACHEDIR": str(kind_flux.workdir / "kube-cache")})
    try:
        time.sleep(1)  # let `logs -f` attach before the pod is told to stop
        t0 = time.monotonic()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        kind_flux.kubectl("-n", PLUNGER_NS, "patch", "deployment", "flux-plunger", "--type=merge",
                          "-p", json.dumps({"spec": {"template": {"metadata": {"annotations": {
                              "kubectl.kubernetes.io/restartedAt": stamp}}}}}))
        out, _ = logs.communicate(timeout=GRACE + 30)
        t_exit = time.monotonic()
        new = helm_plunger.leader_pod(timeout=DRAIN + 30, other_than=old, require_ready=False)
        t_lead = time.monotonic()
    finally:
        if logs.poll() is None:
            logs.kill()
        watch.stop()
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    messages = [r.get("msg") or r.get("message") or "" for r in records]
    assert any("stopped" in m and "flux-plunger controller" in m for m in messages), messages[-15:]
    stopped = [r for r in records if "flux-plunger controller stopped" in (r.get("msg") or r.get("message") or "")]
    assert stopped and stopped[-1].get("exit") == 0, stopped
    assert t_exit - t0 < GRACE, f"the old pod took {t_exit - t0:.1f}s of its {GRACE}s grace"
    assert new != old
    assert t_lead - t0 <= DRAIN + 5, (f"the new pod led {t_lead - t0:.1f}s after the update "
                                     f"(drain {DRAIN}s + 5s allowed)")
    # between the old pod's exit and the new leader, the release was neither suspended nor fenced
    timeline = [(round(t - t0, 2), suspended(o), fenced(o)) for t, o in watch.states]
    drain = [r for r in records if r.get("release") == f"{ns}/demo" or "drain" in (r.get("msg") or "")]
    why = f"(t, suspended, fenced) since the update: {timeline}\nold pod: {drain}"
    # the old pod undid its recovery before it exited: the release went back to neither
    # suspended nor fenced (the new leader may then start its own recovery: helm-controller
    # is still down)
    clean = [o for o in watch.between(t0, t_exit + 2) if not suspended(o) and not fenced(o)]
    assert clean, f"the old pod left its recovery suspended or fenced; {why}"
    assert any(r.get("msg", "").startswith("drain: released every uninstall fence") for r in records), why
    flight.restore()
    _clean_and_ready(kcluster, ns)
    assert _only_deployed(kcluster, ns) == ["deployed"]


# -- 5: the leader killed -----------------------------------------------------------------------

def test_killed_leader_is_replaced_and_the_recovery_finishes(
        kind_flux: KindFlux, kcluster: Cluster, helm_plunger: Plunger) -> None:
    ns = kcluster.namespace("k5")
    install_release(kind_flux, kcluster, ns)
    flight = start_inflight(kind_flux, kcluster, helm_plunger, ns)
    old = flight.leader
    lease_before = helm_plunger.lease()["spec"]
    # `delete --grace-period=0 --force` alone still lets the kubelet send SIGTERM (it keeps a
    # 2 s minimum), and flux-plunger gives its Lease up on SIGTERM: a crash is SIGKILL first
    pod = kind_flux.get_json("-n", PLUNGER_NS, "pod", old)
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    t0 = time.monotonic()
    subprocess.run([images.docker_bin(), "exec", f"{kind_flux.name}-control-plane", "crictl",
                    "stop", "--timeout", "0", cid], check=True, capture_output=True, timeout=60)
    kind_flux.kubectl("-n", PLUNGER_NS, "delete", "pod", old, "--grace-period=0", "--force",
                      "--wait=false")
    new = helm_plunger.leader_pod(timeout=120, other_than=old, require_ready=False)
    t_lead = time.monotonic()
    lease = helm_plunger.lease()["spec"]
    assert lease["holderIdentity"].startswith(new + "_")
    # the killed leader never released it: the successor waited for it to expire
    assert t_lead - t0 >= lease_before.get("leaseDurationSeconds", 15) * 0.5, \
        f"the new pod led {t_lead - t0:.1f}s after the kill, before the Lease could expire"
    flight.restore()
    hr = _clean_and_ready(kcluster, ns)
    assert hr["metadata"]["annotations"].get(C.PROCESSED_ANNOTATION)
    assert _only_deployed(kcluster, ns) == ["deployed"]


# -- 4: helm uninstall and its pre-delete hook ------------------------------------------------

KEEP_FENCE_POLICY = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: kfp-test-keep-fence
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["helm.toolkit.fluxcd.io"]
      apiVersions: ["*"]
      operations: ["UPDATE"]
      resources: ["helmreleases"]
  validations:
  - expression: >-
      !(has(oldObject.metadata.finalizers) && '{fence}' in oldObject.metadata.finalizers) ||
      (has(object.metadata.finalizers) && '{fence}' in object.metadata.finalizers)
    message: "test policy: this uninstall fence cannot be removed"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: kfp-test-keep-fence
spec:
  policyName: kfp-test-keep-fence
  validationActions: ["Deny"]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {ns}
"""


def _hook_job(kind_flux: KindFlux) -> dict | None:
    return kind_flux.get_json("-n", PLUNGER_NS, "job", "flux-plunger-uninstall-cleanup")


def test_helm_uninstall_hook_fails_on_a_fence_that_cannot_be_removed(
        kind_flux: KindFlux, kcluster: Cluster, helm_plunger: Plunger,
        plunger_image: str, kind_setup: Setup) -> None:
    helm_install(kind_flux, plunger_image, kind_setup, "--set", "uninstallCleanup.retryWindowSeconds=10")
    helm_plunger.leader_pod()
    ns = kcluster.namespace("k4b")
    install_release(kind_flux, kcluster, ns)
    kind_flux.apply(KEEP_FENCE_POLICY.replace("{fence}", C.FENCE).replace("{ns}", ns))
    try:
        def denied() -> bool:
            # the fence as flux-plunger would have left it; the running controller may take
            # it off again until the policy is in force: put it back until that is so
            if not fenced(kcluster.get(ns, "demo")):
                kcluster.merge(ns, "demo", {"metadata": {"finalizers": [
                    "finalizers.fluxcd.io", C.FENCE]}})
            probe = kind_flux.kubectl("-n", ns, "patch", "helmrelease", "demo", "--type=json",
                                      "--dry-run=server", "-p",
                                      json.dumps([{"op": "remove", "path": "/metadata/finalizers/1"}]),
                                      check=False)
            return probe.returncode != 0 and "cannot be removed" in probe.stderr
        wait_until(denied, 60, "the test policy to deny removing the fence")
        res = kind_flux.helm("uninstall", "flux-plunger", "-n", PLUNGER_NS, "--timeout", "5m",
                             check=False, timeout=400)
        assert res.returncode != 0, res.stdout
        job = _hook_job(kind_flux)
        assert job is not None and job["status"].get("failed", 0) >= 1, job and job["status"]
        report = kind_flux.logs(PLUNGER_NS, "job/flux-plunger-uninstall-cleanup")
        assert any("NOT released" in line for line in fence_lines(report, ns, "demo")), report
        # Helm kept the release
        assert kind_flux.helm("status", "flux-plunger", "-n", PLUNGER_NS, check=False).returncode == 0
        assert fenced(kcluster.get(ns, "demo"))
    finally:
        kind_flux.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                          "kfp-test-keep-fence", "--ignore-not-found", check=False)
    # the way out: the blocker gone, the uninstall again (hook included) succeeds
    wait_until(lambda: kind_flux.helm("uninstall", "flux-plunger", "-n", PLUNGER_NS, "--timeout",
                                      "5m", check=False, timeout=400).returncode == 0
               or kind_flux.helm("status", "flux-plunger", "-n", PLUNGER_NS, check=False).returncode != 0,
               420, "helm uninstall to succeed once the fence can go", interval=5)
    assert not fenced(kcluster.get(ns, "demo"))


def test_helm_uninstall_hook_releases_every_fence_and_exits_0(
        kind_flux: KindFlux, kcluster: Cluster, helm_plunger: Plunger,
        plunger_image: str, kind_setup: Setup) -> None:
    """Two fenced releases when the chart is uninstalled, both deleted while helm-controller
    is down: ``stuck`` with flux-plunger's recovery in flight, ``held`` healthy but still held
    as a crashed recovery leaves it.  The hook stops the Deployment, releases both fences and
    exits 0; helm-controller, back, uninstalls ``held``.  (``stuck`` goes without an
    uninstall: helm-controller's failed upgrade cleared its status.history, and it skips the
    uninstall of a release with no history — its own behaviour, fluxcd/flux2#4614.)"""
    from tests.apiserver.conftest import hold
    helm_install(kind_flux, plunger_image, kind_setup)
    helm_plunger.leader_pod()
    ns = kcluster.namespace("k4")
    install_release(kind_flux, kcluster, ns, "held")
    install_release(kind_flux, kcluster, ns, "stuck")
    helm_plunger.scale(0)
    hold(kcluster, ns, "held")
    watch = _broken(kind_flux, kcluster, ns, "stuck")
    watch.stop()
    wait_until(lambda: stuck(kcluster.get(ns, "stuck")), 120, f"{ns}/stuck stuck")
    scale(kind_flux, FLUX_NS, "helm-controller", 0, "app=helm-controller")
    restored = False
    try:
        kind_flux.kubectl("-n", ns, "delete", "helmrelease", "held", "--wait=false")
        helm_plunger.scale(1)
        helm_plunger.leader_pod()
        wait_until(lambda: (lambda hr: suspended(hr) and fenced(hr))(kcluster.get(ns, "stuck")),
                   90, f"flux-plunger to suspend and fence {ns}/stuck")
        # its recovery in flight, the release is deleted
        kind_flux.kubectl("-n", ns, "delete", "helmrelease", "stuck", "--wait=false")
        for name in ("held", "stuck"):
            wait_until(lambda n=name: (lambda hr: hr and hr["metadata"].get("deletionTimestamp")
                                       and fenced(hr))(kcluster.get(ns, n)),
                       30, f"{ns}/{name} terminating and fenced")
        try:
            kind_flux.helm("uninstall", "flux-plunger", "-n", PLUNGER_NS, "--timeout", "5m",
                           timeout=400)
        finally:
            report = kind_flux.logs(PLUNGER_NS, "job/flux-plunger-uninstall-cleanup")
        assert "scaled Deployment flux-plunger/flux-plunger to zero" in report, report
        job = _hook_job(kind_flux)
        assert job is not None and job["status"].get("succeeded") == 1, job and job["status"]
        for name in ("held", "stuck"):
            lines = fence_lines(report, ns, name)
            assert lines and all("released" in line and "NOT released" not in line
                                 for line in lines), report
        assert "NOT released" not in report, report
        assert kind_flux.get_json("-n", PLUNGER_NS, "deployment", "flux-plunger") is None
        for name in ("held", "stuck"):
            hr = kcluster.get(ns, name)
            assert hr is not None and not fenced(hr) and not suspended(hr), hr
        scale(kind_flux, FLUX_NS, "helm-controller", 1, "app=helm-controller")
        restored = True
    finally:
        if not restored:
            scale(kind_flux, FLUX_NS, "helm-controller", 1, "app=helm-controller")
    for name in ("held", "stuck"):
        wait_until(lambda n=name: kcluster.get(ns, n) is None, 120, f"{ns}/{name} to go",
                   detail=lambda: kind_flux.flux_logs("helm-controller")[-2000:])
    # helm-controller uninstalled the held release: its objects and storage are gone
    assert kind_flux.get_json("-n", ns, "configmap", "held-cm") is None
    assert _only_deployed(kcluster, ns, "held") == []


# -- 2b: the kustomize base ---------------------------------------------------------------------

def test_kustomize_base_installs_a_controller_that_recovers(
        kind_flux: KindFlux, kcluster: Cluster, plunger_image: str, tmp_path: Path) -> None:
    if kind_flux.helm("status", "flux-plunger", "-n", PLUNGER_NS, check=False).returncode == 0:
        kind_flux.helm("uninstall", "flux-plunger", "-n", PLUNGER_NS, "--timeout", "5m", timeout=400)
    # the image by the digest its signature verified (the kustomize base has no chart to pin it)
    release = kind_flux.release  # type: ignore[attr-defined]
    digest = release["digest"]
    assert digest in cosign_verify(kind_flux, f"{release['registry']}/{RELEASE_REPO}@{digest}")
    repo, _, tag = plunger_image.rpartition(":")
    base = os.path.relpath(ROOT / "controller" / "kustomize", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n- {base}\n"
        f"images:\n- name: kubectl-flux-plunger\n  newName: {repo}\n  digest: {digest}\n")
    kind_flux.kubectl("apply", "--server-side", "-k", str(tmp_path), timeout=120)
    plunger = Plunger(kind_flux)
    try:
        leader = plunger.leader_pod(timeout=180)
        ns = kcluster.namespace("k2k")
        install_release(kind_flux, kcluster, ns)
        watch = _broken(kind_flux, kcluster, ns)
        try:
            _clean_and_ready(kcluster, ns)
        finally:
            watch.stop()
        assert any(stuck(o) for _, o in watch.states), "helm-controller never reported it stuck"
        assert _only_deployed(kcluster, ns) == ["deployed"]
        wait_until(lambda: _recovered_in_logs(plunger, leader, ns), 30,
                   f"a 'recovered' log record for {ns}/demo")
        wait_until(lambda: (plunger.metric("flux_plunger_recoveries_total", result="recovered")
                            or 0.0) >= 1, 30, "/metrics to count the recovery")
    finally:
        kind_flux.kubectl("delete", "-k", str(tmp_path), "--ignore-not-found", "--wait=false",
                          check=False, timeout=120)
