"""The shipped RBAC is exactly what the code sends: no more, no less.

`serve` and each one-shot verb run on a ServiceAccount token bound to exactly the rules of
the shipped ClusterRole and Lease Role (controller/kustomize; the chart renders the same,
tests/apiserver/test_deploy_manifests.py), and the chart's uninstall hook command
(`release-fence --stop-deployment`) on exactly the hook's roles.  The apiserver's audit log
(one Metadata event per request, testplane/plane.py) gives every (apiGroup, resource, verb)
each identity used; the test asserts that set equals the set the roles grant and that
nothing was refused.

The scenarios reach every request kind the code has: a recovery and a Lease held and given
up by `serve`, the kubeConfig Secret of a release whose storage is in another cluster, an Event written twice by separate processes (the second create answers 409,
the recorder reads the Event back and patches its count), `status`, `recover`,
`resume-owned` and `release-fence` (guarded JSON patches).
"""
from __future__ import annotations

import copy

import pytest

from kubectl_flux_plunger.core import constants as C
from testplane.cluster import SimulatedHelmController, unique
from testplane.rbac import service_account_kubeconfig

from .test_deploy_manifests import (ServeProcess, _deployment, _fallbacks, _fenced_release,
                                    cluster_name,
                                   _forbidden,
                                    _hold, _recovered, _stuck, find, render_chart,
                                    render_kustomize, run_tool)


def granted(*roles: dict) -> set[tuple[str, str, str]]:
    out = set()
    for role in roles:
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((group, resource, verb))
    return out


def used(events: list[dict]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource[/subresource], verb) of every resource request; discovery
    (non-resource URLs, allowed to every authenticated user) is not RBAC of ours."""
    out = set()
    for e in events:
        ref = e.get("objectRef")
        if not ref or not ref.get("resource"):
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.add((ref.get("apiGroup", ""), resource, e["verb"]))
    return out


def refused(events: list[dict]) -> list[str]:
    return [f"{e['verb']} {e['requestURI']}: {e['responseStatus'].get('code')}"
            for e in events if (e.get("responseStatus") or {}).get("code") in (401, 403)]


def cli(kubeconfig, *args: str):
    return run_tool("kubectl-flux_plunger", *args, kubeconfig=kubeconfig)


def test_controller_roles_are_exactly_what_serve_and_the_verbs_send(plane, cluster, ns,
                                                                     tmp_path):
    docs = render_kustomize()
    cluster_role = find(docs, "ClusterRole", cluster_name())
    lease_role = find(docs, "Role", "flux-plunger-leader-election")
    name = unique("audit")
    kc = service_account_kubeconfig(plane, name, namespace=ns,
                                    cluster_rules=copy.deepcopy(cluster_role["rules"]),
                                    namespace_rules={ns: copy.deepcopy(lease_role["rules"])})
    user = f"system:serviceaccount:{ns}:{name}"
    mark = plane.audit_mark()

    # serve: a full recovery, leadership taken and given up; the release acted on as a
    # tenant identity (helm-controller's --default-service-account): a SubjectAccessReview
    # asks whether it may delete the storage (here the audited account itself: it may)
    _stuck(cluster, ns)
    with SimulatedHelmController(cluster, ns):
        serve = ServeProcess(kc, tmp_path / "serve.log", "--leader-elect",
                             f"--leader-election-namespace={ns}", "-n", ns,
                             f"--default-service-account={name}")
        try:
            serve.wait_for(lambda: _recovered(cluster, ns), 60, "recovery under the shipped RBAC")
        finally:
            code = serve.stop()
    assert code == 0 and _forbidden(serve.text()) == [], serve.text()
    _fallbacks(plane, serve.text())

    # the verbs: a foreign suspension twice (the second Event write is a 409: read + patch),
    # our own leftover suspension, a fence to release
    cluster.create_hr(ns, "foreign")
    cluster.suspend(ns, "foreign", True, manager="operator")
    for _ in range(2):
        rec = cli(kc, "recover", "-n", ns, "--lease-namespace", ns)
        assert rec.returncode == 0, rec
    cluster.create_hr(ns, "ours")
    _hold(cluster, ns, "ours")
    ro = cli(kc, "resume-owned", "-n", ns, "--lease-namespace", ns)
    assert ro.returncode == 0 and "ours relinquished" in ro.stdout, ro
    _hold(cluster, ns, "ours")
    rf = cli(kc, "release-fence", "-n", ns, "--lease-namespace", ns)
    assert rf.returncode == 0, rf
    # a release whose storage is in another cluster: its kubeConfig Secret is read (here it
    # is missing: reported, nothing else happens)
    cluster.create_hr(ns, "remote", spec={"kubeConfig": {"secretRef": {"name": "nowhere"}}})
    st = cli(kc, "status", "-n", ns, "--lease-namespace", ns)
    assert st.returncode == 0, st
    named = cli(kc, "status", "-n", ns, "remote", "-o", "wide", "--lease-namespace", ns)
    assert named.returncode == 0 and "nowhere" in named.stdout, named
    event = cluster.kube.request("LIST", "GET", f"/api/v1/namespaces/{ns}/events")["items"]
    assert any(e["reason"] == "SuspensionNotOwned" and e["count"] >= 2 for e in event), event

    events = plane.audit_events(mark, user=user)
    assert refused(events) == []
    assert used(events) == granted(cluster_role, lease_role)


@pytest.fixture(scope="module")
def helm():
    from testplane import binaries
    return binaries.ensure("helm")


def test_hook_roles_are_exactly_what_the_hook_command_sends(plane, cluster, helm, monkeypatch):
    """The Job's command, run in this process so a foreign write can land exactly between
    its read and its first write of a release (the JSON patch's resourceVersion test then
    fails, and release-fence re-reads the release: the GET of its retry path)."""
    from kubectl_flux_plunger import kube as kube_mod
    from kubectl_flux_plunger.cli import main

    ns = cluster.namespace("hookaudit")
    docs = render_chart(helm, ns)
    hook_cluster = find(docs, "ClusterRole", cluster_name(ns, "flux-plunger-uninstall-cleanup"))
    hook_stop = find(docs, "Role", "flux-plunger-uninstall-cleanup-stop")
    name = unique("hookaudit")
    kc = service_account_kubeconfig(plane, name, namespace=ns,
                                    cluster_rules=copy.deepcopy(hook_cluster["rules"]),
                                    namespace_rules={ns: copy.deepcopy(hook_stop["rules"])})
    user = f"system:serviceaccount:{ns}:{name}"
    _deployment(plane, ns)
    _fenced_release(cluster, ns, "demo")
    job = find(docs, "Job", "flux-plunger-uninstall-cleanup")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:4] == ["release-fence", "--all-namespaces",
                        f"--stop-deployment={ns}/flux-plunger", f"--lease-namespace={ns}"]

    raced: list[str] = []
    real_init = kube_mod.Kube.__init__

    def init(self, *a, **kw):
        real_init(self, *a, **kw)

        def before(verb, path):
            if verb == "PATCH" and "/helmreleases/" in path and not raced:
                raced.append(path)       # another writer, just before our first write
                cluster.kube.merge_patch_hr(ns, "demo", {"metadata": {"annotations": {
                    "example.com/touched": "yes"}}}, field_manager="someone-else")
        self.before_request = before
    monkeypatch.setattr(kube_mod.Kube, "__init__", init)
    monkeypatch.setattr("sys.argv", ["kubectl-flux_plunger"])
    mark = plane.audit_mark()
    # what the Job runs (there with --all-namespaces), on this test's namespace only
    code = main(["release-fence", "-n", ns, args[2], args[3], "--stop-timeout=5s",
                 "--retry-window=5s",
                 "--kubeconfig", str(kc)])
    assert code == 0
    assert raced, "the concurrent write never landed"
    assert C.FENCE not in cluster.get(ns, "demo")["metadata"]["finalizers"]
    events = plane.audit_events(mark, user=user)
    assert refused(events) == []
    assert used(events) == granted(hook_cluster, hook_stop)
