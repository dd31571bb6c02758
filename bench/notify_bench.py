"""Benchmark: what Flux notifications (``--events-addr``) cost a one-shot ``recover``, on a real
control plane with the real notification-controller (a local process, a ``generic`` Provider
posting to a loopback receiver).

Prints, for one ``recover -n NS demo`` of a stuck release per case (median of --runs):
  * wall time of the CLI process (as a user runs it), and its requests to the apiserver
    (audit log, user agent kubectl-flux-plunger): without --events-addr, with the real
    notification-controller, with an address nothing listens on, and with one that accepts
    connections and never answers;
  * with notification-controller: from the CLI's start to the notification at the receiver.

    .venv/bin/python bench/notify_bench.py [--runs 3]

A simulated helm-controller acknowledges each suspension, as the real one does.  This is a
benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testplane import binaries  # noqa: E402
from testplane.cluster import Cluster, SimulatedHelmController  # noqa: E402
from testplane.notifyctl import (NotificationController, Receiver, apply_route,  # noqa: E402
                                 ready_route)
from testplane.plane import ControlPlane  # noqa: E402

UA = "kubectl-flux-plunger/"


def hung_address() -> tuple[str, callable]:
    """An address that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue
    threading.Thread(target=accept, daemon=True).start()

    def close() -> None:
        stop.set()
        for c in held:
            c.close()
        srv.close()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/", close


def closed_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/"


def one(plane: ControlPlane, cluster: Cluster, address: str | None,
        receiver: Receiver | None, nc: NotificationController | None) -> tuple[float, int, float]:
    ns = cluster.namespace("bench")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.create_hr(ns, "demo")
    cluster.make_stuck(ns, "demo")
    if receiver is not None and nc is not None:
        apply_route(cluster.kube, ns, receiver.url)
        ready_route(nc, receiver, ns)
    args = ["recover", "-n", ns, "demo"] + (["--events-addr", address] if address else [])
    env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig))
    sim = Cluster(plane.kube(user_agent="simulated-helm-controller"))
    with SimulatedHelmController(sim, ns):
        mark = plane.audit_mark()
        before = len(receiver.received()) if receiver else 0
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "kubectl_flux_plunger", *args], env=env,
                              capture_output=True, text=True, timeout=300)
        took = time.monotonic() - started
        arrived = float("nan")
        if receiver is not None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(receiver.received()) == before:
                time.sleep(0.005)
            arrived = time.monotonic() - started
    if "recovered 1 of 1" not in proc.stdout:
        print(f"  NOT RECOVERED: {proc.stdout}{proc.stderr}")
    time.sleep(0.5)  # the last audit line is written just after its response
    requests = len(plane.audit_events(mark, user_agent=UA))
    return took, requests, arrived


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="notify-bench-"))
    plane = ControlPlane(work / "plane").start()
    cluster = Cluster(plane.kube())
    plane.install_crds(binaries.notification_crd_dir())
    nc = NotificationController(plane.kubeconfig, work).start()
    receiver = Receiver()
    hung, close_hung = hung_address()
    cases = [("no --events-addr", None, None),
             ("notification-controller", nc.address, receiver),
             ("nothing listening", closed_address(), None),
             ("accepts, never answers", hung, None)]
    try:
        print(f"`recover -n NS demo`, one stuck release, median of {a.runs}:")
        for label, address, recv in cases:
            runs = [one(plane, cluster, address, recv, nc if recv else None)
                    for _ in range(a.runs)]
            took = statistics.median(r[0] for r in runs)
            reqs = sorted({r[1] for r in runs})
            line = f"  {label:26s} {took:5.2f}s  requests {'/'.join(map(str, reqs))}"
            if recv is not None:
                line += f"  notification at the receiver {statistics.median(r[2] for r in runs):.2f}s after start"
            print(line)
    finally:
        close_hung()
        receiver.stop()
        nc.stop()
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
