"""controller/: the kustomize base and the Helm chart against the real apiserver, and the
shipped RBAC exercised by the real commands.

* `kubectl kustomize controller/kustomize` and `helm template controller/chart/flux-plunger`
  (a real Helm v4 built from helm.sh/helm/v4) are applied with `kubectl apply --server-side`
  and read back (there is no kubelet or controller-manager: Deployments and Jobs never run
  pods; the apiserver's validation and defaulting are what is exercised).
* Both renderings carry the same controller objects; the chart refuses shutdown grace
  periods the drain cannot work with.
* The exact verbs per resource of every shipped ClusterRole/Role are pinned.
* `serve`, `release-fence` and the hook's `release-fence --stop-deployment` run with ServiceAccount
  tokens bound to exactly the rules parsed from the rendered YAML: a full recovery and a
  delete during recovery (simulated helm-controller steps) with zero Forbidden, and the
  clean-up script reporting release-fence's own lines and exit codes.
"""
from __future__ import annotations

import copy
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import ownership, writes
from kubectl_flux_plunger.kube import JSON, KubeError
from testplane import binaries
from testplane.cluster import SimulatedHelmController, eventually, unique
from testplane.plane import free_port
from testplane.rbac import service_account_kubeconfig

from ..conftest import no_watch_lists_lines

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE_DIR = ROOT / "controller" / "kustomize"
CHART_DIR = ROOT / "controller" / "chart" / "flux-plunger"
VENV_BIN = str(Path(sys.executable).parent)

SERVE_ARGS = ["serve", "--leader-elect", "--shutdown-drain-timeout=65s",
              "--termination-grace-period=90", "--metrics-bind-address=:8080",
              "--health-probe-bind-address=:8081", "--log-format=json"]

# (apiGroup, resource) -> verbs, exactly: what the code sends (the audit log proves it in
# tests/apiserver/test_rbac_audit.py)
CONTROLLER_CLUSTER_RULES = {
    ("helm.toolkit.fluxcd.io", "helmreleases"): ["get", "list", "patch", "watch"],
    ("", "secrets"): ["delete", "get", "list"],
    ("", "events"): ["create", "get", "list", "patch"],
    # serve's scope overlap check lists every Lease of the cluster (issue 36)
    ("coordination.k8s.io", "leases"): ["list"],
    # may the tenant identity helm-controller acts as delete the storage? (issue 55)
    ("authorization.k8s.io", "subjectaccessreviews"): ["create"],
}
LEASE_RULES = {("coordination.k8s.io", "leases"): ["create", "get", "list", "update"]}
HOOK_CLUSTER_RULES = {("helm.toolkit.fluxcd.io", "helmreleases"): ["get", "list", "patch"],
                      ("coordination.k8s.io", "leases"): ["list"]}
HOOK_ROLE_RULES = {("apps", "deployments"): ["get"], ("apps", "deployments/scale"): ["patch"],
                   ("", "pods"): ["list"], ("coordination.k8s.io", "leases"): ["list"]}


# -- rendering ------------------------------------------------------------------------

def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def render_kustomize() -> list[dict]:
    proc = subprocess.run(["kubectl", "kustomize", str(KUSTOMIZE_DIR)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return _docs(proc.stdout)


@pytest.fixture(scope="module")
def helm() -> Path:
    return binaries.ensure("helm")


HELM_ENV = dict(HELM_CACHE_HOME="/tmp/flux-plunger-helm-cache",
                HELM_CONFIG_HOME="/tmp/flux-plunger-helm-config",
                HELM_DATA_HOME="/tmp/flux-plunger-helm-data")


def helm_template(helm: Path, namespace: str = "flux-plunger", *sets: str,
                  release: str = "flux-plunger", extra: tuple[str, ...] = ()
                  ) -> subprocess.CompletedProcess:
    argv = [str(helm), "template", release, str(CHART_DIR), "--namespace", namespace, *extra]
    for s in sets:
        argv += ["--set-json", s]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **HELM_ENV))


def helm_run(helm: Path, verb: str, *args: str, chart_last: bool = False
             ) -> subprocess.CompletedProcess:
    """`helm VERB CHART ARGS...` (``chart_last``: `helm VERB ARGS... CHART`)."""
    argv = [str(helm), verb, *args, str(CHART_DIR)] if chart_last else \
        [str(helm), verb, str(CHART_DIR), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **HELM_ENV))


def render_chart(helm: Path, namespace: str = "flux-plunger", *sets: str) -> list[dict]:
    proc = helm_template(helm, namespace, *sets)
    assert proc.returncode == 0, proc.stderr
    return _docs(proc.stdout)


def find(docs: list[dict], kind: str, name: str) -> dict:
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} found in {[(d['kind'], d['metadata']['name']) for d in docs]}"
    return hits[0]


def cluster_name(namespace: str = "flux-plunger", name: str = "flux-plunger") -> str:
    """What the chart names the objects not confined to the release namespace (ClusterRole,
    ClusterRoleBinding; the Role of watchNamespace): ``<namespace>-<name>``, unique per
    install.  The kustomize base (namespace flux-plunger) names them the same way."""
    return f"{namespace}-{name}"


def verbs_by_resource(role: dict) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for rule in role["rules"]:
        for group in rule.get("apiGroups", []):
            for res in rule.get("resources", []):
                out.setdefault((group, res), [])
                out[(group, res)] = sorted(set(out[(group, res)]) | set(rule["verbs"]))
    return out


def is_hook(doc: dict) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


# -- applying -------------------------------------------------------------------------

def kubectl(plane, *args: str, stdin: str | None = None, kubeconfig=None,
            check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig or plane.kubeconfig))
    proc = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=120)
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc


def apply(plane, docs: list[dict], manager: str) -> str:
    text = yaml.safe_dump_all(docs)
    return kubectl(plane, "apply", "--server-side", "--force-conflicts",
                   f"--field-manager={manager}", "-f", "-", stdin=text).stdout


def live(plane, doc: dict) -> dict:
    md = doc["metadata"]
    args = ["get", doc["kind"].lower() + "." + (doc["apiVersion"].split("/")[0]
                                                 if "/" in doc["apiVersion"] else ""),
            md["name"], "-o", "yaml"]
    args[1] = args[1].rstrip(".")
    if md.get("namespace"):
        args += ["-n", md["namespace"]]
    return yaml.safe_load(kubectl(plane, *args).stdout)


def assert_controller_deployment(dep: dict, *, grace: int = 90):
    spec = dep["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace
    assert pod["serviceAccountName"] == "flux-plunger"
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["runAsNonRoot"] is True
    (c,) = pod["containers"]
    assert c["args"][:5] == ["serve", "--leader-elect", f"--shutdown-drain-timeout={grace - 25}s",
                             f"--termination-grace-period={grace}", "--metrics-bind-address=:8080"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert c["livenessProbe"]["httpGet"]["port"] == "health"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


# -- the renderings -------------------------------------------------------------------

def test_kustomize_base_applies_to_the_apiserver(plane):
    docs = render_kustomize()
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted([
        ("Namespace", "flux-plunger"), ("ServiceAccount", "flux-plunger"),
        ("ClusterRole", cluster_name()), ("ClusterRoleBinding", cluster_name()),
        ("Role", "flux-plunger-leader-election"), ("RoleBinding", "flux-plunger-leader-election"),
        ("Deployment", "flux-plunger"), ("Service", "flux-plunger")])
    out = apply(plane, docs, "test-kustomize")
    assert out.count("serverside-applied") == len(docs), out
    for doc in docs:
        got = live(plane, doc)
        assert got["metadata"]["uid"]
    dep = live(plane, find(docs, "Deployment", "flux-plunger"))
    assert_controller_deployment(dep)
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == SERVE_ARGS
    crb = live(plane, find(docs, "ClusterRoleBinding", cluster_name()))
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "flux-plunger",
                                "namespace": "flux-plunger"}]
    svc = live(plane, find(docs, "Service", "flux-plunger"))
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8080, "metrics")]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_chart_renders_with_real_helm_and_applies(plane, helm, cluster):
    ns = cluster.namespace("chart")
    docs = render_chart(helm, ns)
    out = apply(plane, docs, "test-chart")
    assert out.count("serverside-applied") == len(docs), out
    for doc in docs:
        assert live(plane, doc)["metadata"]["uid"]
    dep = live(plane, find(docs, "Deployment", "flux-plunger"))
    assert_controller_deployment(dep)
    assert dep["metadata"]["namespace"] == ns
    job = live(plane, find(docs, "Job", "flux-plunger-uninstall-cleanup"))
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"][2:5] == [f"--stop-deployment={ns}/flux-plunger",
                                                 f"--lease-namespace={ns}",
                                                 "--stop-timeout=100s"]
    # the pods waited for are the Deployment's (its selector), never the Job's own pod
    job_labels = job["spec"]["template"]["metadata"]["labels"]
    selector = dep["spec"]["selector"]["matchLabels"]
    assert not all(job_labels.get(k) == v for k, v in selector.items())
    assert pod["containers"][0]["image"] == dep["spec"]["template"]["spec"]["containers"][0]["image"]


def test_the_same_release_in_two_namespaces_never_shares_an_object(plane, helm, cluster):
    """Issue 28: the release name flux-plunger installed in two namespaces (and two installs
    watching one namespace) renders no cluster-scoped name — or any name in a shared
    namespace — twice; both renderings apply side by side, each binding its own
    ServiceAccounts."""
    for sets in ((), ('{"watchNamespace": "%s"}' % cluster.namespace("watched"),)):
        one, two = cluster.namespace("twice"), cluster.namespace("twice")
        docs = {ns: render_chart(helm, ns, *sets) for ns in (one, two)}
        keys = {ns: {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
                     for d in ds} for ns, ds in docs.items()}
        assert not keys[one] & keys[two], keys[one] & keys[two]
        for ns, ds in docs.items():
            for d in ds:
                if d["kind"] in ("ClusterRole", "ClusterRoleBinding") or (
                        d["kind"] in ("Role", "RoleBinding")
                        and d["metadata"].get("namespace") != ns):
                    assert d["metadata"]["name"].startswith(f"{ns}-flux-plunger"), d["metadata"]
                if d["kind"] in ("ClusterRoleBinding", "RoleBinding"):
                    assert {s["namespace"] for s in d["subjects"]} == {ns}
                    assert d["roleRef"]["name"] in {x["metadata"]["name"] for x in ds
                                                    if x["kind"] == d["roleRef"]["kind"]}
        both = [d for ds in docs.values() for d in ds]
        out = apply(plane, both, "test-twice")
        assert out.count("serverside-applied") == len(both), out
    # kustomize: the base and the shard overlay follow the chart's naming
    kz = {(d["kind"], d["metadata"]["name"]) for d in render_kustomize()}
    assert ("ClusterRole", cluster_name()) in kz and ("ClusterRoleBinding", cluster_name()) in kz


def test_chart_from_an_oci_repository_renders_labels_the_apiserver_accepts(plane, helm, cluster,
                                                                         tmp_path):
    """helm-controller installs a chartRef'd OCIRepository's chart with the digest as build
    metadata in its version (X.Y.Z+<12 hex>, issue 31): helm.sh/chart must not carry the "+",
    which no label value may hold (the real apiserver refuses the object otherwise)."""
    import shutil

    ns = cluster.namespace("chart-oci")
    chart = tmp_path / "flux-plunger"
    shutil.copytree(CHART_DIR, chart)
    meta = chart / "Chart.yaml"
    version = yaml.safe_load(meta.read_text())["version"]
    meta.write_text(re.sub(r"(?m)^version: .*$", f"version: {version}+73ef7b251b49", meta.read_text()))
    proc = subprocess.run([str(helm), "template", "flux-plunger", str(chart), "--namespace", ns],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, **HELM_ENV))
    assert proc.returncode == 0, proc.stderr
    docs = _docs(proc.stdout)
    assert {d["metadata"]["labels"]["helm.sh/chart"] for d in docs} == {
        f"flux-plunger-{version}_73ef7b251b49"}
    out = apply(plane, docs, "test-chart-oci")
    assert out.count("serverside-applied") == len(docs), out


def test_chart_and_kustomize_render_the_same_controller(helm):
    kz = {(d["kind"], d["metadata"]["name"]): d for d in render_kustomize()}
    ch = {(d["kind"], d["metadata"]["name"]): d for d in render_chart(helm)
          if not is_hook(d)}
    assert set(ch) == set(kz) - {("Namespace", "flux-plunger")}
    for key in ("ClusterRole", cluster_name()), ("Role", "flux-plunger-leader-election"):
        assert ch[key]["rules"] == kz[key]["rules"], key
    for key in ("ClusterRoleBinding", cluster_name()), ("RoleBinding", "flux-plunger-leader-election"):
        assert ch[key]["subjects"] == kz[key]["subjects"] and ch[key]["roleRef"] == kz[key]["roleRef"]

    def pod(d):
        p = copy.deepcopy(d["spec"]["template"]["spec"])
        p["containers"][0].pop("image")
        return p
    assert pod(ch[("Deployment", "flux-plunger")]) == pod(kz[("Deployment", "flux-plunger")])
    for field in ("replicas", "strategy", "selector"):
        assert ch[("Deployment", "flux-plunger")]["spec"][field] == \
            kz[("Deployment", "flux-plunger")]["spec"][field]
    assert ch[("Service", "flux-plunger")]["spec"] == kz[("Service", "flux-plunger")]["spec"]


@pytest.mark.parametrize("value, schema, template", [
    ("39", "minimum: got 39, want 40", "must be between 40 and 140"),
    ("141", "maximum: got 141, want 140", "must be between 40 and 140"),
    ("90.5", "got number, want integer", "must be a whole number of seconds"),
    ('"soon"', "got string, want integer", "must be a whole number"),
    ("true", "got boolean, want integer", "must be a whole number"),
])
def test_chart_refuses_a_grace_period_the_drain_cannot_use(helm, value, schema, template):
    """values.schema.json refuses it first; the template's own guard still holds when the
    schema is skipped (helm --skip-schema-validation)."""
    proc = helm_template(helm, "flux-plunger", f"shutdownGracePeriodSeconds={value}")
    assert proc.returncode == 1
    assert "at '/shutdownGracePeriodSeconds': " + schema in proc.stderr, proc.stderr
    skipped = helm_template(helm, "flux-plunger", f"shutdownGracePeriodSeconds={value}",
                            extra=("--skip-schema-validation",))
    assert skipped.returncode == 1
    assert template in skipped.stderr and "shutdownGracePeriodSeconds" in skipped.stderr


@pytest.mark.parametrize("value, message", [
    ('image.digest="sha256:abc"', "at '/image/digest'"),
    ('image.registry="ghcr.io/"', None),
    ('watchNamespace="Team_A"', "at '/watchNamespace'"),
    ('logLevel="verbose"', "at '/logLevel'"),
    ('uninstallCleanup.kubectlImage="x"', "additional properties 'kubectlImage' not allowed"),
    ('metrics.podMonitor.interval="soon"', "at '/metrics/podMonitor/interval'"),
    ('workers=0', "at '/workers'"),
    ('defaultServiceAccount="Tenant SA"', "at '/defaultServiceAccount'"),
    ('defaultServiceAccount="default"', None),
    ('maxFailedRecoveries=0', "at '/maxFailedRecoveries'"),
    ('recoveryBackoff="soon"', "at '/recoveryBackoff'"),
    ('recoveryBackoff="1m30s"', None),
])
def test_values_schema_is_enforced_by_helm_lint_and_template(helm, value, message):
    for verb in ("lint", "template"):
        proc = helm_run(helm, verb, "--set-json", value)
        if message is None:
            assert proc.returncode == 0, proc.stderr + proc.stdout
        else:
            assert proc.returncode != 0, (verb, proc.stdout)
            assert message in proc.stdout + proc.stderr, (verb, proc.stdout + proc.stderr)


def test_chart_lints_clean_and_prints_notes(helm):
    lint = helm_run(helm, "lint", "--strict")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    notes = helm_run(helm, "install", "flux-plunger", "--dry-run=client", "--namespace",
                     "flux-plunger", "--set-json", 'watchNamespace="team-a"', chart_last=True)
    assert notes.returncode == 0, notes.stderr
    text = notes.stdout.split("NOTES:", 1)[1]
    assert "watches HelmReleases in namespace team-a" in text
    assert "kubectl flux-plunger status -n team-a" in text
    assert "Uninstalling runs a pre-delete Job" in text


def test_default_service_account_mirrors_helm_controllers_flag(helm):
    args = lambda docs: find(docs, "Deployment", "flux-plunger")["spec"]["template"][  # noqa: E731
        "spec"]["containers"][0]["args"]
    assert not [a for a in args(render_chart(helm)) if "default-service-account" in a]
    locked = render_chart(helm, "flux-plunger", 'defaultServiceAccount="default"')
    assert "--default-service-account=default" in args(locked)
    notes = helm_run(helm, "install", "flux-plunger", "--dry-run=client", "--namespace",
                     "flux-plunger", "--set-json", 'defaultServiceAccount="default"',
                     chart_last=True)
    assert notes.returncode == 0, notes.stderr
    assert "as ServiceAccount default of its own namespace" in notes.stdout


def test_the_recovery_budget_values_reach_serves_flags(helm):
    """issue 57: maxFailedRecoveries and recoveryBackoff; unset, serve's defaults."""
    args = lambda docs: find(docs, "Deployment", "flux-plunger")["spec"]["template"][  # noqa: E731
        "spec"]["containers"][0]["args"]
    assert not [a for a in args(render_chart(helm)) if "recover" in a]
    set_ = render_chart(helm, "flux-plunger", "maxFailedRecoveries=5",
                        'recoveryBackoff="1m"')
    assert "--max-failed-recoveries=5" in args(set_)
    assert "--recovery-backoff=1m" in args(set_)


def test_image_value_with_registry_and_digest_and_metrics_options(helm):
    digest = "sha256:" + "a" * 64
    docs = render_chart(helm, "flux-plunger", 'image.registry="ghcr.io/cozystack"',
                        'image.tag="v9.9.9"', f'image.digest="{digest}"',
                        'metrics.podMonitor.enabled=true')
    dep = find(docs, "Deployment", "flux-plunger")
    image = f"ghcr.io/cozystack/kubectl-flux-plunger:v9.9.9@{digest}"
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == image
    job = find(docs, "Job", "flux-plunger-uninstall-cleanup")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == image
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": "8080",
                           "prometheus.io/path": "/metrics"}
    pm = find(docs, "PodMonitor", "flux-plunger")
    assert pm["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics",
                                                  "interval": "30s"}]
    plain = render_chart(helm)
    assert not [d for d in plain if d["kind"] == "PodMonitor"]
    off = find(render_chart(helm, "flux-plunger", "metrics.scrapeAnnotations=false"),
               "Deployment", "flux-plunger")
    assert "annotations" not in off["spec"]["template"]["metadata"]


@pytest.mark.parametrize("grace", [40, 90, 140])
def test_chart_derives_drain_and_hook_wait_from_the_grace_period(helm, grace):
    docs = render_chart(helm, "flux-plunger", f"shutdownGracePeriodSeconds={grace}")
    assert_controller_deployment(find(docs, "Deployment", "flux-plunger"), grace=grace)
    job = find(docs, "Job", "flux-plunger-uninstall-cleanup")
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["cleanup"] and "initContainers" not in pod
    hook = pod["containers"][0]
    # one image, one tool: the controller's image runs the plugin itself
    assert hook["image"] == find(docs, "Deployment", "flux-plunger")["spec"]["template"][
        "spec"]["containers"][0]["image"]
    assert hook["command"] == ["kubectl-flux_plunger"]
    assert hook["args"][:5] == ["release-fence", "--all-namespaces",
                                "--stop-deployment=flux-plunger/flux-plunger",
                                "--lease-namespace=flux-plunger",
                                f"--stop-timeout={grace + 10}s"]
    # the rest (retry window, global deadline): tests/apiserver/test_hook_deadline.py
    # serve itself accepts the derived values (stop 10s + drain + 5s margin fit the grace)
    from kubectl_flux_plunger.serve.options import ServeConfig
    cfg = ServeConfig(drain_timeout=grace - 25, stop_timeout=10, lease_duration=15,
                      renew_deadline=10, retry_period=2, termination_grace_period=grace,
                      resync_period=600, fence_recheck=60, fence_warn_after=600,
                      handshake_timeout=30, leader_elect=True)  # raises Invalid if refused
    assert cfg.timings_problem() is None


# -- exact RBAC -----------------------------------------------------------------------

def test_shipped_rbac_is_exactly_the_least_privilege_set(helm):
    kz = render_kustomize()
    ch = render_chart(helm)
    for docs in (kz, ch):
        assert verbs_by_resource(find(docs, "ClusterRole", cluster_name())) == CONTROLLER_CLUSTER_RULES
        assert verbs_by_resource(find(docs, "Role", "flux-plunger-leader-election")) == LEASE_RULES
        for rule in find(docs, "ClusterRole", cluster_name())["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
    hook_cr = find(ch, "ClusterRole", cluster_name(name="flux-plunger-uninstall-cleanup"))
    hook_role = find(ch, "Role", "flux-plunger-uninstall-cleanup-stop")
    assert verbs_by_resource(hook_cr) == HOOK_CLUSTER_RULES
    assert verbs_by_resource(hook_role) == HOOK_ROLE_RULES
    for rule in hook_role["rules"]:
        if rule["apiGroups"] == ["apps"]:
            assert rule["resourceNames"] == ["flux-plunger"]
    # nothing else is granted anywhere: every Role/ClusterRole is one of the above
    roles = sorted((d["kind"], d["metadata"]["name"]) for d in kz + ch
                   if d["kind"] in ("Role", "ClusterRole"))
    assert roles == sorted([("ClusterRole", cluster_name()), ("Role", "flux-plunger-leader-election")] * 2
                           + [("ClusterRole", cluster_name(name="flux-plunger-uninstall-cleanup")),
                              ("Role", "flux-plunger-uninstall-cleanup-stop")])


def test_watch_namespace_grants_a_role_in_that_namespace_only(helm):
    docs = render_chart(helm, "flux-plunger", '{"watchNamespace": "team-a"}')
    role = find(docs, "Role", cluster_name())
    assert role["metadata"]["namespace"] == "team-a"
    leases = ("coordination.k8s.io", "leases")
    reviews = ("authorization.k8s.io", "subjectaccessreviews")
    assert verbs_by_resource(role) == {k: v for k, v in CONTROLLER_CLUSTER_RULES.items()
                                       if k not in (leases, reviews)}
    binding = find(docs, "RoleBinding", cluster_name())
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": cluster_name()}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "flux-plunger",
                                    "namespace": "flux-plunger"}]
    # the cluster-wide grants left: the LIST of the Leases (every running flux-plunger,
    # wherever it leads), the SubjectAccessReview (cluster-scoped) and the LIST of every
    # HelmRelease (a claimant of the same release elsewhere), a ClusterRole of their own
    controller = {(d["kind"], d["metadata"]["name"]): d for d in docs
                  if d["kind"] in ("ClusterRole", "ClusterRoleBinding") and not is_hook(d)}
    assert sorted(controller) == [("ClusterRole", cluster_name() + "-leases"),
                                  ("ClusterRoleBinding", cluster_name() + "-leases")]
    assert verbs_by_resource(controller["ClusterRole", cluster_name() + "-leases"]) == {
        leases: ["list"], reviews: ["create"],
        ("helm.toolkit.fluxcd.io", "helmreleases"): ["list"]}   # every claimant
    # the ScopeOverlap Event on its own Lease, in the release namespace, is writable there
    lease_role = find(docs, "Role", "flux-plunger-leader-election")
    assert verbs_by_resource(lease_role) == {**LEASE_RULES,
                                             ("", "events"): ["create", "get", "patch"]}
    args = find(docs, "Deployment", "flux-plunger")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args


# -- the shipped RBAC, exercised ------------------------------------------------------

def _rules(doc: dict) -> list[dict]:
    return copy.deepcopy(doc["rules"])


def run_tool(*args, kubeconfig, env=None, timeout=120) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("KUBECONFIG", None)
    e.update({"KUBECONFIG": str(kubeconfig), "PATH": VENV_BIN + os.pathsep + e["PATH"]})
    e.update(env or {})
    return subprocess.run(list(args), capture_output=True, text=True, env=e, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _stuck(cluster, ns, name="demo"):
    cluster.create_hr(ns, name)
    cluster.storage(ns, name, [(1, "superseded"), (2, "uninstalling")])
    return cluster.make_stuck(ns, name)


def _hold(cluster, ns, name="demo"):
    """flux-plunger's hold as an interrupted recovery leaves it (SSA apply of the acquire
    body by manager flux-plunger: suspension + fence)."""
    return cluster.apply(writes.acquire_body(cluster.get(ns, name)), manager=C.FIELD_MANAGER)


class ServeProcess:
    def __init__(self, kubeconfig: Path, log: Path, *args: str):
        self.metrics, self.probe = free_port(), free_port()
        self.log = log
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kubectl_flux_plunger", "serve",
                 "--kubeconfig", str(kubeconfig),
                 f"--metrics-bind-address=127.0.0.1:{self.metrics}",
                 f"--health-probe-bind-address=127.0.0.1:{self.probe}",
                 "--log-format=json", "--lease-duration=3s", "--renew-deadline=2s",
                 "--retry-period=500ms", "--handshake-timeout=15s",
                 "--shutdown-stop-timeout=5s", "--shutdown-drain-timeout=10s",
                 "--fence-recheck-interval=500ms", *args],
                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def _get(self, port: int, path: str) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read().decode()

    def ready(self) -> bool:
        """/readyz answers 200: its watch's LIST is done."""
        try:
            return self._get(self.probe, "/readyz")[0] == 200
        except OSError:   # refused, or 503 (an HTTPError is an OSError)
            return False

    def idle(self) -> bool:
        """/metrics: nothing queued and no fence held (whatever labels the samples carry:
        the install's lease)."""
        text = self._get(self.metrics, "/metrics")[1]
        return all(re.search(rf"^{name}(\{{[^}}]*\}})? 0\.0$", text, re.M)
                   for name in ("flux_plunger_queue_depth", "flux_plunger_fences_held"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def wait_for(self, predicate, timeout: float, what: str):
        try:
            return eventually(predicate, timeout, what)
        except TimeoutError as exc:
            self.kill()
            pytest.fail(f"{exc}\n--- serve log ---\n{self.text()}", pytrace=False)


@pytest.fixture
def controller_sa(plane, helm, ns):
    """A kubeconfig for a ServiceAccount bound to exactly the shipped ClusterRole and, in
    ``ns`` (the controller's namespace here), the shipped leader-election Role."""
    docs = render_chart(helm, ns)
    return service_account_kubeconfig(
        plane, unique("fp"), namespace=ns,
        cluster_rules=_rules(find(docs, "ClusterRole", cluster_name(ns))),
        namespace_rules={ns: _rules(find(docs, "Role", "flux-plunger-leader-election"))})


def _forbidden(text: str) -> list[str]:
    """Lines reporting a Forbidden answer other than the test's own admission policy (and
    the fallback line of a server without watch-lists, whose 422 says "Forbidden": checked
    on its own by ``_fallbacks``)."""
    fallback = set(no_watch_lists_lines(text))
    return [line for line in text.splitlines() if re.search(r"forbidden", line, re.I)
            and "denied request: a change freeze" not in line and line not in fallback]


def _fallbacks(plane, text: str, runs_before: int = 0) -> None:
    """A serve's log has the line of a refused watch-list exactly when the server has no
    watch-lists and this is the test's first process to meet it (``runs_before`` = 0)."""
    expected = 0 if plane.watch_lists or runs_before else 1
    assert len(no_watch_lists_lines(text)) == expected, text


def _recovered(cluster, ns, name="demo") -> bool:
    hr = cluster.get(ns, name)
    return (hr is not None and f"sh.helm.release.v1.{name}.v2" not in cluster.secret_names(ns, name)
            and not hr["spec"].get("suspend")
            and C.FENCE not in (hr["metadata"].get("finalizers") or []))


def test_serve_recovers_with_exactly_the_shipped_rbac(plane, cluster, ns, controller_sa, tmp_path):
    _stuck(cluster, ns)
    with SimulatedHelmController(cluster, ns):
        serve = ServeProcess(controller_sa, tmp_path / "serve.log", "--leader-elect",
                             f"--leader-election-namespace={ns}", "-n", ns)
        try:
            serve.wait_for(lambda: _recovered(cluster, ns), 60, "recovery under the shipped RBAC")
            lease = cluster.kube.get_lease(ns, C.LEASE_NAME)
            assert lease and lease["spec"].get("holderIdentity")
        finally:
            code = serve.stop()
    logs = serve.text()
    assert code == 0, logs
    assert _forbidden(logs) == [], logs
    _fallbacks(plane, logs)
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    assert (cluster.get(ns, "demo")["metadata"].get("annotations") or {}).get(
        C.PROCESSED_ANNOTATION) == "2"
    # the Lease was given up on the way out
    assert not (cluster.kube.get_lease(ns, C.LEASE_NAME) or {}).get("spec", {}).get("holderIdentity")


class DeletingHelmController(SimulatedHelmController):
    """helm-controller's steps, plus a user deleting the release the moment flux-plunger's
    suspension lands (before helm-controller acknowledged it): a delete during recovery."""

    deleted = False

    def step(self):
        if not self.deleted:
            hr = self.cluster.get(self.namespace, "demo")
            if not (hr and hr["spec"].get("suspend") and ownership.owns_suspend(hr)):
                # nothing is acknowledged before the delete: a suspension landing between
                # this GET and the step's LIST would otherwise be acknowledged undeleted
                return
            self.cluster.delete_hr(self.namespace, "demo")
            self.deleted = True
        super().step()


def test_serve_carries_a_delete_during_recovery_through_the_uninstall_with_shipped_rbac(
        plane, cluster, ns, controller_sa, tmp_path):
    _stuck(cluster, ns)
    with DeletingHelmController(cluster, ns) as hc:
        serve = ServeProcess(controller_sa, tmp_path / "serve.log", "--no-leader-elect", "-n", ns)
        try:
            serve.wait_for(lambda: cluster.get(ns, "demo") is None, 60,
                           "the deleted release to go after its uninstall")
        finally:
            code = serve.stop()
    logs = serve.text()
    assert hc.deleted, "the delete never landed during the recovery"
    assert "demo" in hc.uninstalled, "helm-controller never ran the uninstall"
    assert cluster.secret_names(ns, "demo") == []
    assert code == 0, logs
    assert _forbidden(logs) == [], logs
    _fallbacks(plane, logs)


# -- release-fence and the uninstall clean-up under the hook's RBAC --------------------

@pytest.fixture
def hook_sa(plane, helm):
    """``hook_sa(ns)``: a kubeconfig bound to exactly the chart's hook ClusterRole, and its
    Role in ``ns``."""
    def _make(ns: str, role_in: str | None = None) -> Path:
        docs = render_chart(helm, ns)
        return service_account_kubeconfig(
            plane, unique("hook"), namespace=ns,
            cluster_rules=_rules(find(docs, "ClusterRole",
                                      cluster_name(ns, "flux-plunger-uninstall-cleanup"))),
            namespace_rules={role_in or ns: _rules(find(docs, "Role",
                                                        "flux-plunger-uninstall-cleanup-stop"))})
    return _make


def _deployment(plane, ns: str, replicas: int = 1) -> None:
    dep = copy.deepcopy(find(render_kustomize(), "Deployment", "flux-plunger"))
    dep["metadata"]["namespace"] = ns
    dep["spec"]["replicas"] = replicas
    apply(plane, [dep], "test-deployment")


def _replicas(plane, ns: str) -> int:
    return live(plane, {"kind": "Deployment", "apiVersion": "apps/v1",
                        "metadata": {"name": "flux-plunger", "namespace": ns}})["spec"]["replicas"]


def _fenced_release(cluster, ns, name="demo"):
    cluster.create_hr(ns, name)
    return _hold(cluster, ns, name)


def cleanup(ns: str, kubeconfig: Path, *args: str, stop_timeout: str = "5s",
            ) -> subprocess.CompletedProcess:
    """What the chart's hook Job runs (there with --all-namespaces)."""
    return run_tool("kubectl-flux_plunger", "release-fence", "--namespace", ns,
                    f"--stop-deployment={ns}/flux-plunger", f"--lease-namespace={ns}",
                    f"--stop-timeout={stop_timeout}", *args, kubeconfig=kubeconfig)


def release_fence(ns: str, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    """By hand, under the hook's RBAC (the controllers' Leases are listed in ``ns``)."""
    return run_tool("kubectl-flux_plunger", "release-fence", "--namespace", ns,
                    f"--lease-namespace={ns}", *args, kubeconfig=kubeconfig)


def _norm(text: str, ns: str) -> list[str]:
    return [line.replace(ns, "NS") for line in text.splitlines() if line.strip()]


def test_uninstall_cleanup_stops_the_controller_and_releases_like_release_fence(
        plane, cluster, hook_sa):
    a, b = cluster.namespace("hook"), cluster.namespace("hook")
    for ns in (a, b):
        _deployment(plane, ns)
        _fenced_release(cluster, ns, "demo")
        _fenced_release(cluster, ns, "other")
        cluster.apply({"apiVersion": C.HR_API_VERSION, "kind": C.HR_KIND,
                       "metadata": {"name": "other", "namespace": ns}, "spec": {"suspend": True}},
                      manager="migration")  # another manager co-owns spec.suspend
    script = cleanup(a, hook_sa(a), "--retry-window=5s")
    direct = release_fence(b, hook_sa(b), "--retry-window=5s")
    for proc in (script, direct):
        assert _forbidden(proc.stdout + proc.stderr) == [], proc
    assert script.returncode == direct.returncode == 0, (script, direct)
    out = _norm(script.stdout, a)
    assert out == _norm(direct.stdout, b)
    assert "helmrelease.helm.toolkit.fluxcd.io/demo uninstall fence released" in out
    assert out[-1] == "released 2 of 2 fenced HelmReleases, 0 without an uninstall"
    assert _norm(script.stderr, a) == ["scaled Deployment NS/flux-plunger to zero"]
    assert _norm(direct.stderr, b) == []
    assert _replicas(plane, a) == 0
    for ns in (a, b):
        demo, other = cluster.get(ns, "demo"), cluster.get(ns, "other")
        assert C.FENCE not in demo["metadata"]["finalizers"] and not demo["spec"].get("suspend")
        # the co-owned suspension is left alone; only the fence went
        assert C.FENCE not in other["metadata"]["finalizers"] and other["spec"]["suspend"] is True


POLICY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["helm.toolkit.fluxcd.io"]
      apiVersions: ["*"]
      operations: ["UPDATE"]
      resources: ["helmreleases"]
  validations:
  - expression: "!(has(oldObject.spec.suspend) && oldObject.spec.suspend) || (has(object.spec.suspend) && object.spec.suspend)"
    message: a change freeze holds every suspension
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {ns}}}
"""


def test_uninstall_cleanup_fails_like_release_fence_while_a_fence_remains(plane, cluster, hook_sa):
    """A validating admission policy (a 'change freeze') refuses to lift suspensions in two
    namespaces: flux-plunger's suspension cannot be lifted, so its fence must stay (without
    it a deleted, still-suspended release would go without an uninstall)."""
    a, b = cluster.namespace("freeze"), cluster.namespace("freeze")
    for ns in (a, b):
        _deployment(plane, ns)
        _fenced_release(cluster, ns)
        kubectl(plane, "apply", "-f", "-", stdin=POLICY.format(name=f"policy-{ns}", ns=ns))

    def denied(ns):
        hr = cluster.get(ns, "demo")
        try:
            cluster.kube.request("PATCH", "PATCH", f"/apis/helm.toolkit.fluxcd.io/v2/namespaces/{ns}/helmreleases/demo",
                                 body=[{"op": "replace", "path": "/spec/suspend", "value": False}],
                                 content_type="application/json-patch+json", query={"dryRun": "All"})
        except KubeError as exc:
            return exc.status == 422 or "freeze" in str(exc)
        return hr is None
    # both namespaces: each has its own policy, and each comes into force on its own
    for ns in (a, b):
        eventually(lambda: denied(ns), 20, f"the admission policy to be in force in {ns}")

    script = cleanup(a, hook_sa(a), "--retry-window=2s")
    direct = release_fence(b, hook_sa(b), "--retry-window=2s")
    assert script.returncode == direct.returncode == 1, (script, direct)
    assert _forbidden(script.stdout + script.stderr) == [], script
    out = _norm(script.stdout, a)
    assert out == _norm(direct.stdout, b)
    assert out[-1] == "released 0 of 1 fenced HelmReleases, 0 without an uninstall"
    errs = _norm(script.stderr, a)
    assert errs[0] == "scaled Deployment NS/flux-plunger to zero"
    assert errs[1:] == _norm(direct.stderr, b)
    assert errs[1].startswith("helmrelease.helm.toolkit.fluxcd.io/demo NOT released:"), errs
    for ns in (a, b):
        hr = cluster.get(ns, "demo")
        assert C.FENCE in hr["metadata"]["finalizers"] and hr["spec"]["suspend"] is True


def test_uninstall_cleanup_touches_no_fence_when_it_cannot_stop_the_controller(
        plane, cluster, hook_sa):
    """The hook's Role is bound in another namespace: the Deployment cannot be read, so the
    script must exit 1 before any HelmRelease is touched."""
    ns, elsewhere = cluster.namespace("nostop"), cluster.namespace("nostop")
    _deployment(plane, ns)
    _fenced_release(cluster, ns)
    proc = cleanup(ns, hook_sa(ns, role_in=elsewhere), "--retry-window=2s")
    assert proc.returncode == 1, proc
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: could not read Deployment {ns}/flux-plunger: ") and "forbidden" in lines[0] \
        and lines[0].endswith("; no fence was touched"), proc.stderr
    hr = cluster.get(ns, "demo")
    assert C.FENCE in hr["metadata"]["finalizers"] and hr["spec"]["suspend"] is True
    assert _replicas(plane, ns) == 1


def test_uninstall_cleanup_without_a_deployment_still_releases(plane, cluster, hook_sa):
    ns = cluster.namespace("nodeploy")
    _fenced_release(cluster, ns)
    proc = cleanup(ns, hook_sa(ns), "--retry-window=5s")
    assert proc.returncode == 0, proc
    assert proc.stderr.splitlines() == [f"no Deployment {ns}/flux-plunger; nothing to stop"]
    assert proc.stdout.splitlines() == [
        "helmrelease.helm.toolkit.fluxcd.io/demo uninstall fence released",
        "released 1 of 1 fenced HelmReleases, 0 without an uninstall"]


def test_uninstall_cleanup_fails_on_a_fence_set_behind_the_sweep_by_a_pod_that_did_not_go(
        plane, cluster, hook_sa):
    """A controller pod that does not go (here: a Pod no kubelet will ever delete) may fence
    again while the sweep runs: the script reports the pod, sweeps, lists fenced releases
    again and fails on one found."""
    import threading

    ns = cluster.namespace("stillrunning")
    _deployment(plane, ns)
    _fenced_release(cluster, ns, "demo")
    cluster.create_hr(ns, "other")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "flux-plunger-abc", "namespace": ns,
                        "labels": {"app.kubernetes.io/name": "flux-plunger",
                                   "app.kubernetes.io/instance": "flux-plunger"}},
           "spec": {"containers": [{"name": "manager", "image": "kubectl-flux-plunger"}]}}
    cluster.kube.request("CREATE", "POST", f"/api/v1/namespaces/{ns}/pods", body=pod,
                         content_type=JSON)
    refenced = threading.Event()

    def still_running_controller():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            hr = cluster.get(ns, "demo")
            if C.FENCE not in hr["metadata"].get("finalizers", []):
                _hold(cluster, ns, "other")  # behind the sweep
                refenced.set()
                return
            time.sleep(0.02)
    t = threading.Thread(target=still_running_controller, daemon=True)
    t.start()
    proc = cleanup(ns, hook_sa(ns), "--retry-window=5s", stop_timeout="2s")
    t.join(5)
    assert refenced.is_set()
    assert proc.returncode == 1, proc
    assert _forbidden(proc.stdout + proc.stderr) == [], proc
    assert proc.stdout.splitlines() == [
        "helmrelease.helm.toolkit.fluxcd.io/demo uninstall fence released",
        "released 1 of 2 fenced HelmReleases, 0 without an uninstall"]
    assert proc.stderr.splitlines() == [
        f"scaled Deployment {ns}/flux-plunger to zero",
        "warning: flux-plunger pods are still running, releasing anyway: pod/flux-plunger-abc",
        "helmrelease.helm.toolkit.fluxcd.io/other NOT released: fenced after the sweep; "
        "a flux-plunger is still running"]
