"""Issue 49: every piece of serve's state that grows with the cluster's history has a bound.

Each test drives one structure with many more distinct releases, Events, servers or re-arms
than its bound and checks, by counting entries (never by timing), that its size stays
bounded: the LRU helper (``core.bounded.Recent``), the Event recorder's remembered counts
(``report.events``), the worker's last logged outcome per release (``serve.controller``),
the work queue's timers, backoff, expectations and sync keys (``serve.queue``), the
watcher's held keys (``serve.watch``), the releases left stuck (``serve.stuck``), the
metrics' label sets (``serve.metrics``), the Flux notifications' folding and queue
(``report.notify``) and the remote-storage clients (``kube.remote``).  docs/DESIGN.md,
"serve's state and its bounds (issue 49)", has the table this file follows."""

from __future__ import annotations

import copy
import threading
from types import SimpleNamespace

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import plan
from kubectl_flux_plunger.core.bounded import Recent
from kubectl_flux_plunger.core.plan import Row, Stuck
from kubectl_flux_plunger.core.scope import Scope
from kubectl_flux_plunger.executor import Outcome, Result
from kubectl_flux_plunger.kube import KubeError, remote
from kubectl_flux_plunger.report import events, notify
from kubectl_flux_plunger.serve import controller as serve_controller
from kubectl_flux_plunger.serve.controller import Controller, ServeConfig
from kubectl_flux_plunger.serve.metrics import Metrics
from kubectl_flux_plunger.serve.queue import STALE_TIMERS, Backoff, WorkQueue
from kubectl_flux_plunger.serve.stuck import LeftStuck
from kubectl_flux_plunger.serve.watch import Watcher

from .builders import OURS, hr, ready_condition, stuck_condition
from .fakes import Clock

pytestmark = pytest.mark.unit

MANY = 10_000  # distinct releases (or Events, servers, re-arms) driven through a structure


# -- core.bounded.Recent ---------------------------------------------------------------


def test_recent_forgets_the_least_recently_used_beyond_its_limit():
    recent: Recent[str, int] = Recent(100)
    for i in range(MANY):
        recent.put(f"k{i}", i)
        if i % 10 == 0:
            assert recent.get("k0") == 0  # used now and then: never the oldest
    assert len(recent) == 100
    assert recent.get("k0") == 0 and recent.get(f"k{MANY - 1}") == MANY - 1
    assert recent.get("k5000") is None  # forgotten
    recent.pop("k0")
    recent.pop("k0")  # popping what is not there is no error
    assert recent.get("k0") is None and len(recent) == 99
    with pytest.raises(ValueError):
        Recent(0)


# -- report.events.Recorder: the count remembered per Event ------------------------------


class EventStore:
    """Events as the apiserver keeps them (create of an existing name: 409, patch of a
    missing one: 404), with the requests counted."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.calls: list[str] = []

    def get_event(self, namespace: str, name: str) -> dict | None:
        self.calls.append("GET")
        return copy.deepcopy(self.objects.get(name))

    def create_event(self, namespace: str, body: dict) -> dict:
        self.calls.append("CREATE")
        name = body["metadata"]["name"]
        if name in self.objects:
            raise KubeError(409, "AlreadyExists", "exists")
        self.objects[name] = copy.deepcopy(body)
        return copy.deepcopy(body)

    def patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        self.calls.append("PATCH")
        if name not in self.objects:
            raise KubeError(404, "NotFound", "gone")
        self.objects[name].update(patch)
        return copy.deepcopy(self.objects[name])


def test_the_recorder_remembers_the_counts_of_the_most_recent_events_only():
    store = EventStore()
    recorder = events.Recorder(store)
    first = hr("r0", uid="uid-0")
    for i in range(events.MAX_REMEMBERED + MANY // 2):
        recorder.record(hr(f"r{i}", uid=f"uid-{i}"), "Recovered", "Normal", "recovered")
    assert len(recorder._counts) == events.MAX_REMEMBERED
    # a forgotten Event is created again: the 409 is a read and a patch of its count
    store.calls.clear()
    recorder.record(first, "Recovered", "Normal", "recovered")
    assert store.calls == ["CREATE", "GET", "PATCH"]
    assert store.objects[events.event_name(first, "Recovered", "Normal")]["count"] == 2


# -- serve.controller: the last outcome logged per release --------------------------------


class Passes:
    """Executor stand-in: each pass over ``namespace/name`` ends with ``result``."""

    def __init__(self, result: Result, row: Row) -> None:
        self.result, self.row = result, row

    def reconcile(self, namespace: str, name: str) -> Outcome:
        return Outcome(namespace, name, self.result, "done", row=self.row, settled="5")


def controller(result: Result, row: Row) -> Controller:
    kube = SimpleNamespace(stats=SimpleNamespace(), dry_run=False, request_timeout=30.0)
    c = Controller(kube, ServeConfig(leader_elect=False, metrics_addr=None,  # type: ignore[arg-type]
                                     probe_addr=None))
    c.executor = Passes(result, row)  # type: ignore[assignment]
    return c


def test_the_worker_remembers_the_last_logged_outcome_of_the_most_recent_releases_only():
    c = controller(Result.RECOVERED, Row.LIVE_STUCK)
    for i in range(serve_controller.LOGGED_RELEASES + MANY // 2):
        c._process(f"apps/r{i}")  # recovered once each, and never passed again
    assert len(c._logged) == serve_controller.LOGGED_RELEASES


# -- serve.queue.WorkQueue ----------------------------------------------------------------


def test_timers_replaced_by_earlier_ones_do_not_pile_up_in_the_heap():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    for i in range(MANY):
        key = f"apps/r{i % 10}"  # ten keys, each re-armed earlier and earlier
        queue.add_after(key, float(MANY - i))
    sizes = queue.sizes()
    assert sizes["due"] == 10
    assert sizes["timers"] <= 2 * sizes["due"] + STALE_TIMERS
    clock.now = float(MANY + 1)
    assert sorted(iter(lambda: queue.get(timeout=0), None)) == [f"apps/r{i}" for i in range(10)]
    assert queue.sizes()["timers"] == 0


def test_backoff_and_timers_of_failed_releases_go_once_a_pass_ends_them():
    clock = Clock()
    queue = WorkQueue(backoff=Backoff(1.0, 300.0), clock=clock)
    for i in range(MANY):
        key = f"apps/r{i}"
        queue.add(key)
        assert queue.get(timeout=0) == key
        queue.add_rate_limited(key)  # the pass failed: it retries after its backoff
        queue.done(key)
        if i % 100 == 99:  # the retries come due; each ends (recovered, or gone)
            clock.now += 301.0
            while (again := queue.get(timeout=0)) is not None:
                queue.forget(again)
                queue.done(again, "10")
            queue.caught_up("10")  # the watch delivers what the passes wrote
            assert queue.sizes()["backoff"] == 0
        assert queue.sizes()["backoff"] <= 100 and queue.sizes()["timers"] <= 100
    assert queue.sizes() == dict.fromkeys(queue.sizes(), 0)


def test_expectations_and_sync_keys_stay_within_what_the_watch_has_not_yet_delivered():
    queue = WorkQueue()
    most = 0
    for sync in range(10):
        queue.relisting()  # a sync: its keys replace the last one's
        for i in range(MANY // 10):
            key = f"apps/s{sync}-{i}"  # distinct releases, sync after sync
            rv = str(1000 * (sync * MANY + i) + 1)
            queue.add(key, rv, listed=True)
            assert queue.get(timeout=0) == key
            queue.add(key, rv)  # a change while its pass runs
            queue.done(key, str(int(rv) + 5))  # settled ahead of the watch
            queue.caught_up(str(int(rv) + 5))  # the watch delivers the pass's writes
            most = max(most, queue.sizes()["settled"], queue.sizes()["dirty_rv"])
        assert queue.sizes()["listed"] == MANY // 10
    assert most <= 1
    assert queue.sizes()["settled"] == 0 and len(queue) == 0


# -- serve.watch.Watcher: the held keys -------------------------------------------------


def held_release(i: int, rv: str) -> dict:
    """Fenced, suspended by us and terminating: in every set the watcher keeps."""
    return hr(f"r{i}", namespace="apps", uid=f"uid-{i}", rv=rv, suspend=True, managed=[OURS],
              finalizers=[C.FENCE, C.HELM_CONTROLLER_FINALIZER],
              deletion_timestamp="2026-11-29T19:30:00Z", conditions=[stuck_condition()])


def test_the_watcher_forgets_a_release_once_it_is_deleted_or_a_sync_did_not_see_it():
    metrics = Metrics()
    w = Watcher(SimpleNamespace(watch_list=True), WorkQueue(), Scope(),  # type: ignore[arg-type]
                resync_period=3600, metrics=metrics)
    for i in range(MANY):
        obj = held_release(i, str(2 * i + 10))
        w._event({"type": "MODIFIED", "object": obj})
        metrics.left_stuck.passed(f"apps/r{i}", Stuck.CORRUPT_PAYLOAD)
        if i % 2:  # deleted: the watch says so
            w._event({"type": "DELETED", "object": {**obj, "metadata": {
                **obj["metadata"], "resourceVersion": str(2 * i + 11)}}})
        assert len(w._fenced) <= MANY // 2 + 1 and len(w._held) <= MANY // 2 + 1
    assert len(w.held_keys()) == MANY // 2 and len(w._held) == MANY // 2
    assert len(w.candidates) == MANY // 2  # the catch-all's keys (serve/resync.py) too
    # the other half went while the watch was down (a 410): the next sync sees none of them
    from kubectl_flux_plunger.serve.sync import Sync as _Sync
    sync = _Sync()
    sync.take(hr("fresh", namespace="apps", rv="1", conditions=[ready_condition()]),
              WorkQueue())
    w._synced(sync, "99999", "expired", "watch-list")
    assert w.held_keys() == set() and w._held == {}
    assert len(w.candidates) == 0
    assert sum(metrics.left_stuck.counts().values()) == 0


# -- serve.stuck.LeftStuck ------------------------------------------------------------------


def test_releases_left_stuck_are_forgotten_when_repaired_deleted_or_not_seen_by_a_sync():
    stuck = LeftStuck()
    for i in range(MANY):
        stuck.passed(f"apps/r{i}", Stuck.CORRUPT_PAYLOAD)
        if i % 3 == 0:
            stuck.passed(f"apps/r{i}", None)  # a later pass found it recovered
        elif i % 3 == 1:
            stuck.forget(f"apps/r{i}")  # the watch saw it repaired or deleted
        if i % 1000 == 999:
            stuck.keep_only([f"apps/r{i}"])  # a sync saw only the newest stuck
            assert sum(stuck.counts().values()) <= 1
    assert sum(stuck.counts().values()) <= 1
    assert len(stuck._causes) <= 1


# -- serve.metrics.Metrics: label sets --------------------------------------------------


def test_the_metrics_label_sets_do_not_grow_with_the_releases():
    metrics = Metrics(lease="flux-plunger.cozystack.io")
    results, rows = list(Result), list(Row)
    for i in range(MANY):
        metrics.observe(Outcome("apps", f"r{i}", results[i % len(results)], "",
                                row=rows[i % len(rows)], failed=i % 7 == 0))
        metrics.relisted(("initial", "resync", "expired", "error")[i % 4])
        metrics.notified((notify.SENT, notify.FOLDED, notify.DROPPED)[i % 3])
    snap = metrics.snapshot()
    assert len(snap["reconciles"]) <= len(Result)
    assert len(snap["recoveries"]) <= len(Result)
    assert len(snap["relists"]) == 4 and len(snap["notifications"]) == 3
    # releases left stuck are keys (forgotten when repaired), counted by cause for the gauge
    assert len(metrics.left_stuck.counts()) == len(Stuck)


# -- report.notify: folding, the queue, the results ----------------------------------------


def test_the_notification_folding_remembers_a_bounded_number_of_objects():
    folder = notify.Folder()
    specs = [plan.UNINSTALL_FENCE_HELD, plan.RECOVERY_FAILED,
             *plan.RECOVERY_SKIPPED.values()]
    for i in range(MANY):
        for spec in specs:
            folder.first(f"uid-{i}", spec.reason, spec.type, spec.message)
            folder.first(f"uid-{i}", spec.reason, spec.type, spec.message)  # a repeat
    assert len(folder._seen) == notify.MAX_FOLDED_OBJECTS
    assert max(len(seen) for seen in folder._seen.values()) <= len(specs)


def test_the_notifier_queues_a_bounded_number_of_events_and_counts_results_by_kind():
    release = threading.Event()
    sent: list[bytes] = []

    def post(address: str, body: bytes, timeout: float) -> int:
        release.wait(10)  # notification-controller hangs: everything waits
        sent.append(body)
        return 200

    n = notify.Notifier("http://127.0.0.1:1/", post=post, max_queued=32)
    for i in range(MANY // 10):
        n.notify(hr(f"r{i}", uid=f"uid-{i}"), "Recovered", "Normal", "recovered")
        assert n._queue.qsize() <= 32
    release.set()
    assert n.flush(10)
    assert len(sent) <= 33 and n.stats[notify.DROPPED] >= MANY // 10 - 33
    assert set(n.stats) <= {notify.SENT, notify.DROPPED}
    n.close()


# -- kube.remote.Remotes: clients, per-release reuse, dead servers ---------------------------


class StubRemote:
    def __init__(self, cfg: object, *, where: str, **_: object) -> None:
        self.cluster = f"https://{where}"
        self.stats = None
        self.closed = False

    def close(self) -> None:
        self.closed = True


def remote_release(i: int, rv: int) -> dict:
    return hr(f"r{i}", namespace="apps", uid=f"uid-{i}",
              spec_extra={"kubeConfig": {"secretRef": {"name": f"kc{rv}"}}})


def test_remote_clients_and_the_per_release_reuse_are_bounded(monkeypatch):
    monkeypatch.setattr(remote, "RemoteKube", StubRemote)
    monkeypatch.setattr(remote, "parse_kubeconfig", lambda data, where, impersonate: None)
    monkeypatch.setattr(remote, "kubeconfig_bytes", lambda secret, ref: b"")
    remotes = remote.Remotes(SimpleNamespace(request_timeout=None, dry_run=False,  # type: ignore[arg-type]
                                             stats=None))
    monkeypatch.setattr(remotes, "_kubeconfig_secret", lambda ref, name: {
        "metadata": {"uid": name, "resourceVersion": "1"}})
    for i in range(MANY):
        remotes.storage_kube(remote_release(i, i % 500))  # 500 kubeconfigs, 10,000 releases
    assert len(remotes._clients) == remote.MAX_CLIENTS
    assert len(remotes._by_release) == remote.MAX_RELEASES


def test_dead_remote_servers_are_held_only_for_their_window():
    clock = Clock()
    remotes = remote.Remotes(SimpleNamespace(request_timeout=None),  # type: ignore[arg-type]
                             unreachable_ttl=30.0, clock=clock)
    for i in range(MANY):
        remotes._mark_dead(f"https://cluster-{i}.example")  # each a different server
        clock.now += 1.0
        assert len(remotes._dead) <= 31
