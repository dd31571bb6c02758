"""Benchmark: serve's shutdown drain with many HelmReleases, N of them fenced.

    .venv/bin/python bench/drain_bench.py [--releases 10000] [--fenced 100] [--runs 3]
        [--plane-dir DIR]     # keep etcd's data there: a second run reuses the releases

1. starts kube-apiserver + etcd (testplane) and seeds ``--releases`` HelmReleases with ~2 KiB
   of values in namespace ``bulk`` (``serve_first_bench.seed``; kept across runs with
   ``--plane-dir``);
2. per run and mode: fences ``--fenced`` live releases spread over the list (our finalizer,
   no suspension: the drain removes each fence after a fresh GET), then runs serve's
   ``Drainer`` in-process with its drain executor, poll 1 s, timeout 60 s:
   * ``list`` — as before the watch-fed drain (and still before the watch synced): a full
     LIST every pass;
   * ``watch`` — from the keys a synced ``Watcher`` holds (its initial LIST is made before
     the clock starts: in serve it was made long before the SIGTERM);
   and reports, from the drain's start, when the last fence was removed and when the drain
   returned (which includes the confirming LIST in ``watch`` mode).

A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kubectl_flux_plunger.core import constants as C  # noqa: E402
from kubectl_flux_plunger.executor import Executor, Options, Outcome, Result  # noqa: E402
from kubectl_flux_plunger.kube import Kube  # noqa: E402
from kubectl_flux_plunger.core.scope import Scope  # noqa: E402
from kubectl_flux_plunger.serve.drain import Drainer  # noqa: E402
from kubectl_flux_plunger.serve.options import DrainOptions  # noqa: E402
from kubectl_flux_plunger.serve.watch import Watcher  # noqa: E402
from serve_first_bench import BULK, seed, start_plane  # noqa: E402
from testplane.plane import wait_for  # noqa: E402


class NoQueue:
    def add(self, key: str) -> None:
        pass


class Timed(Executor):
    """The drain executor, noting when each fence was removed."""

    removed: list[float]

    def reconcile(self, namespace, name, *, only_rows=None) -> Outcome:  # type: ignore[override]
        out = super().reconcile(namespace, name, only_rows=only_rows)
        if out.result is Result.FENCE_REMOVED:
            self.removed.append(time.monotonic())
        return out


def fence(kube: Kube, names: list[str]) -> None:
    for name in names:
        kube.json_patch_hr(BULK, name, [
            {"op": "add", "path": "/metadata/finalizers/-", "value": C.FENCE}])


def one(kube: Kube, names: list[str], mode: str) -> dict[str, float]:
    fence(kube, names)
    stop = threading.Event()
    known = None
    if mode == "watch":
        watcher = Watcher(kube, NoQueue(), Scope(), resync_period=3600)
        threading.Thread(target=watcher.run, args=(stop,), daemon=True).start()
        wait_for(lambda: watcher.synced.is_set() and len(watcher.held_keys()) >= len(names),
                 300, "the watch synced")
        known = watcher.held_keys
    executor = Timed(kube, options=Options(allow_recover=False))
    executor.removed = []
    started = time.monotonic()
    held = Drainer(kube, executor, DrainOptions(poll=1.0), known=known).run(60)
    ended = time.monotonic()
    stop.set()
    return {"held": held, "removed": len(executor.removed),
            "first": executor.removed[0] - started if executor.removed else float("nan"),
            "last": executor.removed[-1] - started if executor.removed else float("nan"),
            "done": ended - started}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", type=int, default=10_000)
    ap.add_argument("--fenced", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed-workers", type=int, default=16)
    ap.add_argument("--plane-dir", type=Path, default=None)
    a = ap.parse_args()

    workdir = a.plane_dir or Path(tempfile.mkdtemp(prefix="drain-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    plane = start_plane(workdir)
    kube = plane.kube()
    try:
        seed(kube, a.releases, a.seed_workers)
        t = time.monotonic()
        count = sum(len(items) for items, _ in kube.iter_hr_pages(None, None, 500))
        print(f"warm-up LIST of {count} HelmReleases: {time.monotonic() - t:.1f}s", flush=True)
        step = max(1, a.releases // max(1, a.fenced))
        names = [f"r{i:05d}" for i in range(0, a.releases, step)][: a.fenced]
        results: dict[str, list[dict[str, float]]] = {"list": [], "watch": []}
        for i in range(a.runs):
            for mode in ("list", "watch"):   # alternating: the same apiserver for both
                r = one(kube, names, mode)
                results[mode].append(r)
                print(f"run {i + 1} {mode}: {r['removed']:.0f} fences removed, first "
                      f"{r['first']:.2f}s, last {r['last']:.2f}s, drain returned "
                      f"{r['done']:.2f}s (held {r['held']:.0f})", flush=True)
        for mode, rs in results.items():
            def med(k: str, rs: list[dict[str, float]] = rs) -> float:
                return statistics.median(r[k] for r in rs)
            print(f"median of {a.runs}, {count} HelmReleases, {len(names)} fenced, {mode}: "
                  f"first fence removed {med('first'):.2f}s, last {med('last'):.2f}s, "
                  f"drain returned {med('done'):.2f}s; load average "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
    finally:
        kube.close()
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
