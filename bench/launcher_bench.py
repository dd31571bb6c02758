#!/usr/bin/env python3
"""Start-up time of the krew launcher: `kubectl-flux_plunger version --client` run N times
from an extracted krew archive of this tree (no cluster), median and minimum.

    .venv/bin/python bench/launcher_bench.py [-n 40] [--compare REV]

--compare REV also times the launcher script of git revision REV on the same bundle,
interleaved run by run, so load on the machine hits both alike.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("--compare", metavar="REV")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "--out-dir", str(out),
                        "--manifest", str(out / "m.yaml")], check=True, capture_output=True)
        archive = next(out.glob("*.tar.gz"))
        launchers = {}
        for label in ("this tree", args.compare):
            if label is None:
                continue
            d = out / label.replace(" ", "-").replace("/", "_")
            with tarfile.open(archive) as tar:
                tar.extractall(d, filter="tar")
            if label != "this tree":
                text = subprocess.run(["git", "-C", str(ROOT), "show",
                                       f"{label}:krew/kubectl-flux_plunger"],
                                      check=True, capture_output=True, text=True).stdout
                (d / "kubectl-flux_plunger").write_text(text)
            launchers[label] = d / "kubectl-flux_plunger"
        times: dict[str, list[float]] = {k: [] for k in launchers}
        for exe in launchers.values():        # one warm-up run each (page cache)
            subprocess.run([str(exe), "version", "--client"], check=True, capture_output=True)
        for _ in range(args.n):
            for label, exe in launchers.items():
                t = time.perf_counter()
                subprocess.run([str(exe), "version", "--client"], check=True, capture_output=True)
                times[label].append(time.perf_counter() - t)
    for label, ts in times.items():
        print(f"{label}: median {statistics.median(ts) * 1000:.0f} ms, "
              f"min {min(ts) * 1000:.0f} ms over {len(ts)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
