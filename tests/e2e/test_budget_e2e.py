"""The recovery budget (issue 57) with the real helm-controller: a chart whose post-install
and pre-delete hooks never finish, ``serve`` running.  Before issue 57 serve recovered such
a release every ~21 s for ever, re-running the hooks each time.  Now: at most
``--max-failed-recoveries`` recoveries, the second waiting ``--recovery-backoff``, the third
twice that — after a leader change, the second serve going on from the count the first left
on the HelmRelease — then
``given-up`` (one Warning ``RecoverySkipped``, ``status`` says so), and nothing more over
five minutes of serve running; the hook Jobs
helm-controller created over the run, counted from the audit log, are N + 1 per hook;
then the chart is fixed (a new artifact revision) and serve recovers it to Ready=True by
itself.  Runs on every helm-controller version the suite runs."""
from __future__ import annotations

import json
import os
import time
from collections import Counter

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import plan
from kubectl_flux_plunger.core.detect import parse_timestamp
from testplane.cluster import Cluster, Poller, eventually
from testplane.plane import wait_for
from testplane.helmctl import (FIXED_VERSION, hooked_release, publish_version,
                               release_statuses, wait_released)

from tests.apiserver.test_serve_support import FAST, serve  # noqa: F401 - fixture

LIMIT = 3
BACKOFF = 20  # seconds: longer than one install-and-remediate cycle (~15 s), so it shows
# the observation window: serve runs at least this long before the counts are taken
# (helm-controller keeps failing the release meanwhile; nothing of ours may follow)
# — on each helm-controller version; the compatibility run on the older kube-apiserver
# (the same helm-controller) counts without the window, to keep CI's time
WINDOW = 0.0 if os.environ.get("FLUX_PLUNGER_KUBE_VERSION") else 300.0


def _given_up(cluster, ns: str, name: str) -> list[dict]:
    return [e for e in cluster.events(ns, name)
            if e["reason"] == "RecoverySkipped"
            and e["message"] == plan.RECOVERY_SKIPPED[plan.Stuck.GIVEN_UP].message]


class HookJobs(Poller):
    """Every hook Job helm-controller creates in ``ns``, by uid: each lives at least the
    hook timeout (it never finishes; the next run of its hook deletes it first), so a LIST
    every 200 ms sees each one."""

    interval = 0.2
    tolerated = (Exception,)  # a failed LIST is tried again

    def __init__(self, cluster, ns: str):
        self.cluster, self.ns = cluster, ns
        self.seen: dict[str, str] = {}  # uid -> name

    def step(self) -> None:
        listed = self.cluster.kube.request(
            "LIST", "GET", f"/apis/batch/v1/namespaces/{self.ns}/jobs")
        for job in listed.get("items") or []:
            self.seen[job["metadata"]["uid"]] = job["metadata"]["name"]

    def per_hook(self) -> Counter:
        return Counter(self.seen.values())


def _audit(plane, since: int, ns: str, resource: str, verb: str) -> list[dict]:
    return [e for e in plane.audit_events(since)
            if (e.get("objectRef") or {}).get("resource") == resource
            and (e.get("objectRef") or {}).get("namespace") == ns
            and e.get("verb") == verb and (e.get("responseStatus") or {}).get("code", 0) < 300]


def test_a_chart_that_keeps_failing_is_given_up_then_recovered_once_fixed(
        plane, helm_controller, chart_server, cluster, ns, serve, cli):  # noqa: F811
    name = "failing"
    mark = plane.audit_mark()
    flags = ("-n", ns, "--leader-election-namespace", ns, *FAST,
             "--max-failed-recoveries", str(LIMIT), "--recovery-backoff", f"{BACKOFF}s")
    first = serve(*flags, name="first")
    eventually(first.leads, 30, "serve leads")
    started = time.monotonic()
    # the install fails on its post-install hook, the remediation's uninstall on its
    # pre-delete hook: StateError, for ever (retries 3: the limit stays serve's 3)
    publish_version(cluster.kube, ns, name, chart_server, "0.1.0", ("post-install", "pre-delete"))
    with HookJobs(cluster, ns) as hooks:
        Cluster(cluster.kube).apply(hooked_release(ns, name, install={"retries": 3}),
                                    manager="kustomize-controller")
        # a leader change after the second failed recovery: the first serve stops (drain,
        # Lease given up), a second leads and goes on from the count on the HelmRelease
        wait_for(lambda: first.logged(r"backing off: 2 failed recoveries in a row"), 240,
                 "the second failed recovery")
        first.signal()
        assert first.wait(60) == 0
        s = serve(*flags, name="second")
        eventually(s.leads, 30, "the second serve leads")
        events = eventually(lambda: _given_up(cluster, ns, name), 240, "the given-up Warning")
        eventually(lambda: s.logged(rf"skipped: given up: {LIMIT} failed recoveries"), 15,
                   "the second serve's given-up pass")
        # the last attempt's pre-delete hook Job exists before the StateError it ends in
    hr = cluster.get(ns, name)
    record = json.loads(hr["metadata"]["annotations"][C.BUDGET_ANNOTATION])
    assert record["recoveries"] == LIMIT and record["limit"] == LIMIT, record
    (event,) = events
    assert event["type"] == "Warning"
    res = cli("status", "-n", ns, name, "-o", "json")
    assert res.code == 0, res
    (item,) = json.loads(res.out)["items"]
    assert item["state"] == "given-up", item
    assert (item["budget"]["failedRecoveries"], item["budget"]["limit"]) == (LIMIT, LIMIT)
    assert "recover-by-hand" in item["budget"]["resetsOn"]
    # serve goes on running through the window; what follows counts the whole of it
    wait_for(lambda: time.monotonic() - started >= WINDOW, WINDOW + 30,
             f"serve running {WINDOW:.0f} s", interval=1.0)
    assert len(_given_up(cluster, ns, name)) == 1      # said once, still

    # the recoveries: serve's DELETEs of the storage, the second after the backoff
    deletes = [e for e in _audit(plane, mark, ns, "secrets", "delete")
               if (e.get("userAgent") or "").startswith("kubectl-flux-plunger/")
               and e["objectRef"]["name"].startswith(f"sh.helm.release.v1.{name}.")]
    assert len(deletes) == LIMIT, [e["objectRef"]["name"] for e in deletes]
    times = [parse_timestamp(e["requestReceivedTimestamp"]) for e in deletes]
    assert (times[1] - times[0]).total_seconds() >= BACKOFF, times
    assert (times[2] - times[1]).total_seconds() >= 2 * BACKOFF, times   # doubled, and
    # across the leader change: the second serve waited out what the first recorded
    # the hook Jobs helm-controller created: the attempt that got it stuck and one per
    # recovery — at most N + 1 per hook.  The audit log is the count (a LIST every 200 ms
    # can miss a Job at load); the watcher's names say which hook each belongs to
    # (Helm 3 creates a hook Job with a POST; Helm 4, in helm-controller v1.5+, with a
    # server-side apply: a PATCH answered 201 Created)
    creates = [e for e in _audit(plane, mark, ns, "jobs", "create")
               + _audit(plane, mark, ns, "jobs", "patch")
               if e["verb"] == "create" or e["responseStatus"].get("code") == 201]
    assert len(creates) == 2 * (LIMIT + 1), [(e["verb"], e["objectRef"].get("name"))
                                             for e in creates]
    named = Counter(e["objectRef"].get("name") for e in creates)
    if None not in named:            # the apiserver names the created object in its line
        assert named == {f"{name}-post-install": LIMIT + 1,
                         f"{name}-pre-delete": LIMIT + 1}, named
    jobs = hooks.per_hook()
    assert set(jobs) <= {f"{name}-post-install", f"{name}-pre-delete"}, jobs
    assert all(n <= LIMIT + 1 for n in jobs.values()), jobs
    assert s.metric("flux_plunger_releases_left_stuck", reason="given-up") == 1.0

    # the chart is fixed: a new artifact revision ends the run, serve recovers it by itself
    publish_version(cluster.kube, ns, name, chart_server, FIXED_VERSION)
    hr = wait_released(cluster.kube, ns, name, 1, FIXED_VERSION)
    assert hr["spec"].get("suspend") is None
    assert C.FENCE not in (hr["metadata"].get("finalizers") or [])
    assert json.loads(hr["metadata"]["annotations"][C.BUDGET_ANNOTATION])["recoveries"] == 1
    assert release_statuses(cluster.kube, ns, name) == {1: "deployed"}
    eventually(lambda: s.metric("flux_plunger_releases_left_stuck", reason="given-up") == 0.0,
               15, "no longer counted as left stuck")
    s.signal()
    assert s.wait(30) == 0
