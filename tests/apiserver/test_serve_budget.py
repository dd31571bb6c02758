"""The recovery budget under ``serve`` (issue 57), against the real apiserver with a
simulated helm-controller whose chart keeps failing: every attempt after a recovery leaves
the release stuck again.  serve recovers it at most ``--max-failed-recoveries`` times, each
recovery after a failed one waiting the doubled backoff, then gives it up — one Warning
``RecoverySkipped``, the left-stuck gauge — and a second serve process taking over the Lease
mid-run keeps the count, because the count lives on the HelmRelease."""
from __future__ import annotations

import json
from datetime import timedelta

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import plan
from kubectl_flux_plunger.core.detect import parse_timestamp
from testplane.cluster import Poller, SimulatedHelmController, eventually

from .test_serve_support import FAST, serve, stuck  # noqa: F401

LIMIT = 3
BACKOFF = 3.0  # seconds: the waits are 3 s, then 6 s


class FailingChart(Poller):
    """helm-controller with a chart that still fails: whenever the release is not suspended
    and helm-controller has not attempted its current generation (our relinquish bumped it),
    it "attempts" — the install fails and its remediation's uninstall too: a new newest
    revision ``uninstalling`` and Ready=False "has no deployed releases" for that
    generation.  Each attempt is kept with the budget record it found (the recovery that
    let it through)."""

    def __init__(self, cluster, ns: str, name: str):
        self.cluster, self.ns, self.name = cluster, ns, name
        self.attempts: list[dict] = []

    def step(self):
        hr = self.cluster.get(self.ns, self.name)
        if hr is None or hr["spec"].get("suspend") or hr["metadata"].get("deletionTimestamp"):
            return
        if hr.get("status", {}).get("lastAttemptedGeneration") == hr["metadata"]["generation"]:
            return
        names = self.cluster.secret_names(self.ns, self.name)
        newest = max(int(n.rsplit(".v", 1)[1]) for n in names) if names else 0
        self.cluster.storage(self.ns, self.name, [(newest + 1, "uninstalling")])
        self.cluster.make_stuck(self.ns, self.name)
        notes = hr["metadata"].get("annotations") or {}
        self.attempts.append(json.loads(notes.get(C.BUDGET_ANNOTATION, "{}")))


def _record(cluster, ns: str) -> dict:
    notes = cluster.get(ns, "demo")["metadata"].get("annotations") or {}
    return json.loads(notes.get(C.BUDGET_ANNOTATION, "{}"))


def _given_up_events(cluster, ns: str) -> list[dict]:
    return [e for e in cluster.events(ns, "demo") if e["reason"] == "RecoverySkipped"]


def test_serve_backs_off_gives_up_once_and_a_new_leader_keeps_the_count(
    cluster, ns, serve  # noqa: F811
):
    flags = ("-n", ns, "--leader-election-namespace", ns, *FAST,
             "--max-failed-recoveries", str(LIMIT), "--recovery-backoff", f"{BACKOFF:g}s")
    stuck(cluster, ns, "demo")
    with SimulatedHelmController(cluster, ns), FailingChart(cluster, ns, "demo") as chart:
        first = serve(*flags, name="first")
        eventually(first.leads, 30, "the first serve leads")
        # two recoveries, each followed by a failed attempt: stuck again after both
        eventually(lambda: len(chart.attempts) >= 2, 60, "two failed recoveries")
        assert [a.get("recoveries") for a in chart.attempts] == [1, 2]
        # a leader change mid-run: the first stops (drain, Lease given up), a second leads
        first.signal()
        assert first.wait(30) == 0
        second = serve(*flags, name="second")
        eventually(second.leads, 30, "the second serve leads")
        events = eventually(lambda: _given_up_events(cluster, ns), 60, "the given-up Warning")
        # the second serve made the third recovery — from the count the first left — and
        # no fourth: the third attempt was the last
        assert [a.get("recoveries") for a in chart.attempts] == [1, 2, 3]
        eventually(lambda: second.metric("flux_plunger_releases_left_stuck",
                                         reason=plan.Stuck.GIVEN_UP.value) == 1.0,
                   15, "left_stuck{reason=given-up} 1")
        eventually(lambda: second.logged(rf"skipped: given up: {LIMIT} failed recoveries"),
                   10, "the given-up pass logged")
        assert len(chart.attempts) == 3 and _record(cluster, ns)["recoveries"] == LIMIT

    # the backoff between recoveries, from the records' own times (millisecond stamps)
    times = [parse_timestamp(a["at"]) for a in chart.attempts]
    assert times[1] - times[0] >= timedelta(seconds=BACKOFF)
    assert times[2] - times[1] >= timedelta(seconds=2 * BACKOFF)
    # one Warning, with the static given-up message (folded: one object)
    (event,) = events
    assert event["type"] == "Warning"
    assert event["message"] == plan.RECOVERY_SKIPPED[plan.Stuck.GIVEN_UP].message
    recovered = [e for e in cluster.events(ns, "demo") if e["reason"] == "Recovered"]
    assert len(recovered) == 1 and recovered[0]["count"] == LIMIT
    assert second.metric("flux_plunger_recoveries_total", result="recovered") == 1.0
    second.signal()
    assert second.wait(30) == 0


def test_an_operator_change_ends_a_given_up_run(cluster, ns, serve):  # noqa: F811
    """Given up, then `flux reconcile` (requestedAt): serve recovers again, a new run."""
    flags = ("-n", ns, "--leader-election-namespace", ns, *FAST,
             "--max-failed-recoveries", "1", "--recovery-backoff", "1s")
    stuck(cluster, ns, "demo")
    with SimulatedHelmController(cluster, ns), FailingChart(cluster, ns, "demo") as chart:
        s = serve(*flags)
        eventually(s.leads, 30, "serve leads")
        eventually(lambda: _given_up_events(cluster, ns), 60, "given up after one")
        assert [a.get("recoveries") for a in chart.attempts] == [1]
        cluster.merge(ns, "demo", {"metadata": {"annotations": {
            "reconcile.fluxcd.io/requestedAt": "2026-12-07T01:00:00Z"}}})
        eventually(lambda: len(chart.attempts) >= 2, 60, "recovered again after the request")
        assert chart.attempts[1]["recoveries"] == 1  # a new run
        assert chart.attempts[1]["asked"].startswith("2026-12-07T01:00:00Z|")
    s.signal()
    assert s.wait(30) == 0
