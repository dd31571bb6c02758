"""The apiserver's cost per hour after start-up (issue 58): requests, and bytes sent to each
controller, with serve, serve as it was before the catch-all, and the reference controller
running side by side on one quiet cluster of ``--releases`` HelmReleases.

    .venv/bin/python bench/apiserver_cost_bench.py --releases 10000 --minutes 20 \\
        [--before-tree DIR] [--reference-bin BIN] [--settle 60] [--out DIR]

1. starts kube-apiserver + etcd (testplane, the audit log on) and seeds ``--releases``
   HelmReleases in ``bulk`` (bench/serve_first_bench.py's seed: ~2 KiB of values each);
2. puts a TCP proxy in front of the apiserver for each controller (its own kubeconfig points
   there) that counts the bytes each way; the proxy connects upstream from its own loopback
   address (127.0.0.2, .3, .4), so the audit log's ``sourceIPs`` tells whose requests are
   whose.  The bytes are TLS records: the payload plus a few dozen bytes per record, alike
   for every controller;
3. starts the controllers as their charts run them, each also without leader election — leader election on (each its own
   Lease), default timings (serve: ``--resync-period`` 10 min, Lease 15 s / renew 10 s /
   retry 2 s; the reference: controller-runtime's) — and waits until each is ready and
   ``--settle`` seconds more (the start-up's reads done);
4. counts, over ``--minutes`` with nothing changing in the cluster (no recoveries, no
   writes: what the controllers cost by themselves), the bytes each proxy carried each way,
   its connections, and each controller's requests by verb and resource from the audit log;
   printed per hour.

A benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serve_bench import Serve  # noqa: E402
from serve_first_bench import LEASE_NS as REFERENCE_LEASE_NS  # noqa: E402
from serve_first_bench import ensure_namespace, reference_argv, seed  # noqa: E402
from testplane.plane import ControlPlane, free_port, wait_for  # noqa: E402

LEASE_NS = "cost-lease"


class Proxy:
    """A TCP proxy 127.0.0.1:``port`` → the apiserver, from ``source`` (a loopback address):
    ``down`` bytes the apiserver sent the client, ``up`` the client sent it."""

    def __init__(self, upstream: tuple[str, int], source: str) -> None:
        self.upstream, self.source = upstream, source
        self.down = self.up = self.connections = 0
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def counts(self) -> tuple[int, int, int]:
        with self.lock:
            return self.down, self.up, self.connections

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, source_address=(self.source, 0))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, upstream, "up"), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, "down"),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                with self.lock:
                    setattr(self, way, getattr(self, way) + len(data))
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


def kubeconfig_via(plane: ControlPlane, proxy: Proxy, path: Path) -> SimpleNamespace:
    cfg = yaml.safe_load(plane.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path.write_text(yaml.safe_dump(cfg))
    return SimpleNamespace(kubeconfig=path)


class Reference(Serve):
    """The reference controller as its chart runs it (serve_first_bench's ``reference_argv``),
    through its proxy; ready as ``Serve`` is (its /readyz).  ``elect=False``: without leader
    election (``--leader-elect=false``), to tell its Lease's cost from the rest."""

    def __init__(self, binary: Path, plane_like: SimpleNamespace, log: Path, elect: bool):
        self.probe, self.metrics, self.log = free_port(), None, log
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        argv = reference_argv(binary.resolve(), plane_like, 0, self.probe)
        if not elect:
            argv = [x for x in argv if x != "--leader-elect"] + ["--leader-elect=false"]
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)


def audit_by_source(plane: ControlPlane, since: int) -> dict[str, collections.Counter]:
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for ev in plane.audit_events(since):
        src = (ev.get("sourceIPs") or ["?"])[0]
        ref = ev.get("objectRef") or {}
        out[src][f"{ev.get('verb')} {ref.get('resource', ev.get('requestURI', '?')[:30])}"] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--releases", type=int, default=10_000)
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--settle", type=float, default=60, help="seconds after ready, not counted")
    ap.add_argument("--before-tree", type=Path, default=None,
                    help="serve from this tree too (e.g. `git archive` of main before)")
    ap.add_argument("--reference-bin", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    work = a.out or Path(tempfile.mkdtemp(prefix="cost-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(work / "plane").start()
    print(f"control plane up ({work}); load average {os.getloadavg()[0]:.2f}", flush=True)
    kube = plane.kube()
    procs: dict[str, Serve] = {}
    proxies: dict[str, Proxy] = {}
    try:
        seed(kube, a.releases, 16)
        for ns in (LEASE_NS, REFERENCE_LEASE_NS):
            ensure_namespace(kube, ns)
        upstream = ("127.0.0.1", int(plane.server.rsplit(":", 1)[1]))
        # (name, serve's tree or the reference's binary, leader election): each controller
        # also runs without leader election, which tells its Lease's cost from the rest
        which = [("serve", None, True), ("serve-no-lease", None, False),
                 ("before", a.before_tree, True), ("before-no-lease", a.before_tree, False),
                 ("reference", a.reference_bin, True),
                 ("reference-no-lease", a.reference_bin, False)]
        for i, (name, arg, elect) in enumerate(which):
            if not name.startswith("serve") and arg is None:
                continue
            proxies[name] = Proxy(upstream, f"127.0.0.{i + 2}")
            via = kubeconfig_via(plane, proxies[name], work / f"{name}.kubeconfig")
            log = work / f"{name}.log"
            lease = (("--leader-election-namespace", LEASE_NS, "--leader-election-id",
                      f"cost-{name}") if elect else ("--no-leader-elect",))
            # one at a time, each ready before the next starts (six syncs of every release
            # at once made the reference's cache sync miss its 2-minute timeout at 50,000);
            # a controller that exits before it is ready is started again, as its pod would be
            for attempt in range(1, 4):
                started = time.monotonic()
                procs[name] = (Reference(arg, via, log.with_suffix(f".{attempt}.log"), elect)
                               if name.startswith("reference") else
                               Serve(via, log.with_suffix(f".{attempt}.log"), *lease,
                                     **({"tree": arg} if arg else {})))
                try:
                    wait_for(lambda p=procs[name]: p.proc.poll() is not None or p.ready(),
                             900, f"{name} ready", interval=0.2)
                except TimeoutError:
                    pass
                if procs[name].proc.poll() is None:
                    break
                print(f"{name} exited {procs[name].proc.returncode} before it was ready "
                      f"(attempt {attempt}); starting it again", flush=True)
            print(f"{name} ready after {time.monotonic() - started:.1f}s", flush=True)
        time.sleep(a.settle)
        mark = plane.audit_mark()
        before = {n: p.counts() for n, p in proxies.items()}
        t0 = time.monotonic()
        print(f"counting for {a.minutes:g} min (load average {os.getloadavg()[0]:.2f})",
              flush=True)
        loads = []
        while time.monotonic() - t0 < a.minutes * 60:
            time.sleep(min(30.0, a.minutes * 60 - (time.monotonic() - t0)))
            loads.append(os.getloadavg()[0])
            for name, p in procs.items():
                if p.proc.poll() is not None:
                    print(f"{name} exited {p.proc.returncode}", flush=True)
        span = time.monotonic() - t0
        time.sleep(2)   # the audit log's last lines
        per_h = 3600 / span
        audit = audit_by_source(plane, mark)
        result = {"releases": a.releases, "minutes": span / 60,
                  "load": [min(loads), max(loads)], "controllers": {}}
        print(f"\nper hour after start-up, {a.releases} HelmReleases, nothing changing "
              f"({span / 60:.1f} min counted; load average {min(loads):.1f}-{max(loads):.1f}):")
        print(f"{'controller':<10} {'requests/h':>10} {'MB sent to it/h':>16} "
              f"{'MB it sent/h':>13} {'connections':>11}  requests by verb")
        for i, (name, _, _) in enumerate(which):
            if name not in proxies:
                continue
            d0, u0, c0 = before[name]
            d1, u1, c1 = proxies[name].counts()
            reqs = audit.get(f"127.0.0.{i + 2}", collections.Counter())
            row = {"requests_per_h": sum(reqs.values()) * per_h,
                   "mb_down_per_h": (d1 - d0) * per_h / 1e6,
                   "mb_up_per_h": (u1 - u0) * per_h / 1e6,
                   "connections": c1 - c0, "requests": dict(reqs)}
            result["controllers"][name] = row
            print(f"{name:<10} {row['requests_per_h']:>10.0f} {row['mb_down_per_h']:>16.3f} "
                  f"{row['mb_up_per_h']:>13.3f} {row['connections']:>11}  "
                  + ", ".join(f"{k} {v}" for k, v in reqs.most_common()))
        (work / "cost.json").write_text(json.dumps(result, indent=1))
        print(f"\n{work / 'cost.json'}", flush=True)
        return 0
    finally:
        for p in procs.values():
            p.stop()
        for x in proxies.values():
            x.close()
        kube.close()
        plane.stop()


if __name__ == "__main__":
    raise SystemExit(main())
