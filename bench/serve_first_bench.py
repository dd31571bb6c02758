"""Benchmark: ``serve`` start → first recovery with many HelmReleases (issue #13, item 2;
issue 32: the stuck release listed last, against the reference controller).

    .venv/bin/python bench/serve_first_bench.py [--releases 10000[,50000...]] [--runs 3]
        [--plane-dir DIR]     # keep etcd's data there: a second run reuses the releases
        [--serve-python PY]   # run serve from another interpreter/tree
        [--serve-root DIR]
        [--before-root DIR]   # also run serve from DIR (e.g. the tree before a change),
                              # alternating with --serve-root run by run, on the same plane
        [--reference-bin BIN] # also run the reference controller (cozystack's Go
                              # flux-plunger; built outside this repository), alternating too
        [--stuck both|last]   # both stuck releases (default), or only the one listed last

1. starts kube-apiserver + etcd (testplane).  With ``--plane-dir`` the etcd data directory is
   kept, so the releases seeded once (the slow part at 50,000) are there on the next run;
   only missing ones are created (concurrently, each with ~2 KiB of ``spec.values`` so pages
   weigh like real releases), in namespace ``bulk``;
2. per run: one stuck release in namespace ``a-first`` (the first page of an all-namespaces
   LIST, which is ordered by namespace/name) and one in ``zz-last`` (the last page; with
   ``--stuck last`` only that one, so it is the first recovery too); a
   simulated helm-controller acknowledges suspensions there (polling every 100 ms); the
   deletes are noticed by watches, so measuring adds no polling load on the apiserver;
3. starts ``serve`` (leader election on, all namespaces; killed after the run, its Lease
   deleted) and reports, from the moment the
   process is started: the first-page release's Secret deleted, the last-page release's
   Secret deleted, ``/readyz`` answering 200 (the initial sync done: a paged LIST, or the
   initial events of a watch-list), and serve's RSS (VmRSS) and peak RSS (VmHWM) once the
   sync is done and the recoveries are over;
4. with ``--before-root``, each run is a pair — the tree at ``--before-root`` first, then
   ``--serve-root`` — and the medians of both and their ratios (after / before) are printed;
5. with ``--reference-bin``, each run also starts that binary (``--leader-elect``, the
   admin kubeconfig, metrics off, its probes on loopback).  Its leader election takes the
   Lease's namespace from the in-cluster file, so it runs in a private mount namespace
   (``unshare -m``, root) whose ``/run`` is a tmpfs holding
   ``secrets/kubernetes.io/serviceaccount/namespace`` = ``a-first``: the host is not
   touched.  Its readiness probe is a ping, so only its recoveries are timed;
6. every stuck release also gets the Warning Event helm-controller records on a release it
   finds stuck (``UpgradeFailed``, "… has no deployed releases"; core/v1, source
   ``helm-controller``): serve's start-up hints (issue 32) read those; the previous serve
   and the reference ignore them.  With several ``--releases`` (ascending) the plane grows
   from one to the next and every count is measured in the same invocation.

A benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubectl_flux_plunger.core import constants as C  # noqa: E402
from kubectl_flux_plunger.kube import JSON, Kube, KubeError, hr_path  # noqa: E402
from testplane.cluster import Cluster, SimulatedHelmController  # noqa: E402
from testplane.plane import ControlPlane, free_port, wait_for  # noqa: E402

VALUES = {f"key{i:03d}": "x" * 20 for i in range(80)}   # ~2 KiB of chart values
BULK = "bulk"


def rss_kib(pid: int) -> tuple[int, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def ensure_namespace(kube: Kube, name: str) -> None:
    try:
        kube.request("CREATE", "POST", "/api/v1/namespaces", content_type=JSON,
                     body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except KubeError as exc:
        if not exc.conflict:
            raise


def seed(kube: Kube, n: int, workers: int) -> None:
    """Create r00000..r{n-1} in ``bulk`` unless present (reused from a kept plane)."""
    ensure_namespace(kube, BULK)
    have: set[str] = set()
    for items, _ in kube.iter_hr_pages(BULK, None, 2000):
        have.update(hr["metadata"]["name"] for hr in items)
    missing = [f"r{i:05d}" for i in range(n) if f"r{i:05d}" not in have]
    if not missing:
        print(f"{n} HelmReleases already in namespace {BULK} (kept plane)", flush=True)
        return
    started = time.monotonic()
    body_of = (lambda name: {
        "apiVersion": C.HR_API_VERSION, "kind": C.HR_KIND,
        "metadata": {"name": name, "namespace": BULK, "labels": {"app": name[-2:]},
                     "finalizers": [C.HELM_CONTROLLER_FINALIZER]},
        "spec": {"interval": "5m", "chartRef": {"kind": "ExternalArtifact", "name": name},
                 "values": VALUES}})

    def create(name: str) -> None:
        for attempt in range(6):
            try:
                kube.request("CREATE", "POST", hr_path(BULK), body=body_of(name),
                             content_type=JSON)
                return
            except KubeError as exc:
                if exc.conflict:
                    return
                time.sleep(0.2 * (attempt + 1))
        raise RuntimeError(f"could not create {name}")

    done = 0
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(create, missing):
            done += 1
            if done % 5000 == 0:
                print(f"  seeded {done}/{len(missing)} ...", flush=True)
    took = time.monotonic() - started
    print(f"created {len(missing)} HelmReleases in {took:.1f}s ({len(missing) / took:.0f}/s, "
          f"{workers} concurrent creates)", flush=True)


def record_stuck_event(kube: Kube, hr: dict) -> None:
    """The Warning Event helm-controller records at a failed upgrade of a stuck release (its
    shape as read from the real helm-controller: tests/e2e/test_serve_hints_e2e.py)."""
    md = hr["metadata"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    message = (f"Helm upgrade failed for release {md['namespace']}/{md['name']} with chart "
               f"demo@0.1.0: \"{md['name']}\" has no deployed releases")
    kube.request("CREATE", "POST", f"/api/v1/namespaces/{md['namespace']}/events",
                 content_type=JSON, body={
                     "apiVersion": "v1", "kind": "Event",
                     "metadata": {"generateName": f"{md['name']}.", "namespace": md["namespace"]},
                     "involvedObject": {"apiVersion": C.HR_API_VERSION, "kind": C.HR_KIND,
                                        "namespace": md["namespace"], "name": md["name"],
                                        "uid": md["uid"]},
                     "type": "Warning", "reason": "UpgradeFailed", "message": message,
                     "source": {"component": "helm-controller"},
                     "reportingComponent": "helm-controller",
                     "firstTimestamp": now, "lastTimestamp": now, "count": 1})


def prepare_stuck(cluster: Cluster, ns: str, name: str) -> str:
    """A stuck release with a fresh storage revision, and helm-controller's Warning Event on
    it; returns the Secret's path."""
    ensure_namespace(cluster.kube, ns)
    cluster.delete_hr(ns, name)
    wait_for(lambda: cluster.get(ns, name) is None or _drop_finalizers(cluster, ns, name),
             30, f"{ns}/{name} gone")
    for s in cluster.kube.list_secrets(ns, f"owner=helm,name={name}"):
        cluster.kube.request("DELETE", "DELETE",
                             f"/api/v1/namespaces/{ns}/secrets/{s['metadata']['name']}")
    cluster.create_hr(ns, name)
    cluster.storage(ns, name, [(1, "superseded"), (2, "uninstalling")])
    record_stuck_event(cluster.kube, cluster.make_stuck(ns, name))
    return f"/api/v1/namespaces/{ns}/secrets/sh.helm.release.v1.{name}.v2"


def _drop_finalizers(cluster: Cluster, ns: str, name: str) -> bool:
    cluster.merge(ns, name, {"metadata": {"finalizers": None}})
    return cluster.get(ns, name) is None


class DeleteWatch(threading.Thread):
    """When the Secret at ``path`` is deleted (a watch, so measuring adds no polling load
    on the apiserver the serve under test is listing from)."""

    def __init__(self, kube: Kube, path: str) -> None:
        super().__init__(daemon=True)
        self.kube = kube
        self.ns, self.name = path.split("/")[4], path.rsplit("/", 1)[1]
        self.at: float | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        base = f"/api/v1/namespaces/{self.ns}/secrets"
        rv = self.kube.request("LIST", "GET", base, query={
            "fieldSelector": f"metadata.name={self.name}"})["metadata"]["resourceVersion"]
        resp = self.kube.open_watch(base, {
            "watch": "true", "fieldSelector": f"metadata.name={self.name}",
            "resourceVersion": rv, "timeoutSeconds": 600}, timeout=630)
        self.ready.set()
        buf = b""
        try:
            for chunk in resp.stream(4096):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip() and json.loads(line).get("type") == "DELETED":
                        self.at = time.monotonic()
                        return
        finally:
            resp.release_conn()


def drop_lease(cluster: Cluster) -> None:
    """No Lease left by an earlier, killed serve (the next one would wait for it to expire)."""
    try:
        cluster.kube.request("DELETE", "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/"
                                                 f"a-first/leases/{C.LEASE_NAME}")
    except KubeError:
        pass


LEASE_NS = "a-first"


def serve_argv(python: str, plane: ControlPlane, metrics: int, probe: int) -> list[str]:
    return [python, "-m", "kubectl_flux_plunger", "serve", "--kubeconfig", str(plane.kubeconfig),
            "--leader-election-namespace", LEASE_NS,
            "--metrics-bind-address", f"127.0.0.1:{metrics}",
            "--health-probe-bind-address", f"127.0.0.1:{probe}"]


def reference_argv(binary: Path, plane: ControlPlane, metrics: int, probe: int) -> list[str]:
    """The reference controller as its chart runs it (``--leader-elect``), out of a cluster:
    the admin kubeconfig, and the Lease's namespace from an in-cluster namespace file that
    exists only in its own mount namespace (a tmpfs over ``/run``, so ``/var/run/secrets``)."""
    del metrics     # metrics off, its default ("0")
    script = ("mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount"
              f" && printf %s {LEASE_NS} > /run/secrets/kubernetes.io/serviceaccount/namespace"
              ' && exec "$0" "$@"')
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(binary),
            "--kubeconfig", str(plane.kubeconfig), "--leader-elect",
            f"--health-probe-bind-address=127.0.0.1:{probe}", "--zap-log-level=info"]


def one_run(plane: ControlPlane, cluster: Cluster, argv_of, root: Path, log: Path,
            stuck: str, *, readyz: bool = True) -> dict[str, float]:
    """One start of one controller (``argv_of(plane, metrics, probe)``, run from ``root``)
    until the stuck releases' Secrets are deleted (and, with ``readyz``, it answers ready)."""
    drop_lease(cluster)
    ensure_namespace(cluster.kube, LEASE_NS)
    paths = {"last": prepare_stuck(cluster, "zz-last", "stuck")}
    if stuck == "both":
        paths["first"] = prepare_stuck(cluster, "a-first", "stuck")
    probe, metrics = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PYTHONPATH"] = str(root)
    found: dict[str, float] = {}
    watches = {what: DeleteWatch(cluster.kube, path) for what, path in paths.items()}
    for w in watches.values():
        w.start()
        w.ready.wait(30)
    with SimulatedHelmController(cluster, "a-first", interval=0.1), \
            SimulatedHelmController(cluster, "zz-last", interval=0.1), open(log, "wb") as fh:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv_of(plane, metrics, probe), stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=str(root))
        try:
            ready_at = None if readyz else 0.0
            while (any(w.is_alive() for w in watches.values()) or ready_at is None) \
                    and time.monotonic() - t0 < 600:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv_of.__name__} exited {proc.returncode}:\n"
                                       f"{log.read_text()[-3000:]}")
                if ready_at is None:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz",
                                                    timeout=1) as r:
                            if r.status == 200:
                                ready_at = time.monotonic() - t0
                                found["ready"] = ready_at
                    except OSError:
                        pass
                time.sleep(0.02)
            for what, w in watches.items():
                if w.at is not None:
                    found[what] = w.at - t0
            time.sleep(1.0)
            rss, hwm = rss_kib(proc.pid)
            found["rss"], found["hwm"] = rss / 1024, hwm / 1024
        finally:
            # SIGKILL, not SIGTERM: the drain's LIST of every release would take longer than
            # the run; the Lease it leaves is deleted so the next run leads at once
            proc.kill()
            proc.wait(10)
            drop_lease(cluster)
    return found


def start_plane(workdir: Path) -> ControlPlane:
    """A control plane on ``workdir``; a kept one (etcd data present) already holds the CRDs
    and the releases: testplane's CRD check would LIST every release at once, so wait for the
    HelmRelease API with a one-item LIST instead."""
    kept = (workdir / "etcd-data").exists()
    plane = ControlPlane(workdir)
    try:
        plane.start(crds=not kept)
        if kept:
            kube = plane.kube()

            def served() -> bool:
                kube.request("LIST", "GET", hr_path(None), query={"limit": 1})
                return True
            wait_for(served, 120, "the HelmRelease API of the kept plane")
            kube.close()
    except BaseException:
        plane.stop()     # never leave an etcd holding the kept data directory
        raise
    return plane


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", default="10000",
                    help="HelmReleases in namespace bulk; several, comma-separated, ascending: "
                         "the plane grows from one count to the next")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=0,
                    help="runs of every variant before the counted ones, not counted (the "
                         "first start of a tree compiles its bytecode and reads it from disk)")
    ap.add_argument("--seed-workers", type=int, default=16)
    ap.add_argument("--plane-dir", type=Path, default=None)
    ap.add_argument("--serve-python", default=sys.executable)
    ap.add_argument("--serve-root", type=Path, default=ROOT)
    ap.add_argument("--before-root", type=Path, default=None)
    ap.add_argument("--reference-bin", type=Path, default=None)
    ap.add_argument("--stuck", choices=("both", "last"), default="both")
    a = ap.parse_args()
    counts = [int(n) for n in a.releases.split(",")]
    if counts != sorted(counts):
        ap.error("--releases: ascending counts")

    workdir = a.plane_dir or Path(tempfile.mkdtemp(prefix="serve-first-"))
    workdir.mkdir(parents=True, exist_ok=True)
    plane = start_plane(workdir)
    print(f"control plane up in {plane.start_seconds:.1f}s ({workdir}); load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    kube = plane.kube()
    cluster = Cluster(kube)

    def serve_from(python: str):
        def serve(plane: ControlPlane, metrics: int, probe: int) -> list[str]:
            return serve_argv(python, plane, metrics, probe)
        return serve

    def reference(plane: ControlPlane, metrics: int, probe: int) -> list[str]:
        return reference_argv(a.reference_bin.resolve(), plane, metrics, probe)

    # (name, argv_of, root, serves /readyz)
    variants = [("after", serve_from(a.serve_python), a.serve_root, True)]
    if a.before_root is not None:
        variants.insert(0, ("before", serve_from(a.serve_python), a.before_root, True))
    if a.reference_bin is not None:
        variants.append(("reference", reference, workdir, False))
    metrics_shown = ("last",) + (("first",) if a.stuck == "both" else ()) + (
        "ready", "rss", "hwm")
    try:
        for n in counts:
            seed(kube, n, a.seed_workers)
            # a restarted apiserver serves its first full LIST while its watch cache fills:
            # warm it so every run meets the same apiserver
            t = time.monotonic()
            count = sum(len(items) for items, _ in kube.iter_hr_pages(None, None, 500))
            print(f"warm-up LIST of {count} HelmReleases: {time.monotonic() - t:.1f}s",
                  flush=True)
            results: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in variants}
            for i in range(-a.warmup, a.runs):
                for name, argv_of, root, readyz in variants:     # alternating, on one plane
                    log = workdir / f"run-{n}-{name}-{i}.log"
                    r = one_run(plane, cluster, argv_of, root, log, a.stuck, readyz=readyz)
                    if i < 0:
                        print(f"{n} warm-up {name}: last-page release recovered "
                              f"{r.get('last', float('nan')):.2f}s (not counted)", flush=True)
                        continue
                    text = log.read_text(errors="replace")
                    r["via_watch_list"] = float('"via":"watch-list"' in text
                                                or "via=watch-list" in text)
                    results[name].append(r)
                    print(f"{n} run {i + 1} {name}: last-page release recovered "
                          f"{r.get('last', float('nan')):.2f}s"
                          + (f", first-page release {r.get('first', float('nan')):.2f}s"
                             if a.stuck == "both" else "")
                          + (f", ready {r.get('ready', float('nan')):.2f}s" if readyz else "")
                          + f" after start; RSS {r['rss']:.1f} MiB (peak {r['hwm']:.1f} MiB)"
                          + (f"; synced by {'watch-list' if r['via_watch_list'] else 'LIST'}"
                             if readyz else "")
                          + f"; load average {os.getloadavg()[0]:.2f}", flush=True)

            def med(name: str, k: str) -> float:
                return statistics.median(r.get(k, float("nan")) for r in results[name])
            for name, *_ in variants:
                print(f"median of {a.runs} {name} with {n} HelmReleases: " + ", ".join(
                    f"{k} {med(name, k):.2f}" for k in metrics_shown), flush=True)
            for base in ("before", "reference"):
                if base in results:
                    print(f"{n}: after / {base} (medians): " + ", ".join(
                        f"{k} {med('after', k) / med(base, k):.2f}x"
                        for k in metrics_shown if k != "ready" or base != "reference"),
                        flush=True)
            print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        kube.close()
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
