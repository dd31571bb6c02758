"""Benchmark: what a user of the one-shot verbs feels, against the real local control plane.

Prints:
  * API requests per recovery (counted in kubectl_flux_plunger.kube),
  * ``recover -A`` wall time on N HelmReleases with S stuck, at concurrency 1 and the default,
  * with ``--startup``, plugin start-up time for ``--help`` and ``version --client``
    (bench/startup_bench.py measures its CPU through kubectl).

    .venv/bin/python bench/recover_bench.py [--releases 1000] [--stuck 100]
        [--concurrency 1,default,8,16,32] [--root TREE ...] [--ack-delay 0.02]

A simulated helm-controller acknowledges each suspension (observedGeneration) from a watch,
as the real one does; nothing else is simulated.  ``--root`` runs ``recover`` from another
source tree (e.g. ``git archive main | tar -x -C /tmp/before``), so before and after are
compared on the same control plane and load.  This is a benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubectl_flux_plunger.core import constants as C  # noqa: E402
from kubectl_flux_plunger.core import storage  # noqa: E402
from kubectl_flux_plunger.report.events import Recorder  # noqa: E402
from kubectl_flux_plunger.executor import Executor, Options  # noqa: E402
from kubectl_flux_plunger.kube import JSON, KubeError  # noqa: E402
from testplane.cluster import Cluster, WatchingAcknowledger  # noqa: E402
from testplane.plane import ControlPlane  # noqa: E402


def make_stuck(cluster: Cluster, ns: str, name: str) -> None:
    try:
        cluster.kube.request("CREATE", "POST", f"/api/v1/namespaces/{ns}/secrets",
                             content_type=JSON,
                             body=storage.make_storage_secret(name, ns, 2, "uninstalling"))
    except KubeError as exc:
        if not exc.conflict:     # still there: not recovered since it was made stuck
            raise
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


def proc_cpu(pid: int) -> float:
    """CPU seconds (user+system) a running process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_idle() -> float:
    """Seconds all CPUs together have been idle since boot."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()
    return (int(parts[4]) + int(parts[5])) / os.sysconf("SC_CLK_TCK")


def timed_recover(kubeconfig: Path, root: Path, *args: str) -> tuple[float, str, float, float]:
    """(wall seconds, summary line, seconds until the first result line, CPU seconds of the
    recover process) of one ``recover -A`` run by the tree at ``root``."""
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), PYTHONPATH=str(root))
    t = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kubectl_flux_plunger", "recover", "-A", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(root))
    first = float("nan")
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if not lines:
            first = time.monotonic() - t
        lines.append(line.rstrip("\n"))
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    secs = time.monotonic() - t
    return secs, (lines or ["?"])[-1], first, usage.ru_utime + usage.ru_stime


def apiserver_requests(plane: ControlPlane) -> int:
    """apiserver_request_total summed over every verb and resource (all clients)."""
    req = urllib.request.Request(f"{plane.server}/metrics")
    with urllib.request.urlopen(req, context=plane.ssl_context(), timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


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
    ap.add_argument("--concurrency", default="1,default,8,16,32",
                    help="comma-separated --concurrency values to run ('default': the flag left out)")
    ap.add_argument("--root", type=Path, action="append", default=None,
                    help="source tree(s) to run recover from (repeat to compare before/after "
                         "within one run); default: this tree")
    ap.add_argument("--ack-delay", type=float, default=0.02,
                    help="seconds the simulated helm-controller takes to observe a suspension")
    ap.add_argument("--startup", action="store_true", help="also time --help/version --client")
    a = ap.parse_args()
    roots = a.root or [ROOT]

    if a.startup:
        print(f"startup: --help median {startup(['--help']) * 1000:.0f} ms, "
              f"version --client median {startup(['version', '--client']) * 1000:.0f} ms")
    plane = ControlPlane().start()
    print(f"control plane start: {plane.start_seconds:.1f} s; load average {os.getloadavg()[0]:.2f}")
    kube = plane.kube()
    cluster = Cluster(kube)
    ack = WatchingAcknowledger(cluster, delay=a.ack_delay)
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
        base: dict[Path, float] = {}
        for c in a.concurrency.split(","):
            for root in roots:
                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(lambda p: make_stuck(cluster, *p), stuck))
                args = [] if c == "default" else ["--concurrency", c]
                before = apiserver_requests(plane)
                server0 = proc_cpu(plane.apiserver.proc.pid) + proc_cpu(plane.etcd.proc.pid)
                idle0 = machine_idle()
                secs, summary, first, cpu = timed_recover(plane.kubeconfig, root, *args)
                server = proc_cpu(plane.apiserver.proc.pid) + proc_cpu(plane.etcd.proc.pid) - server0
                idle = machine_idle() - idle0
                sent = apiserver_requests(plane) - before
                base.setdefault(root, secs)
                label = "default concurrency" if c == "default" else f"--concurrency {c}"
                print(f"[{root.name}] recover -A {label}: {secs:.1f} s ({base[root] / secs:.1f}x "
                      f"of the first), first result line after {first:.1f} s, {sent} apiserver "
                      f"requests ({sent / secs:.0f}/s, simulated helm-controller included); CPU: "
                      f"recover {cpu:.1f} s, kube-apiserver+etcd {server:.1f} s, machine idle "
                      f"{idle / secs / (os.cpu_count() or 1) * 100:.0f}%  [{summary}]", flush=True)
        for root in roots:
            secs, summary, _, _ = timed_recover(plane.kubeconfig, root)
            print(f"[{root.name}] recover -A with nothing stuck: {secs:.1f} s  [{summary}]")
        print(f"load average {os.getloadavg()[0]:.2f}")
    finally:
        ack.stop.set()
        kube.close()
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
