"""The watch survives an apiserver restart and a 410 Gone without missing a stuck release;
the initial sync as one watch-list recovers a release while the rest is still streaming."""
from __future__ import annotations

import threading

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import KubeError, WatchLists
from kubectl_flux_plunger.core.scope import Scope
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
        # etcd's revision moved while no apiserver runs: the restarted watch cache starts past
        # serve's resourceVersion (without it the 410 was not certain — a restart with no
        # write in between let serve's old watch resume once, on v1.33.13)
        plane.restart_apiserver(move_revision=True)
        # written at once, while serve is still reconnecting: no watch event reaches it live
        stuck(cluster, ns, "after")
        eventually(lambda: recovered(cluster, ns, "after"), 60, "recovered after the restart")
    assert s.alive()
    assert s.logged(r"watch: .*retrying in"), "the broken watch was not noticed"
    # the restarted apiserver no longer has the old resourceVersion: a real 410, a fresh LIST
    assert s.logged(r"resource version expired \(410\); relisting")
    assert (s.metric("flux_plunger_relists_total", reason="expired") or 0) >= 1


class _StaleWatch:
    """The shared Kube, except that the first watch after the first sync (a paged LIST, or
    — ``watch_list`` — a watch-list whose stream the server ended after ``watch_seconds``)
    starts at resourceVersion "1" instead: long compacted, so the real apiserver answers
    410.  ``requests`` logs each sync ("LIST", "WATCH-LIST") and where each plain watch
    started from."""

    def __init__(self, kube, on_first_watch, *, watch_list: bool):
        self._kube = kube
        self._on_first_watch = on_first_watch
        self.watch_list = watch_list
        self.watch_lists = WatchLists()
        self.requests: list[str] = []

    def iter_hr_pages(self, *args, **kwargs):
        self.requests.append("LIST")
        yield from self._kube.iter_hr_pages(*args, **kwargs)

    def watch_hrs(self, namespace, selector, rv, timeout_seconds=300, *,
                  send_initial_events=False):
        if send_initial_events:
            self.requests.append("WATCH-LIST")
            return self._kube.watch_hrs(namespace, selector, rv, timeout_seconds,
                                        send_initial_events=True)
        stale = not any(r not in ("LIST", "WATCH-LIST") for r in self.requests)
        if stale:
            self._on_first_watch()
        self.requests.append("1" if stale else rv)
        return self._kube.watch_hrs(namespace, selector, "1" if stale else rv, timeout_seconds)


@pytest.mark.parametrize("sync", ["watch-list", "list"])
def test_a_410_relists_and_finds_what_the_watch_missed(plane, cluster, kube, ns, sync):
    """On the path the server allows: a 410 on the watch is a fresh watch-list (no LIST),
    or — without watch-lists — a fresh LIST.  A server that has none (the compatibility
    stage's older kube-apiserver) refuses the first watch-list, and from then on the
    watcher syncs with the LIST."""
    cluster.create_hr(ns, "early")
    queue, metrics, stop = WorkQueue(), Metrics(), threading.Event()
    # made stuck after the first sync and before the (expired) watch: only a relist sees it
    client = _StaleWatch(kube, lambda: stuck(cluster, ns, "missed"),
                         watch_list=sync == "watch-list")
    watcher = Watcher(client, queue, Scope(ns), resync_period=3600,
                      metrics=metrics, watch_seconds=2)
    t = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    t.start()
    try:
        eventually(lambda: queue.contains(f"{ns}/missed"), 30, "the missed release enqueued")
        assert metrics.relists["expired"] >= 1
        if sync == "watch-list" and not plane.watch_lists:
            assert client.requests[:4] == ["WATCH-LIST", "LIST", "1", "LIST"], client.requests
            assert client.watch_list is False and client.requests.count("WATCH-LIST") == 1
            return
        first = "WATCH-LIST" if sync == "watch-list" else "LIST"
        assert client.requests[:3] == [first, "1", first], client.requests
        assert (("LIST" in client.requests) == (sync == "list")), client.requests
        assert not queue.contains(f"{ns}/early")    # the predicate filters healthy releases
    finally:
        stop.set()


class _HeldAfter:
    """The serve Controller's Kube, except that the stream of its watch-list is held right
    after the initial event of ``key`` until ``until()`` holds (a deadline): the watcher
    cannot reach the initial-events-end bookmark before.  ``seen`` logs the stream as the
    apiserver sent it — each initial event's key, "END" for the bookmark — and "until" where
    the hold ended, with whether the watcher had synced by then."""

    def __init__(self, kube, key: str, until, watcher_synced):
        self._kube, self.key, self.until, self.watcher_synced = kube, key, until, watcher_synced
        self.seen: list[str] = []
        self.synced_when_held: bool | None = None
        self.watch_list = kube.watch_list

    def __getattr__(self, name):
        return getattr(self._kube, name)

    def watch_hrs(self, namespace, selector, rv, timeout_seconds=300, *,
                  send_initial_events=False):
        events = self._kube.watch_hrs(namespace, selector, rv, timeout_seconds,
                                      send_initial_events=send_initial_events)
        return self._held(events) if send_initial_events and not self.seen else events

    def _held(self, events):
        from kubectl_flux_plunger.kube import INITIAL_EVENTS_END

        for ev in events:
            md = (ev.get("object") or {}).get("metadata") or {}
            if ev["type"] == "ADDED" and "END" not in self.seen:
                self.seen.append(f"{md['namespace']}/{md['name']}")
            elif (md.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                self.seen.append("END")
            yield ev
            if self.seen[-1] == self.key and self.synced_when_held is None:
                eventually(self.until, 60, f"{self.key} recovered, the stream held")
                self.synced_when_held = self.watcher_synced()
                self.seen.append("until")


def test_the_initial_watch_list_recovers_a_stuck_release_before_its_bookmark(
        plane, cluster, ns):
    """serve (in-process: the real queue, workers and executor) syncs with one watch-list;
    the stuck release sorts after 300 others and before 100 more.  Held right after its
    initial event (the watcher cannot decode the rest, the bookmark among it), it is
    recovered all the same: queued the moment its event was decoded, not at the end of
    the sync.  The order is the stream's own, as the apiserver sent it.  On a server
    without watch-lists (the compatibility stage's older kube-apiserver) the watch-list is
    refused, serve syncs with the paged LIST instead and recovers the release from it."""
    from concurrent.futures import ThreadPoolExecutor

    from kubectl_flux_plunger.serve.controller import Controller, ServeConfig

    names = [f"a-{i:03d}" for i in range(300)] + [f"z-{i:03d}" for i in range(100)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: cluster.create_hr(ns, n), names))
    stuck(cluster, ns, "m-stuck")
    k = plane.kube()
    c = Controller(k, ServeConfig(namespace=ns, leader_elect=False, metrics_addr=None,
                                  probe_addr=None, handshake_timeout=15, stop_timeout=5,
                                  drain_timeout=10, fence_recheck=0.5))
    held = _HeldAfter(k, f"{ns}/m-stuck", lambda: recovered(cluster, ns, "m-stuck"),
                      c.watcher.synced.is_set)
    c.watcher.kube = held
    try:
        with SimulatedHelmController(cluster, ns):
            c.start()
            eventually(c.watcher.synced.is_set, 90, "the watch-list synced")
            if not plane.watch_lists:
                eventually(lambda: recovered(cluster, ns, "m-stuck"), 60,
                           "m-stuck recovered from the paged LIST")
    finally:
        c.stopping.set()
        c.wake.set()
        code = c.shutdown()
        k.close()
    assert code == 0
    seen = held.seen
    if not plane.watch_lists:
        assert held.watch_list is False and seen == [], seen[:5]   # refused: no stream held
        assert recovered(cluster, ns, "m-stuck")
        return
    # the stream as sent: 300 before the stuck release, the hold, 100 after, the bookmark
    i = seen.index(f"{ns}/m-stuck")
    assert i == 300 and seen[i + 1:i + 2] == ["until"], seen[max(0, i - 3):i + 4]
    assert len(seen) == 403 and seen[-1] == "END", seen[-5:]
    assert held.synced_when_held is False      # recovered before the bookmark was read
    assert recovered(cluster, ns, "m-stuck")
    assert held.watch_list is True             # no fallback to the LIST
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
