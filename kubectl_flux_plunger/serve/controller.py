""":class:`Controller`, the running ``serve``: watch → queue → workers (leader only) →
executor, plus leader election, health/metrics endpoints and the shutdown sequence
(:mod:`.startup` builds it and runs it).

Shutdown on SIGTERM/SIGINT:
1. stop taking new work: the queue stops handing out keys and the work executor's
   ``should_stop`` turns true, so an in-flight recovery aborts before the delete (relinquishing);
   workers are awaited at most ``stop_timeout``;
2. only if this process ever led (and still does): drain within ``drain_timeout`` with a
   separate executor that never starts a recovery, renewing the Lease meanwhile;
3. release the Lease so the next instance leads at once.
A second signal exits at once with status 1.  Losing the Lease stops without a drain (another
instance leads now) and exits 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import threading
import time
from types import FrameType

from ..core import plan
from ..core.bounded import Recent
from ..core.budget import Policy
from ..core.selector import Selector
from ..core.selector import parse as parse_selector
from ..executor import Executor, Options, Result
from ..executor.backup import SecretBackup
from ..executor.outcome import CLEANUP_RESULTS, Claimants
from ..kube import Kube, KubeError
from ..kube.authority import TenantAuthority
from ..kube.claimants import ListedClaimants
from ..kube.remote import Remotes
from ..report.events import Recorder
from ..report.notify import Notifier
from .drain import Drainer
from .health import Endpoints, prometheus_renderer
from .leader import LeaderElector, identity
from .logs import fields
from .metrics import Metrics
from .options import ServeConfig
from .overlap import OverlapCheck
from .queue import Backoff, WorkQueue
from .startup_hints import StartupHints
from .watch import Watcher

log = logging.getLogger("kubectl_flux_plunger.serve")

# outcomes logged at DEBUG: nothing to do, or the release is gone
_QUIET = (Result.UNCHANGED, Result.GONE)
# after lifting what an interrupted run left on a live release, decide again at once (as
# ``Executor.settle`` does for the one-shot verbs): the release may still be stuck
_REDECIDE = frozenset({plan.Row.LIVE_SUSPENDED_OWNED, plan.Row.LIVE_FENCED})
# releases whose last outcome logged at info is remembered, so a repeat logs at debug: a
# recovered release is never passed again (no pass follows helm-controller's success), nor
# is one deleted, so without a bound this grows with every release ever worked on (issue 49);
# one forgotten logs its next repeat at info once more
LOGGED_RELEASES = 4096
# how long a sharded or namespaced serve answers "who else claims it?" from one LIST of the
# cluster's HelmReleases before the first write (the check at the delete always lists anew)
CLAIMANTS_KEEP = 30.0


class Controller:
    def __init__(self, kube: Kube, cfg: ServeConfig, *, lease_kube: Kube | None = None):
        self.kube, self.cfg = kube, cfg
        self.identity = identity()
        self.metrics = Metrics(lease=cfg.lease_name)
        self.queue = WorkQueue(backoff=Backoff(cfg.backoff_base, cfg.backoff_cap))
        self.notifier: Notifier | None = None
        if cfg.events_addr:
            self.notifier = Notifier(
                cfg.events_addr, instance=self.identity, on_result=self.metrics.notified
            )
        self.recorder = Recorder(kube, instance=self.identity, notifier=self.notifier)
        self.stopping = threading.Event()  # signal received: take no new work
        self.watch_stop = threading.Event()
        self.watcher = Watcher(
            kube, self.queue, cfg.scope, resync_period=cfg.resync_period, metrics=self.metrics
        )
        selector = parse_selector(cfg.selector) if cfg.selector else None
        # releases helm-controller has just reported stuck, queued ahead of the sync once
        # this process leads (startup_hints.py)
        self.hints = StartupHints(kube, self.queue, namespace=cfg.namespace, selector=selector)
        self.lease_kube = lease_kube
        self.elector: LeaderElector | None = None
        # while leading: does another running flux-plunger's scope overlap ours?
        self.overlap: OverlapCheck | None = None
        if cfg.leader_elect:
            self._elect_on(lease_kube or kube)
        self.executor, self.drain_executor = self._executors(selector)
        self.workers: list[threading.Thread] = []
        self._workers_lock = threading.Lock()
        self.wake = threading.Event()
        self.signals = 0
        self._drain_running = False  # the leader gauge stays 1 meanwhile
        # key -> last (result, detail) logged at info, the most recent LOGGED_RELEASES
        self._logged: Recent[str, tuple[str, str]] = Recent(LOGGED_RELEASES)
        self._logged_lock = threading.Lock()
        self._gauges()
        self.endpoints = Endpoints(ready=self.watcher.synced.is_set, render_metrics=None)

    def _elect_on(self, lease_kube: Kube) -> None:
        """Leader election on the Lease (its own client), and the overlap check it enables."""
        cfg = self.cfg
        lease = cfg.lease(self.identity)
        self.elector = LeaderElector(
            lease_kube, lease, on_started=self._started_leading, on_lost=self._lost
        )
        self.overlap = OverlapCheck(
            self.kube,
            Recorder(self.kube, instance=self.identity),
            lease.namespace,
            lease.name,
            cfg.scope,
            period=cfg.overlap_check,
        )

    def _executors(self, selector: Selector | None) -> tuple[Executor, Executor]:
        """The workers' executor (stops with the process, backs up) and the drain's (never
        starts a recovery)."""
        cfg = self.cfg
        # An in-flight recovery notices a stop between handshake watch windows: keep a window
        # well inside the stop bound so SIGTERM aborts it before the delete, in time.
        window = max(0.5, min(5.0, cfg.stop_timeout / 4))
        timings = Options(
            # every fresh read that decides is checked against the selector too: a release
            # relabelled out of this shard is left to the shard that selects it now
            selector=selector,
            fence_warn_after=cfg.fence_warn_after,
            fence_recheck=cfg.fence_recheck,
            handshake_timeout=cfg.handshake_timeout,
            handshake_window=window,
        )
        backup = cfg.backup
        if backup is None and cfg.backup_namespace:
            backup = SecretBackup(self.kube, cfg.backup_namespace, retention=cfg.backup_retention)
        # who else claims a release: this watch's index when it sees every HelmRelease of
        # the cluster, else (a namespaced or sharded install) a LIST of them kept for
        # CLAIMANTS_KEEP seconds for the check before any write and a fresh one at the delete
        claimants: Claimants = (
            self.watcher
            if self.watcher.claims is not None
            else ListedClaimants(self.kube, keep=CLAIMANTS_KEEP, on_warning=log.warning)
        )
        work = Executor(
            self.kube,
            self.recorder,
            options=dataclasses.replace(
                timings,
                backup=backup,
                claimants=claimants,
                authority=TenantAuthority(self.kube, cfg.default_service_account),
                budget=Policy(cfg.max_failed_recoveries, cfg.recovery_backoff),
            ),
            should_stop=self._should_stop,
            remotes=Remotes(self.kube, default_service_account=cfg.default_service_account),
        )
        drain = Executor(
            self.kube, self.recorder, options=dataclasses.replace(timings, allow_recover=False)
        )
        return work, drain

    def _gauges(self) -> None:
        """What /metrics reads at scrape time."""
        m = self.metrics
        m.fences_held = self.watcher.fences_held
        m.queue_depth = lambda: len(self.queue)
        m.leader = self.leading
        m.ready = self.watcher.synced.is_set
        m.oldest_held_delete = self.watcher.oldest_held_delete
        if self.overlap is not None:
            m.scope_overlaps = self.overlap.count
        lease_kube = self.lease_kube
        m.api_stats = [self.kube.stats] + ([lease_kube.stats] if lease_kube else [])

    # -- leadership --------------------------------------------------------------

    def leading(self) -> bool:
        if self.elector is None:
            return not self.stopping.is_set() or self._drain_running
        return self.elector.is_leader()

    def ever_led(self) -> bool:
        return self.elector is None or self.elector.ever_led

    def _should_stop(self) -> bool:
        return self.stopping.is_set() or not self.leading()

    def _started_leading(self) -> None:
        self._start_workers()
        if self.overlap is not None:
            threading.Thread(
                target=self.overlap.run,
                args=(self.stopping, self.leading),
                name="scope-overlap",
                daemon=True,
            ).start()

    def _lost(self) -> None:
        self.queue.shutdown()
        self.wake.set()

    # -- workers -----------------------------------------------------------------

    def _start_workers(self) -> None:
        with self._workers_lock:
            if self.workers or self.stopping.is_set():
                return
            for i in range(self.cfg.workers):
                t = threading.Thread(target=self._work, name=f"worker-{i}", daemon=True)
                t.start()
                self.workers.append(t)
            threading.Thread(target=self.hints.run, name="startup-hints", daemon=True).start()
        log.info("processing HelmReleases", extra=fields(workers=self.cfg.workers))

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            settled = None
            try:
                settled = self._process(key)
            finally:
                self.queue.done(key, settled)

    def _process(self, key: str) -> str | None:
        """One pass over ``key``; returns where it settled the release (``Outcome.settled``)."""
        if not self.leading():
            self.queue.add_after(key, self.cfg.retry_period)
            return None
        ns, name = key.split("/", 1)
        started = time.monotonic()
        try:
            out = self.executor.reconcile(ns, name)
        except KubeError as exc:
            self.metrics.error()
            delay = self.queue.add_rate_limited(key)
            log.warning(
                "reconcile failed: %s; retrying in %.1fs",
                exc,
                delay,
                extra=fields(release=key, status=exc.status),
            )
            return None
        except Exception:  # a bug in one pass must not kill the worker (logged)
            self.metrics.error()
            delay = self.queue.add_rate_limited(key)
            log.exception("reconcile crashed; retrying in %.1fs", delay, extra=fields(release=key))
            return None
        self.metrics.observe(out)
        level = logging.DEBUG if out.result in _QUIET else logging.INFO
        with self._logged_lock:
            # the same outcome again (our own writes re-trigger a pass) is not news
            if level == logging.INFO and self._logged.get(key) == (out.result, out.detail):
                level = logging.DEBUG
            if level == logging.INFO:
                self._logged.put(key, (out.result, out.detail))
            elif out.result in _QUIET:
                self._logged.pop(key)
        if out.failed:
            level = logging.WARNING
        log.log(
            level,
            "%s: %s",
            out.result,
            out.detail,
            extra=fields(
                release=key,
                row=out.row,
                result=out.result,
                revision=out.revision,
                seconds=round(time.monotonic() - started, 3),
            ),
        )
        if self.stopping.is_set():
            return None
        if out.failed or (out.result == Result.DEFERRED and not out.requeue_after):
            self.queue.add_rate_limited(key)
            return None
        self.queue.forget(key)
        if out.requeue_after:
            self.queue.add_after(key, out.requeue_after)
        elif out.result in CLEANUP_RESULTS and out.row in _REDECIDE:
            self.queue.add(key)
        return out.settled

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        cfg = self.cfg
        if cfg.metrics_addr is not None:
            self.endpoints.render_metrics = prometheus_renderer(self.metrics)
        self.endpoints.start(cfg.metrics_addr, cfg.probe_addr)
        log.info(
            "starting flux-plunger controller",
            extra=fields(
                identity=self.identity,
                namespace=cfg.namespace or "(all)",
                selector=cfg.selector or "",
                workers=cfg.workers,
                leader_elect=cfg.leader_elect,
                lease=(f"{cfg.lease_namespace}/{cfg.lease_name}" if cfg.leader_elect else ""),
            ),
        )
        threading.Thread(
            target=self.watcher.run, args=(self.watch_stop,), name="watch", daemon=True
        ).start()
        # every --resync-period, the candidates queued again; the watch runs on (resync.py)
        threading.Thread(
            target=self.watcher.catch_all.run,
            args=(self.watch_stop,),
            name="catch-all",
            daemon=True,
        ).start()
        if self.elector is not None:
            threading.Thread(target=self._elect, name="leader-election", daemon=True).start()
        else:
            self._start_workers()

    def _elect(self) -> None:
        elector = self.elector
        assert elector is not None  # started only with leader election
        try:
            elector.run(self.stopping)
        except Exception:
            log.exception("leader election crashed")
            elector.lost.set()
            self._lost()

    def handle_signal(self, signum: int, frame: FrameType | None) -> None:  # noqa: ARG002
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals > 1:
            log.error("received %s again: exiting at once", name)
            for h in logging.getLogger().handlers:
                with contextlib.suppress(Exception):
                    h.flush()
            os._exit(1)
        log.info("received %s: stopping (send it again to exit at once)", name)
        self.stopping.set()
        self.wake.set()

    def wait(self) -> None:
        """Block the main thread until a signal or the loss of the Lease."""
        while not self.stopping.is_set():
            if self.elector is not None and self.elector.lost.is_set():
                return
            self.wake.wait(0.5)
            self.wake.clear()

    def shutdown(self) -> int:
        """The shutdown sequence; returns the exit status."""
        cfg = self.cfg
        code = 0
        lost = self.elector is not None and self.elector.lost.is_set()
        self.stopping.set()
        self.queue.shutdown()
        # 1. stop taking new work, bounded
        deadline = time.monotonic() + cfg.stop_timeout
        with self._workers_lock:
            workers = list(self.workers)
        for t in workers:
            t.join(max(0.0, deadline - time.monotonic()))
        busy = sum(t.is_alive() for t in workers)
        if busy:
            code = 1
            log.error(
                "stopping new work took longer than %.1fs; %d worker(s) still busy",
                cfg.stop_timeout,
                busy,
            )
        else:
            log.info("stopped taking new work")
        if lost:
            self._finish()
            return 1
        # 2. drain, only if this process ever led (and does now)
        if not self.ever_led():
            log.info("never became leader; leaving the fences to the leader")
        elif self.elector is not None and not self.elector.is_leader():
            log.error("not leading any more; leaving the fences to the new leader")
            code = 1
        else:
            self._drain_running = True
            drainer = Drainer(
                self.kube,
                self.drain_executor,
                cfg.drain,
                known=self.watcher.held_keys if self.watcher.synced.is_set() else None,
                metrics=self.metrics,
            )
            still = self.elector.is_leader if self.elector is not None else (lambda: True)
            drainer.run(cfg.drain_timeout, still)
            self._drain_running = False
        # 3. give the Lease up
        if self.elector is not None:
            self.elector.release()
        self._finish()
        log.info("flux-plunger controller stopped", extra=fields(exit=code))
        return code

    def _finish(self) -> None:
        if self.notifier is not None:
            # what the drain recorded goes out, bounded: the Lease is already given up
            self.notifier.close()
        self.watch_stop.set()
        if self.elector is not None:
            self.elector.stop_renewing()
        self.endpoints.stop()
