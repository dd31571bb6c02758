"""Benchmark: the self-contained binary against the wheel on a real apiserver (issue 29).

    .venv/bin/python bench/binary_bench.py [--releases 1000] [--rounds 15] [--archive A]...

* the archive's size (compressed, and unpacked) of the platform built here;
* `kubectl flux-plunger status -A` wall time (and the child's CPU) on ``--releases``
  HelmReleases in 20 namespaces, one in ten of them stuck (a Helm storage Secret left
  uninstalling: those are the rows shown), of a real kube-apiserver + etcd (testplane), through the real
  kubectl, the binary (the archive, as krew unpacks and links it) against the wheel (this
  venv's console script, the same code), alternating, median of ``--rounds`` each; the
  outputs must be the same table.

The archive is ``--archive`` or a build of this tree (krew/build.py, cached); ``--archive``
repeated compares several builds in the same alternation (issue 37: the floor build and a
``--host`` build), each labelled by its directory's name.  A benchmark: it asserts only that
all answered the same rows (AGE aside).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testplane.cluster import Cluster  # noqa: E402
from testplane.plane import ControlPlane  # noqa: E402

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    t = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}")
    return wall, ru.ru_utime + ru.ru_stime, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--archive", type=Path, action="append")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="binary-bench-"))
    plane = None
    try:
        archives = a.archive
        if not archives:
            out = base / "dist"
            subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "--out-dir", str(out),
                            "--manifest", str(out / "flux-plunger.yaml")], check=True)
            archives = [next(out.glob("kubectl-flux_plunger-v*-*-*.tar.gz"))]
        binbins = {}
        for i, archive in enumerate(archives):
            store = base / f"store-{i}"
            with tarfile.open(archive) as tar:
                tar.extractall(store, filter="tar")
            unpacked = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
            label = "binary" if len(archives) == 1 else f"binary[{archive.parent.name}]"
            print(f"{label}: {archive.name}: {archive.stat().st_size / 2**20:.1f} MiB "
                  f"compressed, {unpacked / 2**20:.1f} MiB unpacked")
            binbins[label] = base / f"binary-bin-{i}"
            binbins[label].mkdir()
            (binbins[label] / "kubectl-flux_plunger").symlink_to(store / "kubectl-flux_plunger")
        wheelbin = Path(sys.executable).parent  # the venv's console script

        plane = ControlPlane(base / "plane").start()
        kube = plane.kube()
        cluster = Cluster(kube)
        namespaces = [cluster.namespace("bench") for _ in range(20)]
        t = time.monotonic()
        def create(i: int) -> None:
            ns, name = namespaces[i % 20], f"hr-{i:05d}"
            cluster.create_hr(ns, name)
            if i % 10 == 0:
                cluster.storage(ns, name, [(1, "superseded"), (2, "uninstalling")])
                cluster.make_stuck(ns, name)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(a.releases)))
        print(f"{a.releases} HelmReleases created in {time.monotonic() - t:.1f}s")
        common = {"HOME": str(base / "home"), "KUBECONFIG": str(plane.kubeconfig)}
        cases = {label: {**common, "PATH": f"{binbin}:/usr/bin:/bin"}
                 for label, binbin in binbins.items()}
        cases["wheel"] = {**common, "PATH": f"{wheelbin}:/usr/bin:/bin"}
        argv = [KUBECTL, "flux-plunger", "status", "-A"]
        outputs = {name: measure(argv, env)[2] for name, env in cases.items()}  # warm-up
        def table(out: bytes) -> list[list[bytes]]:
            return [line.split()[:-1] for line in out.splitlines()]  # but AGE, which ticks

        for label in binbins:
            assert table(outputs[label]) == table(outputs["wheel"]), f"{label} and the wheel differ"
        rows = outputs["wheel"].count(b"\n") - 1
        assert rows == len(range(0, a.releases, 10)), rows
        wall: dict[str, list[float]] = {n: [] for n in cases}
        cpu: dict[str, list[float]] = {n: [] for n in cases}
        for _ in range(a.rounds):
            for name, env in cases.items():
                w, c, _ = measure(argv, env)
                wall[name].append(w)
                cpu[name].append(c)
        print(f"status -A, {rows} rows, {a.rounds} rounds alternating, "
              f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
        ref = statistics.median(wall["wheel"])
        for name in cases:
            w, c = statistics.median(wall[name]), statistics.median(cpu[name])
            print(f"  {name:14s} wall {w * 1000:7.1f} ms (min {min(wall[name]) * 1000:7.1f})  "
                  f"CPU {c * 1000:7.1f} ms  wall vs wheel {w / ref:.2f}x")
    finally:
        if plane is not None:
            plane.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
