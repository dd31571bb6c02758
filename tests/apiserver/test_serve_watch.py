"""The watch survives an apiserver restart and a 410 Gone without missing a stuck release."""
from __future__ import annotations

import threading

from kubectl_flux_plunger import constants as C
from kubectl_flux_plunger.kube import KubeError
from kubectl_flux_plunger.serve.metrics import Metrics
from kubectl_flux_plunger.serve.queue import WorkQueue
from kubectl_flux_plunger.serve.watch import Watcher
from testplane.cluster import SimulatedHelmController, eventually

from .test_serve_support import FAST, recovered, serve, stuck  # noqa: F401


def test_watch_survives_an_apiserver_restart(plane, cluster, ns, serve):  # noqa: F811
    s = serve("-n", ns, "--no-leader-elect", *FAST)
    eventually(s.ready, 30, "ready")
    with SimulatedHelmController(cluster, ns):
        stuck(cluster, ns, "before")
        eventually(lambda: recovered(cluster, ns, "before"), 30, "recovered before the restart")
        plane.restart_apiserver()
        # written at once, while serve is still reconnecting: no watch event reaches it live
        stuck(cluster, ns, "after")
        eventually(lambda: recovered(cluster, ns, "after"), 60, "recovered after the restart")
    assert s.alive()
    assert s.logged(r"watch: .*retrying in"), "the broken watch was not noticed"
    # the restarted apiserver no longer has the old resourceVersion: a real 410, a fresh LIST
    assert s.logged(r"resource version expired \(410\); relisting")
    assert (s.metric("flux_plunger_relists_total", reason="expired") or 0) >= 1


class _StaleWatch:
    """The shared Kube, except that a watch from the first LIST's resourceVersion starts at
    resourceVersion "1" instead: long compacted, so the real apiserver answers 410."""

    def __init__(self, kube, on_first_watch):
        self._kube = kube
        self._on_first_watch = on_first_watch
        self.first_rv = None
        self.watched_from: list[str] = []

    def iter_hr_pages(self, *args, **kwargs):
        for items, rv in self._kube.iter_hr_pages(*args, **kwargs):
            if self.first_rv is None:
                self.first_rv = rv
            yield items, rv

    def watch_hrs(self, namespace, selector, rv, timeout_seconds=300):
        if not self.watched_from:
            self._on_first_watch()
        stale = rv == self.first_rv
        self.watched_from.append("1" if stale else rv)
        return self._kube.watch_hrs(namespace, selector, "1" if stale else rv, timeout_seconds)


def test_a_410_relists_and_finds_what_the_watch_missed(cluster, kube, ns):
    cluster.create_hr(ns, "early")
    queue, metrics, stop = WorkQueue(), Metrics(), threading.Event()
    # made stuck after the first LIST and before the (expired) watch: only a relist sees it
    client = _StaleWatch(kube, lambda: stuck(cluster, ns, "missed"))
    watcher = Watcher(client, queue, namespace=ns, selector=None, resync_period=3600,
                      metrics=metrics)
    t = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    t.start()
    try:
        eventually(lambda: queue.contains(f"{ns}/missed"), 20, "the missed release enqueued")
        assert metrics.relists["expired"] >= 1
        assert client.watched_from[0] == "1" and len(set(client.watched_from)) >= 2
        assert not queue.contains(f"{ns}/early")    # the predicate filters healthy releases
    finally:
        stop.set()


def test_the_real_apiserver_answers_410_for_a_compacted_resource_version(cluster, kube, ns):
    """The fact the watcher relies on (an ERROR event with code 410, or a 410 status)."""
    cluster.create_hr(ns, "x")
    try:
        events = list(kube.watch_hrs(ns, None, "1", timeout_seconds=5))
    except KubeError as exc:
        assert exc.gone
        return
    assert events and events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410
    assert C.HR_KIND not in str(events[0]["object"].get("kind"))
