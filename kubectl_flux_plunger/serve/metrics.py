"""The controller's counters and gauges, kept as plain numbers so the loop never depends on
prometheus-client; :func:`collector` renders them as Prometheus metric families at scrape
time (prometheus-client is imported lazily: it is the optional ``serve`` extra).

Every sample carries the label ``lease``: the name of the install's Lease
(``--leader-election-id``, unique per install in a namespace), so alert rules and dashboards
tell two installs in one namespace (two shards) apart whatever the scrape configuration adds
(docs/INSTALL.md, "Alerts").  Empty (no label) only where no Lease name is given."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..core.plan import Row
from ..executor import Result
from ..report import notify
from .stuck import LeftStuck

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import Collector

    Family = CounterMetricFamily | GaugeMetricFamily

    from ..executor import Outcome


class RequestStats(Protocol):
    """Requests one client sent, by verb (``kube.Stats``)."""

    def snapshot(self) -> dict[str, int]: ...


class Metrics:
    def __init__(self, *, lease: str = "") -> None:
        self.lease = lease  # the label every sample carries (module doc)
        self._lock = threading.Lock()
        # by outcome of a recovery attempt (the live-stuck row)
        self.recoveries: Counter[str] = Counter()
        self.reconciles: Counter[str] = Counter()  # every pass, by result
        self.deferrals = 0
        self.errors = 0
        # streams that read every release, by reason: initial, expired, error (and resync,
        # before issue 58: the periodic re-sync is now the catch-all, no stream)
        self.relists: Counter[str] = Counter()
        self.catch_alls = self.caught = 0  # catch-all passes, and the keys they queued
        self.notifications: Counter[str] = Counter()  # Flux events, by result (notify)
        # gauges read at scrape time
        self.fences_held: Callable[[], int] = lambda: 0
        self.queue_depth: Callable[[], int] = lambda: 0
        self.leader: Callable[[], bool] = lambda: False
        self.ready: Callable[[], bool] = lambda: False
        self.oldest_held_delete: Callable[[], float] = lambda: 0.0
        # other running flux-plunger Leases whose scope overlaps this leader's (serve/overlap)
        self.scope_overlaps: Callable[[], int] = lambda: 0
        self.api_stats: Sequence[RequestStats] = ()  # kube.Stats of every client in use
        self.left_stuck = LeftStuck()  # releases skipped and left stuck, by cause

    def observe(self, outcome: Outcome) -> None:
        key = f"{outcome.namespace}/{outcome.name}"
        if not outcome.selected:
            self.left_stuck.forget(key)
            return  # outside the controller's selection: not this controller's release
        self.left_stuck.passed(key, outcome.left_stuck)
        with self._lock:
            self.reconciles[outcome.result] += 1
            # a release recovered earlier that awaits helm-controller's retry is not a
            # recovery attempt (nor a skip): it only shows under reconciles
            if outcome.row == Row.LIVE_STUCK and outcome.result != Result.AWAITING_RETRY:
                self.recoveries[outcome.result] += 1
            if outcome.result == Result.DEFERRED:
                self.deferrals += 1
            if outcome.failed:
                self.errors += 1

    def error(self) -> None:
        with self._lock:
            self.errors += 1

    def notified(self, result: str) -> None:
        with self._lock:
            self.notifications[result] += 1

    def relisted(self, reason: str) -> None:
        with self._lock:
            self.relists[reason] += 1

    def caught_all(self, keys: int) -> None:
        with self._lock:
            self.catch_alls += 1
            self.caught += keys

    def api_requests(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for stats in self.api_stats:
            total.update(stats.snapshot())
        return dict(total)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "recoveries": dict(self.recoveries),
                "reconciles": dict(self.reconciles),
                "deferrals": self.deferrals,
                "errors": self.errors,
                "relists": dict(self.relists),
                "catch_alls": self.catch_alls,
                "caught": self.caught,
                "notifications": dict(self.notifications),
            }


def collector(metrics: Metrics) -> Collector:
    """A prometheus-client collector over ``metrics``; every sample labelled with the
    install's ``lease`` (when it has one: ``_Install``)."""

    class _Collector:
        def collect(self) -> Iterator[Family]:
            snap = metrics.snapshot()
            yield from _passes(snap)
            yield from _state(metrics)
            yield from _traffic(metrics, snap)

    return _Install(_Collector(), metrics.lease)


def _passes(snap: dict[str, Any]) -> Iterator[Family]:
    """What the passes over releases did (counters, from one snapshot)."""
    from prometheus_client.core import CounterMetricFamily

    rec = CounterMetricFamily(
        "flux_plunger_recoveries",
        "Recovery attempts of stuck HelmReleases by outcome.",
        labels=["result"],
    )
    always = (Result.RECOVERED, Result.DEFERRED, Result.SKIPPED, Result.FAILED)
    for result in always:
        rec.add_metric([result.value], snap["recoveries"].get(result, 0))
    for result, n in snap["recoveries"].items():
        if result not in always:
            rec.add_metric([str(result)], n)
    yield rec
    passes = CounterMetricFamily(
        "flux_plunger_reconciles",
        "Passes over one HelmRelease by result.",
        labels=["result"],
    )
    for result, n in sorted(snap["reconciles"].items()):
        passes.add_metric([str(result)], n)
    yield passes
    yield CounterMetricFamily(
        "flux_plunger_deferrals", "Recoveries deferred.", value=snap["deferrals"]
    )
    yield CounterMetricFamily(
        "flux_plunger_errors", "Passes that failed or raised.", value=snap["errors"]
    )
    relists = CounterMetricFamily(
        "flux_plunger_relists",
        "Fresh syncs (watch-list or LIST) of HelmReleases by reason.",
        labels=["reason"],
    )
    for reason, n in sorted(snap["relists"].items()):
        relists.add_metric([reason], n)
    yield relists
    yield CounterMetricFamily(
        "flux_plunger_catch_all_passes",
        "Catch-all passes (every --resync-period: the candidate releases queued again).",
        value=snap["catch_alls"],
    )
    yield CounterMetricFamily(
        "flux_plunger_catch_all_queued",
        "Releases the catch-all passes queued again.",
        value=snap["caught"],
    )


def _state(metrics: Metrics) -> Iterator[Family]:
    """The gauges, read as each family is rendered."""
    from prometheus_client.core import GaugeMetricFamily

    yield GaugeMetricFamily(
        "flux_plunger_fences_held",
        "HelmReleases carrying flux-plunger's uninstall fence (as last seen).",
        value=metrics.fences_held(),
    )
    yield GaugeMetricFamily(
        "flux_plunger_fence_held_delete_seconds",
        "Seconds the oldest HelmRelease delete held by the uninstall fence has "
        "waited (as last seen; 0 when none is held).",
        value=metrics.oldest_held_delete(),
    )
    yield GaugeMetricFamily(
        "flux_plunger_queue_depth",
        "Keys ready to be processed.",
        value=metrics.queue_depth(),
    )
    stuck = GaugeMetricFamily(
        "flux_plunger_releases_left_stuck",
        "Stuck HelmReleases this instance skipped and left for a human to repair "
        "(RecoverySkipped Events), by cause; only the leader passes over releases.",
        labels=["reason"],
    )
    for cause, n in metrics.left_stuck.counts().items():
        stuck.add_metric([cause.value], n)
    yield stuck
    yield GaugeMetricFamily(
        "flux_plunger_leader",
        "1 while this instance leads.",
        value=1 if metrics.leader() else 0,
    )
    yield GaugeMetricFamily(
        "flux_plunger_scope_overlaps",
        "Other running flux-plunger controllers whose Lease (in this instance's Lease "
        "namespace) records a scope that cannot be shown disjoint from this "
        "instance's: both write as field manager flux-plunger (checked while "
        "leading, every --scope-overlap-check-interval; 0 when none).",
        value=metrics.scope_overlaps(),
    )
    yield GaugeMetricFamily(
        "flux_plunger_ready",
        "1 while /readyz answers ok (the HelmRelease list/watch is synced).",
        value=1 if metrics.ready() else 0,
    )


def _traffic(metrics: Metrics, snap: dict[str, Any]) -> Iterator[Family]:
    """What went out: Flux events and API requests."""
    from prometheus_client.core import CounterMetricFamily

    notes = CounterMetricFamily(
        "flux_plunger_notifications",
        "Flux events for notification-controller (--events-addr) by result: sent, "
        "rate-limited (dropped there as a duplicate), refused, unreachable, dropped "
        "(queue full), folded (a repeat, not posted).",
        labels=["result"],
    )
    for note in (notify.SENT, notify.UNREACHABLE):
        notes.add_metric([note], snap["notifications"].get(note, 0))
    for note, n in sorted(snap["notifications"].items()):
        if note not in (notify.SENT, notify.UNREACHABLE):
            notes.add_metric([note], n)
    yield notes
    api = CounterMetricFamily(
        "flux_plunger_api_requests",
        "Requests sent to the Kubernetes API by verb.",
        labels=["verb"],
    )
    for verb, n in sorted(metrics.api_requests().items()):
        api.add_metric([verb], n)
    yield api


class _Install:
    """``inner``'s families with the label ``lease`` added to every sample (when set)."""

    def __init__(self, inner: Any, lease: str) -> None:
        self.inner, self.lease = inner, lease

    def collect(self) -> Iterator[Any]:
        for family in self.inner.collect():
            if self.lease:
                family.samples = [
                    s._replace(labels={"lease": self.lease, **s.labels}) for s in family.samples
                ]
            yield family
