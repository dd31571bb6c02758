"""serve, while it leads: does another running flux-plunger watch releases this one watches?

Every flux-plunger writes as the field manager ``flux-plunger``, so two controllers whose
scopes overlap take each other's in-flight suspensions for crash leftovers and undo each
other's recoveries — two shards installed with the same selector, a second unsharded
install, the reference controller next to this one.  Leader election cannot help: each has
its own Lease.  So the leader compares its own scope (``--namespace`` and ``--selector``)
with the scope every other live flux-plunger Lease of the cluster records
(``scope.disjoint``: conservative, a scope that cannot be read overlaps), once right after it
becomes leader and then every :data:`CHECK_PERIOD` seconds — one LIST of the Leases of the
cluster each time (where that is refused, of its own Lease namespace and watched namespace),
nothing per release.  While they cannot be shown disjoint it says so loudly:

* the gauge ``flux_plunger_scope_overlaps`` (how many other Leases; 0 again once the overlap
  ends);
* a WARNING log line naming them, when the overlap starts or changes and every
  :data:`REMIND_EVERY` seconds while it lasts, and an INFO line when it ends;
* a Warning Event ``ScopeOverlap`` on this controller's own Lease, with the log line (static
  message, folded into one counted Event like the others; Kubernetes expires Events after an
  hour, so the reminder keeps it listed).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

from ..core.objects import Obj
from ..core.scope import Scope, disjoint
from ..kube import Kube, KubeError, controller_lease, kept
from ..kube.controller_lease import ControllerLease
from ..report.events import Recorder
from .logs import fields

log = logging.getLogger("kubectl_flux_plunger.serve")

CHECK_PERIOD = 60.0
REMIND_EVERY = 600.0
REASON = "ScopeOverlap"
MESSAGE = (
    "Another running flux-plunger controller's Lease records a scope that "
    "cannot be shown disjoint from this controller's: both write as field manager "
    "flux-plunger and undo each other's recoveries. Give each install its own selector "
    "(docs/INSTALL.md#sharding)"
)


def scope_of(lease: ControllerLease) -> Scope:
    """What a Lease says its controller watches (unrecorded: everything)."""
    return Scope(lease.watch_namespace, lease.selector)


class OverlapCheck:
    """The check of one leader: its Lease ``namespace``/``own_name`` and ``own`` scope."""

    def __init__(
        self,
        kube: Kube,
        recorder: Recorder,
        namespace: str,
        own_name: str,
        own: Scope,
        *,
        period: float = CHECK_PERIOD,
        remind_every: float = REMIND_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.recorder = kube, recorder
        self.namespace, self.own_name, self.own = namespace, own_name, own
        self.period, self.remind_every, self.clock = period, remind_every, clock
        self._lock = threading.Lock()
        self._overlapping: tuple[ControllerLease, ...] = ()
        self._told: tuple[str, ...] = ()  # the Leases the last warning named
        self._told_at = 0.0
        self._list_failed = False
        self._cluster_failed = False

    def count(self) -> int:
        """The gauge: other running flux-plunger Leases overlapping this scope now."""
        with self._lock:
            return len(self._overlapping)

    def run(self, stop: threading.Event, leading: Callable[[], bool]) -> None:
        """Check now and every ``period`` seconds while ``leading()``, until ``stop``."""
        while not stop.is_set():
            if leading():
                try:
                    self.check()
                except Exception:  # a bug here must not end the check for good (logged)
                    log.exception("the scope overlap check crashed")
            else:
                self._set(())
            stop.wait(self.period)
        self._set(())

    def check(self, now: dt.datetime | None = None) -> None:
        """One LIST of the Leases; the gauge, log line and Event as the module says."""
        items = self._list()
        if items is None:
            return  # the last verdict stands
        now = now or dt.datetime.now(dt.timezone.utc)
        found = controller_lease.from_items(items, self.namespace, now)
        me = (self.namespace, self.own_name)
        overlapping = tuple(
            c
            for c in found.live()
            if (c.namespace, c.name) != me and not disjoint(self.own, scope_of(c))
        )
        self._set(overlapping)
        names = tuple(c.name for c in overlapping)
        if not names:
            if self._told:
                log.info(
                    "no other running flux-plunger controller's scope overlaps this one's any more",
                    extra=fields(scope=str(self.own)),
                )
                self._told = ()
            return
        at = self.clock()
        if names == self._told and at - self._told_at < self.remind_every:
            return
        self._told, self._told_at = names, at
        log.warning(
            "this controller's scope overlaps another running flux-plunger controller's: both "
            "write as field manager flux-plunger and undo each other's recoveries; give each "
            "install its own selector",
            extra=fields(
                scope=str(self.own),
                overlaps=[
                    f"Lease {c.namespace}/{c.name} held by {c.holder}, {self._words(c)}"
                    for c in overlapping
                ],
            ),
        )
        own = self._own_lease(items)
        if own is not None:
            self.recorder.record(own, REASON, "Warning", MESSAGE)

    def _list(self) -> list[Obj] | None:
        """Every Lease of the cluster (one LIST, the node heartbeats left out); where that is
        refused, those of this controller's Lease namespace and of the namespace it watches
        (one warning line, once).  None: nothing could be listed (one warning, once)."""
        try:
            items = self.kube.list_cluster_leases()
        except KubeError as exc:
            cluster = kept(exc)  # outlives the except: no traceback (a cycle with this frame)
        else:
            self._list_failed = self._cluster_failed = False
            return items
        spaces = tuple(dict.fromkeys(n for n in (self.namespace, self.own.namespace) if n))
        try:
            items = [i for ns in spaces for i in self.kube.list_leases(ns)]
        except KubeError as exc:
            if not self._list_failed:
                log.warning(
                    "cannot list the Leases to compare this controller's scope with other "
                    "flux-plunger controllers': %s (the cluster's: %s)",
                    exc,
                    cluster,
                    extra=fields(lease_namespace=self.namespace, status=exc.status),
                )
            self._list_failed = True
            return None
        if not self._cluster_failed or self._list_failed:
            log.warning(
                "cannot list the Leases of the cluster to compare this controller's scope with "
                "other flux-plunger controllers'; comparing only with those in namespace %s: %s",
                ", ".join(spaces),
                cluster,
                extra=fields(lease_namespace=self.namespace, status=cluster.status),
            )
        self._list_failed, self._cluster_failed = False, True
        return items

    def _set(self, overlapping: tuple[ControllerLease, ...]) -> None:
        with self._lock:
            self._overlapping = overlapping

    @staticmethod
    def _words(c: ControllerLease) -> str:
        if c.selector is None and c.watch_namespace is None:
            return "no scope recorded (taken to watch every release)"
        return f"watching {scope_of(c)}"

    def _own_lease(self, items: list[Obj]) -> Obj | None:
        """This controller's Lease as listed, the object the Event is about."""
        for lease in items:
            md = lease.get("metadata") or {}
            if md.get("name") == self.own_name and md.get("namespace", self.namespace) == (
                self.namespace
            ):
                return {**lease, "apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
        return None
