"""Benchmark: the record → DELETE window of a recovery, against the real local apiserver.

The record (an rv-locked merge patch of the processed-version annotation) is the last
check that the HelmRelease is still as judged; a foreign write landing after it commits
and before the Secret DELETE arrives is not seen.  This measures that window per recovery
as the time from sending the record PATCH to sending the DELETE, in the same thread (an
upper bound: it includes the PATCH's own round trip), at concurrency 1 and under load.

    .venv/bin/python bench/record_delete_window.py [--releases 100] [--concurrency 1 8]

A simulated helm-controller acknowledges each suspension.  Prints p50/p95/max in ms.
This is a benchmark: it asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.recover_bench import make_stuck  # noqa: E402
from kubectl_flux_plunger.report.events import Recorder  # noqa: E402
from kubectl_flux_plunger.executor import Executor, Options  # noqa: E402
from testplane.cluster import Cluster, WatchingAcknowledger  # noqa: E402
from testplane.plane import ControlPlane  # noqa: E402


def measure(plane: ControlPlane, cluster: Cluster, n: int, concurrency: int) -> list[float]:
    ns = cluster.namespace("win")
    for i in range(n):
        cluster.create_hr(ns, f"r{i}")
        make_stuck(cluster, ns, f"r{i}")
    kube = plane.kube()
    started: dict[int, float] = {}
    windows: list[float] = []
    lock = threading.Lock()

    def hook(verb: str, path: str) -> None:
        me = threading.get_ident()
        now = time.perf_counter()
        if verb == "PATCH" and "/helmreleases/" in path:
            started[me] = now
        elif verb == "DELETE" and "/secrets/" in path and me in started:
            with lock:
                windows.append(now - started.pop(me))
    kube.before_request = hook
    ex = Executor(kube, Recorder(kube, enabled=False), options=Options(handshake_timeout=30))
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda i: ex.reconcile(ns, f"r{i}").result, range(n)))
    kube.close()
    done = sum(r == "recovered" for r in results)
    print(f"  recovered {done} of {n}")
    return windows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", type=int, default=100)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args()
    plane = ControlPlane(Path(tempfile.mkdtemp(prefix="window-bench-"))).start()
    admin = plane.kube()
    cluster = Cluster(admin)
    ack = WatchingAcknowledger(Cluster(plane.kube()))
    ack.start()
    try:
        for c in args.concurrency:
            print(f"concurrency {c}:")
            w = sorted(x * 1000 for x in measure(plane, cluster, args.releases, c))
            p95 = w[min(len(w) - 1, int(len(w) * 0.95))]
            print(f"  record PATCH sent -> DELETE sent: p50 {statistics.median(w):.1f} ms, "
                  f"p95 {p95:.1f} ms, max {w[-1]:.1f} ms ({len(w)} recoveries)")
    finally:
        ack.stop.set()
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
