"""Benchmark: what remote storage (spec.kubeConfig) and backups cost, on two real control planes.

Prints:
  * requests one recovery sends to each cluster, local storage vs remote storage vs remote
    storage with ``--backup-dir``, counted by the apiservers' audit logs (user agent
    kubectl-flux-plunger, the CLI as a user runs it);
  * ``status -o wide`` wall time with R releases on a remote that accepts connections and never
    answers, next to one local stuck release (the default remote timeout, and 3s).

    .venv/bin/python bench/remote_bench.py [--hung 20]

A simulated helm-controller acknowledges each suspension, as the real one does.  This is a
benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import base64
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubectl_flux_plunger.kube import JSON, core_path  # noqa: E402
from testplane.cluster import Cluster, SimulatedHelmController  # noqa: E402
from testplane.plane import ControlPlane  # noqa: E402
from testplane.rbac import ensure_namespace  # noqa: E402

UA = "kubectl-flux-plunger/"


def cli(kubeconfig: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kubectl_flux_plunger", *args], env=env,
                          capture_output=True, text=True, timeout=600)
    return time.monotonic() - started, proc


def secret(cluster: Cluster, ns: str, name: str, data: bytes) -> None:
    cluster.kube.request("CREATE", "POST", core_path("secrets", ns), content_type=JSON, body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
        "data": {"value": base64.b64encode(data).decode()}})


def counted(plane: ControlPlane, mark: int) -> str:
    time.sleep(0.5)    # the last audit line is written just after its response
    events = plane.audit_events(mark, user_agent=UA)
    verbs = Counter(f"{e['verb']} {(e.get('objectRef') or {}).get('resource', '')}"
                    for e in events)
    return f"{len(events):2d} ({', '.join(f'{k} {v}' for k, v in sorted(verbs.items()))})"


def one_recovery(local: ControlPlane, remote: ControlPlane, lc: Cluster, rc: Cluster,
                 kind: str, workdir: Path) -> None:
    ns = lc.namespace("bench")
    spec = {}
    if kind != "local":
        ensure_namespace(rc.kube, ns)
        secret(lc, ns, "kc", remote.self_contained_kubeconfig())
        spec = {"kubeConfig": {"secretRef": {"name": "kc"}}}
        rc.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    else:
        lc.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    lc.create_hr(ns, "demo", spec=spec)
    lc.make_stuck(ns, "demo")
    args = ["recover", "-n", ns, "demo"]
    if kind == "remote+backup":
        args += ["--backup-dir", str(workdir / "backups")]
    sim = Cluster(local.kube(user_agent="simulated-helm-controller"))   # not counted
    with SimulatedHelmController(sim, ns):
        lm, rm = local.audit_mark(), remote.audit_mark()
        took, proc = cli(local.kubeconfig, *args)
    ok = "recovered 1 of 1" in proc.stdout
    print(f"  {kind:14s} local {counted(local, lm)}")
    print(f"  {'':14s} remote {counted(remote, rm)}   {took:.2f}s{'' if ok else '  NOT RECOVERED'}")


def hung_status(local: ControlPlane, lc: Cluster, remote: ControlPlane, n: int) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(256)
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
    import yaml
    cfg = yaml.safe_load(remote.self_contained_kubeconfig())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{srv.getsockname()[1]}"
    ns = lc.namespace("hung")
    secret(lc, ns, "hung", yaml.safe_dump(cfg).encode())
    for i in range(n):
        lc.create_hr(ns, f"r{i:03d}", spec={"kubeConfig": {"secretRef": {"name": "hung"}}})
        lc.make_stuck(ns, f"r{i:03d}")
    lc.storage(ns, "local", [(1, "superseded"), (2, "uninstalling")])
    lc.create_hr(ns, "local")
    lc.make_stuck(ns, "local")
    for flags in ((), ("--request-timeout", "3s")):
        took, proc = cli(local.kubeconfig, "status", "-n", ns, "-o", "wide", *flags)
        rows = len(proc.stdout.splitlines()) - 1
        print(f"  status, {n} releases on a hung remote + 1 local {' '.join(flags) or '(default)':22s}"
              f" {took:5.2f}s, {rows} rows, exit {proc.returncode}")
    stop.set()
    for c in held:
        c.close()
    srv.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hung", type=int, default=20)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="remote-bench-"))
    local = ControlPlane(work / "local").start()
    remote = ControlPlane(work / "remote").start(crds=False)
    lc, rc = Cluster(local.kube()), Cluster(remote.kube())
    try:
        print("requests of one `recover -n NS NAME` (audit logs, user agent kubectl-flux-plunger):")
        for kind in ("local", "remote", "remote+backup"):
            one_recovery(local, remote, lc, rc, kind, work)
        hung_status(local, lc, remote, a.hung)
    finally:
        local.stop()
        remote.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
