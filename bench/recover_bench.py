"""Benchmark: what a user of the one-shot verbs feels, against the real local control plane.

Prints:
  * API requests per recovery (counted in kubectl_flux_plunger.kube),
  * ``recover -A`` wall time on N HelmReleases with S stuck, at concurrency 1 and the default,
  * plugin start-up time for ``--help`` and ``version --client``.

    .venv/bin/python bench/recover_bench.py [--releases 1000] [--stuck 100]

A simulated helm-controller acknowledges each suspension (observedGeneration), as the real
one does; nothing else is simulated.  This is a benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubectl_flux_plunger import constants as C  # noqa: E402
from kubectl_flux_plunger import storage  # noqa: E402
from kubectl_flux_plunger.events import Recorder  # noqa: E402
from kubectl_flux_plunger.executor import Executor, Options  # noqa: E402
from kubectl_flux_plunger.kube import JSON, KubeError  # noqa: E402
from testplane.cluster import Cluster  # noqa: E402
from testplane.plane import ControlPlane  # noqa: E402


class Acknowledger(threading.Thread):
    """helm-controller's reaction to a suspension: observedGeneration = generation."""

    def __init__(self, cluster: Cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                items = self.cluster.kube.list_hrs(None)
                for hr in items:
                    md = hr["metadata"]
                    if hr["spec"].get("suspend") and \
                            hr.get("status", {}).get("observedGeneration") != md["generation"]:
                        self.cluster.set_status(md["namespace"], md["name"],
                                                {"observedGeneration": md["generation"]})
            except KubeError:
                pass
            self.stop.wait(0.05)


def make_stuck(cluster: Cluster, ns: str, name: str) -> None:
    cluster.kube.request("CREATE", "POST", f"/api/v1/namespaces/{ns}/secrets", content_type=JSON,
                         body=storage.make_storage_secret(name, ns, 2, "uninstalling"))
    cluster.merge(ns, name, {"metadata": {"annotations": {C.PROCESSED_ANNOTATION: None}}})
    cluster.make_stuck(ns, name)


def populate(cluster: Cluster, n: int, stuck: int, namespaces: int = 10) -> list[tuple[str, str]]:
    nss = [cluster.namespace("bench") for _ in range(namespaces)]
    names = [(nss[i % namespaces], f"hr-{i:05d}") for i in range(n)]

    def create(i_ns_name):
        i, (ns, name) = i_ns_name
        cluster.create_hr(ns, name)
        if i < stuck:
            cluster.kube.request("CREATE", "POST", f"/api/v1/namespaces/{ns}/secrets",
                                 content_type=JSON,
                                 body=storage.make_storage_secret(name, ns, 1, "superseded"))
            make_stuck(cluster, ns, name)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, enumerate(names)))
    return names[:stuck]


def timed_recover(kubeconfig: Path, *args: str) -> tuple[float, str]:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kubectl_flux_plunger", "recover", "-A", *args],
                          capture_output=True, text=True, env=env)
    return time.monotonic() - t, (proc.stdout.strip().splitlines() or ["?"])[-1]


def startup(args: list[str], runs: int = 10) -> float:
    times = []
    for _ in range(runs):
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "kubectl_flux_plunger", *args],
                       capture_output=True, check=False)
        times.append(time.monotonic() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", type=int, default=1000)
    ap.add_argument("--stuck", type=int, default=100)
    a = ap.parse_args()

    print(f"startup: --help median {startup(['--help']) * 1000:.0f} ms, "
          f"version --client median {startup(['version', '--client']) * 1000:.0f} ms")
    plane = ControlPlane().start()
    print(f"control plane start: {plane.start_seconds:.1f} s")
    kube = plane.kube()
    cluster = Cluster(kube)
    ack = Acknowledger(cluster)
    ack.start()
    try:
        # requests per recovery, one release, in-process
        ns = cluster.namespace("cost")
        cluster.create_hr(ns, "one")
        cluster.storage(ns, "one", [(1, "superseded")])
        make_stuck(cluster, ns, "one")
        k = plane.kube()
        out = Executor(k, Recorder(k), options=Options()).reconcile(ns, "one")
        print(f"requests per recovery: {k.stats.total()} ({out.result}) = {k.stats.snapshot()}")

        t = time.monotonic()
        stuck = populate(cluster, a.releases, a.stuck)
        print(f"created {a.releases} HelmReleases ({a.stuck} stuck) in {time.monotonic() - t:.1f} s")
        secs, summary = timed_recover(plane.kubeconfig, "--concurrency", "1")
        print(f"recover -A --concurrency 1: {secs:.1f} s  [{summary}]")
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: make_stuck(cluster, *p), stuck))
        secs, summary = timed_recover(plane.kubeconfig)
        print(f"recover -A (default concurrency 4): {secs:.1f} s  [{summary}]")
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: make_stuck(cluster, *p), stuck))
        secs, summary = timed_recover(plane.kubeconfig, "--concurrency", "16")
        print(f"recover -A --concurrency 16: {secs:.1f} s  [{summary}]")
        secs, summary = timed_recover(plane.kubeconfig)
        print(f"recover -A with nothing stuck: {secs:.1f} s  [{summary}]")
    finally:
        ack.stop.set()
        kube.close()
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
