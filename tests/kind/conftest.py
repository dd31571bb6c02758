"""The kind tier: a real kind cluster (pytest-kind, with local kind/kubectl so nothing is
downloaded), Flux's source-controller and helm-controller as Deployments, and flux-plunger's
own image installed by its Helm chart and its kustomize base.  See testplane/kind.py for the
stock (laptop) and local-build (FLUX_PLUNGER_KIND_BUILD=1) ways of getting the images."""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import Kube
from testplane import images
from testplane.cluster import Cluster
from testplane.helmctl import is_ready, ready
from testplane.kind import (FLUX_NS, KindError, KindFlux, Setup, helm_release, helm_repository,
                            resolve, wait_until, why_not)

WHY = why_not()
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "controller" / "chart" / "flux-plunger"
PLUNGER_NS = "flux-plunger"
GRACE = 40                  # the chart's shutdownGracePeriodSeconds in these tests (its minimum)
DRAIN = GRACE - 25          # --shutdown-drain-timeout the chart derives from it


def skip_reason() -> str:
    return WHY or ""


@pytest.fixture(scope="session")
def kind_setup() -> Setup:
    try:
        return resolve()
    except Exception as exc:  # noqa: BLE001 - one clear line, not a traceback
        pytest.fail(f"cannot prepare the kind tier's binaries and images: {exc}", pytrace=False)


# -- the release's registry (issue 21) ------------------------------------------------------
# The controller runs hack/release.py's image and chart: pushed to a real distribution registry
# the session starts, signed there by digest with a cosign key pair the session makes (issue
# 31), the image pulled by the node's containerd by digest through a mirror in the kind config.
# flux-plunger is installed only through a verified signature: by Flux (an OCIRepository with
# verify.provider cosign, tests/kind/test_signed_chart_in_kind.py), or with
# `helm upgrade --install oci://…@DIGEST` of the digest `cosign verify` has just verified
# (helm_install, verified_chart).  The registry listens on the Docker bridge's gateway: the
# node container and the pods reach the host there (their loopback is their own).
# FLUX_PLUNGER_KIND_REGISTRY_HOST names another address.
RELEASE_REGISTRY = "kfp-registry.local:5000"   # the name the image has in the cluster
RELEASE_REPO = "cozystack/kubectl-flux-plunger"


def _bridge_gateway() -> str:
    """The Docker bridge's gateway (the host's address on it): IPAM's Gateway, or else the
    subnet's first address, which is what dockerd gives docker0 (20.10 leaves Gateway out)."""
    import ipaddress

    proc = subprocess.run([images.docker_bin(), "network", "inspect", "bridge", "--format",
                           "{{json .IPAM.Config}}"], capture_output=True, text=True, timeout=60)
    configs = json.loads(proc.stdout or "null") if proc.returncode == 0 else None
    if not configs:
        raise KindError(f"cannot read the Docker bridge's IPAM config: {proc.stderr.strip()}")
    cfg = configs[0]
    return cfg.get("Gateway") or str(ipaddress.ip_network(cfg["Subnet"])[1])


@pytest.fixture(scope="session")
def kind_registry(kind_setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of the distribution registry the node pulls the release image from."""
    from testplane.oci import Registry

    try:
        host = os.environ.get("FLUX_PLUNGER_KIND_REGISTRY_HOST") or _bridge_gateway()
        reg = Registry(tmp_path_factory.mktemp("kind-registry"), host=host)
    except (KindError, RuntimeError) as exc:
        pytest.fail(f"the release registry did not start: {exc}", pytrace=False)
    yield reg.addr
    reg.stop()


@pytest.fixture(scope="session")
def kind_flux(kind_setup: Setup, kind_registry: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindFlux]:
    work = tmp_path_factory.mktemp("kind")
    cluster = KindFlux(kind_setup, os.environ.get("FLUX_PLUNGER_KIND_CLUSTER", "flux-plunger"), work)
    cluster.mirrors = {RELEASE_REGISTRY: f"http://{kind_registry}"}
    try:
        cluster.start()
    except (KindError, subprocess.TimeoutExpired) as exc:
        try:
            cluster.stop()
        finally:
            pytest.fail(f"the kind cluster did not come up: {exc}", pytrace=False)
    _record("setup", {"images_s": round(kind_setup.seconds, 1),
                      "create_s": round(cluster.timings.create, 1),
                      "ready_s": round(cluster.timings.ready, 1),
                      "flux_s": round(cluster.timings.flux, 1)})
    yield cluster
    if os.environ.get("FLUX_PLUNGER_KIND_KEEP") == "1":
        print(f"\nkeeping kind cluster {cluster.name}: KUBECONFIG={cluster.kubeconfig}")
        return
    cluster.stop()


def _record(what: str, values: dict) -> None:
    """Append timings to $FLUX_PLUNGER_KIND_TIMINGS (bench/kind_tier.sh reads them)."""
    out = os.environ.get("FLUX_PLUNGER_KIND_TIMINGS")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"what": what, **values}) + "\n")


@pytest.fixture(scope="session")
def kkube(kind_flux: KindFlux) -> Iterator[Kube]:
    k = Kube.from_kubeconfig(str(kind_flux.kubeconfig))
    yield k
    k.close()


@pytest.fixture(scope="session")
def kcluster(kkube: Kube) -> Cluster:
    return Cluster(kkube)


def _release_base(setup: Setup, tmp: Path) -> tuple[Path, str | None]:
    """(OCI layout of the release image's base, its Python X.Y or None to read it from the
    base): the local Debian python3 base in local-build mode, else the Containerfile's
    python:3.12-slim digest pulled with crane."""
    import re

    from testplane import binaries
    from testplane.oci import docker_archive_to_oci

    if setup.local:
        base = images.python_base_image()
        saved = tmp / "base.tar"
        images.docker("save", "-o", str(saved), base)
        layout = docker_archive_to_oci(saved, tmp / "base")
        saved.unlink()
        pyver = images.docker("run", "--rm", "--entrypoint", "python3", base, "-c",
                              "import sys; print('%d.%d' % sys.version_info[:2])").strip()
        return layout, pyver
    pinned = re.search(r"^ARG PYTHON_IMAGE=(\S+)$",
                       (ROOT / "controller" / "Containerfile").read_text(), re.M)
    assert pinned, "controller/Containerfile pins no PYTHON_IMAGE"
    digest = pinned.group(1).split("@", 1)[1]
    proc = subprocess.run([str(binaries.ensure("crane")), "pull", "--format=oci", "--platform",
                           "linux/amd64", f"docker.io/library/python@{digest}", str(tmp / "base")],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HOME": str(tmp)})
    if proc.returncode != 0:
        raise KindError(f"crane pull of the base failed: {proc.stderr.strip()[-1500:]}")
    return tmp / "base", None


COSIGN_PASSWORD = "kind-tier"


@pytest.fixture(scope="session")
def kind_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The session's cosign key pair (cosign generate-key-pair): what signs the release here."""
    from testplane import binaries

    keys = tmp_path_factory.mktemp("kind-keys")
    proc = subprocess.run([str(binaries.ensure("cosign")), "generate-key-pair"], cwd=keys,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(keys), "COSIGN_PASSWORD": COSIGN_PASSWORD})
    if proc.returncode != 0:
        pytest.fail(f"cosign generate-key-pair failed: {proc.stderr.strip()[-1500:]}", pytrace=False)
    return {"key": keys / "cosign.key", "pub": keys / "cosign.pub"}


def cosign_verify(kind_flux: KindFlux, ref: str) -> set[str]:
    """`cosign verify` of ``ref`` in the session's registry with the session's public key
    (offline: no transparency log); the digests its signatures are for.  KindError if it
    does not verify."""
    from testplane import binaries

    release = kind_flux.release  # type: ignore[attr-defined]
    proc = subprocess.run([str(binaries.ensure("cosign")), "verify", "--key", str(release["pub"]),
                           "--insecure-ignore-tlog", "--allow-insecure-registry",
                           "--allow-http-registry", ref], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HOME": str(kind_flux.workdir)})
    if proc.returncode != 0:
        raise KindError(f"cosign verify {ref} failed: {proc.stderr.strip()[-1000:]}")
    return {c["critical"]["image"]["docker-manifest-digest"]
            for line in proc.stdout.splitlines() if line.startswith("[")
            for c in json.loads(line) if c["critical"]["type"] == "https://sigstore.dev/cosign/sign/v1"}


def verified_chart(kind_flux: KindFlux) -> str:
    """oci://…/flux-plunger@DIGEST: the digest the chart's tag resolves to, once its signature
    verified with the session's key (what helm then installs: that digest, not the tag)."""
    release = kind_flux.release  # type: ignore[attr-defined]
    repo = release["chart"].removeprefix("oci://")
    digests = cosign_verify(kind_flux, f"{repo}:{release['version']}")
    if release["chart_digest"] not in digests:
        raise KindError(f"{repo}:{release['version']} verified, but not as the chart pushed "
                        f"({release['chart_digest']}): {sorted(digests)}")
    return f"{release['chart']}@{release['chart_digest']}"


@pytest.fixture(scope="session")
def plunger_image(kind_setup: Setup, kind_flux: KindFlux, kind_registry: str,
                  kind_keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The release of this work tree (hack/release.py --worktree: its image and chart), pushed
    to the session's registry with crane and helm push and signed there by digest with the
    session's key (hack/release_sign.py sign); the image's name in the cluster (by tag; the
    chart pins its digest).  ``kind_flux.release`` says where the chart is."""
    import sys

    from testplane import binaries

    started = time.monotonic()
    tmp = tmp_path_factory.mktemp("kind-release")
    base, pyver = _release_base(kind_setup, tmp)
    version = "v" + __import__("kubectl_flux_plunger").__version__
    dist = tmp / "dist"
    env = {**os.environ, "HOME": str(tmp / "home"), "DOCKER_CONFIG": str(tmp / "docker"),
           "HELM_CACHE_HOME": str(tmp / "helm-cache"), "HELM_CONFIG_HOME": str(tmp / "helm-config"),
           "HELM_DATA_HOME": str(tmp / "helm-data"),
           "FLUX_PLUNGER_TESTBIN_CACHE": str(binaries.cache_root())}
    argv = [sys.executable, str(ROOT / "hack" / "release.py"), "--version", version, "--worktree",
            "--out", str(dist), "--base-image", str(base), "--platforms", "linux/amd64",
            "--image", f"{RELEASE_REGISTRY}/{RELEASE_REPO}",
            *(["--base-python", pyver] if pyver else []), *(["--offline"] if kind_setup.local else [])]

    def run(*cmd: str) -> str:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tmp)
        if proc.returncode != 0:
            pytest.fail(f"{' '.join(cmd[:3])} failed: {(proc.stderr or proc.stdout)[-2000:]}",
                        pytrace=False)
        return proc.stdout + proc.stderr

    run(*argv)
    layout = tmp / "layout"
    import tarfile
    with tarfile.open(dist / f"kubectl-flux-plunger-{version}.oci.tar") as tar:
        tar.extractall(layout, filter="data")
    run(str(binaries.ensure("crane")), "push", "--insecure", str(layout),
        f"{kind_registry}/{RELEASE_REPO}:{version}")
    chart = dist / f"flux-plunger-{version.lstrip('v')}.tgz"
    pushed = run(str(kind_flux.setup.helm), "push", str(chart), f"oci://{kind_registry}/charts",
                 "--plain-http")
    chart_digest = next(line.split()[1] for line in pushed.splitlines() if line.startswith("Digest:"))
    digest = (dist / "image-digest.txt").read_text().strip()
    env["COSIGN_PASSWORD"] = COSIGN_PASSWORD
    for ref in (f"{kind_registry}/{RELEASE_REPO}@{digest}",
                f"{kind_registry}/charts/flux-plunger@{chart_digest}"):
        run(sys.executable, str(ROOT / "hack" / "release_sign.py"), "sign", ref,
            "--key", str(kind_keys["key"]), "--insecure-registry")
    kind_flux.release = {"chart": f"oci://{kind_registry}/charts/flux-plunger",  # type: ignore[attr-defined]
                         "version": version.lstrip("v"), "digest": digest,
                         "chart_digest": chart_digest, "chart_file": chart,
                         "registry": kind_registry, "key": kind_keys["key"],
                         "pub": kind_keys["pub"]}
    _record("plunger_image", {"build_and_load_s": round(time.monotonic() - started, 1)})
    return f"{RELEASE_REGISTRY}/{RELEASE_REPO}:{version}"


# -- releases -------------------------------------------------------------------------------

def install_release(kind_flux: KindFlux, kcluster: Cluster, ns: str, name: str = "demo",
                    timeout: float = 180) -> dict:
    """A HelmRelease of the in-cluster chart, installed by helm-controller to Ready=True."""
    kind_flux.apply([helm_repository(ns), helm_release(ns, name)])
    wait_until(lambda: is_ready(kcluster.get(ns, name)), timeout, f"{ns}/{name} Ready=True",
               detail=lambda: f"HelmRelease status: {json.dumps(kcluster.get(ns, name), indent=1)[-2500:]}"
                              f"\nhelm-controller log:\n{kind_flux.flux_logs('helm-controller')[-3000:]}"
                              f"\nsource-controller log:\n{kind_flux.flux_logs('source-controller')[-2000:]}")
    return kcluster.get(ns, name)


def stuck(hr: dict | None) -> bool:
    r = ready(hr)
    return bool(r and r[0] == "False" and "has no deployed releases" in r[2])


def fenced(hr: dict | None) -> bool:
    return C.FENCE in ((hr or {}).get("metadata", {}).get("finalizers") or [])


def suspended(hr: dict | None) -> bool:
    return bool((hr or {}).get("spec", {}).get("suspend"))


def scale(kind_flux: KindFlux, ns: str, deployment: str, replicas: int, selector: str,
          timeout: float = 120) -> None:
    """Scale and wait until exactly that many pods of it exist and are Ready."""
    kind_flux.kubectl("-n", ns, "scale", f"deployment/{deployment}", f"--replicas={replicas}")

    def settled() -> bool:
        pods = kind_flux.get_json("-n", ns, "pods", "-l", selector)["items"]
        if replicas == 0:
            return not pods
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return len(pods) == replicas and all(pod_ready(p) for p in live)
    wait_until(settled, timeout, f"{ns}/{deployment} at {replicas} ready pod(s)",
               detail=lambda: kind_flux.describe("pod", ns, selector))


def pod_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions", []))


# -- the controller -------------------------------------------------------------------------

@dataclass
class Plunger:
    """flux-plunger as installed in the kind cluster (chart or kustomize)."""
    kind_flux: KindFlux
    namespace: str = PLUNGER_NS
    selector: str = "app.kubernetes.io/name=flux-plunger"
    service: str = "flux-plunger"

    def pods(self) -> list[dict]:
        return self.kind_flux.get_json("-n", self.namespace, "pods", "-l", self.selector)["items"]

    def lease(self) -> dict | None:
        return self.kind_flux.get_json("-n", self.namespace, "lease", C.LEASE_NAME)

    def holder(self) -> str:
        return ((self.lease() or {}).get("spec") or {}).get("holderIdentity") or ""

    def leader_pod(self, timeout: float = 120, other_than: str | None = None,
                   require_ready: bool = True) -> str:
        """Name of the pod of this Deployment that holds the Lease (and is Ready, unless
        ``require_ready`` is false: leading does not wait for the readiness probe)."""
        def found() -> str | None:
            holder = self.holder()
            if other_than and holder.startswith(other_than + "_"):
                return None
            for p in self.pods():
                name = p["metadata"]["name"]
                if holder.startswith(name + "_") and (pod_ready(p) or not require_ready):
                    return name
            return None
        return str(wait_until(found, timeout, f"a flux-plunger pod to hold the Lease "
                                              f"{self.namespace}/{C.LEASE_NAME}",
                              detail=lambda: f"holder: {self.holder()!r}\n"
                                             + self.kind_flux.describe("pod", self.namespace, self.selector)))

    def log_records(self, pod: str) -> list[dict]:
        out = []
        for line in self.kind_flux.logs(self.namespace, pod, tail=2000).splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def metrics(self) -> str:
        path = (f"/api/v1/namespaces/{self.namespace}/services/"
                f"http:{self.service}:http-metrics/proxy/metrics")
        return self.kind_flux.kubectl("get", "--raw", path).stdout

    def metric(self, name: str, **labels: str) -> float | None:
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, rest = head.partition("{")
            if metric != name:
                continue
            got = ",".join(sorted(p for p in rest.rstrip("}").split(",") if p))
            if all(f in got.split(",") for f in want.split(",") if f):
                return float(value)
        return None

    def scale(self, replicas: int, timeout: float = 150) -> None:
        scale(self.kind_flux, self.namespace, "flux-plunger", replicas, self.selector, timeout)


@pytest.fixture(scope="module")
def helm_plunger(kind_flux: KindFlux, plunger_image: str, kind_setup: Setup) -> Iterator[Plunger]:
    """flux-plunger installed by `helm install` of controller/chart/flux-plunger."""
    helm_install(kind_flux, plunger_image, kind_setup)
    p = Plunger(kind_flux)
    p.leader_pod(timeout=180)
    yield p
    if kind_flux.helm("status", "flux-plunger", "-n", PLUNGER_NS, check=False).returncode == 0:
        kind_flux.helm("uninstall", "flux-plunger", "-n", PLUNGER_NS, "--timeout", "5m",
                       check=False, timeout=400)


def helm_install(kind_flux: KindFlux, image: str, setup: Setup, *extra: str) -> None:
    """`helm upgrade --install oci://…@DIGEST` of the release's chart from the session's
    registry, by the digest its signature verified (verified_chart; its values pin the image
    by digest; the uninstall hook runs the same image) with the shortest grace period the
    chart allows."""
    repo, _, tag = image.rpartition(":")
    registry, _, repository = repo.partition("/")
    # a namespace an earlier test deleted (kustomize's, --wait=false) must be gone first
    wait_until(lambda: (kind_flux.get_json("namespace", PLUNGER_NS) or {}).get(
                   "status", {}).get("phase", "Active") == "Active", 180,
               f"namespace {PLUNGER_NS} to finish terminating")
    args = ["upgrade", "--install", "flux-plunger", verified_chart(kind_flux),
            "--plain-http", "-n", PLUNGER_NS, "--create-namespace",
            "--set", f"image.registry={registry}", "--set", f"image.repository={repository}",
            "--set", f"image.tag={tag}", "--set", f"shutdownGracePeriodSeconds={GRACE}"]
    kind_flux.helm(*args, *extra)


class HRWatch:
    """Every state of one HelmRelease as the API server streamed it (kubectl get -w), with
    the time each arrived: assertions about what happened between two polls."""

    def __init__(self, kind_flux: KindFlux, ns: str, name: str):
        self.states: list[tuple[float, dict]] = []
        self.proc = subprocess.Popen(
            [str(kind_flux.setup.kubectl), "-n", ns, "get", "helmrelease", name, "-w",
             "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "KUBECONFIG": str(kind_flux.kubeconfig)})
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        decoder = json.JSONDecoder()
        buf = ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            buf += line
            while buf.strip():
                try:
                    obj, end = decoder.raw_decode(buf.lstrip())
                except ValueError:
                    break
                self.states.append((time.monotonic(), obj))
                buf = buf.lstrip()[end:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def between(self, start: float, end: float) -> list[dict]:
        return [o for t, o in self.states if start <= t <= end]


@dataclass
class InFlight:
    """A recovery flux-plunger has started and cannot finish: helm-controller is scaled to
    zero, so the suspension it wrote is never observed.  ``restore()`` brings
    helm-controller back."""
    kind_flux: KindFlux
    kcluster: Cluster
    ns: str
    name: str
    leader: str
    hc_down: bool = True
    notes: list[str] = field(default_factory=list)

    def restore(self) -> None:
        if self.hc_down:
            scale(self.kind_flux, FLUX_NS, "helm-controller", 1, "app=helm-controller")
            self.hc_down = False


def start_inflight(kind_flux: KindFlux, kcluster: Cluster, plunger: Plunger, ns: str,
                   name: str = "demo") -> InFlight:
    """Break ``ns/name`` while flux-plunger is stopped, let helm-controller report it stuck,
    stop helm-controller, start flux-plunger: it suspends and fences the release and waits."""
    from testplane.helmctl import break_release, request_reconcile
    plunger.scale(0)
    break_release(kcluster.kube, ns, name)
    request_reconcile(kcluster.kube, ns, name)
    wait_until(lambda: stuck(kcluster.get(ns, name)), 120,
               f"{ns}/{name} stuck with 'has no deployed releases'",
               detail=lambda: kind_flux.flux_logs("helm-controller")[-2000:])
    scale(kind_flux, FLUX_NS, "helm-controller", 0, "app=helm-controller")
    flight = InFlight(kind_flux, kcluster, ns, name, leader="")
    plunger.scale(1)
    flight.leader = plunger.leader_pod()
    wait_until(lambda: (lambda hr: suspended(hr) and fenced(hr))(kcluster.get(ns, name)), 90,
               f"flux-plunger to suspend and fence {ns}/{name}",
               detail=lambda: "\n".join(json.dumps(r) for r in plunger.log_records(flight.leader)[-30:]))
    return flight


def fence_lines(report: str, ns: str, name: str) -> list[str]:
    """release-fence's report lines about ``ns/name`` (kubectl references under -A)."""
    return [line for line in report.splitlines()
            if f"-n {ns} " in line and line.split(" ")[2:3] and line.split(" ")[2].endswith(f"/{name}")]
