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

from kubectl_flux_plunger import constants as C
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


@pytest.fixture(scope="session")
def kind_flux(kind_setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindFlux]:
    work = tmp_path_factory.mktemp("kind")
    cluster = KindFlux(kind_setup, os.environ.get("FLUX_PLUNGER_KIND_CLUSTER", "flux-plunger"), work)
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


@pytest.fixture(scope="session")
def plunger_image(kind_setup: Setup, kind_flux: KindFlux) -> str:
    """controller/Containerfile built here (on the local Python base in local-build mode)
    and loaded into the node."""
    started = time.monotonic()
    tag = images.plunger_image(kind_setup.python_image, wheels=kind_setup.local)
    kind_flux.load(tag)
    _record("plunger_image", {"build_and_load_s": round(time.monotonic() - started, 1)})
    return tag


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
    """`helm upgrade --install` of the chart with this tier's image (the uninstall hook runs
    the same image) and the shortest grace period the chart allows."""
    repo, _, tag = image.rpartition(":")
    args = ["upgrade", "--install", "flux-plunger", str(CHART), "-n", PLUNGER_NS,
            "--create-namespace", "--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
            "--set", f"shutdownGracePeriodSeconds={GRACE}"]
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
