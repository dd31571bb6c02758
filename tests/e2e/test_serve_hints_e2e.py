"""serve's start-up hints (issue 32) against the real apiserver and the real helm-controller:
the Warning Events helm-controller records on a release it finds stuck put that release
ahead of the sync.

1. 5,000 HelmReleases, and one made stuck by helm-controller that the sync lists last: it is
   recovered while the sync is held before its event, long before the sync's bookmark; the
   sync's copy of it and the stream of the recovery's own writes start no second pass.
2. An Event naming a release that is not stuck any more: one read, no write.
3. An Event naming a release outside ``-l``: one GET that checks the selector, no read that
   decides and nothing written; the one inside is recovered.
4. Events forbidden by the install's RBAC: one warning; the sync recovers the release with
   the requests it always took.
"""
from __future__ import annotations

import copy
import datetime as dt
import json
import re
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import INITIAL_EVENTS_END, JSON, hr_path
from testplane.binaries import BuildError
from testplane.cluster import Cluster, eventually
from testplane.helmctl import (HelmController, break_release, helmrelease, is_ready,
                               publish_chart, ready, request_reconcile)
from testplane.plane import ControlPlane, PlaneError

from tests.apiserver.test_deploy_manifests import find, render_kustomize
from tests.apiserver.test_request_count import (EIGHT_SERVE_WITHOUT_WATCH_LISTS,
                                                NINE_WITHOUT_WATCH_LISTS, SEVEN,
                                                CountedServe, _about)

from .conftest import wait_ready, wait_stuck
from .test_recover_e2e import make_stuck

BULK = 5000
BULK_LABEL = "e2e.flux-plunger.cozystack.io/bulk"   # helm-controller never watches these
HOLD_AFTER = 100                                    # initial events before the sync is held
UA = "flux-plunger-hints-e2e"
WRITES = ("create", "update", "patch", "delete")


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def stamp(ev: dict) -> float:
    """An audit event's requestReceivedTimestamp, epoch seconds."""
    raw = ev["requestReceivedTimestamp"].replace("Z", "+00:00")
    return dt.datetime.fromisoformat(raw).timestamp()


def naming(events: list[dict], name: str) -> list[tuple[str, str, int]]:
    """(verb, resource, status) of the requests that name release ``name``, by arrival: the
    release itself, its storage Secrets and Events (by name, or by a selector on its name)."""
    out = []
    for ev in sorted(events, key=lambda e: e["requestReceivedTimestamp"]):
        ref = ev.get("objectRef") or {}
        obj = ref.get("name") or ""
        uri = urllib.parse.unquote(ev["requestURI"])
        if (obj == name or obj.startswith((f"{name}.", f"sh.helm.release.v1.{name}."))
                or re.search(rf"name={re.escape(name)}(?:[&,]|$)", uri)):
            out.append((ev["verb"], ref.get("resource"), ev["responseStatus"]["code"]))
    return out


def writes(events: list[dict]) -> list[str]:
    """Every write serve sent, other than to its Lease."""
    return [f"{ev['verb']} {ev['requestURI']}" for ev in events
            if ev["verb"] in WRITES and (ev.get("objectRef") or {}).get("resource") != "leases"]


def hints_line(text: str) -> dict:
    (line,) = [x for x in json_lines(text) if x["msg"].startswith("start-up hints: ")]
    return line


def warnings(text: str) -> list[str]:
    return [x["msg"] for x in json_lines(text) if x["level"] in ("warning", "error")]


# -- 1. 5,000 releases, the stuck one listed last ------------------------------------------

@pytest.fixture(scope="module")
def big(tmp_path_factory, chart_server):
    """A control plane of its own holding BULK healthy HelmReleases (one namespace, names
    sorting before the stuck one's) and a helm-controller of its own that watches every
    release but those: the session's plane and helm-controller stay as they were."""
    work = tmp_path_factory.mktemp("hints-plane")
    plane = ControlPlane(work)
    hc = HelmController(plane.kubeconfig, work, label_selector=f"!{BULK_LABEL}")
    try:
        plane.start()
        hc.start()
    except (BuildError, PlaneError, TimeoutError) as exc:
        hc.stop()
        plane.stop()
        pytest.fail(f"cannot start the hints test's plane and helm-controller: {exc}",
                    pytrace=False)
    kube = plane.kube(user_agent="e2e-test")
    kube.ensure_connections(32)
    cluster = Cluster(kube)
    ns = cluster.namespace("hints")

    def create(i: int) -> None:
        body = {"apiVersion": C.HR_API_VERSION, "kind": C.HR_KIND,
                "metadata": {"name": f"bulk-{i:05d}", "namespace": ns,
                             "labels": {BULK_LABEL: "yes"},
                             "finalizers": [C.HELM_CONTROLLER_FINALIZER]},
                "spec": {"interval": "5m",
                         "chartRef": {"kind": "ExternalArtifact", "name": "bulk"}}}
        kube.request("CREATE", "POST", hr_path(ns), body=body, content_type=JSON)

    with ThreadPoolExecutor(32) as pool:       # ~250 a second on a loaded 2-core machine
        list(pool.map(create, range(BULK)))
    yield SimpleNamespace(plane=plane, kube=kube, cluster=cluster, ns=ns, hc=hc)
    kube.close()
    hc.stop()
    plane.stop()


class _HeldSync:
    """The Controller's Kube as its watcher sees it: the sync (its watch-list, or without
    watch-lists its paged LIST) is held after HOLD_AFTER releases until ``until()`` holds
    (a deadline).  ``seen`` is the sync as the apiserver sent it — each release's key, "END"
    for the initial-events bookmark (or the LIST's last page) and "held" where it stood
    still; ``released_at`` when it went on (wall clock, as the audit log's); ``timed_out``
    what ``until`` waited for in vain."""

    def __init__(self, kube, until):
        self._kube, self.until = kube, until
        self.seen: list[str] = []
        self.released_at: float | None = None
        self.timed_out = ""

    def __getattr__(self, name):
        return getattr(self._kube, name)

    @property
    def watch_list(self):
        return self._kube.watch_list

    @watch_list.setter
    def watch_list(self, value):
        self._kube.watch_list = value

    def _take(self, hr: dict) -> None:
        md = hr.get("metadata") or {}
        self.seen.append(f"{md.get('namespace')}/{md.get('name')}")
        if len(self.seen) == HOLD_AFTER:
            self.seen.append("held")
            try:
                eventually(self.until, 90, "the stuck release recovered, the sync held")
            except TimeoutError as exc:     # the watcher's thread: reported by the test
                self.timed_out = str(exc)
            self.released_at = time.time()

    def watch_hrs(self, namespace, selector, rv, timeout_seconds=300, *,
                  send_initial_events=False):
        events = self._kube.watch_hrs(namespace, selector, rv, timeout_seconds,
                                      send_initial_events=send_initial_events)
        if not send_initial_events or "END" in self.seen:
            return events
        return self._held_stream(events)

    def _held_stream(self, events):
        for ev in events:
            md = (ev.get("object") or {}).get("metadata") or {}
            if ev["type"] == "ADDED" and "END" not in self.seen:
                self._take(ev["object"])
            elif (md.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                self.seen.append("END")
            yield ev

    def iter_hr_pages(self, namespace, selector, limit=500):
        for items, rv in self._kube.iter_hr_pages(namespace, selector, limit):
            for hr in items:
                self._take(hr)
            yield items, rv
        self.seen.append("END")


def test_a_release_helm_controller_reported_stuck_is_recovered_before_the_sync_reaches_it(
        big, chart_server, tmp_path):
    """The release sorts after 5,000 others; made stuck by helm-controller, which records
    Warning Events on it.  serve (in-process: the real watcher, queue, workers, hints and
    executor) starts, and its sync is held after its first 100 releases: the release is
    recovered all the same, from the hint, with the sync's bookmark still 4,901 releases
    away.  The sync then reaches it (its copy of the stuck state is older than the
    recovery) and its stream carries the recovery's own writes: neither starts a pass.
    From the audit log: the recovery's DELETE arrived before the sync went on, and every
    request serve sent about the release is the hints' LIST and the one pass."""
    from kubectl_flux_plunger.serve.controller import Controller, ServeConfig

    plane, cluster, ns = big.plane, big.cluster, big.ns
    name = "zz-stuck"
    publish_chart(big.kube, ns, name, chart_server.chart, chart_server)
    cluster.apply(helmrelease(ns, name, name), manager="kustomize-controller")
    wait_ready(cluster, ns, name, 90, f" (helm-controller log: {big.hc.process.log})")
    broken = break_release(big.kube, ns, name)
    request_reconcile(big.kube, ns, name)
    wait_stuck(cluster, ns, name)

    def recovered() -> bool:        # serve's part done: the revision gone, the hold lifted
        hr = cluster.get(ns, name)
        return (broken not in cluster.secret_names(ns, name) and not hr["spec"].get("suspend")
                and C.FENCE not in hr["metadata"]["finalizers"])

    k = plane.kube(user_agent=UA)
    c = Controller(k, ServeConfig(namespace=ns, leader_elect=False, metrics_addr=None,
                                  probe_addr=None, handshake_timeout=30, stop_timeout=5,
                                  drain_timeout=10, fence_recheck=0.5))
    held = _HeldSync(k, recovered)
    c.watcher.kube = held
    mark = plane.audit_mark()
    try:
        c.start()
        eventually(c.watcher.synced.is_set, 120, "the sync done")
        assert not held.timed_out, held.timed_out
        eventually(lambda: is_ready(cluster.get(ns, name)), 120, "helm-controller installs it")
        # idle: nothing queued, being processed or armed, and the pass's watch closed
        eventually(lambda: not len(c.queue) and not c.queue.processing(), 30, "serve idle")
        ended = plane.audit_mark()
    finally:
        c.stopping.set()
        c.wake.set()
        c.shutdown()
        k.close()
    sent = plane.audit_events(since=mark, user_agent=UA)
    sent = sent[:len(sent) - len(plane.audit_events(since=ended, user_agent=UA))]

    # the sync as the apiserver sent it: held after 100, the stuck release last, the end
    assert held.seen.index("held") == HOLD_AFTER, held.seen[:5]
    assert held.seen[-2:] == [f"{ns}/{name}", "END"], held.seen[-3:]
    assert len(held.seen) == BULK + 3
    # seen from outside serve: its DELETE of the judged revision came in while it was held
    (delete,) = [ev for ev in sent if ev["verb"] == "delete"]
    assert delete["objectRef"]["name"] == broken and delete["responseStatus"]["code"] == 200
    assert held.released_at is not None and stamp(delete) < held.released_at
    # one pass: the hints' LIST of Events, then the recovery's requests and nothing else
    # (a status write of helm-controller's between the read and the acquire costs one
    # 409'd APPLY, re-decided on the stream: not counted)
    about = _about(sent, name, conflicts=False, hints=True)
    if plane.watch_lists:
        assert about == [("list", "events"), *SEVEN], about
    else:   # no watch-lists: whichever of the sync and the pass met the refusal first paid it
        assert about in ([("list", "events"), *EIGHT_SERVE_WITHOUT_WATCH_LISTS],
                         [("list", "events"), *NINE_WITHOUT_WATCH_LISTS]), about
    assert len(_about(sent, name, hints=True)) - len(about) <= 1, _about(sent, name, hints=True)
    hr = cluster.get(ns, name)
    assert ready(hr)[1] in ("InstallSucceeded", "UpgradeSucceeded")
    assert hr["metadata"]["annotations"][C.PROCESSED_ANNOTATION] == "1"


# -- 2.-4. one serve process on the shipped roles, the session's helm-controller -----------

def heal_by_hand(cluster, ns: str, name: str) -> None:
    """What an operator does without flux-plunger (test_helm_controller_facts): suspend,
    wait for helm-controller to see it, delete the blocking revision, resume."""
    cluster.suspend(ns, name, True)
    gen = cluster.get(ns, name)["metadata"]["generation"]
    eventually(lambda: cluster.get(ns, name)["status"].get("observedGeneration") == gen, 30,
               "helm-controller to observe the suspension")
    for secret in cluster.secret_names(ns, name):
        cluster.kube.request("DELETE", "DELETE", f"/api/v1/namespaces/{ns}/secrets/{secret}")
    cluster.suspend(ns, name, False)
    wait_ready(cluster, ns, name)


def test_an_event_naming_a_release_that_is_not_stuck_any_more_leads_to_no_write(
        installed, cluster, ns, plane, tmp_path):
    make_stuck(installed, cluster, ns, "healed")
    heal_by_hand(cluster, ns, "healed")
    warned = [e for e in cluster.events(ns, "healed")
              if e["type"] == "Warning" and C.STUCK_MESSAGE in e["message"]]
    assert warned, cluster.events(ns, "healed")       # helm-controller's reports are there

    counted = CountedServe(plane, cluster, ns, tmp_path)
    about = counted.about("healed", lambda: True, hints=True)
    text = counted.serve.text()
    line = hints_line(text)
    assert (line["reported"], line["queued"]) == (1, 1), line
    # the hint's one read (the sync does not queue a healthy release), and nothing written
    read = ("watch", "helmreleases") if plane.watch_lists else ("get", "helmreleases")
    assert about[0] == ("list", "events") and about[1:] in ([read],
                                                             [("watch", "helmreleases"), read])
    assert writes(counted.logged) == []
    assert is_ready(cluster.get(ns, "healed"))
    assert warnings(text) == []


def test_an_event_naming_a_release_outside_the_selector_leads_to_no_read_that_decides(
        installed, cluster, ns, plane, tmp_path):
    make_stuck(installed, cluster, ns, "inside")
    cluster.merge(ns, "inside", {"metadata": {"labels": {"shard": "one"}}})
    make_stuck(installed, cluster, ns, "outside")

    def back() -> bool:
        hr = cluster.get(ns, "inside")
        return is_ready(hr) and (hr["metadata"].get("annotations") or {}).get(
            C.PROCESSED_ANNOTATION) == "1"

    try:
        counted = CountedServe(plane, cluster, ns, tmp_path, "-l", "shard=one")
        inside = counted.about("inside", back, conflicts=False, hints=True)
        hr = cluster.get(ns, "outside")
    finally:    # helm-controller would retry it for the rest of the session
        cluster.delete_hr(ns, "outside")
    line = hints_line(counted.serve.text())
    assert line["reported"] == 2 and line["queued"] <= 1, line
    # the release outside -l: the one GET that checks the selector, nothing else — no
    # watch-list or GET that decides, no storage LIST, no write
    assert naming(counted.logged, "outside") == [("get", "helmreleases", 200)]
    assert not hr["spec"].get("suspend") and C.FENCE not in hr["metadata"]["finalizers"]
    # still stuck, never recovered: helm-controller's retries of it turn Ready Unknown
    # while each attempt runs, so the condition may be caught between False and False
    assert ready(hr)[0] in ("False", "Unknown"), ready(hr)
    assert C.PROCESSED_ANNOTATION not in (hr["metadata"].get("annotations") or {}), hr
    # the one inside: that GET too, then the recovery as always
    pass_ = SEVEN if plane.watch_lists else EIGHT_SERVE_WITHOUT_WATCH_LISTS
    assert sorted(inside) == sorted([("list", "events"), ("get", "helmreleases"), *pass_]), \
        inside
    assert warnings(counted.serve.text()) == []


def test_with_events_forbidden_serve_starts_with_one_warning_and_the_sync_recovers(
        installed, cluster, ns, plane, tmp_path):
    make_stuck(installed, cluster, ns)
    rules = copy.deepcopy(find(render_kustomize(), "ClusterRole", "flux-plunger-flux-plunger")["rules"])
    for rule in rules:
        if "events" in rule["resources"]:
            rule["verbs"].remove("list")

    def back() -> bool:
        hr = cluster.get(ns, "demo")
        return is_ready(hr) and (hr["metadata"].get("annotations") or {}).get(
            C.PROCESSED_ANNOTATION) == "1"

    counted = CountedServe(plane, cluster, ns, tmp_path, cluster_rules=rules)
    about = counted.about("demo", back, conflicts=False, hints=True)
    text = counted.serve.text()
    (warning,) = warnings(text)
    assert warning.startswith("start-up hints: cannot list the Warning Events on "
                              "HelmReleases (") and "forbidden" in warning, warning
    assert not any(x["msg"].startswith("start-up hints: queued") for x in json_lines(text))
    # the refused LIST (before or during the pass: the sync, not the hint, queued it) and
    # the one pass — what serve always sent
    listed = [ev for ev in counted.logged
              if (ev.get("objectRef") or {}).get("resource") == "events" and ev["verb"] == "list"]
    assert [ev["responseStatus"]["code"] for ev in listed] == [403]
    pass_ = SEVEN if plane.watch_lists else EIGHT_SERVE_WITHOUT_WATCH_LISTS
    assert about.count(("list", "events")) == 1, about
    assert [x for x in about if x != ("list", "events")] == pass_, about
    synced = [x for x in json_lines(text) if x["msg"] == "listed HelmReleases"]
    assert synced and synced[0]["queued"] == 1, synced

