"""Benchmark: the fresh read of one release as a watch-list (``Executor.read_watched``)
against a GET, on the real apiserver, for a release that exists and one that does not (the
watch-list then ends its initial events with a bookmark and no ADDED).

    .venv/bin/python bench/read_bench.py [--rounds 10]

Prints the median and max of each.  A benchmark: it asserts only that each read answered the
way it should (the state, or None, and an open watch), so a fallback to GET cannot pass for a
fast watch-list.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubectl_flux_plunger.executor import Executor, Options  # noqa: E402
from testplane.cluster import Cluster  # noqa: E402
from testplane.plane import ControlPlane  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    plane = ControlPlane().start()
    try:
        kube = plane.kube()
        cluster = Cluster(kube)
        ns = cluster.namespace("read")
        cluster.create_hr(ns, "there")
        executor = Executor(kube, options=Options())
        for name in ("there", "missing"):
            watch_list, get = [], []
            for _ in range(args.rounds):
                t = time.monotonic()
                hr, watch = executor.read_watched(ns, name)
                watch_list.append(time.monotonic() - t)
                assert watch is not None and (hr is None) == (name == "missing"), (name, hr)
                watch.close()
                t = time.monotonic()
                kube.get_hr(ns, name)
                get.append(time.monotonic() - t)
            print(
                f"{name:8} watch-list read: median {statistics.median(watch_list) * 1000:.1f} ms"
                f" (max {max(watch_list) * 1000:.1f}); GET: median "
                f"{statistics.median(get) * 1000:.1f} ms (max {max(get) * 1000:.1f})"
            )
    finally:
        plane.stop()


if __name__ == "__main__":
    main()
