"""Benchmark of ``kubectl flux-plunger serve`` against the real local control plane.

    .venv/bin/python bench/serve_bench.py [--releases 10000] [--samples 20]

1. starts kube-apiserver + etcd (testplane), creates N HelmReleases (concurrently; each with a
   ~2 KiB ``spec.values`` so pages weigh like real releases);
2. starts ``serve`` watching every namespace and reports time to ready and its RSS
   (``/proc/<pid>/status`` VmRSS, and the peak VmHWM) — against the idle RSS of a ``serve``
   watching an empty namespace;
3. reaction time: for each sample release, the time from writing the stuck condition to its
   newest Helm storage Secret being deleted (p50/p95); a simulated helm-controller acknowledges
   the suspension (the executor waits for that handshake);
4. hand-over: a second ``serve`` follows; SIGTERM the leader and time until the follower holds
   the Lease.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubectl_flux_plunger.core import constants as C  # noqa: E402
from kubectl_flux_plunger.kube import KubeError  # noqa: E402
from testplane.cluster import Cluster, SimulatedHelmController  # noqa: E402
from testplane.plane import ControlPlane, free_port, wait_for  # noqa: E402

VALUES = {f"key{i:03d}": "x" * 20 for i in range(80)}   # ~2 KiB of chart values


def rss_kib(pid: int) -> tuple[int, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


class Serve:
    """``serve`` as a process, run from ``tree`` (default: this one); ``launcher`` is what
    runs the command line (default ``python -m kubectl_flux_plunger``), ``env`` more
    environment (bench/soak_bench.py: a wrapper that takes tracemalloc snapshots)."""

    def __init__(self, plane: ControlPlane, log: Path, *args: str, tree: Path = ROOT,
                 launcher: list[str] | None = None, env: dict[str, str] | None = None):
        self.probe, self.metrics = free_port(), free_port()
        env = dict(os.environ, PYTHONPATH=str(tree), **(env or {}))
        env.pop("KUBECONFIG", None)
        self.log = log
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                [*(launcher or [sys.executable, "-m", "kubectl_flux_plunger"]), "serve",
                 "--kubeconfig", str(plane.kubeconfig),
                 "--metrics-bind-address", f"127.0.0.1:{self.metrics}",
                 "--health-probe-bind-address", f"127.0.0.1:{self.probe}", *args],
                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=str(tree))

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.log.stem} exited {self.proc.returncode}:\n"
                               f"{self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.probe}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def identity(self) -> str:
        import re
        m = re.search(r"identity=(\S+)", self.log.read_text())
        return m.group(1) if m else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    plane = ControlPlane(work / "plane").start()
    print(f"control plane up in {plane.start_seconds:.1f}s ({work})", flush=True)
    kube = plane.kube()
    cluster = Cluster(kube)
    procs: list[Serve] = []
    try:
        timings = ("--lease-duration", "15s", "--renew-deadline", "10s", "--retry-period", "1s",
                   "--shutdown-drain-timeout", "20s", "--shutdown-stop-timeout", "5s")
        # idle baseline
        empty = cluster.namespace("empty")
        idle = Serve(plane, work / "idle.log", "-n", empty, "--no-leader-elect")
        procs.append(idle)
        wait_for(idle.ready, 60, "idle serve ready")
        time.sleep(1)
        idle_rss, _ = rss_kib(idle.proc.pid)
        idle.stop()

        bulk = cluster.namespace("bulk")
        started = time.monotonic()

        def create(i: int) -> None:
            for attempt in range(5):
                try:
                    cluster.create_hr(bulk, f"r{i:05d}", spec={"values": VALUES},
                                      labels={"app": f"a{i % 50}"})
                    return
                except KubeError as exc:
                    if exc.conflict:
                        return
                    time.sleep(0.2 * (attempt + 1))
            raise RuntimeError(f"could not create r{i:05d}")

        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(create, range(args.releases)))
        took = time.monotonic() - started
        print(f"created {args.releases} HelmReleases in {took:.1f}s "
              f"({args.releases / took:.0f}/s)", flush=True)

        sample = cluster.namespace("sample")
        names = [f"s{i:02d}" for i in range(args.samples)]
        for name in names:
            cluster.create_hr(sample, name)
            cluster.storage(sample, name, [(1, "superseded"), (2, "uninstalling")])

        leader = Serve(plane, work / "leader.log", "--leader-election-namespace", sample,
                       *timings)
        procs.append(leader)
        t0 = time.monotonic()
        wait_for(leader.ready, 300, "serve ready (initial LIST)", interval=0.05)
        ready_s = time.monotonic() - t0
        wait_for(lambda: leader.identity(), 30, "identity logged")
        time.sleep(2)
        rss_synced, hwm_synced = rss_kib(leader.proc.pid)
        print(f"serve ready after {ready_s:.2f}s with {args.releases + args.samples} "
              f"HelmReleases; RSS {rss_synced / 1024:.1f} MiB (peak {hwm_synced / 1024:.1f} "
              f"MiB); idle serve RSS {idle_rss / 1024:.1f} MiB", flush=True)

        reactions = []
        with SimulatedHelmController(cluster, sample, interval=0.02):
            for name in names:
                secret = f"/api/v1/namespaces/{sample}/secrets/sh.helm.release.v1.{name}.v2"
                start = time.monotonic()
                cluster.make_stuck(sample, name)

                def deleted():
                    try:
                        kube.request("GET", "GET", secret)
                        return False
                    except KubeError as exc:
                        return exc.not_found
                wait_for(deleted, 60, f"{name} recovered", interval=0.005)
                reactions.append(time.monotonic() - start)
        rss_after, hwm_after = rss_kib(leader.proc.pid)
        print(f"reaction (stuck written -> Secret deleted) over {len(reactions)} samples: "
              f"p50 {pct(reactions, 50) * 1000:.0f} ms, p95 {pct(reactions, 95) * 1000:.0f} ms, "
              f"max {max(reactions) * 1000:.0f} ms", flush=True)
        print(f"serve RSS after the recoveries: {rss_after / 1024:.1f} MiB "
              f"(peak {hwm_after / 1024:.1f} MiB)", flush=True)

        follower = Serve(plane, work / "follower.log", "--leader-election-namespace", sample,
                         *timings)
        procs.append(follower)
        wait_for(follower.ready, 300, "follower ready", interval=0.05)
        wait_for(lambda: follower.identity(), 30, "follower identity")
        fid = follower.identity()

        def holder():
            lease = kube.get_lease(sample, C.LEASE_NAME) or {}
            return (lease.get("spec") or {}).get("holderIdentity") or ""
        assert holder() == leader.identity()
        term = time.monotonic()
        leader.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: holder() == fid, 120, "follower leads", interval=0.02)
        handover = time.monotonic() - term
        code = leader.proc.wait(60)
        exited = time.monotonic() - term
        print(f"hand-over after SIGTERM: follower holds the Lease after {handover:.2f}s "
              f"(leader exited {code} after {exited:.2f}s; drain timeout 20s)", flush=True)
        return 0
    finally:
        for p in procs:
            p.stop()
        kube.close()
        plane.stop()


if __name__ == "__main__":
    raise SystemExit(main())
