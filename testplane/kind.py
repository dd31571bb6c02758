"""A kind cluster with Flux's source-controller and helm-controller in it (the kind tier).

Two ways to get the images:

* **stock** (a laptop with Docker and internet): ``kind`` and ``kubectl`` from PATH (or
  ``KIND``/``KUBECTL``), kind's default node image unless ``KIND_NODE_IMAGE`` names one,
  Flux's published controller images, the Containerfile's default Python base.
* **local build** (``FLUX_PLUNGER_KIND_BUILD=1``; the project's machines, where no image can
  be pulled): everything comes from ``testplane.images`` and ``testplane.binaries``, built
  here once and cached; ``KIND_NODE_IMAGE`` may still name another node image.

Services the tests reach get fixed ClusterIPs, so nothing depends on cluster DNS (the local
node image has no coredns unless one was built).
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from . import binaries, images

SOURCE_CONTROLLER_IP = "10.96.200.10"
CHARTS_IP = "10.96.200.20"
FLUX_NS = "flux-system"
CHARTS_NS = "kfp-charts"
UPSTREAM_FLUX = "ghcr.io/fluxcd"


class KindError(RuntimeError):
    """The cluster or a component in it did not come up; the message says which and why."""


def local_build() -> bool:
    return os.environ.get("FLUX_PLUNGER_KIND_BUILD", "") == "1"


def docker_answers() -> str | None:
    """None when a Docker engine answers, else why not."""
    docker = shutil.which("docker")
    if not docker:
        return "the docker CLI is not installed"
    try:
        probe = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"],
                               capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 30s"
    if probe.returncode != 0:
        first = (probe.stderr.strip().splitlines() or ["no output"])[0]
        return f"no Docker engine answers (`docker info`: {first})"
    return None


def why_not() -> str | None:
    """Why the kind tier cannot run here (None: it can)."""
    reason = docker_answers()
    if reason:
        return (f"{reason}; the kind tier needs a Docker engine (on the project's machines: "
                f"KIND_ENGINE=start ./hack/test.sh, see docs/INSTALL.md)")
    if not local_build():
        for tool, env in (("kind", "KIND"), ("kubectl", "KUBECTL")):
            if not (os.environ.get(env) or shutil.which(tool)):
                return (f"{tool} is not installed (set {env}, or FLUX_PLUNGER_KIND_BUILD=1 to "
                        f"build everything from Go modules)")
    return None


@dataclass
class Setup:
    """Binaries and images the tier uses (see the module docstring)."""
    local: bool
    kind: Path
    kubectl: Path
    helm: Path
    node_image: str | None
    flux: dict[str, str]
    python_image: str | None    # PYTHON_IMAGE for controller/Containerfile; None = its default
    http_image: str             # serves charts inside the cluster (python3 -m http.server)
    coredns: bool
    seconds: float = 0.0        # time resolve() took (image builds included)


def resolve() -> Setup:
    """Find or build what the tier needs; in local-build mode this builds missing images."""
    started = time.monotonic()
    helm = binaries.ensure("helm")
    versions = images.flux_versions()
    if local_build():
        node = os.environ.get("KIND_NODE_IMAGE") or images.node_image()
        coredns = images.coredns_in(images.control_plane_images()) if not os.environ.get(
            "KIND_NODE_IMAGE") else True
        python = images.python_base_image()
        setup = Setup(True, binaries.ensure("kind"), binaries.ensure("kubectl"), helm, node,
                      images.flux_images(), python, python, coredns)
    else:
        kind = Path(os.environ.get("KIND") or shutil.which("kind") or "kind")
        kubectl = Path(os.environ.get("KUBECTL") or shutil.which("kubectl") or "kubectl")
        flux = {name: f"{UPSTREAM_FLUX}/{name}:{v}" for name, v in versions.items()}
        setup = Setup(False, kind, kubectl, helm, os.environ.get("KIND_NODE_IMAGE") or None,
                      flux, None, "python:3.12-slim", True)
    setup.seconds = time.monotonic() - started
    return setup


def wait_until(predicate: Callable[[], object], timeout: float, what: str,
               interval: float = 1.0, detail: Callable[[], str] | None = None) -> object:
    """Poll ``predicate`` until truthy; KindError naming ``what`` (and ``detail()``) at the
    deadline.  Exceptions from the predicate count as "not yet"."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        if time.monotonic() > deadline:
            extra = f"; last error: {last}" if last else ""
            more = ""
            if detail:
                try:
                    more = "\n" + detail()
                except Exception as exc:  # noqa: BLE001
                    more = f"\n(could not collect details: {exc})"
            raise KindError(f"timed out after {timeout:.0f}s waiting for {what}{extra}{more}")
        time.sleep(interval)


def kind_config(setup: Setup, mirrors: dict[str, str] | None = None) -> str:
    """The kind cluster config: patches only where this machine needs them; ``mirrors``
    (registry name → http://host:port) become the node containerd's registry mirrors."""
    patches: list[str] = []
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        # cgroup v1 host: kubelet >= 1.35 refuses to start on it unless told
        patches.append("kind: KubeletConfiguration\nfailCgroupV1: false\n")
    if setup.local and not os.environ.get("KIND_NODE_IMAGE"):
        patches.append("kind: ClusterConfiguration\netcd:\n  local:\n"
                       f"    imageTag: \"{images.etcd_image_tag()}\"\n")
        if not setup.coredns:
            patches.append("kind: InitConfiguration\nskipPhases: [preflight, addon/coredns]\n")
    doc = {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4",
           "nodes": [{"role": "control-plane"}]}
    if patches:
        doc["kubeadmConfigPatches"] = patches
    if mirrors:  # the release's image, pulled by digest from a registry the test started
        doc["containerdConfigPatches"] = [
            f'[plugins."io.containerd.grpc.v1.cri".registry.mirrors."{name}"]\n'
            f'  endpoint = ["{endpoint}"]\n' for name, endpoint in sorted(mirrors.items())]
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass
class Timings:
    create: float = 0.0
    ready: float = 0.0
    flux: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


class KindFlux:
    """One kind cluster with Flux; ``start()`` creates it, ``stop()`` deletes it."""

    def __init__(self, setup: Setup, name: str, workdir: Path):
        self.setup, self.name, self.workdir = setup, name, workdir
        self.kubeconfig = workdir / "kubeconfig"
        self.timings = Timings()
        self._cluster = None
        self.mirrors: dict[str, str] = {}   # set before start(): see kind_config

    # -- plumbing ---------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(self.setup.kubectl), *args], input=stdin, text=True,
                              capture_output=True, timeout=timeout,
                              env={**os.environ, "KUBECONFIG": str(self.kubeconfig)})
        if check and proc.returncode != 0:
            raise KindError(f"kubectl {' '.join(args)} failed (exit {proc.returncode}): "
                            f"{proc.stderr.strip()[-1500:]}")
        return proc

    def apply(self, docs: list[dict] | str) -> None:
        text = docs if isinstance(docs, str) else yaml.safe_dump_all(docs, sort_keys=False)
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=text)

    def get_json(self, *args: str) -> dict | None:
        proc = self.kubectl("get", *args, "-o", "json", check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise KindError(f"kubectl get {' '.join(args)}: {proc.stderr.strip()}")
        return json.loads(proc.stdout)

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(self.setup.helm), *args], text=True, capture_output=True,
                              timeout=timeout,
                              env={**os.environ, "KUBECONFIG": str(self.kubeconfig),
                                   "HELM_CACHE_HOME": str(self.workdir / "helm-cache"),
                                   "HELM_CONFIG_HOME": str(self.workdir / "helm-config"),
                                   "HELM_DATA_HOME": str(self.workdir / "helm-data")})
        if check and proc.returncode != 0:
            raise KindError(f"helm {' '.join(args[:2])} failed (exit {proc.returncode}): "
                            f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        return proc

    def load(self, image: str) -> None:
        """Put a locally built image into the node (local mode; stock images are pulled)."""
        proc = subprocess.run([str(self.setup.kind), "load", "docker-image", "--name", self.name,
                               image], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise KindError(f"kind load docker-image {image} failed: {proc.stderr.strip()[-1500:]}")

    def describe(self, kind: str, namespace: str, selector: str | None = None) -> str:
        args = ["-n", namespace, "describe", kind] + (["-l", selector] if selector else [])
        out = self.kubectl(*args, check=False).stdout
        return out[-3000:]

    def logs(self, namespace: str, target: str, *, previous: bool = False, tail: int = 200) -> str:
        args = ["-n", namespace, "logs", target, f"--tail={tail}"]
        if previous:
            args.append("--previous")
        return self.kubectl(*args, check=False).stdout

    def rollout(self, kind: str, namespace: str, name: str, timeout: int = 180) -> None:
        proc = self.kubectl("-n", namespace, "rollout", "status", f"{kind}/{name}",
                            f"--timeout={timeout}s", check=False, timeout=timeout + 30)
        if proc.returncode != 0:
            raise KindError(f"{kind} {namespace}/{name} did not roll out within {timeout}s: "
                            f"{proc.stderr.strip()}\n{self.describe('pod', namespace)}")

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> "KindFlux":
        from pytest_kind import KindCluster

        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "kind.yaml"
        config.write_text(kind_config(self.setup, self.mirrors))
        started = time.monotonic()
        # a cluster of this name left by an interrupted run would be reused: start clean
        subprocess.run([str(self.setup.kind), "delete", "cluster", "--name", self.name],
                       capture_output=True, timeout=180)
        self._cluster = KindCluster(self.name, kubeconfig=self.kubeconfig,
                                    image=self.setup.node_image, kind_path=self.setup.kind,
                                    kubectl_path=self.setup.kubectl)
        try:
            self._cluster.create(config_file=config)
        except subprocess.CalledProcessError as exc:
            raise KindError(f"kind create cluster failed (exit {exc.returncode}); "
                            f"config {config}") from exc
        self.timings.create = time.monotonic() - started
        started = time.monotonic()
        self._wait_ready()
        self.timings.ready = time.monotonic() - started
        started = time.monotonic()
        self._install_flux()
        self.timings.flux = time.monotonic() - started
        return self

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.delete()
            self._cluster = None

    def _wait_ready(self) -> None:
        proc = self.kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=240s",
                            check=False, timeout=270)
        if proc.returncode != 0:
            raise KindError(f"the kind node did not become Ready in 240s: {proc.stderr.strip()}\n"
                            + self.kubectl("describe", "nodes", check=False).stdout[-3000:])
        # kube-proxy's first sync: until then the kubernetes Service's ClusterIP is not
        # routed to the apiserver (pods would talk to whatever answers outside the node)
        self.rollout("daemonset", "kube-system", "kube-proxy", 240)
        if self.setup.coredns:
            self.rollout("deployment", "kube-system", "coredns", 240)
        wait_until(lambda: self.get_json("-n", "default", "serviceaccount", "default"), 60,
                   "the default ServiceAccount")
        node = f"{self.name}-control-plane"
        docker = shutil.which("docker") or "docker"

        def proxied() -> bool:
            out = subprocess.run([docker, "exec", node, "iptables-save", "-t", "nat"],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode != 0:  # no iptables on this node: nothing to check
                return True
            return "default/kubernetes:https" in out.stdout
        wait_until(proxied, 120, "kube-proxy to program the kubernetes Service")

    # -- Flux ------------------------------------------------------------------------------

    def crd_files(self) -> list[Path]:
        hc = binaries.module_dir("github.com/fluxcd/helm-controller", "helm-controller")
        sc_module = "github.com/fluxcd/source-controller"
        sc = binaries.module_dir(sc_module, "source-controller",
                                 binaries.module_version("source-controller", sc_module))
        files = [hc / "config" / "crd" / "bases" / "helm.toolkit.fluxcd.io_helmreleases.yaml"]
        files += sorted((sc / "config" / "crd" / "bases").glob("source.toolkit.fluxcd.io_*.yaml"))
        return files

    def _install_flux(self) -> None:
        for f in self.crd_files():
            self.kubectl("apply", "--server-side", "-f", str(f))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s",
                     timeout=90)
        if self.setup.local:
            for image in (*self.setup.flux.values(), self.setup.http_image):
                self.load(image)
        self.apply(flux_manifests(self.setup.flux))
        for name in ("source-controller", "helm-controller"):
            self.rollout("deployment", FLUX_NS, name, 180)
        self.apply(chart_server_manifests(self.setup.http_image, self.workdir / "charts"))
        self.rollout("deployment", CHARTS_NS, "charts", 120)

    def flux_logs(self, name: str) -> str:
        return self.logs(FLUX_NS, f"deployment/{name}")


# -- manifests ---------------------------------------------------------------------------------

def _container_security() -> dict:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}}


def flux_manifests(flux_images: dict[str, str]) -> list[dict]:
    """source-controller and helm-controller as Deployments (cluster-admin, no leader
    election, no events sink), source-controller's artifacts on a fixed ClusterIP."""
    docs: list[dict] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FLUX_NS}}]
    args = {
        "source-controller": ["--watch-all-namespaces=true", "--log-level=info",
                              "--log-encoding=json", "--enable-leader-election=false",
                              "--storage-path=/data", "--storage-addr=:9090",
                              f"--storage-adv-addr={SOURCE_CONTROLLER_IP}",
                              "--health-addr=:9440", "--metrics-addr=:8080",
                              "--requeue-dependency=5s"],
        "helm-controller": ["--watch-all-namespaces=true", "--log-level=info",
                            "--log-encoding=json", "--enable-leader-election=false",
                            "--health-addr=:9440", "--metrics-addr=:8080",
                            "--requeue-dependency=2s", "--min-retry-delay=500ms",
                            "--max-retry-delay=5s", "--http-retry=3"],
    }
    for name, image in flux_images.items():
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": name, "namespace": FLUX_NS}})
        docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": f"kfp-{name}"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": "cluster-admin"},
                     "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": FLUX_NS}]})
        mounts = [{"name": "tmp", "mountPath": "/tmp"}]
        volumes: list[dict] = [{"name": "tmp", "emptyDir": {}}]
        ports = [{"name": "healthz", "containerPort": 9440}, {"name": "metrics", "containerPort": 8080}]
        if name == "source-controller":
            mounts.append({"name": "data", "mountPath": "/data"})
            volumes.append({"name": "data", "emptyDir": {}})
            ports.append({"name": "http", "containerPort": 9090})
        labels = {"app": name}
        docs.append({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": FLUX_NS, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "serviceAccountName": name, "terminationGracePeriodSeconds": 10,
                         "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                             "runAsGroup": 65534, "fsGroup": 65534},
                         "containers": [{
                             "name": "manager", "image": image, "imagePullPolicy": "IfNotPresent",
                             "args": args[name],
                             "env": [{"name": "RUNTIME_NAMESPACE", "valueFrom": {
                                         "fieldRef": {"fieldPath": "metadata.namespace"}}},
                                     {"name": "TUF_ROOT", "value": "/tmp/.sigstore"}],
                             "ports": ports,
                             "readinessProbe": {"httpGet": {"path": "/readyz", "port": "healthz"},
                                                "periodSeconds": 2},
                             "securityContext": _container_security(),
                             "volumeMounts": mounts}],
                         "volumes": volumes}}}})
    docs.append({"apiVersion": "v1", "kind": "Service",
                 "metadata": {"name": "source-controller", "namespace": FLUX_NS},
                 "spec": {"clusterIP": SOURCE_CONTROLLER_IP, "selector": {"app": "source-controller"},
                          "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}})
    return docs


def chart_index(chart: Path, url: str) -> str:
    """A Helm repository index.yaml for one chart tarball."""
    import tarfile
    with tarfile.open(chart) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/Chart.yaml"))
        meta = yaml.safe_load(tar.extractfile(member).read())  # type: ignore[union-attr]
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    entry = {**meta, "digest": hashlib.sha256(chart.read_bytes()).hexdigest(),
             "created": now, "urls": [url]}
    return yaml.safe_dump({"apiVersion": "v1", "entries": {meta["name"]: [entry]},
                           "generated": now})


def chart_server_manifests(http_image: str, directory: Path) -> list[dict]:
    """A Helm repository served from a pod (python3 -m http.server over a ConfigMap)."""
    from .helmctl import build_chart
    chart = build_chart(directory)
    base = f"http://{CHARTS_IP}:8080"
    labels = {"app": "charts"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CHARTS_NS}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "charts", "namespace": CHARTS_NS},
         "data": {"index.yaml": chart_index(chart, f"{base}/{chart.name}")},
         "binaryData": {chart.name: base64.b64encode(chart.read_bytes()).decode()}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "charts", "namespace": CHARTS_NS, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
                      "containers": [{
                          "name": "http", "image": http_image, "imagePullPolicy": "IfNotPresent",
                          "command": ["python3", "-m", "http.server", "8080", "--directory", "/charts"],
                          "ports": [{"name": "http", "containerPort": 8080}],
                          "readinessProbe": {"httpGet": {"path": "/index.yaml", "port": "http"},
                                             "periodSeconds": 2},
                          "securityContext": _container_security(),
                          "volumeMounts": [{"name": "charts", "mountPath": "/charts"}]}],
                      "volumes": [{"name": "charts", "configMap": {"name": "charts"}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "charts", "namespace": CHARTS_NS},
         "spec": {"clusterIP": CHARTS_IP, "selector": labels,
                  "ports": [{"name": "http", "port": 8080, "targetPort": "http"}]}},
    ]


def helm_repository(namespace: str) -> dict:
    return {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
            "metadata": {"name": "charts", "namespace": namespace},
            "spec": {"url": f"http://{CHARTS_IP}:8080", "interval": "10m"}}


def helm_release(namespace: str, name: str, **spec: object) -> dict:
    """A HelmRelease of the test chart from the in-cluster HelmRepository."""
    body: dict = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                  "metadata": {"name": name, "namespace": namespace},
                  "spec": {"interval": "1m",
                           "chart": {"spec": {"chart": "demo", "version": "0.1.0",
                                              "sourceRef": {"kind": "HelmRepository",
                                                            "name": "charts"},
                                              "interval": "10m"}},
                           "install": {"disableWait": True}, "upgrade": {"disableWait": True},
                           "uninstall": {"disableWait": True}}}
    body["spec"].update(spec)
    return body
