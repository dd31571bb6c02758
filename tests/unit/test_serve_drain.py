"""The shutdown drain on a fake lister, a fake reconciler and a fake clock: it carries a
terminating release through the uninstall (relinquish, wait, fence removed), gives up at the
deadline with the count still held, stops at once when the Lease is lost, and survives
failing LISTs and failing passes.  Once the watch synced, it starts from the keys the watch
knows (no LIST before the first pass), re-reads each before acting, and ends with one
confirming LIST when time remains.

The apiserver tier drains real releases (tests/apiserver/test_serve_drain.py)."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.executor import Executor, Options, Outcome, Result
from kubectl_flux_plunger.kube import KubeError
from kubectl_flux_plunger.core.plan import Row
from kubectl_flux_plunger.serve.drain import Drainer, settled
from kubectl_flux_plunger.serve.metrics import Metrics
from kubectl_flux_plunger.serve.options import DrainOptions

from .builders import OURS, hr

from .fakes import Clock

pytestmark = pytest.mark.unit

DELETED = "2026-11-30T11:59:00Z"


class Cluster:
    """Releases by key; ``iter_hr_pages`` lists them (two per page), ``reconcile`` runs the
    next scripted step of a release: (result, the release afterwards or None)."""

    def __init__(self, clock: Clock, releases: dict[str, dict], steps: dict[str, list]) -> None:
        self.clock = clock
        self.releases = releases
        self.steps = steps
        self.reconciled: list[tuple[float, str]] = []
        self.trace: list[str] = []              # "list" and the keys reconciled, in order
        self.list_failures = 0
        self.lists = 0

    def iter_hr_pages(self, namespace, selector, limit):
        self.lists += 1
        self.trace.append("list")
        if self.list_failures:
            self.list_failures -= 1
            raise KubeError(503, "ServiceUnavailable", "the server is currently unable")
        items = list(self.releases.values())
        for i in range(0, len(items), 2):
            yield items[i:i + 2], "1"

    def reconcile(self, namespace: str, name: str, only_rows=None) -> Outcome:
        key = f"{namespace}/{name}"
        self.reconciled.append((self.clock(), key))
        self.trace.append(key)
        step = self.steps[key].pop(0) if len(self.steps[key]) > 1 else self.steps[key][0]
        if isinstance(step, Exception):
            raise step
        result, after = step
        if after is None:
            self.releases.pop(key, None)
        else:
            self.releases[key] = after
        return Outcome(namespace, name, Result(result), f"{result} (scripted)",
                       row=Row.TERMINATING_FENCED_WAITING)


def terminating(name: str, *, suspended: bool) -> dict:
    return hr(name, namespace="apps", suspend=True if suspended else None,
              managed=[OURS] if suspended else [], finalizers=[C.FENCE],
              deletion_timestamp=DELETED)


def drainer(cluster: Cluster, clock: Clock, poll: float = 1.0, **kw) -> Drainer:
    return Drainer(cluster, cluster, DrainOptions(poll=poll), clock=clock, sleep=clock.sleep,
                   **kw)


def test_a_terminating_release_is_carried_through_the_uninstall():
    clock = Clock()
    held = terminating("web", suspended=True)
    unsuspended = terminating("web", suspended=False)
    cluster = Cluster(clock, {"apps/web": held}, {"apps/web": [
        ("relinquished", unsuspended),          # our suspension lifted, the fence kept
        ("waiting", unsuspended),               # helm-controller has not uninstalled yet
        ("waiting", unsuspended),
        ("fence-removed", None),                # uninstalled: the fence goes, the object too
    ]})
    metrics = Metrics()
    assert drainer(cluster, clock, metrics=metrics).run(timeout=30) == 0
    assert [key for _, key in cluster.reconciled] == ["apps/web"] * 4
    assert clock.slept == [1.0, 1.0, 1.0]       # one poll between passes, none after the last
    assert metrics.snapshot()["reconciles"] == {"relinquished": 1, "waiting": 2,
                                                "fence-removed": 1}
    assert cluster.lists == 5                   # the last LIST finds nothing of ours


def test_releases_that_are_not_ours_are_left_alone():
    clock = Clock()
    foreign = hr("other", namespace="apps", suspend=True, managed=[("velero", "Update", True)])
    cluster = Cluster(clock, {"apps/other": foreign}, {})
    assert drainer(cluster, clock).run(timeout=30) == 0
    assert cluster.reconciled == []


def test_the_deadline_leaves_the_rest_and_reports_how_many():
    clock = Clock()
    stuck = {f"apps/r{i}": terminating(f"r{i}", suspended=False) for i in range(3)}
    cluster = Cluster(clock, dict(stuck), {k: [("waiting", v)] for k, v in stuck.items()})
    assert drainer(cluster, clock, poll=2.0).run(timeout=5) == 3
    assert clock.slept == [2.0, 2.0, 1.0]       # the last wait ends at the deadline
    assert clock() == 5.0
    assert [t for t, _ in cluster.reconciled] == [0.0] * 3 + [2.0] * 3 + [4.0] * 3


def test_the_deadline_interrupts_a_pass():
    clock = Clock()
    slow = {f"apps/r{i}": terminating(f"r{i}", suspended=False) for i in range(4)}

    class Slow(Cluster):
        def reconcile(self, namespace, name, only_rows=None):
            clock.now += 2.0                    # each pass over one release takes 2 s
            return super().reconcile(namespace, name, only_rows)

    cluster = Slow(clock, dict(slow), {k: [("waiting", v)] for k, v in slow.items()})
    assert drainer(cluster, clock).run(timeout=3) == 4
    assert [k for _, k in cluster.reconciled] == ["apps/r0", "apps/r1"]   # r2 never started


def test_losing_the_lease_aborts_at_once():
    clock = Clock()
    two = {k: terminating(k.split("/")[1], suspended=True) for k in ("apps/a", "apps/b")}
    cluster = Cluster(clock, dict(two), {k: [("relinquished", v)] for k, v in two.items()})
    leading = iter([True, True, False])
    assert drainer(cluster, clock).run(timeout=30, still_leading=lambda: next(leading)) == 2
    assert [k for _, k in cluster.reconciled] == ["apps/a"]   # b is left to the new leader
    assert clock.slept == []


def test_never_leading_never_lists():
    clock = Clock()
    cluster = Cluster(clock, {}, {})
    assert drainer(cluster, clock).run(timeout=30, still_leading=lambda: False) == -1
    assert cluster.lists == 0


def test_a_failing_list_is_retried_until_the_deadline():
    clock = Clock()
    cluster = Cluster(clock, {}, {})
    cluster.list_failures = 100
    assert drainer(cluster, clock).run(timeout=3) == -1    # never listed: unknown
    assert cluster.lists == 3 and clock() == pytest.approx(3.0)


def test_a_list_failing_once_is_retried():
    clock = Clock()
    cluster = Cluster(clock, {}, {})
    cluster.list_failures = 1
    assert drainer(cluster, clock).run(timeout=30) == 0
    assert cluster.lists == 2 and clock.slept == [1.0]


def test_a_failing_pass_is_counted_and_retried():
    clock = Clock()
    rel = terminating("web", suspended=False)
    cluster = Cluster(clock, {"apps/web": rel}, {"apps/web": [
        KubeError(409, "Conflict", "the object has been modified"),
        ("fence-removed", None),
    ]})
    metrics = Metrics()
    assert drainer(cluster, clock, metrics=metrics).run(timeout=30) == 0
    assert len(cluster.reconciled) == 2
    assert metrics.snapshot()["errors"] == 1


def test_a_release_that_settles_at_the_last_moment_is_reported_released():
    clock = Clock()
    rel = terminating("web", suspended=False)

    class Settles(Cluster):
        def iter_hr_pages(self, namespace, selector, limit):
            if clock() >= 2.0:                  # helm-controller uninstalled it meanwhile
                self.releases.clear()
            return super().iter_hr_pages(namespace, selector, limit)

    cluster = Settles(clock, {"apps/web": rel}, {"apps/web": [("waiting", rel)]})
    assert drainer(cluster, clock).run(timeout=2) == 0


# -- starting from what the watch knows ----------------------------------------------------


def live_held(name: str) -> dict:
    return hr(name, namespace="apps", suspend=True, managed=[OURS], finalizers=[C.FENCE])


def test_a_synced_watch_drains_the_known_keys_before_any_list_then_lists_once():
    clock = Clock()
    rels = {k: terminating(k.split("/")[1], suspended=False) for k in ("apps/a", "apps/b")}
    cluster = Cluster(clock, dict(rels), {k: [("fence-removed", None)] for k in rels})
    known = {"apps/a", "apps/b"}
    assert drainer(cluster, clock, known=lambda: known).run(timeout=30) == 0
    # both acted on before the one LIST, which confirms nothing is left
    assert cluster.trace == ["apps/a", "apps/b", "list"]
    assert clock.slept == []


def test_the_confirming_list_finds_what_the_watch_missed():
    clock = Clock()
    rels = {k: terminating(k.split("/")[1], suspended=False) for k in ("apps/a", "apps/b")}
    cluster = Cluster(clock, dict(rels), {k: [("fence-removed", None)] for k in rels})
    assert drainer(cluster, clock, known=lambda: {"apps/a"}).run(timeout=30) == 0
    assert cluster.trace == ["apps/a", "list", "apps/b"]     # b: found by the LIST, drained
    assert cluster.lists == 1


def test_a_known_key_is_re_read_until_a_pass_settles_it():
    """Relinquished is not settled (the fence may stay): the next pass reads it again; the
    read that finds nothing of ours settles it — with no LIST in between."""
    clock = Clock()
    rel = live_held("web")
    healthy = hr("web", namespace="apps")

    class Live(Cluster):
        def reconcile(self, namespace, name, only_rows=None):
            out = super().reconcile(namespace, name, only_rows)
            out.row = Row.LIVE_SUSPENDED_OWNED if out.result == "relinquished" else Row.HEALTHY
            return out

    cluster = Live(clock, {"apps/web": rel}, {"apps/web": [
        ("relinquished", healthy), ("unchanged", healthy)]})
    assert drainer(cluster, clock, known=lambda: {"apps/web"}).run(timeout=30) == 0
    assert cluster.trace == ["apps/web", "apps/web", "list"]
    assert clock.slept == [1.0]                 # one poll after the relinquish, none after


def test_keys_the_watch_reports_during_the_drain_join_it():
    clock = Clock()
    rels = {k: terminating(k.split("/")[1], suspended=False) for k in ("apps/a", "apps/b")}
    cluster = Cluster(clock, dict(rels), {"apps/a": [("waiting", rels["apps/a"]),
                                                     ("fence-removed", None)],
                                          "apps/b": [("fence-removed", None)]})
    seen = [{"apps/a"}, {"apps/a", "apps/b"}]
    known = lambda: seen.pop(0) if len(seen) > 1 else seen[0]  # noqa: E731
    assert drainer(cluster, clock, known=known).run(timeout=30) == 0
    assert cluster.trace == ["apps/a", "apps/a", "apps/b", "list"]
    assert cluster.lists == 1


def test_no_list_at_the_deadline_when_the_known_keys_are_not_done():
    clock = Clock()
    stuck = {f"apps/r{i}": terminating(f"r{i}", suspended=False) for i in range(2)}
    cluster = Cluster(clock, dict(stuck), {k: [("waiting", v)] for k, v in stuck.items()})
    assert drainer(cluster, clock, known=lambda: set(stuck)).run(timeout=3) == 2
    assert cluster.lists == 0
    assert [k for _, k in cluster.reconciled] == ["apps/r0", "apps/r1"] * 3


def test_the_confirming_list_stops_at_the_deadline(caplog):
    clock = Clock()
    rels = {f"apps/r{i}": terminating(f"r{i}", suspended=False) for i in range(6)}

    class SlowList(Cluster):
        def iter_hr_pages(self, namespace, selector, limit):
            for page in super().iter_hr_pages(namespace, selector, limit):
                clock.now += 2.0                # each page takes 2 s
                yield page

    cluster = SlowList(clock, dict(rels), {k: [("fence-removed", rels[k])] for k in rels})
    # the known key settles at once; the LIST (3 pages) does not fit in the 3 s left
    cluster.steps["apps/r0"] = [("fence-removed", None)]
    assert drainer(cluster, clock, known=lambda: {"apps/r0"}).run(timeout=3) == 0
    assert cluster.trace == ["apps/r0", "list"]
    assert clock() == 4.0                       # stopped after the page that crossed it
    assert "no time left for the LIST" in caplog.text


def test_an_unsynced_watch_falls_back_to_a_list_every_pass():
    clock = Clock()
    rel = terminating("web", suspended=False)
    cluster = Cluster(clock, {"apps/web": rel}, {"apps/web": [("waiting", rel),
                                                              ("fence-removed", None)]})
    assert drainer(cluster, clock, known=None).run(timeout=30) == 0
    assert cluster.trace == ["list", "apps/web", "list", "apps/web", "list"]


@pytest.mark.parametrize(("result", "row", "done"), [
    ("fence-removed", Row.LIVE_FENCED, True),
    ("gone", Row.GONE, True),
    ("unchanged", Row.HEALTHY, True),
    ("unchanged", Row.LIVE_SUSPENDED_FOREIGN, True),
    ("skipped", Row.LIVE_STUCK, True),
    ("unchanged", Row.LIVE_SUSPENDED_OWNED, False),   # changed hands: read it again
    ("relinquished", Row.LIVE_SUSPENDED_OWNED, False),
    ("relinquished", Row.TERMINATING_SUSPENDED_OWNED, False),
    ("waiting", Row.TERMINATING_FENCED_WAITING, False),
    ("failed", Row.LIVE_FENCED, False),
])
def test_what_settles_a_known_key(result, row, done):
    assert settled(Outcome("apps", "web", Result(result), "", row=row)) is done


class Kube:
    """What the drain executor reads and writes through: every call in ``calls``."""

    dry_run = False
    watch_list = False
    request_timeout = None

    def __init__(self, releases: dict[str, dict]) -> None:
        self.releases = releases
        self.calls: list[tuple[str, str]] = []

    def get_hr(self, namespace, name):
        self.calls.append(("get", f"{namespace}/{name}"))
        return self.releases.get(f"{namespace}/{name}")

    def json_patch_hr(self, namespace, name, ops):
        key = f"{namespace}/{name}"
        self.calls.append(("patch", key))
        after = dict(self.releases[key])
        after["metadata"] = {**after["metadata"], "finalizers": []}
        self.releases[key] = after
        return after

    def iter_hr_pages(self, namespace, selector, limit):
        self.calls.append(("list", ""))
        yield [], "1"


def test_a_known_key_is_read_fresh_before_anything_is_written():
    """The watch saw both fenced; by the drain, one has lost the fence (nothing to write)
    and the other has not: each is read (GET) before the one write."""
    clock = Clock()
    kube = Kube({
        "apps/kept": hr("kept", namespace="apps", finalizers=[C.FENCE]),
        "apps/freed": hr("freed", namespace="apps"),
    })
    executor = Executor(kube, options=Options(allow_recover=False))  # type: ignore[arg-type]
    d = Drainer(kube, executor, DrainOptions(), known=lambda: {"apps/kept", "apps/freed"},
                clock=clock, sleep=clock.sleep)
    assert d.run(timeout=30) == 0
    assert kube.calls == [("get", "apps/freed"), ("get", "apps/kept"), ("patch", "apps/kept"),
                          ("list", "")]
