"""serve's re-sync without a blind window (issue 58) against the real apiserver: the periodic
catch-all queues the candidates again while the live watch keeps running — a change made
during a catch-all pass is delivered by the watch at once, with no stream of every release
before it, and is taken before the candidates the pass queued; the catch-all still catches
what no watch event shows (a Helm storage Secret appearing for a release left stuck for want
of one); a 410 still syncs afresh (tests/apiserver/test_serve_watch.py)."""
from __future__ import annotations

import threading

from kubectl_flux_plunger.core.scope import Scope
from kubectl_flux_plunger.serve.metrics import Metrics
from kubectl_flux_plunger.serve.queue import WorkQueue
from kubectl_flux_plunger.serve.watch import Watcher
from testplane.cluster import SimulatedHelmController, eventually

from .test_serve_support import FAST, recovered, serve, stuck  # noqa: F401


class _Requests:
    """The shared Kube, logging each watch request: "WATCH-LIST" for a stream of every
    release, else the resourceVersion it resumes from."""

    def __init__(self, kube):
        self._kube = kube
        self.requests: list[str] = []

    def __getattr__(self, name):
        return getattr(self._kube, name)

    def watch_hrs(self, namespace, selector, rv, timeout_seconds=300, *,
                  send_initial_events=False):
        self.requests.append("WATCH-LIST" if send_initial_events else rv)
        return self._kube.watch_hrs(namespace, selector, rv, timeout_seconds,
                                    send_initial_events=send_initial_events)


class _HeldPass(WorkQueue):
    """A WorkQueue whose catch-all pass (the thread named ``catch-all``) stops at its first
    key until ``release`` is set: the pass is under way, half done."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def add_behind(self, key, resource_version=None):
        if threading.current_thread().name == "catch-all" and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(60), "the test never let the pass go on"
        super().add_behind(key, resource_version)


def test_a_change_during_a_catch_all_pass_is_delivered_at_once_with_no_stream(
        cluster, kube, ns):
    for i in range(20):
        stuck(cluster, ns, f"c-{i:02d}")          # candidates: the pass queues them again
    for i in range(50):
        cluster.create_hr(ns, f"ok-{i:02d}")      # fine: no candidates
    queue, metrics, stop = _HeldPass(), Metrics(), threading.Event()
    client = _Requests(kube)
    watcher = Watcher(client, queue, Scope(ns), resync_period=3600, metrics=metrics)
    threading.Thread(target=watcher.run, args=(stop,), daemon=True).start()
    passed: list[int] = []
    try:
        eventually(watcher.synced.is_set, 60, "the first sync")
        assert len(watcher.candidates) == 20
        while (key := queue.get(timeout=0)) is not None:   # the sync's keys: taken
            queue.done(key)
        catch_all = threading.Thread(target=lambda: passed.append(
            watcher.catch_all.pass_once()), name="catch-all", daemon=True)
        catch_all.start()
        assert queue.entered.wait(30), "the catch-all pass did not start"
        stuck(cluster, ns, "live")                # written while the pass is under way
        eventually(lambda: queue.contains(f"{ns}/live"), 30, "the live change queued")
        assert catch_all.is_alive() and not passed   # delivered before the pass ended
        queue.release.set()
        catch_all.join(30)
        assert passed == [20]                     # the candidates as the pass began
        stuck(cluster, ns, "after")               # once the pass queued all 20
        eventually(lambda: queue.contains(f"{ns}/after"), 30, "the later change queued")
        # the live changes first: the candidates wait behind them (WorkQueue.add_behind)
        assert _drain(queue) == [f"{ns}/live", f"{ns}/after",
                                 *(f"{ns}/c-{i:02d}" for i in range(20))]
        assert watcher.candidates.snapshot().keys() >= {f"{ns}/live", f"{ns}/after"}
    finally:
        queue.release.set()
        stop.set()
    # one stream of every release (the first sync); the watch was never ended for the pass
    # (a server without watch-lists refuses the one watch-list and is LISTed instead)
    assert client.requests.count("WATCH-LIST") == 1, client.requests
    assert all(rv not in ("", "WATCH-LIST") for rv in client.requests[1:]), client.requests
    assert metrics.relists == {"initial": 1}
    assert metrics.catch_alls == 1


def _drain(queue: WorkQueue) -> list[str]:
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def test_the_catch_all_recovers_a_release_whose_storage_appears_later(
        cluster, ns, serve):  # noqa: F811
    """Stuck with no Helm storage: skipped, left stuck (no-storage).  An operator restores
    its storage: a Secret, no change of the HelmRelease, so no watch event — the catch-all
    passes over it again and recovers it.  No stream of every release was made for it."""
    s = serve("-n", ns, "--no-leader-elect", "--resync-period", "2s", *FAST)
    eventually(s.ready, 30, "ready")
    cluster.create_hr(ns, "late")
    cluster.make_stuck(ns, "late")
    eventually(lambda: s.metric("flux_plunger_releases_left_stuck", reason="no-storage") == 1,
               30, "left stuck for want of storage")
    with SimulatedHelmController(cluster, ns):
        cluster.storage(ns, "late", [(1, "superseded"), (2, "uninstalling")])
        eventually(lambda: recovered(cluster, ns, "late"), 60, "recovered by the catch-all")
    assert (s.metric("flux_plunger_catch_all_passes_total") or 0) >= 1
    assert s.metric("flux_plunger_relists_total", reason="initial") == 1
    assert s.metric("flux_plunger_relists_total", reason="resync") is None
    assert s.logged(r"catch-all: candidates queued again")
