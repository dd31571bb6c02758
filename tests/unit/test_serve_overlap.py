"""serve/overlap.py: the leader compares its scope with every other running flux-plunger
Lease of its Lease namespace — the gauge, the WARNING line (when the overlap starts, changes
and as a reminder) and the Warning Event ScopeOverlap on its own Lease; disjoint shards, an
expired Lease and a follower say nothing; the reference controller's Lease (no scope
recorded) overlaps everything.  On a fake Lease and Event store; the same with real serve
processes: tests/apiserver/test_shards.py."""
from __future__ import annotations

import datetime as dt
import gc
import logging
import threading

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.report.events import Recorder
from kubectl_flux_plunger.kube import KubeError, kube_error
from kubectl_flux_plunger.core.scope import Scope
from kubectl_flux_plunger.serve.metrics import Metrics, collector
from kubectl_flux_plunger.serve.overlap import MESSAGE, REASON, OverlapCheck

from .test_events import Events

pytestmark = pytest.mark.unit

KEY = "sharding.fluxcd.io/key"
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
OWN = "a.flux-plunger.cozystack.io"


def lease(name, selector=None, namespace=None, *, renew="2026-12-01T11:59:58.000000Z",
          holder="pod_1", uid=None, lease_ns="fp"):
    ann = {}
    if selector is not None:
        ann[C.LEASE_SELECTOR_ANNOTATION] = selector
    if namespace is not None:
        ann[C.LEASE_NAMESPACE_ANNOTATION] = namespace
    return {"metadata": {"name": name, "namespace": lease_ns, "uid": uid or f"uid-{name}",
                         "annotations": ann},
            "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": 15}}


def fresh(error: KubeError) -> KubeError:
    """A new error per refused request, as the client raises (not one instance kept here)."""
    return kube_error(error.status, error.reason, error.message)


class Store(Events):
    """Leases (listed) and Events of the Lease namespace."""

    def __init__(self, *leases):
        super().__init__()
        self.leases = list(leases)
        self.list_error: KubeError | None = None      # every LIST refused
        self.cluster_error: KubeError | None = None   # only the cluster-wide LIST refused

    def list_cluster_leases(self):
        self.calls.append("LIST")
        if self.list_error is not None or self.cluster_error is not None:
            raise fresh(self.list_error or self.cluster_error)
        return self.leases

    def list_leases(self, namespace):
        self.calls.append(f"LIST {namespace}")
        if self.list_error is not None:
            raise fresh(self.list_error)
        return [i for i in self.leases if i["metadata"]["namespace"] == namespace]


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def check_of(store, own=Scope(None, f"{KEY}=a"), **kw):
    clock = Clock()
    return OverlapCheck(store, Recorder(store, instance="me"), "fp", OWN, own,
                        clock=clock, **kw), clock


def warnings(caplog):
    return [r for r in caplog.records if r.levelno == logging.WARNING]


def test_two_shards_with_one_selector_overlap_loudly(caplog):
    caplog.set_level(logging.INFO)
    store = Store(lease(OWN, f"{KEY}=a", ""), lease("twin.flux-plunger.cozystack.io", f"{KEY}=a", ""))
    check, clock = check_of(store, remind_every=600)
    check.check(NOW)
    assert check.count() == 1 and store.calls == ["LIST", "CREATE"]
    (event,) = store.objects.values()
    assert event["involvedObject"] == {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                       "name": OWN, "namespace": "fp", "uid": f"uid-{OWN}"}
    assert (event["reason"], event["type"], event["message"]) == (REASON, "Warning", MESSAGE)
    (line,) = warnings(caplog)
    assert "overlaps another running flux-plunger controller's" in line.getMessage()
    said = line.fp_fields
    assert said["scope"] == f"-A -l '{KEY}=a'"
    assert said["overlaps"] == [
        f"Lease fp/twin.flux-plunger.cozystack.io held by pod_1, watching -A -l '{KEY}=a'"]
    # the next check within the reminder period: the gauge only
    caplog.clear()
    check.check(NOW)
    assert store.calls[2:] == ["LIST"] and warnings(caplog) == []
    # the reminder: the same Event folded (count 2), the line again
    clock.t += 600
    check.check(NOW)
    assert store.calls[3:] == ["LIST", "PATCH"] and len(store.objects) == 1
    assert event["count"] == 2 and len(warnings(caplog)) == 1
    # the other one stops (its Lease expires): the gauge goes back to 0, said once
    caplog.clear()
    store.leases[1]["spec"]["renewTime"] = "2026-12-01T11:50:00.000000Z"
    check.check(NOW)
    assert check.count() == 0
    assert [r.getMessage() for r in caplog.records] == [
        "no other running flux-plunger controller's scope overlaps this one's any more"]
    caplog.clear()
    check.check(NOW)
    assert caplog.records == []


@pytest.mark.parametrize(("own", "other"), [
    (Scope(None, f"{KEY}=a"), (f"{KEY}=b", "")),            # two shards
    (Scope(None, f"!{KEY}"), (f"{KEY}=b", "")),             # the main instance and a shard
    (Scope("team-a", None), ("", "team-b")),                # two namespaces
])
def test_disjoint_scopes_say_nothing(caplog, own, other):
    store = Store(lease(OWN, own.selector or "", own.namespace or ""),
                  lease("other.flux-plunger.cozystack.io", *other))
    check, _ = check_of(store, own)
    check.check(NOW)
    assert check.count() == 0 and store.calls == ["LIST"] and warnings(caplog) == []


def test_the_reference_controllers_lease_overlaps_everything(caplog):
    store = Store(lease(OWN, f"{KEY}=a", ""), lease(C.LEASE_NAME))   # no annotations
    check, _ = check_of(store)
    check.check(NOW)
    assert check.count() == 1
    assert warnings(caplog)[0].fp_fields["overlaps"] == [
        f"Lease fp/{C.LEASE_NAME} held by pod_1, no scope recorded (taken to watch every "
        "release)"]


def test_expired_released_and_foreign_leases_and_our_own_do_not_count():
    store = Store(lease(OWN, f"{KEY}=a", ""),
                  lease("old.flux-plunger.cozystack.io", f"{KEY}=a", "",
                        renew="2026-12-01T11:00:00.000000Z"),
                  lease("gone.flux-plunger.cozystack.io", f"{KEY}=a", "", holder=""),
                  lease("helm-controller-leader-election"))
    check, _ = check_of(store)
    check.check(NOW)
    assert check.count() == 0 and store.calls == ["LIST"]


def test_a_refused_list_is_said_once_and_the_last_verdict_stands(caplog):
    store = Store(lease(OWN, f"{KEY}=a", ""), lease("twin.flux-plunger.cozystack.io", f"{KEY}=a", ""))
    check, _ = check_of(store)
    check.check(NOW)
    store.list_error = KubeError(403, "Forbidden", "leases is forbidden")
    caplog.clear()
    check.check(NOW)
    check.check(NOW)
    assert check.count() == 1
    (line,) = warnings(caplog)
    assert "cannot list the Leases" in line.getMessage() and "forbidden" in line.getMessage()
    store.list_error = None
    check.check(NOW)
    assert check.count() == 1


def test_no_event_without_our_own_lease_in_the_list():
    store = Store(lease("twin.flux-plunger.cozystack.io", f"{KEY}=a", ""))
    check, _ = check_of(store)
    check.check(NOW)
    assert check.count() == 1 and store.calls == ["LIST"]


def test_the_loop_checks_only_while_leading_and_ends_at_zero():
    store = Store(lease(OWN, f"{KEY}=a", ""), lease("twin.flux-plunger.cozystack.io", f"{KEY}=a", "",
                  renew=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")))
    check, _ = check_of(store, period=0.01)
    stop = threading.Event()
    seen = []

    def leading():
        seen.append(check.count())
        if len(seen) == 3:
            return False          # leadership gone: the gauge goes to 0 at once
        if len(seen) > 3:
            stop.set()
        return True

    check.run(stop, leading)
    assert seen[:3] == [0, 1, 1] and seen[3] == 0
    assert check.count() == 0


def test_the_loop_survives_a_crashing_check(caplog):
    check, _ = check_of(Store(), period=0.01)
    stop = threading.Event()
    calls = []

    def boom(now=None):
        calls.append(1)
        if len(calls) == 2:
            stop.set()
        raise RuntimeError("bug")

    check.check = boom
    check.run(stop, lambda: True)
    assert len(calls) == 2
    assert any("scope overlap check crashed" in r.getMessage() for r in caplog.records)


def test_the_gauge_is_exported():
    m = Metrics()
    m.scope_overlaps = lambda: 2
    families = {f.name: f for f in collector(m).collect()}
    assert families["flux_plunger_scope_overlaps"].samples[0].value == 2
    assert Metrics().scope_overlaps() == 0


def test_a_lease_in_another_namespace_counts_even_under_our_own_name(caplog):
    """Issue 36: the check lists the Leases of the cluster — a plain install in flux-system
    leading on the contract's Lease name, as this one does in fp, is another controller."""
    store = Store(lease(OWN, f"{KEY}=a", ""),
                  lease(OWN, None, None, lease_ns="flux-system"),       # the same name elsewhere
                  lease("b.flux-plunger.cozystack.io", f"{KEY}=b", "", lease_ns="shard-b"))
    check, _ = check_of(store)
    check.check(NOW)
    assert check.count() == 1 and store.calls[0] == "LIST"
    (line,) = warnings(caplog)
    assert line.fp_fields["overlaps"] == [
        f"Lease flux-system/{OWN} held by pod_1, no scope recorded (taken to watch every "
        "release)"]
    (event,) = store.objects.values()
    assert event["involvedObject"]["namespace"] == "fp"                # on our own Lease


def test_a_refused_cluster_list_falls_back_to_our_own_namespaces(caplog):
    store = Store(lease(OWN, f"{KEY}=a", ""),
                  lease("twin.flux-plunger.cozystack.io", f"{KEY}=a", ""),
                  lease("far.flux-plunger.cozystack.io", f"{KEY}=a", "", lease_ns="elsewhere"))
    store.cluster_error = KubeError(403, "Forbidden", "leases is forbidden at the cluster scope")
    check, _ = check_of(store)
    check.check(NOW)
    check.check(NOW)
    assert check.count() == 1                                   # the twin; "far" is not seen
    assert [c for c in store.calls if c.startswith("LIST")] == ["LIST", "LIST fp"] * 2
    (line,) = [r for r in warnings(caplog) if "cannot list" in r.getMessage()]
    assert "cannot list the Leases of the cluster" in line.getMessage()
    assert "only with those in namespace fp" in line.getMessage()
    store.cluster_error = None                                  # granted: seen again
    check.check(NOW)
    assert check.count() == 2


def test_a_refused_cluster_list_leaves_no_reference_cycle_behind():
    """The refused cluster list's error outlives its ``except`` (the warning names it); kept
    with its traceback, it and the frame that caught it would hold each other until a full
    collection, once per check (issue 49)."""
    store = Store(lease(OWN, f"{KEY}=a", ""))
    store.cluster_error = KubeError(403, "Forbidden", "leases is forbidden at the cluster scope")
    check, _ = check_of(store)
    check.check(NOW)                                            # the warning said once
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            check.check(NOW)
        assert gc.collect() == 0
    finally:
        gc.enable()
