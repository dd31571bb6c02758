"""The verbs as a user runs them (a real process, through kubectl's plugin dispatch where it
matters) against the real apiserver: output formats, exit codes, dry runs, release-fence
outcome lines, bad input, and a ServiceAccount bound to exactly the RBAC the CLI needs."""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from kubectl_flux_plunger.core import constants as C
from testplane.cluster import SimulatedHelmController
from testplane.rbac import service_account_kubeconfig

from .conftest import hold, stuck_release

# What the one-shot verbs need, and nothing more (same as the controller's ClusterRole).
CLI_RULES = [
    {"apiGroups": ["helm.toolkit.fluxcd.io"], "resources": ["helmreleases"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "create", "patch"]},
    # which flux-plunger controllers run?  (every Lease of the cluster, whatever namespace it
    # is in: one LIST, cluster-wide — this is a ClusterRole; the GET is the fallback where a
    # LIST is refused)
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list"]},
]


def schema():
    """docs/output-schema.json, the contract of -o json|yaml."""
    from pathlib import Path

    import jsonschema
    path = Path(__file__).resolve().parents[2] / "docs" / "output-schema.json"
    return jsonschema.Draft202012Validator(json.loads(path.read_text()),
                                           format_checker=jsonschema.FormatChecker())


# -- version / help ---------------------------------------------------------------------

def test_version_through_kubectl_plugin_dispatch(cli, plane):
    res = cli("version", via_kubectl=True)
    assert res.code == 0, res
    assert "Client Version: 0.1.0" in res.out
    assert "Server Version: v1.37.2" in res.out or "Server Version: v" in res.out
    assert "helm-controller Version: not found" in res.out


def test_help_through_kubectl(cli):
    res = cli("--help", via_kubectl=True)
    assert res.code == 0 and "kubectl flux-plunger" in res.out
    for verb in ("status", "recover", "resume-owned", "release-fence", "version"):
        assert verb in res.out


# -- status -----------------------------------------------------------------------------

def test_status_table_wide_json_yaml_name(cli, cluster, ns):
    stuck_release(cluster, ns)
    cluster.create_hr(ns, "healthy")
    cluster.create_hr(ns, "paused")
    cluster.suspend(ns, "paused", True, manager="operator")
    res = cli("status", "-n", ns)
    assert res.code == 0, res
    lines = res.out.splitlines()
    assert lines[0].split()[:3] == ["NAME", "STATE", "SUSPEND-OWNER"]
    rows = {l.split()[0]: l.split() for l in lines[1:]}
    assert set(rows) == {"demo", "paused"}                 # the healthy one is not listed
    assert lines[0].split()[3] == "STORAGE-REV"
    assert rows["demo"][1:5] == ["stuck", "-", "2", "uninstalling"]
    assert rows["paused"][1:3] == ["suspended-by-other", "operator(Update)"]
    wide = cli("status", "-n", ns, "-o", "wide")
    assert "STORAGE-NAMESPACE" in wide.out and "no revision is deployed" in wide.out
    data = json.loads(cli("status", "-n", ns, "-o", "json").out)
    assert (data["apiVersion"], data["kind"]) == ("flux-plunger.cozystack.io/v1alpha1",
                                                  "HelmReleaseStatusList")
    assert [i["metadata"]["name"] for i in data["items"]] == ["demo", "paused"]
    assert data["items"][0]["storage"]["helmStatus"] == "uninstalling"
    live = cluster.get(ns, "demo")["metadata"]
    assert data["items"][0]["metadata"]["uid"] == live["uid"]
    assert data["items"][0]["metadata"]["creationTimestamp"] == live["creationTimestamp"]
    assert "managedFields" not in data["items"][0]["metadata"]
    assert data["items"][1]["suspendOwners"] == [{"manager": "operator", "operation": "Update"}]
    schema().validate(data)
    ydata = yaml.safe_load(cli("status", "-n", ns, "-o", "yaml").out)
    assert ydata["items"][1]["state"] == "suspended-by-other"
    names = cli("status", "-n", ns, "-o", "name").out.split()
    assert names == ["helmrelease.helm.toolkit.fluxcd.io/demo",
                     "helmrelease.helm.toolkit.fluxcd.io/paused"]


def test_status_all_namespaces_puts_namespace_first(cli, cluster, ns):
    stuck_release(cluster, ns)
    res = cli("status", "-A")
    assert res.code == 0
    assert res.out.splitlines()[0].startswith("NAMESPACE")
    assert any(l.split()[:3] == [ns, "demo", "stuck"] for l in res.out.splitlines())


def test_status_with_nothing_to_show_says_so_on_stderr(cli, ns):
    res = cli("status", "-n", ns)
    assert res.code == 0 and res.out == ""
    assert res.err.strip() == f"No resources found in {ns} namespace."


def test_status_of_a_namespace_of_healthy_releases_is_not_no_resources(cli, cluster, ns):
    cluster.create_hr(ns, "a")
    cluster.create_hr(ns, "b")
    res = cli("status", "-n", ns)
    assert res.code == 0 and res.out == ""
    assert res.err == f"2 HelmReleases in {ns} namespace, none needs attention.\n"
    named = cli("status", "-n", ns, "a", "--no-headers")
    assert named.code == 0 and named.out.split()[:2] == ["a", "healthy"]


def test_status_unknown_release_is_a_not_found_error(cli, ns):
    res = cli("status", "-n", ns, "nope")
    assert res.code == 1
    assert 'helmreleases.helm.toolkit.fluxcd.io "nope" not found' in res.err


# -- recover ------------------------------------------------------------------------------

def test_recover_and_release_fence_json_documents_match_the_schema(cli, cluster, ns):
    stuck_release(cluster, ns)
    for dry in ("client", "server"):
        doc = json.loads(cli("recover", "-n", ns, f"--dry-run={dry}", "-o", "json").out)
        schema().validate(doc)
        assert doc["dryRun"] == dry and doc["kind"] == "RecoveryResultList"
        assert doc["items"][0]["metadata"] == {"name": "demo", "namespace": ns}
    cluster.create_hr(ns, "held")
    hold(cluster, ns, "held")
    for dry in ("client", "none"):
        res = cli("release-fence", "-n", ns, "held", f"--dry-run={dry}", "-o", "yaml")
        assert res.code == 0, res
        doc = yaml.safe_load(res.out)
        schema().validate(doc)
        assert [i["metadata"]["name"] for i in doc["items"]] == ["held"]
        assert doc["items"][0]["released"] is (dry == "none")


def test_recover_dry_run_client_prints_the_plan_and_writes_nothing(cli, cluster, ns):
    stuck_release(cluster, ns)
    before = cluster.get(ns, "demo")["metadata"]["resourceVersion"]
    res = cli("recover", "-n", ns, "--dry-run=client")
    assert res.code == 0, res
    assert "helmrelease.helm.toolkit.fluxcd.io/demo would recover (dry run)" in res.out
    assert res.out.splitlines()[-1] == ("would recover 1 of 1 stuck HelmReleases, 0 deferred, "
                                        "0 skipped, 0 failed (dry run)")
    assert "delete Secret" in res.out and "sh.helm.release.v1.demo.v2" in res.out
    assert cluster.get(ns, "demo")["metadata"]["resourceVersion"] == before
    assert len(cluster.secret_names(ns, "demo")) == 2


def test_recover_dry_run_server_sends_dry_run_writes(cli, cluster, ns):
    stuck_release(cluster, ns)
    res = cli("recover", "-n", ns, "--dry-run=server")
    # every write was admitted by the apiserver with dryRun=All, none persisted
    assert res.code == 0, res
    assert res.out.splitlines() == [
        "helmrelease.helm.toolkit.fluxcd.io/demo recovered: deleted revision 2 (uninstalling) "
        "of release demo; helm-controller will reconcile it again (server dry run)",
        "would recover 1 of 1 stuck HelmReleases, 0 deferred, 0 skipped, 0 failed "
        "(server dry run)"]
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE not in hr["metadata"]["finalizers"]
    assert C.PROCESSED_ANNOTATION not in (hr["metadata"].get("annotations") or {})
    assert len(cluster.secret_names(ns, "demo")) == 2


def test_recover_all_namespaces_with_concurrency(cli, cluster):
    namespaces = [cluster.namespace() for _ in range(3)]
    sims = [SimulatedHelmController(cluster, n) for n in namespaces]
    for n in namespaces:
        stuck_release(cluster, n, labels={"batch": ns_batch(namespaces)})
    for s in sims:
        s.__enter__()
    try:
        res = cli("recover", "-l", f"batch={ns_batch(namespaces)}", "-A", "--concurrency", "3")
    finally:
        for s in sims:
            s.__exit__()
    assert res.code == 0, res
    for n in namespaces:
        assert f"-n {n} helmrelease.helm.toolkit.fluxcd.io/demo recovered" in res.out
        assert cluster.secret_names(n, "demo") == ["sh.helm.release.v1.demo.v1"]


def ns_batch(namespaces):
    return namespaces[0]


def test_recover_reports_why_nothing_was_done_and_exits_1(cli, cluster, ns):
    stuck_release(cluster, ns, revisions=[(1, "superseded"), (2, "failed")])
    res = cli("recover", "-n", ns)
    assert res.code == 1, res
    assert "demo skipped" in res.out and "failed" in res.out
    assert "recovered 0 of 1 stuck HelmReleases, 0 deferred, 1 skipped, 0 failed" in res.out


# -- resume-owned ---------------------------------------------------------------------------

def test_resume_owned_lifts_only_our_suspensions(cli, cluster, ns):
    cluster.create_hr(ns, "ours")
    hold(cluster, ns, "ours")
    cluster.create_hr(ns, "theirs")
    cluster.suspend(ns, "theirs", True, manager="operator")
    cluster.create_hr(ns, "csa")
    cluster.suspend(ns, "csa", True, manager=C.CLIENT_SIDE_MANAGER)
    res = cli("resume-owned", "-n", ns)
    assert res.code == 0, res
    assert "ours relinquished" in res.out
    assert "lifted 1 flux-plunger suspensions, 0 failed" in res.out
    ours = cluster.get(ns, "ours")
    assert ours["spec"].get("suspend") is None and C.FENCE not in ours["metadata"]["finalizers"]
    assert cluster.get(ns, "theirs")["spec"]["suspend"] is True
    assert cluster.get(ns, "csa")["spec"]["suspend"] is True


# -- release-fence ---------------------------------------------------------------------------

def test_release_fence_outcome_lines_and_exit_codes(cli, cluster, ns):
    # live, suspended by us alone: suspension lifted, fence removed
    cluster.create_hr(ns, "live")
    hold(cluster, ns, "live")
    # deleted, helm-controller already dropped its finalizer while it was suspended
    cluster.create_hr(ns, "orphan")
    hold(cluster, ns, "orphan")
    cluster.delete_hr(ns, "orphan")
    cluster.remove_finalizer(ns, "orphan", C.HELM_CONTROLLER_FINALIZER)
    # deleted, suspension co-owned by another manager: left, fence still removed
    cluster.create_hr(ns, "coowned")
    hold(cluster, ns, "coowned")
    cluster.apply({"apiVersion": C.HR_API_VERSION, "kind": C.HR_KIND,
                   "metadata": {"name": "coowned", "namespace": ns},
                   "spec": {"suspend": True}}, manager="operator")
    cluster.delete_hr(ns, "coowned")
    cluster.remove_finalizer(ns, "coowned", C.HELM_CONTROLLER_FINALIZER)
    res = cli("release-fence", "-n", ns)
    assert res.code == 0, res
    out = res.out
    assert "helmrelease.helm.toolkit.fluxcd.io/live uninstall fence released\n" in out
    assert ("helmrelease.helm.toolkit.fluxcd.io/orphan uninstall fence released without an "
            "uninstall") in out
    assert "helmrelease.helm.toolkit.fluxcd.io/coowned uninstall fence released without" in out
    assert "released 3 of 3 fenced HelmReleases, 2 without an uninstall" in out
    live = cluster.get(ns, "live")
    assert live["spec"]["suspend"] is False and C.FENCE not in live["metadata"]["finalizers"]
    assert cluster.get(ns, "orphan") is None and cluster.get(ns, "coowned") is None
    again = cli("release-fence", "-n", ns)
    assert again.code == 0 and "released 0 of 0 fenced HelmReleases" in again.out


def test_release_fence_without_patch_permission_is_not_released_and_exits_1(plane, cluster, ns):
    cluster.create_hr(ns)
    hold(cluster, ns)
    # it may read the Leases of the release's namespace (the fallback of issue 36): with no
    # Lease readable at all, release-fence would refuse before it tried to write
    ro = service_account_kubeconfig(plane, "readonly", namespace=ns, namespace_rules={ns: [
        {"apiGroups": ["helm.toolkit.fluxcd.io"], "resources": ["helmreleases"],
         "verbs": ["get", "list"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}]})
    from tests.conftest import run_cli
    res = run_cli("release-fence", "-n", ns, "--retry-window=1s", kubeconfig=ro)
    assert res.code == 1, res
    assert "helmrelease.helm.toolkit.fluxcd.io/demo NOT released: " in res.err
    assert "forbidden" in res.err.lower()
    assert "released 0 of 1 fenced HelmReleases" in res.out
    assert C.FENCE in cluster.get(ns, "demo")["metadata"]["finalizers"]


def test_release_fence_wait_uninstall_lets_helm_controller_finish_first(cli, cluster, ns):
    cluster.create_hr(ns)
    cluster.storage(ns, "demo", [(1, "deployed")])
    hold(cluster, ns)
    cluster.delete_hr(ns, "demo")
    with SimulatedHelmController(cluster, ns) as sim:
        res = cli("release-fence", "-n", ns, "--wait-uninstall", "--timeout=30s")
    assert res.code == 0, res
    # however helm-controller first saw the delete, the fence made it uninstall
    assert sim.uninstalled == ["demo"]
    assert cluster.get(ns, "demo") is None
    assert cluster.secret_names(ns, "demo") == []


# -- least privilege -----------------------------------------------------------------------

def test_verbs_under_exactly_the_rbac_they_need(plane, cluster, ns):
    from tests.conftest import run_cli
    kc = service_account_kubeconfig(plane, "cli", namespace=ns, cluster_rules=CLI_RULES)
    stuck_release(cluster, ns)
    with SimulatedHelmController(cluster, ns):
        st = run_cli("status", "-n", ns, kubeconfig=kc)
        assert st.code == 0 and "stuck" in st.out, st
        rec = run_cli("recover", "-n", ns, kubeconfig=kc)
        assert rec.code == 0 and "demo recovered" in rec.out, rec
    cluster.create_hr(ns, "held")
    hold(cluster, ns, "held")
    ro = run_cli("resume-owned", "-n", ns, kubeconfig=kc)
    assert ro.code == 0 and "held relinquished" in ro.out, ro
    hold(cluster, ns, "held")
    rf = run_cli("release-fence", "-n", ns, kubeconfig=kc)
    assert rf.code == 0 and "released 1 of 1" in rf.out, rf
    for r in (st, rec, ro, rf):
        assert "forbidden" not in (r.out + r.err).lower()


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (("status", "-A", "demo"), "cannot be retrieved by name across all namespaces"),
    (("status", "-l", "a=b", "demo"), "name cannot be provided when a selector is specified"),
    (("status", "-o", "xml"), "Invalid value for '-o'"),
    (("recover", "--concurrency", "0"), "Invalid value for '--concurrency'"),
    (("recover", "--request-timeout", "soon"), "invalid duration"),
    (("frobnicate",), "No such command"),
])
def test_usage_errors_exit_2_with_one_error_line(cli, args, message):
    res = cli(*args)
    assert res.code == 2, res
    first = res.err.splitlines()[0]
    assert first.startswith("error: ") and message in first


def test_malformed_kubeconfig_is_one_clear_line(tmp_path):
    from tests.conftest import run_cli
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text("apiVersion: v1\nclusters: [: nope\n")
    res = run_cli("status", kubeconfig=bad)
    assert res.code == 1
    assert res.err.startswith("error: ") and len(res.err.strip().splitlines()) == 1, res


def test_missing_kubeconfig_file(tmp_path):
    from tests.conftest import run_cli
    res = run_cli("status", "--kubeconfig", str(tmp_path / "none"))
    assert res.code == 1 and res.err.startswith("error: stat ") and "no such file" in res.err


def test_unknown_context(plane):
    from tests.conftest import run_cli
    res = run_cli("status", "--context", "nope", kubeconfig=plane.kubeconfig)
    assert res.code == 1 and res.err.startswith("error: ") and "nope" in res.err, res


def test_missing_permission_is_one_forbidden_line(plane, ns):
    from tests.conftest import run_cli
    kc = service_account_kubeconfig(plane, "nobody", namespace=ns)
    res = run_cli("status", "-n", ns, kubeconfig=kc)
    assert res.code == 1
    assert res.err.startswith("error: Forbidden: ") and len(res.err.strip().splitlines()) == 1


def test_unreachable_apiserver_is_one_line(plane, tmp_path):
    from tests.conftest import run_cli
    from testplane.plane import free_port
    cfg = yaml.safe_load(plane.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    kc = tmp_path / "down.kubeconfig"
    kc.write_text(yaml.safe_dump(cfg))
    res = run_cli("status", "-A", "--request-timeout=5s", kubeconfig=kc)
    assert res.code == 1
    assert res.err.startswith("error: cannot reach the Kubernetes API") and \
        len(res.err.strip().splitlines()) == 1, res


def test_recover_again_before_helm_controller_retried_is_not_a_failure(cli, cluster, ns):
    stuck_release(cluster, ns, revisions=[(1, "uninstalling"), (2, "uninstalling")])
    with SimulatedHelmController(cluster, ns):
        first = cli("recover", "-n", ns)
        assert first.code == 0 and "demo recovered" in first.out, first
        second = cli("recover", "-n", ns)
    assert second.code == 0, second
    assert "demo awaiting-retry" in second.out
    assert "1 recovered earlier, awaiting helm-controller's retry" in second.out
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]   # not deleted


def test_recover_again_with_a_healthy_older_revision_awaits_the_retry(cli, cluster, ns):
    stuck_release(cluster, ns)          # v1 superseded, v2 uninstalling
    with SimulatedHelmController(cluster, ns):
        assert cli("recover", "-n", ns).code == 0
    again = cli("recover", "-n", ns)
    assert again.code == 0 and "demo awaiting-retry" in again.out, again


def test_release_fence_dry_run_server_changes_nothing(cli, cluster, ns):
    cluster.create_hr(ns)
    hold(cluster, ns)
    res = cli("release-fence", "-n", ns, "--dry-run=server", "--wait-uninstall")
    assert res.code == 0, res
    assert res.out.splitlines()[-1] == ("would have released 1 of 1 fenced HelmReleases, "
                                        "0 without an uninstall (server dry run)")
    assert res.out.splitlines()[0].endswith(" (server dry run)")
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is True and C.FENCE in hr["metadata"]["finalizers"]


def test_release_fence_wait_reports_releases_it_released_while_waiting(cli, cluster, ns):
    cluster.create_hr(ns)
    hold(cluster, ns, suspend=False)
    cluster.suspend(ns, "demo", True, manager="operator")
    cluster.delete_hr(ns, "demo")
    cluster.remove_finalizer(ns, "demo", C.HELM_CONTROLLER_FINALIZER)
    res = cli("release-fence", "-n", ns, "--wait-uninstall", "--timeout=20s")
    assert res.code == 0, res
    assert "helmrelease.helm.toolkit.fluxcd.io/demo uninstall fence released without an uninstall" \
        in res.out
    assert "released 1 of 1 fenced HelmReleases, 1 without an uninstall" in res.out
    assert cluster.get(ns, "demo") is None


def test_release_fence_counts_a_foreign_suspension_with_helm_controllers_finalizer_as_unhandled(
        cli, cluster, ns):
    """Deleted, suspended by another manager, helm-controller's finalizer still there: once
    our fence goes helm-controller drops its finalizer without an uninstall."""
    cluster.create_hr(ns)
    hold(cluster, ns, suspend=False)
    cluster.suspend(ns, "demo", True, manager="operator")
    cluster.delete_hr(ns, "demo")
    assert C.HELM_CONTROLLER_FINALIZER in cluster.get(ns, "demo")["metadata"]["finalizers"]
    res = cli("release-fence", "-n", ns)
    assert res.code == 0, res
    assert "helmrelease.helm.toolkit.fluxcd.io/demo uninstall fence released without an uninstall" \
        in res.out
    assert "released 1 of 1 fenced HelmReleases, 1 without an uninstall" in res.out
    hr = cluster.get(ns, "demo")
    assert C.FENCE not in hr["metadata"]["finalizers"] and hr["spec"]["suspend"] is True


# -- kubectl's connection flags ------------------------------------------------------------

def _token_of(kubeconfig) -> str:
    return yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]


def test_token_server_and_certificate_authority_without_any_kubeconfig(plane, ns, tmp_path):
    from tests.conftest import run_cli
    kc = service_account_kubeconfig(plane, "bytoken", namespace=ns, cluster_rules=CLI_RULES)
    token = _token_of(kc)
    env = {"HOME": str(tmp_path)}            # no ~/.kube/config, no KUBECONFIG
    base = ("status", "-n", ns, "--server", plane.server, "--token", token)
    ok = run_cli(*base, "--certificate-authority", str(plane.files["serving_ca"]), env=env)
    assert ok.code == 0, ok
    assert ok.err == f"No resources found in {ns} namespace.\n"
    insecure = run_cli(*base, "--insecure-skip-tls-verify", env=env)
    assert insecure.code == 0, insecure
    untrusted = run_cli(*base, env=env)      # the serving CA is not in the system's bundle
    assert untrusted.code == 1 and untrusted.err.startswith("error: cannot reach the Kubernetes API")
    mark = plane.audit_mark()
    assert run_cli(*base, "--insecure-skip-tls-verify", env=env).code == 0
    users = {e["user"]["username"] for e in plane.audit_events(mark, user_agent="kubectl-flux-plunger")}
    assert users == {f"system:serviceaccount:{ns}:bytoken"}


def test_user_and_cluster_pick_kubeconfig_entries(plane, ns, tmp_path):
    from tests.conftest import run_cli
    kc = service_account_kubeconfig(plane, "picked", namespace=ns, cluster_rules=CLI_RULES)
    admin = yaml.safe_load(plane.kubeconfig.read_text())
    cfg = copy.deepcopy(admin)
    cfg["users"].append({"name": "sa", "user": {"token": _token_of(kc)}})
    cfg["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}})
    multi = tmp_path / "multi.kubeconfig"
    multi.write_text(yaml.safe_dump(cfg))
    mark = plane.audit_mark()
    res = run_cli("status", "-n", ns, "--user", "sa", kubeconfig=multi)
    assert res.code == 0, res
    users = {e["user"]["username"] for e in plane.audit_events(mark, user_agent="kubectl-flux-plunger")}
    assert users == {f"system:serviceaccount:{ns}:picked"}
    down = run_cli("status", "-n", ns, "--cluster", "nowhere", "--request-timeout=3s",
                   kubeconfig=multi)
    assert down.code == 1 and "https://127.0.0.1:9" in down.err, down
    for flag, name, what in (("--user", "nobody", "auth info"), ("--cluster", "none", "cluster")):
        bad = run_cli("status", flag, name, kubeconfig=multi)
        assert bad.code == 1 and bad.err == f'error: {what} "{name}" does not exist\n', bad


def test_client_certificate_and_tls_server_name(plane, ns, tmp_path):
    from tests.conftest import run_cli
    f = plane.files
    env = {"HOME": str(tmp_path)}            # no kubeconfig at all
    base = ("status", "-n", ns, "--server", plane.server, "--certificate-authority",
            str(f["serving_ca"]), "--client-certificate", str(f["admin_cert"]),
            "--client-key", str(f["admin_key"]), "--request-timeout=5s")
    ok = run_cli(*base, "--tls-server-name", "localhost", env=env)
    assert ok.code == 0, ok
    wrong = run_cli(*base, "--tls-server-name", "elsewhere.example", env=env)
    assert wrong.code == 1 and "elsewhere.example" in wrong.err, wrong


def test_as_and_as_group_impersonate(cli, plane, ns):
    mark = plane.audit_mark()
    res = cli("status", "-n", ns, "--as", "jane", "--as-group", "ops", "--as-group", "devs",
              "--as-uid", "1234")
    # jane has no rights: the apiserver answers as it would answer jane
    assert res.code == 1 and res.err.startswith("error: Forbidden: "), res
    assert 'User "jane"' in res.err
    events = plane.audit_events(mark, user_agent="kubectl-flux-plunger")
    assert events and all(e.get("impersonatedUser", {}).get("username") == "jane"
                          and e["impersonatedUser"].get("groups", [])[:2] == ["ops", "devs"]
                          and e["impersonatedUser"].get("uid") == "1234"
                          for e in events), [(e.get("requestURI"), e.get("user"),
                                              e.get("impersonatedUser")) for e in events]


# -- status --watch ------------------------------------------------------------------------

def test_status_watch_prints_each_change_without_a_header_again(plane, cluster, ns):
    import os
    import subprocess
    import sys
    import time

    stuck_release(cluster, ns)
    env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig))
    proc = subprocess.Popen([sys.executable, "-m", "kubectl_flux_plunger", "status", "-n", ns,
                             "--watch"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        lines = []
        deadline = time.monotonic() + 60

        def read_until(pred):
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line.rstrip("\n"))
                if pred(lines[-1]):
                    return
            raise AssertionError(f"no such line in {lines!r}")

        read_until(lambda l: l.split()[:2] == ["demo", "stuck"])
        assert lines[0].split()[0] == "NAME"
        cluster.create_hr(ns, "later")
        cluster.storage(ns, "later", [(1, "superseded"), (2, "uninstalling")])
        cluster.make_stuck(ns, "later")
        read_until(lambda l: l.split()[:2] == ["later", "stuck"])
        assert sum(l.split()[0] == "NAME" for l in lines) == 1
    finally:
        proc.terminate()
        proc.wait(30)


# -- completion through kubectl's plugin completion ------------------------------------------

def test_kubectl_completes_namespaces_and_release_names_from_the_cluster(plane, cluster, tmp_path):
    """`kubectl __complete flux-plunger status -n <TAB>` runs kubectl_complete-flux_plunger
    (krew/, on PATH next to the pip-installed kubectl-flux_plunger)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    venv = Path(sys.executable).parent
    (bin_dir / "kubectl-flux_plunger").symlink_to(venv / "kubectl-flux_plunger")
    helper = Path(__file__).resolve().parents[2] / "krew" / "kubectl_complete-flux_plunger"
    (bin_dir / "kubectl_complete-flux_plunger").symlink_to(helper)
    ns = cluster.namespace("kcompl")
    cluster.create_hr(ns, "alpha")
    cluster.create_hr(ns, "beta")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               KUBECONFIG=str(plane.kubeconfig))

    def complete(*words):
        p = subprocess.run(["kubectl", "__complete", "flux-plunger", *words],
                           capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout.splitlines()

    out = complete("status", "-n", ns[:-1])
    assert ns in out[:-1] and out[-1] == ":4", out
    assert complete("recover", "-n", ns, "") == ["alpha", "beta", ":4"]
    assert complete("recover", "-n", ns, "b") == ["beta", ":4"]


def _state_error(cluster, ns, name, history_version):
    """Ready=False StateError quoting 'uninstalling', with ``status.history`` naming
    ``history_version`` (``uninstalling``), as helm-controller v1.5+ leaves it (a v2
    snapshot: one without apiVersion is verified against nothing)."""
    gen = cluster.get(ns, name)["metadata"]["generation"]
    return cluster.set_status(ns, name, {
        "lastAttemptedGeneration": gen, "observedGeneration": gen,
        "history": [{"apiVersion": "v2", "name": name, "namespace": ns, "version": history_version,
                     "status": "uninstalling", "digest": "sha256:0", "chartName": "demo",
                     "chartVersion": "0.1.0", "configDigest": "sha256:1",
                     "firstDeployed": "2026-12-01T00:00:00Z",
                     "lastDeployed": "2026-12-01T00:00:00Z"}],
        "conditions": [{"type": "Ready", "status": "False", "reason": "StateError",
                        "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": gen,
                        "message": "Could not determine release state: unable to determine "
                                   "state for release with status 'uninstalling'"}]})


def test_status_lists_failing_releases_and_writes_nothing_to_them(cli, cluster, ns):
    """Issue 47: a release Ready=False for a reason flux-plunger does not repair is listed
    as ``failing`` with helm-controller's reason and counted, never "none needs attention";
    ``recover`` leaves it exactly as it was."""
    cluster.create_hr(ns, "healthy")
    cluster.create_hr(ns, "broken")
    gen = cluster.get(ns, "broken")["metadata"]["generation"]
    before = cluster.set_status(ns, "broken", {"lastAttemptedGeneration": gen, "conditions": [
        {"type": "Ready", "status": "False", "reason": "InstallFailed", "observedGeneration": gen,
         "lastTransitionTime": "2026-12-01T00:00:00Z",
         "message": "Helm install failed for release x/broken: values don't meet the schema"}]})
    res = cli("status", "-n", ns, "-o", "wide")
    assert res.code == 0, res
    (line,) = res.out.splitlines()[1:]
    assert line.split()[:2] == ["broken", "failing"], res.out
    assert "helm-controller reports InstallFailed; flux-plunger does not repair it" in line
    assert res.err.splitlines()[-1] == f"2 HelmReleases in {ns} namespace, 1 listed: 1 failing.", res.err
    doc = json.loads(cli("status", "-n", ns, "-o", "json").out)
    schema().validate(doc)
    (item,) = doc["items"]
    assert (item["state"], item["stuck"], item["face"], item["readyReason"]) == \
        ("failing", False, None, "InstallFailed"), item
    rec = cli("recover", "-n", ns)
    assert rec.code == 0 and "recovered 0 of 0 stuck" in rec.out + rec.err, rec
    assert cluster.get(ns, "broken")["metadata"]["resourceVersion"] == \
        before["metadata"]["resourceVersion"]


def test_a_state_error_recorded_by_history_is_recovered_and_a_stale_one_is_not(cli, cluster, ns):
    """The StateError face on storage as helm-controller's failed remediation leaves it: v1
    deployed, v2 uninstalling.  With the history naming v2 the recovery deletes v2 (the
    deployed v1 does not refuse it); with the history naming v1 the message is older than
    the storage — listed stuck, nothing deleted, nothing suspended."""
    for name, recorded in (("fresh", 2), ("stale", 1)):
        cluster.create_hr(ns, name)
        cluster.storage(ns, name, [(1, "deployed"), (2, "uninstalling")])
        _state_error(cluster, ns, name, recorded)
    doc = json.loads(cli("status", "-n", ns, "-o", "json").out)
    schema().validate(doc)
    assert {i["metadata"]["name"]: (i["state"], i["face"]) for i in doc["items"]} == \
        {"fresh": ("stuck", "state-error"), "stale": ("stuck", "state-error")}, doc
    with SimulatedHelmController(cluster, ns):
        rec = cli("recover", "-n", ns, "stale")
        assert rec.code == 1 and "stale skipped" in rec.out and "not newest revision 2" in rec.out, rec
        assert cluster.secret_names(ns, "stale") == ["sh.helm.release.v1.stale.v1",
                                                     "sh.helm.release.v1.stale.v2"]
        assert cluster.get(ns, "stale")["spec"].get("suspend") is None
        rec = cli("recover", "-n", ns, "fresh")
        assert rec.code == 0 and "fresh recovered: deleted revision 2 (uninstalling)" in rec.out, rec
    assert cluster.secret_names(ns, "fresh") == ["sh.helm.release.v1.fresh.v1"]
    hr = cluster.get(ns, "fresh")
    assert hr["spec"].get("suspend") is None and C.FENCE not in hr["metadata"]["finalizers"]
