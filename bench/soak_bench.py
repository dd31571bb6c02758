"""Soak of ``kubectl flux-plunger serve`` (issue 49): does memory, files and reaction stay flat
over a compressed stretch of cluster life?

    .venv/bin/python bench/soak_bench.py [--releases 2000] [--minutes 30] [--warmup 5]
        [--write-rate 25] [--stuck-every 60] [--churn-every 10] [--resync 120]
        [--restarts 1] [--sample-every 10] [--no-tracemalloc] [--reference-bin BIN]
        [--out DIR]
    .venv/bin/python bench/soak_bench.py --rss-plot OURS/samples.json:serve \
        REF/samples.json:reference --out DIR      # the RSS curves side by side (rss.png)

1. starts kube-apiserver + etcd (testplane; ``--min-request-timeout=60``) and creates
   ``--releases`` HelmReleases in namespace ``bulk`` (bench/serve_first_bench.py's seed, ~2 KiB
   of values each), each with one ``deployed`` Helm storage Secret;
2. starts ``serve`` as the chart runs it — leader election on, metrics on, every namespace,
   Flux notifications on (``--events-addr``: a loopback receiver, testplane.notifyctl) — and,
   once it is ready, drives it for ``--minutes``:
   * a helm-controller-like status writer: ``--write-rate`` status updates a second (Ready
     True, the attempted revision and reconcile time moving) on random releases of ``bulk``;
   * churn: every ``--churn-every`` seconds a new release (with storage) and a deleted one
     (its helm-controller finalizer dropped, as helm-controller does);
   * every ``--stuck-every`` seconds one release made stuck in its own short-lived release
     (a new name, a new uid): in turn recovered (a simulated helm-controller acknowledges the
     suspension from a watch as the real one does, testplane.cluster.WatchingAcknowledger;
     ``--ack poll``: a LIST every 50 ms, as the soaks before the last of 2026-12-07; then the
     driver writes its successful retry), recovered, corrupt
     (its newest revision undecodable: skipped, announced by a RecoverySkipped Event and
     notification), recovered, deleted mid-recovery (deleted once serve holds it; its own
     namespace's simulated helm-controller handles deletes but never acknowledges a
     suspension, so the delete always lands while the recovery waits); each with
     helm-controller's Warning Event; the previous cycle's release is deleted;
   * ``--restarts`` apiserver restarts, spread over the run after the warm-up (the watch
     resumes from a resourceVersion the new watch cache may not have: 410, a fresh sync);
   * serve runs with ``--resync-period`` = ``--resync`` (default 2 min): before issue 58
     every re-sync ended the watch and streamed every release again; since, it is the
     catch-all (no stream), and the watch ends only at its ``timeoutSeconds`` (300 s: the
     apiserver honours a client's timeout over ``--min-request-timeout``) and resumes from
     its resourceVersion;
   * ``--kinds`` picks the stuck cycles' kinds in turn (default: the five above);
3. every ``--sample-every`` seconds: serve's RSS (VmRSS), open file descriptors, threads,
   its request rate (``flux_plunger_api_requests_total`` from its /metrics), the reactions
   (stuck written → its newest Secret's DELETE seen by a watch) of that window, and the
   status writes the driver made, and what its heap holds (serve runs under a wrapper whose
   SIGUSR2 handler answers: Python's allocated blocks and glibc malloc's bytes in use and
   free, ``mallinfo2``; it tells a growing Python heap from an allocator keeping freed
   memory); printed as a table as it goes and plotted into ``soak.png`` (matplotlib,
   bench/requirements-soak.txt);
4. with tracemalloc (default): the wrapper traces serve from its start and
   dumps a snapshot at 80 % of the warm-up and after the last sample (SIGUSR1); the top
   allocation sites that grew between the two are printed.  Tracing costs memory (a record
   per live block; a snapshot copies them all) and time of its own: with it from the start
   its share is steady by the end of the warm-up, but the absolute RSS and the reactions are
   those of a traced process — ``--no-tracemalloc`` measures serve as it runs in a
   Deployment;
5. the reactions inside re-syncs and outside them (issue 58), p50/p95/p99: a recovery is
   inside when its stuck → recovered interval meets a catch-all pass's first ``--inside``
   seconds (its log line: the candidates it queued may keep the workers), or an old-style
   re-sync's stream;
6. the goals of issue 49 are printed with the numbers: RSS slope after the warm-up (MiB/h,
   least squares), RSS / fds / threads first vs last, every stuck release recovered, every
   corrupt one announced, every deleted one gone, reaction p95 and request rate of the
   first window after the warm-up vs the last (``--window`` minutes, at most half of what
   follows the warm-up), the relists by reason;
7. with ``--reference-bin``: the same soak of the reference controller (PR #4293's Go build,
   as its chart runs it: bench/serve_first_bench.py's ``reference_argv``) instead of serve —
   RSS, fds, threads and reactions (no metrics: no request rate; Go: no heap figures;
   it announces nothing for a corrupt revision).  ``--rss-plot`` then draws both RSS curves.

A benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import functools
import gc
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from datetime import datetime, timezone
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SNAPSHOTS = "SOAK_TRACEMALLOC_DIR"
TRACE = "SOAK_TRACE"          # "1": trace from the start (tracemalloc)
STATS = "SOAK_STATS_FILE"     # where SIGUSR2 writes the heap's figures
COLLECT = "SOAK_COLLECT"      # "1": each SIGUSR2 first runs a full gc.collect() (--collect)
TYPES = 25                    # object types counted per probe with --collect
FRAMES = 12  # frames kept per traced allocation: enough to reach the package's own code


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc >= 2.33): the C heap's figures."""
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


@functools.cache
def _mallinfo2():
    """glibc's ``mallinfo2``, looked up once: a ``CDLL`` made per call would leave its
    function objects behind in the process it measures (the traced run of 2026-12-05 saw
    +45 KiB of them)."""
    fn = ctypes.CDLL(None).mallinfo2
    fn.restype = MallInfo2
    return fn


def heap_figures(collect: bool = False) -> dict:
    """What the process's heap holds: Python's allocated blocks, the traced bytes (when
    tracing), glibc malloc's in-use and free bytes (``mallinfo2``; none elsewhere), and the
    cyclic collector's full (generation 2) collections so far and what they freed.

    ``collect``: first a full ``gc.collect()`` (it changes the process it measures: a
    diagnosis, not the soak), then the blocks that are left (``live_blocks``), how many
    unreachable objects it found, and the most numerous object types the collector tracks."""
    gen2 = gc.get_stats()[2]
    out: dict = {"blocks": sys.getallocatedblocks(), "gc2": gen2["collections"],
                 "gc2_freed": gen2["collected"]}
    if collect:
        gc.set_debug(gc.DEBUG_SAVEALL)     # keep what it finds, to name it, then drop it
        try:
            out["unreachable"] = gc.collect()
        finally:
            gc.set_debug(0)
        found, gc.garbage[:] = gc.garbage[:], []
        out["garbage"] = dict(collections.Counter(
            type(o).__name__ for o in found).most_common(TYPES))
        out["garbage_code"] = dict(collections.Counter(
            f"{Path(c.co_filename).name}:{c.co_firstlineno}:{c.co_name}" for c in (
                getattr(o, "f_code", None) or getattr(o, "__code__", None) for o in found)
            if c is not None).most_common(TYPES))
        del found
        gc.collect()    # now free them (saved, they were reachable from gc.garbage)
        out["live_blocks"] = sys.getallocatedblocks()
        out["types"] = dict(collections.Counter(
            type(o).__name__ for o in gc.get_objects()).most_common(TYPES))
    if tracemalloc.is_tracing():
        out["traced"] = tracemalloc.get_traced_memory()[0]
    try:
        mi = _mallinfo2()()
        out.update(malloc_used=mi.uordblks + mi.hblkhd, malloc_free=mi.fordblks)
    except (OSError, AttributeError):
        pass
    return out


def serve_child(argv: list[str]) -> int:
    """``serve`` with two signal handlers: SIGUSR2 writes :func:`heap_figures` (with a
    sequence number) to $SOAK_STATS_FILE; with $SOAK_TRACE=1, tracemalloc traces it from its
    start and each SIGUSR1 dumps a snapshot into $SOAK_TRACEMALLOC_DIR (snap-1, snap-2 …).
    Without tracing this is serve as it runs in a Deployment, plus the handlers."""
    where, stats = Path(os.environ[SNAPSHOTS]), Path(os.environ[STATS])
    taken, told = itertools.count(1), itertools.count(1)
    if os.environ.get(TRACE) == "1":
        tracemalloc.start(FRAMES)

    def on_usr1(signum, frame):
        n = next(taken)
        tracemalloc.take_snapshot().dump(str(where / f".snap-{n}"))
        os.replace(where / f".snap-{n}", where / f"snap-{n}.tracemalloc")  # whole when seen

    def on_usr2(signum, frame):
        part = stats.with_suffix(".part")
        part.write_text(json.dumps({"seq": next(told),
                                    **heap_figures(os.environ.get(COLLECT) == "1")}))
        os.replace(part, stats)

    if tracemalloc.is_tracing():
        signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGUSR2, on_usr2)
    sys.argv = ["kubectl-flux-plunger", *argv]
    from kubectl_flux_plunger.entry import main
    return main()


if __name__ == "__main__" and sys.argv[1:2] == ["--serve-child"]:
    raise SystemExit(serve_child(sys.argv[2:]))

from kubectl_flux_plunger.core import constants as C  # noqa: E402
from kubectl_flux_plunger.kube import KubeError  # noqa: E402
from serve_bench import Serve, pct, rss_kib  # noqa: E402
from serve_first_bench import LEASE_NS as REFERENCE_LEASE_NS  # noqa: E402
from serve_first_bench import (BULK, DeleteWatch, ensure_namespace,  # noqa: E402
                               record_stuck_event, reference_argv, seed)
from testplane.cluster import Cluster, SimulatedHelmController, WatchingAcknowledger  # noqa: E402
from testplane.notifyctl import Receiver  # noqa: E402
from testplane.plane import ControlPlane, free_port, wait_for  # noqa: E402
from tests.apiserver.conftest import corrupt_revision  # noqa: E402

STUCK, SLOW, LEASE_NS = "soak-stuck", "soak-slow", "soak-lease"
SKIPPED = "soak-skipped"   # --skipped: corrupt releases nobody repairs, candidates of every pass
KINDS = ("recover", "recover", "corrupt", "recover", "delete")


class Reference(Serve):
    """The reference controller (``--reference-bin``) as its chart runs it
    (bench/serve_first_bench.py's ``reference_argv``: ``--leader-elect``, metrics off): the
    same soak, its RSS, fds, threads and reactions; no request rate (no metrics) and no heap
    figures (a Go process).  Ready and stopped as ``Serve`` is (its /readyz, a kill)."""

    def __init__(self, binary: Path, plane: ControlPlane, log: Path):  # not Serve.__init__
        self.probe, self.metrics = free_port(), None
        self.log = log
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(reference_argv(binary.resolve(), plane, 0, self.probe),
                                         stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)


class QuietDeleteWatch(DeleteWatch):
    """``DeleteWatch`` whose stream may break (an apiserver restart): the cycle then reads."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            self.error = exc


def now_stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def ready_status(name: str, generation: int, n: int) -> dict:
    """What helm-controller writes after a successful reconcile."""
    return {"observedGeneration": generation, "lastAttemptedGeneration": generation,
            "lastAttemptedRevision": f"0.1.{n}", "lastHandledReconcileAt": now_stamp(),
            "conditions": [{"type": "Ready", "status": "True",
                            "reason": "UpgradeSucceeded", "observedGeneration": generation,
                            "lastTransitionTime": now_stamp(),
                            "message": f"Helm upgrade succeeded for release {BULK}/{name}.v{n} "
                                       f"with chart demo@0.1.{n}"}]}


def add_storage(cluster: Cluster, ns: str, names: list[str], workers: int) -> None:
    """One ``deployed`` storage revision each (kept when there already is one)."""
    def one(name: str) -> None:
        try:
            cluster.storage(ns, name, [(1, "deployed")])
        except KubeError as exc:
            if not exc.conflict:
                raise
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, names))


def make_skipped(cluster: Cluster, n: int) -> None:
    """``n`` releases stuck on a corrupt newest revision in soak-skipped, left as they are."""
    def one(i: int) -> None:
        name = f"k{i:04d}"
        cluster.create_hr(SKIPPED, name)
        cluster.storage(SKIPPED, name, [(1, "superseded")])
        corrupt_revision(cluster, SKIPPED, name, 2)
        cluster.make_stuck(SKIPPED, name)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


class Driver:
    """The cluster's life: status writes, churn, stuck cycles, apiserver restarts."""

    def __init__(self, plane: ControlPlane, cluster: Cluster, receiver: Receiver,
                 names: list[str], a: argparse.Namespace) -> None:
        self.plane, self.cluster, self.receiver, self.a = plane, cluster, receiver, a
        self.names = list(names)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.writes = self.write_errors = 0
        self.cycles: list[dict] = []   # one per stuck cycle: kind, start, outcome
        self.restarts: list[tuple[float, float]] = []   # (at, seconds it took)
        self.churned = 0
        self.t0 = time.monotonic()
        self.restart_at = [a.warmup * 60 + (i + 1) * (a.minutes - a.warmup) * 60
                           / (a.restarts + 1) for i in range(a.restarts)]

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._writer, args=(i,), daemon=True)
                   for i in range(4)]
        threads += [threading.Thread(target=self._churn, daemon=True),
                    threading.Thread(target=self._stuck_loop, daemon=True)]
        for t in threads:
            t.start()
        return threads

    def _writer(self, i: int) -> None:
        period = 4 / self.a.write_rate
        due = time.monotonic() + i * period / 4
        rng = random.Random(i)
        while not self.stop.is_set():
            due += period
            with self.lock:
                name = rng.choice(self.names)
            try:
                self.cluster.set_status(BULK, name, ready_status(name, 1, rng.randrange(1000)))
                with self.lock:
                    self.writes += 1
            except KubeError:
                with self.lock:
                    self.write_errors += 1
            self.stop.wait(max(0.0, due - time.monotonic()))
            due = max(due, time.monotonic() - 1)   # after an outage: no burst to catch up

    def _churn(self) -> None:
        k = 0
        while not self.stop.wait(self.a.churn_every):
            k += 1
            new = f"c{k:05d}"
            try:
                self.cluster.create_hr(BULK, new, spec={"values": {"k": "v" * 2000}})
                self.cluster.storage(BULK, new, [(1, "deployed")])
                with self.lock:
                    self.names.append(new)
                    old = self.names.pop(random.randrange(len(self.names) - 1))
                self.cluster.delete_hr(BULK, old)
                self.cluster.remove_finalizer(BULK, old, C.HELM_CONTROLLER_FINALIZER)
                self.churned += 1
            except KubeError:
                pass

    def _stuck_loop(self) -> None:
        previous: tuple[str, str] | None = None
        for k in itertools.count():
            if self.stop.wait(self.a.stuck_every if k else 5):
                return
            while self.restart_at and self.elapsed() >= self.restart_at[0]:
                self.restart_at.pop(0)
                at = time.monotonic()
                self.plane.restart_apiserver()
                self.restarts.append((at - self.t0, time.monotonic() - at))
                print(f"  apiserver restarted at {at - self.t0:.0f}s "
                      f"({time.monotonic() - at:.1f}s)", flush=True)
            if previous is not None:
                try:
                    self.cluster.delete_hr(*previous)
                except KubeError:
                    pass
            kind = self.a.kinds[k % len(self.a.kinds)]
            cycle = {"kind": kind, "start": self.elapsed(), "name": f"s{k:04d}"}
            self.cycles.append(cycle)
            try:
                getattr(self, f"_{kind}")(cycle)
            except (KubeError, TimeoutError) as exc:
                cycle["error"] = str(exc)[:200]
            previous = (SLOW if kind == "delete" else STUCK, cycle["name"])

    def _stuck(self, ns: str, name: str, corrupt: bool = False) -> dict:
        self.cluster.create_hr(ns, name)
        self.cluster.storage(ns, name, [(1, "superseded")] if corrupt
                             else [(1, "superseded"), (2, "uninstalling")])
        if corrupt:
            corrupt_revision(self.cluster, ns, name, 2)
        hr = self.cluster.make_stuck(ns, name)
        record_stuck_event(self.cluster.kube, hr)
        return hr

    def _recover(self, cycle: dict) -> None:
        name = cycle["name"]
        path = f"/api/v1/namespaces/{STUCK}/secrets/sh.helm.release.v1.{name}.v2"
        self.cluster.create_hr(STUCK, name)
        self.cluster.storage(STUCK, name, [(1, "superseded"), (2, "uninstalling")])
        watch = QuietDeleteWatch(self.cluster.kube, path)
        watch.start()
        watch.ready.wait(30)
        t = time.monotonic()
        cycle["written"] = time.time()   # wall clock: placed against serve's log
        record_stuck_event(self.cluster.kube, self.cluster.make_stuck(STUCK, name))

        def gone() -> bool:
            if watch.at is not None or watch.is_alive():
                return watch.at is not None
            try:   # the watch broke (an apiserver restart): a read says it
                self.cluster.kube.request("GET", "GET", path)
                return False
            except KubeError as exc:
                return exc.not_found
        wait_for(gone, 120, f"{name} recovered", interval=0.01)
        cycle["reaction"] = ((watch.at or time.monotonic()) - t)
        cycle["at"] = cycle["start"] + (time.monotonic() - t)
        # serve relinquishes; helm-controller's retry then succeeds
        wait_for(lambda: not self._held(STUCK, name), 60, f"{name} relinquished")
        hr = self.cluster.get(STUCK, name)
        self.cluster.set_status(STUCK, name, ready_status(name, hr["metadata"]["generation"], 2))
        cycle["outcome"] = "recovered"

    def _held(self, ns: str, name: str) -> bool:
        hr = self.cluster.get(ns, name) or {}
        return bool((hr.get("spec") or {}).get("suspend")) or C.FENCE in (
            (hr.get("metadata") or {}).get("finalizers") or [])

    def _corrupt(self, cycle: dict) -> None:
        name = cycle["name"]
        self._stuck(STUCK, name, corrupt=True)

        def announced() -> bool:
            events = [e for e in self.cluster.events(STUCK, name)
                      if e.get("reason") == "RecoverySkipped"]
            posted = [b for b in self.receiver.received()
                      if b.get("reason") == "RecoverySkipped"
                      and (b.get("involvedObject") or {}).get("name") == name]
            cycle["event"], cycle["notification"] = bool(events), bool(posted)
            return bool(events and posted)
        try:
            wait_for(announced, 60, f"{name} announced", interval=0.2)
        finally:
            cycle["outcome"] = "announced" if cycle.get("event") else "not announced"

    def _delete(self, cycle: dict) -> None:
        name = cycle["name"]
        self._stuck(SLOW, name)
        wait_for(lambda: self._held(SLOW, name), 60, f"{name} held by serve", interval=0.02)
        self.cluster.delete_hr(SLOW, name)
        t = time.monotonic()
        wait_for(lambda: self.cluster.get(SLOW, name) is None, 120, f"{name} gone")
        cycle["gone_after"] = time.monotonic() - t
        cycle["outcome"] = "gone"


def scrape(port: int) -> dict[str, dict[tuple, float]]:
    """serve's /metrics: family → {label values: value} (the lease label left out)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for line in text.splitlines():
        m = re.match(r"^(flux_plunger_\w+?)(?:\{(.*)\})? (\S+)$", line)
        if m:
            labels = tuple(v for k, v in re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")
                           if k != "lease")
            out.setdefault(m.group(1), {})[labels] = float(m.group(3))
    return out


def proc_counts(pid: int) -> tuple[float, int, int, float]:
    """RSS (MiB), open file descriptors, threads of ``pid``, and the anonymous part of its
    RSS (MiB: the heaps and stacks, not the pages of files mapped — code and libraries a
    path touches for the first time grow RSS once, not with the history)."""
    rss, _ = rss_kib(pid)
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))
    anon = re.search(r"^RssAnon:\s+(\d+)", status, re.M)
    return (rss / 1024, len(os.listdir(f"/proc/{pid}/fd")), threads,
            int(anon.group(1)) / 1024 if anon else float("nan"))


def mean(ss: list[dict], key: str) -> float:
    return sum(s[key] for s in ss) / len(ss)


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) in value per hour."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx * 3600 if sxx else float("nan")


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


NO_PLOT = "no plot: matplotlib is not installed (pip install -r bench/requirements-soak.txt)"


def plot(samples: list[dict], driver: Driver, warmup: float, path: Path) -> str:
    plt = _pyplot()
    if plt is None:
        return NO_PLOT
    t = [s["t"] / 60 for s in samples]
    heap = any("blocks" in s for s in samples)
    fig, axes = plt.subplots(6 if heap else 5, 1, figsize=(9, 14 if heap else 12), sharex=True)
    series = (("rss", "RSS (MiB)"), ("fds", "open fds"), ("threads", "threads"),
              ("req_rate", "requests/s"))
    for ax, (key, label) in zip(axes, series):
        ax.plot(t, [s[key] for s in samples], marker=".")
        ax.set_ylabel(label)
    axes[0].plot(t, [s.get("anon", float("nan")) for s in samples], marker=".")
    axes[0].legend(["RSS", "of it anonymous (RssAnon)"])
    done = [c for c in driver.cycles if "reaction" in c]
    axes[4].plot([c["at"] / 60 for c in done], [c["reaction"] * 1000 for c in done], "o")
    axes[4].set_ylabel("reaction (ms)")
    if heap:
        ax = axes[5]
        have = [s for s in samples if "blocks" in s]
        ax.plot([s["t"] / 60 for s in have], [s["blocks"] / 1000 for s in have], marker=".")
        ax.set_ylabel("Python blocks (k)")
        twin = ax.twinx()
        twin.plot([s["t"] / 60 for s in have], [s.get("malloc_used", 0) / 2**20 for s in have],
                  color="tab:orange", marker=".")
        twin.set_ylabel("malloc in use (MiB)", color="tab:orange")
    axes[-1].set_xlabel("minutes since the drivers started")
    for ax in axes:
        ax.axvline(warmup, color="grey", linestyle="--")
        for at, _ in driver.restarts:
            ax.axvline(at / 60, color="red", linestyle=":")
        ax.grid(alpha=0.3)
    fig.suptitle("soak (issue 49); dashed: end of warm-up; dotted: apiserver restart")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return f"plot: {path}"


def rss_plot(runs: list[str], path: Path, warmup: float) -> str:
    """The RSS of earlier runs (their samples.json, each ``PATH:LABEL``) on one axis."""
    plt = _pyplot()
    if plt is None:
        return NO_PLOT
    fig, ax = plt.subplots(figsize=(9, 4))
    for run in runs:
        file, _, label = run.partition(":")
        samples = json.loads(Path(file).read_text())
        ax.plot([s["t"] / 60 for s in samples], [s["rss"] for s in samples], marker=".",
                label=label or file)
    ax.axvline(warmup, color="grey", linestyle="--")
    ax.set_xlabel("minutes since the drivers started")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle("soak (issue 49): RSS side by side; dashed: end of warm-up")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return f"plot: {path}"


def growth(first: Path, last: Path, top: int = 12) -> list[str]:
    """The allocation sites that grew most from snapshot ``first`` to ``last``."""
    noise = [tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
             tracemalloc.Filter(False, tracemalloc.__file__)]
    a = tracemalloc.Snapshot.load(str(first)).filter_traces(noise)
    b = tracemalloc.Snapshot.load(str(last)).filter_traces(noise)
    diff = b.compare_to(a, "traceback")
    total = sum(d.size_diff for d in diff)
    lines = [f"tracemalloc, last vs first snapshot: {total / 1024:+.1f} KiB in all; top growing "
             "sites (the allocating line; 'via': the innermost line of the package above it):"]

    def short(frame) -> str:
        return f"{frame.filename.replace(str(ROOT) + '/', '')}:{frame.lineno}"
    for d in sorted(diff, key=lambda d: -d.size_diff)[:top]:
        frames = list(reversed(d.traceback))   # most recent call first
        ours = next((f for f in frames if "kubectl_flux_plunger" in f.filename), None)
        via = f"  via {short(ours)}" if ours is not None and ours is not frames[0] else ""
        lines.append(f"  {d.size_diff / 1024:+9.1f} KiB {d.count_diff:+7d} blocks  "
                     f"{short(frames[0])}{via}")
    return lines


def collected_lines(heap: list[dict], first: list[dict], last: list[dict]) -> list[str]:
    """With ``--collect``: the blocks left after each full collection (first window -> last,
    slope), what each collection found unreachable, and the object types that grew."""
    live = [s for s in heap if "live_blocks" in s]
    lf, ll = [s for s in first if "live_blocks" in s], [s for s in last if "live_blocks" in s]
    if len(live) < 2 or not lf or not ll:
        return []
    unreachable = sorted(s["unreachable"] for s in live)
    lines = [f"  after a full gc.collect(): Python blocks {mean(lf, 'live_blocks') / 1000:.1f}k "
             f"-> {mean(ll, 'live_blocks') / 1000:.1f}k ("
             f"{slope_per_hour([(s['t'], s['live_blocks']) for s in live]) / 1000:+.1f}k/h); "
             f"unreachable objects found per probe: median {unreachable[len(unreachable) // 2]}, "
             f"max {unreachable[-1]}"]
    grew = {k: ll[-1]["types"].get(k, 0) - lf[0]["types"].get(k, 0)
            for k in set(lf[0]["types"]) | set(ll[-1]["types"])}
    top = sorted(grew.items(), key=lambda kv: -abs(kv[1]))[:8]
    lines.append("  object types, last probe vs first after the warm-up: "
                 + ", ".join(f"{k} {v:+d}" for k, v in top))
    for key, what in (("garbage", "cyclic garbage by type"),
                      ("garbage_code", "frames and functions in it by code")):
        total: collections.Counter = collections.Counter()
        for s in live:
            total.update(s.get(key, {}))
        if total:
            lines.append(f"  {what}, all probes after the warm-up: "
                         + ", ".join(f"{k} {v}" for k, v in total.most_common(8)))
    return lines


class HeapProbe:
    """Asks the serve child for its heap figures (SIGUSR2) and waits for the answer."""

    def __init__(self, path: Path):
        self.path, self.seq = path, 0

    def ask(self, proc: subprocess.Popen) -> dict:
        proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                got = json.loads(self.path.read_text())
            except (OSError, ValueError):
                got = {}
            if got.get("seq", 0) > self.seq:
                self.seq = got["seq"]
                return got
            time.sleep(0.02)
        return {}   # not answered in 5 s: this sample has no heap figures


def sample(serve, driver: Driver, last: dict | None, probe: HeapProbe | None) -> dict:
    rss, fds, threads, anon = proc_counts(serve.proc.pid)
    metrics = scrape(serve.metrics) if serve.metrics else {}
    requests = sum(metrics.get("flux_plunger_api_requests_total", {}).values())
    t = driver.elapsed()
    s = {"t": t, "rss": rss, "anon": anon, "fds": fds, "threads": threads, "requests": requests,
         "writes": driver.writes, "metrics": metrics, "load": os.getloadavg()[0]}
    if probe is not None:
        s.update({k: v for k, v in probe.ask(serve.proc).items() if k != "seq"})
    dt = t - last["t"] if last else t
    if not serve.metrics:
        s["req_rate"] = float("nan")   # the reference: no metrics
    else:
        s["req_rate"] = (requests - (last["requests"] if last else 0)) / dt if dt > 0 else 0.0
    s["write_rate"] = (driver.writes - (last["writes"] if last else 0)) / dt if dt > 0 else 0.0
    since = last["t"] if last else 0.0
    s["reactions"] = [c["reaction"] for c in driver.cycles
                      if "reaction" in c and since <= c["at"] < t]
    return s


def row(s: dict) -> str:
    r = s["reactions"]
    react = f"{max(r) * 1000:6.0f}" if r else "     -"
    heap = (f" {s['blocks'] / 1000:8.1f} {s.get('malloc_used', 0) / 2**20:7.1f} "
            f"{s.get('malloc_free', 0) / 2**20:7.1f}" if "blocks" in s else "")
    return (f"{s['t'] / 60:6.1f} {s['rss']:8.1f} {s['anon']:6.1f} {s['fds']:5d} {s['threads']:5d} "
            f"{s['req_rate']:8.2f} {s['write_rate']:7.1f} {len(r):4d} {react}{heap}")


HEADER = ("   min  RSS-MiB   anon   fds  thr   req/s  writes/s  rec  max-ms  pyblk-k  malloc  "
          "mfree   (malloc in use / free, MiB)")


def windows(samples: list[dict], warmup_s: float, window_s: float) -> tuple[list, list]:
    after = [s for s in samples if s["t"] >= warmup_s]
    if not after:
        return [], []
    end = after[-1]["t"]
    span = min(window_s, (end - warmup_s) / 2)
    first = [s for s in after if s["t"] <= warmup_s + span]
    last = [s for s in after if s["t"] >= end - span]
    return first, last


def syncs_by_way(log: str) -> str:
    """How serve's syncs were made, in order: ``reason/via`` of each "listed HelmReleases"
    line of its log (a watch-list, or the paged LIST it falls back to)."""
    ways = re.findall(r"listed HelmReleases reason=(\S+) via=(\S+)", log)
    runs: list[list] = []
    for way in (f"{r}/{v}" for r, v in ways):
        if runs and runs[-1][0] == way:
            runs[-1][1] += 1
        else:
            runs.append([way, 1])
    return "  serve's syncs in order: " + ", ".join(
        f"{way} x{n}" if n > 1 else way for way, n in runs)


def spread(r: list[float]) -> str:
    return (f"p50 {pct(r, 50) * 1000:.0f} ms, p95 {pct(r, 95) * 1000:.0f} ms, "
            f"p99 {pct(r, 99) * 1000:.0f} ms, max {max(r) * 1000:.0f} ms ({len(r)} recoveries)"
            if r else "no recoveries")


def _stamp(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=timezone.utc).timestamp()


def resync_spans(log: str, after: float) -> tuple[list[tuple[float, float]], str]:
    """Where serve re-synced, as wall-clock spans from its log: a catch-all pass (issue
    58: no stream) from its line to ``after`` seconds later — the time its queued candidates
    may keep the workers — or an old-style re-sync's stream, from the watch that ended for
    it to its "listed HelmReleases reason=resync" line (its initial events' time: the line's
    ``seconds`` when logged, else ``after`` back)."""
    spans, kinds, queued = [], collections.Counter(), []
    for m in re.finditer(r"^(\S+) +INFO +(catch-all: candidates queued again count=(\d+)|"
                         r"listed HelmReleases reason=resync)", log, re.M):
        at = _stamp(m.group(1))
        if m.group(2).startswith("catch-all"):
            spans.append((at, at + after))
            kinds["catch-all pass"] += 1
            queued.append(int(m.group(3)))
        else:
            spans.append((at - after, at))
            kinds["re-sync stream"] += 1
    what = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "none"
    if queued:
        what += f" (each queued {min(queued)}-{max(queued)} candidates)"
    return spans, what


def reactions_inside(driver: Driver, spans: list[tuple[float, float]]) -> tuple[list, list]:
    """The recoveries whose stuck → recovered interval meets a re-sync span, and the rest."""
    inside, outside = [], []
    for c in driver.cycles:
        if "reaction" not in c or "written" not in c:
            continue
        lo, hi = c["written"], c["written"] + c["reaction"]
        (inside if any(a <= hi and lo <= b for a, b in spans) else outside).append(c["reaction"])
    return inside, outside


def summary(samples: list[dict], driver: Driver, a: argparse.Namespace) -> list[str]:
    warm = a.warmup * 60
    first, last = windows(samples, warm, a.window * 60)
    after = [s for s in samples if s["t"] >= warm]
    out = [f"goals (issue 49), after a {a.warmup:g} min warm-up, windows of "
           f"{(first[-1]['t'] - first[0]['t']) / 60 if first else 0:.1f} min"
           + (" (serve traced by tracemalloc: its RSS is a traced process's)" if a.tracemalloc
              else "") + ":"]
    if not first:
        return out + ["  no samples after the warm-up"]
    slope = slope_per_hour([(s["t"], s["rss"]) for s in after])
    out.append(f"  RSS slope after the warm-up: {slope:+.2f} MiB/h (goal <= 2); "
               f"first window {mean(first, 'rss'):.1f} MiB, last {mean(last, 'rss'):.1f} MiB "
               f"({(mean(last, 'rss') / mean(first, 'rss') - 1) * 100:+.1f} %, goal within 10 %)")
    out.append(f"  of it anonymous (RssAnon): "
               f"{slope_per_hour([(s['t'], s['anon']) for s in after]):+.2f} MiB/h, "
               f"{mean(first, 'anon'):.1f} -> {mean(last, 'anon'):.1f} MiB")
    heap = [s for s in after if "blocks" in s]
    if len(heap) >= 2:
        def mib(key, ss):
            return sum(s.get(key, 0) for s in ss) / len(ss) / 2**20
        hf, hl = [s for s in first if "blocks" in s], [s for s in last if "blocks" in s]
        out.append(
            f"  heap after the warm-up: Python blocks {mean(hf, 'blocks') / 1000:.1f}k -> "
            f"{mean(hl, 'blocks') / 1000:.1f}k ("
            f"{slope_per_hour([(s['t'], s['blocks']) for s in heap]) / 1000:+.1f}k/h); malloc "
            f"in use {mib('malloc_used', hf):.1f} -> {mib('malloc_used', hl):.1f} MiB ("
            f"{slope_per_hour([(s['t'], s.get('malloc_used', 0) / 2**20) for s in heap]):+.2f}"
            f" MiB/h), free in its heap {mib('malloc_free', hf):.1f} -> "
            f"{mib('malloc_free', hl):.1f} MiB"
            + (f"; traced {mib('traced', hf):.1f} -> {mib('traced', hl):.1f} MiB"
               if "traced" in heap[0] else ""))
        out.append(f"  full (generation 2) collections after the warm-up: "
                   f"{heap[-1].get('gc2', 0) - heap[0].get('gc2', 0)}, freeing "
                   f"{heap[-1].get('gc2_freed', 0) - heap[0].get('gc2_freed', 0)} objects")
        out.extend(collected_lines(heap, hf, hl))
    out.append(f"  open fds: {after[0]['fds']} at the warm-up's end, {after[-1]['fds']} last; "
               f"threads: {after[0]['threads']} -> {after[-1]['threads']} (goal: equal)")
    by_kind = {k: [c for c in driver.cycles if c["kind"] == k] for k in set(KINDS)}
    unfinished = [c for c in driver.cycles if "outcome" not in c and "error" not in c]
    by_kind = {k: [c for c in v if c not in unfinished] for k, v in by_kind.items()}
    rec = by_kind["recover"]
    out.append(f"  stuck releases recovered: {sum(c.get('outcome') == 'recovered' for c in rec)}"
               f" of {len(rec)}" + (f" ({len(unfinished)} cycle still running at the end, "
                                    "not counted)" if unfinished else ""))
    cor = by_kind["corrupt"]
    out.append(f"  corrupt newest revision announced: Event {sum(bool(c.get('event')) for c in cor)}"
               f", notification {sum(bool(c.get('notification')) for c in cor)} of {len(cor)}")
    dele = by_kind["delete"]
    gone = [c["gone_after"] for c in dele if "gone_after" in c]
    out.append(f"  deleted mid-recovery, gone: {len(gone)} of {len(dele)}"
               + (f" (max {max(gone):.1f} s after the delete)" if gone else ""))
    errors = [c for c in driver.cycles if "error" in c]
    for c in errors:
        out.append(f"    cycle {c['name']} ({c['kind']}) at {c['start']:.0f}s: {c['error']}")

    def react(ss):
        r = [x for s in ss for x in s["reactions"]]
        return f"p95 {pct(r, 95) * 1000:.0f} ms of {len(r)}" if r else "none"
    out.append(f"  reaction (stuck written -> Secret DELETE): first window {react(first)}, "
               f"last window {react(last)} (goal: last p95 <= 1.2x first)")
    loads = [s["load"] for s in samples if "load" in s]
    if loads:
        def span(ss):
            got = [s["load"] for s in ss if "load" in s]
            return f"{min(got):.1f}-{max(got):.1f}" if got else "-"
        out.append(f"  load average (1 min): the run {span(samples)}, first window "
                   f"{span(first)}, last window {span(last)}")
    all_r = [c["reaction"] for c in driver.cycles if "reaction" in c]
    if all_r:
        out.append(f"  reaction over the whole run: {spread(all_r)}")
    out.append(f"  serve's request rate: first window {mean(first, 'req_rate'):.2f}/s, last "
               f"{mean(last, 'req_rate'):.2f}/s (goal: no creep)" if a.reference_bin is None
               else "  request rate: not measured (the reference serves no metrics here)")
    m = samples[-1]["metrics"]
    relists = {k[0]: int(v) for k, v in m.get("flux_plunger_relists_total", {}).items()}
    verbs = {k[0]: int(v) for k, v in m.get("flux_plunger_api_requests_total", {}).items()}
    notes = {k[0]: int(v) for k, v in m.get("flux_plunger_notifications_total", {}).items()}
    out.append(f"  serve's syncs by reason: {relists}; requests by verb: {verbs}")
    out.append(f"  notifications: {notes}; received at the loopback receiver: "
               f"{len(driver.receiver.received())}")
    out.append(f"  driver: {driver.writes} status writes ({driver.writes / samples[-1]['t']:.1f}/s"
               f", {driver.write_errors} failed), {driver.churned} releases churned, "
               f"{len(driver.cycles)} stuck cycles, apiserver restarts "
               + ", ".join(f"at {at:.0f}s ({took:.1f}s)" for at, took in driver.restarts))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--releases", type=int, default=2000)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=5, help="minutes not in the goals")
    ap.add_argument("--window", type=float, default=5,
                    help="minutes of the first and last windows compared")
    ap.add_argument("--write-rate", type=float, default=25, help="status writes a second")
    ap.add_argument("--stuck-every", type=float, default=60, help="seconds between stuck cycles")
    ap.add_argument("--churn-every", type=float, default=10, help="seconds between churns")
    ap.add_argument("--resync", type=float, default=120, help="serve's --resync-period, s")
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="the stuck cycles' kinds in turn (recover, corrupt, delete)")
    ap.add_argument("--inside", type=float, default=3.0,
                    help="seconds after a catch-all pass (before an old re-sync's line) that "
                         "count as inside it")
    ap.add_argument("--skipped", type=int, default=0,
                    help="releases stuck on a corrupt newest revision that nobody repairs, "
                         "made before serve starts: every catch-all pass re-decides each "
                         "(read, storage LIST, its Event folded, the notification)")
    ap.add_argument("--restarts", type=int, default=1, help="apiserver restarts after warm-up")
    ap.add_argument("--ack", choices=("watch", "poll"), default="watch",
                    help="how the stuck releases' simulated helm-controller sees a suspension: "
                         "from a watch, as the real one does (default), or by a LIST every "
                         "50 ms (the soaks before 2026-12-07's last)")
    ap.add_argument("--sample-every", type=float, default=10)
    ap.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false")
    ap.add_argument("--collect", action="store_true",
                    help="a diagnosis: every heap probe first runs a full gc.collect() and "
                         "also reports the blocks left and the object types counted")
    ap.add_argument("--reference-bin", type=Path, default=None,
                    help="soak the reference controller (this binary) instead of serve")
    ap.add_argument("--out", type=Path, default=None, help="work directory (plot, logs)")
    ap.add_argument("--rss-plot", nargs="+", metavar="SAMPLES_JSON:LABEL", default=None,
                    help="only plot the RSS of earlier runs side by side into --out/rss.png")
    a = ap.parse_args()
    a.kinds = tuple(a.kinds.split(","))
    if a.rss_plot:
        print(rss_plot(a.rss_plot, (a.out or Path(".")) / "rss.png", a.warmup))
        return 0
    if a.reference_bin is not None:
        a.tracemalloc = False
    work = a.out or Path(tempfile.mkdtemp(prefix="soak-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(work / "plane", apiserver_args=("--min-request-timeout=60",)).start()
    print(f"control plane up in {plane.start_seconds:.1f}s ({work}); load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    kube = plane.kube()
    cluster = Cluster(kube)
    receiver = Receiver()
    serve = None
    driver = None
    try:
        seed(kube, a.releases, 16)
        names = [f"r{i:05d}" for i in range(a.releases)]
        add_storage(cluster, BULK, names, 16)
        for ns in (STUCK, SLOW, LEASE_NS, REFERENCE_LEASE_NS, SKIPPED):
            ensure_namespace(kube, ns)
        make_skipped(cluster, a.skipped)
        snaps = work / "tracemalloc"
        snaps.mkdir(exist_ok=True)
        probe = None
        if a.reference_bin is not None:
            serve = Reference(a.reference_bin, plane, work / "reference.log")
        else:
            probe = HeapProbe(work / "heap.json")
            serve = Serve(plane, work / "serve.log", "--leader-election-namespace", LEASE_NS,
                          "--lease-duration", "60s", "--renew-deadline", "45s",
                          "--retry-period", "2s", "--resync-period", f"{a.resync:g}s",
                          "--events-addr", receiver.url,
                          launcher=[sys.executable, str(Path(__file__).resolve()),
                                    "--serve-child"],
                          env={SNAPSHOTS: str(snaps), STATS: str(probe.path),
                               TRACE: "1" if a.tracemalloc else "0",
                               COLLECT: "1" if a.collect else "0"})
        wait_for(serve.ready, 300, "the controller ready", interval=0.1)
        print(f"{'the reference' if a.reference_bin else 'serve'} ready with {a.releases} "
              f"HelmReleases, each with storage; driving it for {a.minutes:g} min "
              f"({a.warmup:g} min warm-up)", flush=True)
        # soak-slow's helm-controller never acknowledges a suspension (busy elsewhere): the
        # recovery there waits for it until the bench deletes the release it holds
        # soak-stuck's acknowledges from a watch (or, --ack poll, a LIST every 50 ms); its
        # deletes are handled by a poller either way
        watching = a.ack == "watch"
        ack = WatchingAcknowledger(cluster, STUCK, delay=0.0) if watching else None
        if ack is not None:
            ack.start()
        with SimulatedHelmController(cluster, STUCK, acknowledge=not watching,
                                     interval=0.5 if watching else 0.05), \
                SimulatedHelmController(cluster, SLOW, acknowledge=False, interval=0.2):
            driver = Driver(plane, cluster, receiver, names, a)
            driver.start()
            samples = run_samples(serve, driver, a, snaps, probe)
            driver.stop.set()
        if ack is not None:
            ack.stop.set()
        print()
        print(HEADER)
        for s in samples:
            print(row(s))
        print()
        for line in summary(samples, driver, a):
            print(line)
        if a.reference_bin is None:
            print(syncs_by_way(serve.log.read_text()))
            spans, what = resync_spans(serve.log.read_text(), a.inside)
            inside, outside = reactions_inside(driver, spans)
            print(f"  re-syncs in serve's log: {what} (inside: {a.inside:g} s)")
            print(f"  reaction inside re-syncs: {spread(inside)}")
            print(f"  reaction outside them: {spread(outside)}")
            if inside and outside:
                print(f"  p99 inside / p99 outside: {pct(inside, 99) / pct(outside, 99):.2f}x"
                      " (goal <= 1.2x)")
        print(plot(samples, driver, a.warmup, work / "soak.png"))
        found = sorted(snaps.glob("snap-*.tracemalloc"), key=lambda p: int(p.stem[5:]))
        if len(found) >= 2:
            for line in growth(found[0], found[-1]):
                print(line)
        (work / "samples.json").write_text(json.dumps(
            [{k: v for k, v in s.items() if k != "metrics"} for s in samples]))
        print(f"samples: {work / 'samples.json'}; serve's log: {work / 'serve.log'}", flush=True)
        return 0
    finally:
        if driver is not None:
            driver.stop.set()
        if serve is not None:
            serve.stop()
        receiver.stop()
        kube.close()
        plane.stop()


def run_samples(serve, driver: Driver, a: argparse.Namespace, snaps: Path,
                probe: HeapProbe | None) -> list[dict]:
    """Sample every ``--sample-every`` s until ``--minutes``; tracemalloc: a snapshot at 80 %
    of the warm-up (what the snapshot itself costs — a copy of every trace, ~25 MiB of RSS
    that stays with the process — lands inside the warm-up) and one after the last sample."""
    samples: list[dict] = []
    print(HEADER, flush=True)
    signals = 0
    while driver.elapsed() < a.minutes * 60:
        time.sleep(max(0.0, (len(samples) + 1) * a.sample_every - driver.elapsed()))
        if serve.proc.poll() is not None:
            print(f"the controller exited {serve.proc.returncode}; see {serve.log}", flush=True)
            break
        try:
            samples.append(sample(serve, driver, samples[-1] if samples else None, probe))
        except OSError as exc:
            print(f"  sample failed: {exc}", flush=True)
            continue
        print(row(samples[-1]), flush=True)
        if a.tracemalloc and samples[-1]["t"] >= 0.8 * a.warmup * 60 and not signals:
            serve.proc.send_signal(signal.SIGUSR1)   # snapshot 1: near the warm-up's end
            signals += 1
    if a.tracemalloc and signals and serve.proc.poll() is None:
        count = len(list(snaps.glob("snap-*")))
        serve.proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: len(list(snaps.glob("snap-*"))) > count, 120, "the last snapshot",
                 interval=0.5)
    return samples


if __name__ == "__main__":
    raise SystemExit(main())
