"""What ``recover -n NS NAME`` really sends, end to end, read from the apiserver's audit log
(not from the client's own counters): no discovery round trip, and the read of the release
and the WATCH the recovery waits on are one request (a watch-list)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from testplane.cluster import Cluster, SimulatedHelmController
from testplane.plane import wait_for

from ..conftest import run_cli
from .conftest import stuck_release

UA = "kubectl-flux-plunger"


# the one-shot verbs know every other claimant of the release from a LIST of the cluster's
# HelmReleases: once before anything is written, again at the delete (issue 55; serve keeps
# the claimants from its watch and sends neither)
CLAIMANTS = ("list", "helmreleases")
HR_PAGE = 500   # kube.helmreleases: the items of one page of a LIST of HelmReleases


def claimant_pages(cluster) -> int:
    """The requests one claimants' LIST takes: a page per 500 HelmReleases of the cluster
    (this shared apiserver keeps what the earlier tests of the tier created)."""
    return max(1, -(-len(cluster.kube.list_hrs(None, None)) // HR_PAGE))


def test_recover_one_named_release_sends_ten_requests_end_to_end(cli, plane, cluster, ns):
    lease_ns = cluster.namespace("lease")
    stuck_release(cluster, ns)
    listed = [CLAIMANTS] * claimant_pages(cluster)   # counted before the mark: its LIST is not
    hc_kube = plane.kube(user_agent="simulated-helm-controller")   # not counted
    mark = plane.audit_mark()
    with SimulatedHelmController(Cluster(hc_kube), ns):
        r = cli("recover", "-n", ns, "demo", "--lease-namespace", lease_ns)
    hc_kube.close()
    assert r.code == 0 and "recovered" in r.out, r
    # a WATCH is logged when it ends: wait until the closed stream's line is written
    watches = 1 if plane.watch_lists else 2        # without watch-lists: the refused one too
    wait_for(lambda: sum(ev["verb"] == "watch" for ev in plane.audit_events(
        since=mark, user_agent=UA)) == watches, 10, "the WATCHes' audit lines")
    events = sorted(plane.audit_events(since=mark, user_agent=UA),      # by arrival: a watch
                    key=lambda ev: ev["requestReceivedTimestamp"])      # is logged at its end
    verbs = [(ev["verb"], (ev.get("objectRef") or {}).get("resource")) for ev in events]
    writes = [("patch", "helmreleases"), ("patch", "helmreleases"), *listed,
              ("delete", "secrets"), ("create", "events"), ("patch", "helmreleases")]
    if plane.watch_lists:
        # everything the process sends: the controller check (SPEC §2: every flux-plunger
        # Lease with one LIST; a release a running one covers is left to it), then the
        # named read as a watch-list — its initial event is the
        # fresh read, and the same stream carries the newest state for the acquire and
        # helm-controller's handshake — LIST, the claimants' LIST, APPLY, PATCH (record),
        # the claimants' LIST again, DELETE, the `Recovered` Event (the trace in
        # `kubectl describe`), APPLY (relinquish)
        assert verbs == [("list", "leases"), ("watch", "helmreleases"), ("list", "secrets"),
                         *listed, *writes], verbs
        watch = events[1]
        assert "sendInitialEvents=true" in watch["requestURI"], watch["requestURI"]
    else:
        # no watch-lists (Kubernetes 1.33), first run against this server: the refused
        # watch-list, then the read as a GET and a WATCH from its resourceVersion (12;
        # from the second run on 11: test_a_refused_watch_list_is_remembered_…)
        assert verbs == [("list", "leases"), ("watch", "helmreleases"),
                         ("get", "helmreleases"), ("list", "secrets"), *listed,
                         ("watch", "helmreleases"), *writes], verbs
        assert [ev["responseStatus"]["code"] for ev in events[1:3]] == [422, 200]
        assert "sendInitialEvents=true" not in events[4]["requestURI"]
    assert not any(v == "get" and r is None for v, r in verbs), verbs   # no discovery


def test_a_tenant_identity_costs_one_subject_access_review(cli, plane, cluster, ns):
    """With helm-controller's --default-service-account mirrored, the release is acted on
    only after one SubjectAccessReview of that identity (issue 55): one request more, and
    nothing else changes."""
    from testplane.rbac import service_account_kubeconfig

    lease_ns = cluster.namespace("lease")
    stuck_release(cluster, ns)
    service_account_kubeconfig(plane, "tenant", namespace=ns, namespace_rules={ns: [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
    paged = 2 * (claimant_pages(cluster) - 1)       # each claimants' LIST past one page
    hc_kube = plane.kube(user_agent="simulated-helm-controller")   # not counted
    mark = plane.audit_mark()
    with SimulatedHelmController(Cluster(hc_kube), ns):
        r = cli("recover", "-n", ns, "demo", "--lease-namespace", lease_ns,
                "--default-service-account", "tenant")
    hc_kube.close()
    assert r.code == 0 and "recovered" in r.out, r
    watches = 1 if plane.watch_lists else 2
    wait_for(lambda: sum(ev["verb"] == "watch" for ev in plane.audit_events(
        since=mark, user_agent=UA)) == watches, 10, "the WATCHes' audit lines")
    events = sorted(plane.audit_events(since=mark, user_agent=UA),
                    key=lambda ev: ev["requestReceivedTimestamp"])
    verbs = [(ev["verb"], (ev.get("objectRef") or {}).get("resource")) for ev in events]
    reviews = [i for i, v in enumerate(verbs) if v == ("create", "subjectaccessreviews")]
    assert len(reviews) == 1, verbs                      # cached for the delete's decision
    assert verbs.index(("list", "secrets")) < reviews[0] < verbs.index(
        ("patch", "helmreleases")), verbs                 # asked before anything is written
    review = events[reviews[0]]
    assert review["responseStatus"]["code"] == 201, review
    assert len(verbs) == (11 if plane.watch_lists else 13) + paged, verbs


def test_one_executor_pass_over_a_stuck_release_sends_seven_requests(plane, cluster, ns):
    """What one ``Executor.reconcile`` (serve's worker's pass) sends for one recovery: the
    watch-list read, LIST, APPLY, PATCH, DELETE, Event, APPLY.  The serve process as a
    whole: test_serve_as_a_process_recovers_in_seven_requests.  (Without watch-lists, the
    first pass against the server: the refused watch-list, GET, LIST, WATCH, … — 9.)"""
    from kubectl_flux_plunger.report.events import Recorder
    from kubectl_flux_plunger.executor import Executor, Options, Result

    stuck_release(cluster, ns)
    k = plane.kube(user_agent="flux-plunger-serve-count")
    hc_kube = plane.kube(user_agent="simulated-helm-controller")   # not counted
    mark = plane.audit_mark()
    try:
        with SimulatedHelmController(Cluster(hc_kube), ns):
            out = Executor(k, Recorder(k), options=Options(handshake_timeout=10)).reconcile(
                ns, "demo")
    finally:
        k.close()
        hc_kube.close()
    assert out.result == Result.RECOVERED, out
    # a WATCH is logged when it ends: wait until the closed stream's line is written
    watches = 1 if plane.watch_lists else 2        # without watch-lists: the refused one too
    wait_for(lambda: sum(ev["verb"] == "watch" for ev in plane.audit_events(
        since=mark, user_agent="flux-plunger-serve-count")) == watches, 10,
        "the WATCHes' audit lines")
    events = sorted(plane.audit_events(since=mark, user_agent="flux-plunger-serve-count"),
                    key=lambda ev: ev["requestReceivedTimestamp"])
    verbs = [(ev["verb"], (ev.get("objectRef") or {}).get("resource")) for ev in events]
    assert verbs == (SEVEN if plane.watch_lists else NINE_WITHOUT_WATCH_LISTS), verbs


def _about(events: list[dict], name: str = "demo", *, conflicts: bool = True,
           hints: bool = False) -> list[tuple[str, str]]:
    """(verb, resource) of the requests about one release, by arrival: the release by name,
    its Helm storage Secrets (by name, or listed by its ``name=<release>`` label) and its
    Events (named ``<release>.fp-…``); with ``conflicts=False``, not those answered 409;
    with ``hints=True``, also serve's start-up LIST of the Warning Events on HelmReleases
    (it names no release, and so it counts for every one).  Requests about any other release
    in the namespace are not counted: serve's pass over one it synced before the window
    opened may land inside it."""
    def ours(ev: dict) -> bool:
        ref = ev.get("objectRef") or {}
        res, obj, uri = ref.get("resource"), ref.get("name") or "", ev.get("requestURI", "")
        if hints and res == "events" and ev["verb"] == "list":
            return re.search(r"fieldSelector=involvedObject\.kind(%3D|=)HelmRelease",
                             uri) is not None
        if res == "secrets":
            return (obj.startswith(f"sh.helm.release.v1.{name}.")
                    or re.search(rf"name(%3D|=){re.escape(name)}($|&|%2C|,)", uri) is not None)
        if res == "events":
            return obj.startswith(f"{name}.fp-")
        return res == "helmreleases" and obj == name

    return [(ev["verb"], ev["objectRef"]["resource"])
            for ev in sorted(events, key=lambda ev: ev["requestReceivedTimestamp"])
            if ours(ev) and (conflicts or (ev.get("responseStatus") or {}).get("code") != 409)]


def _received(ev: dict):
    """When the apiserver received the request (the audit event's RFC 3339 time)."""
    import datetime as dt

    return dt.datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00"))


class _Quiet:
    """True once ``count()`` has not changed for ``seconds``."""

    def __init__(self, count, seconds: float = 1.0):
        import time

        self.count, self.seconds, self.clock = count, seconds, time.monotonic
        self.last, self.since = -1, self.clock()

    def __call__(self) -> bool:
        n = self.count()
        if n != self.last:
            self.last, self.since = n, self.clock()
        return self.clock() - self.since >= self.seconds


@pytest.fixture(scope="module")
def plane_without_watch_lists(tmp_path_factory):
    """A real control plane whose apiserver has WatchList off (as Kubernetes 1.33 ships)."""
    from testplane.plane import ControlPlane

    cp = ControlPlane(tmp_path_factory.mktemp("no-watch-list"),
                      apiserver_args=("--feature-gates=WatchList=false",))
    try:
        cp.start()
    except Exception as exc:  # noqa: BLE001 - reported as the failure it is
        cp.stop()
        pytest.fail(f"cannot start the control plane without WatchList: {exc}", pytrace=False)
    yield cp
    cp.stop()


def test_a_server_without_watch_lists_is_read_with_a_get(plane_without_watch_lists):
    """The apiserver refuses the watch-list (422): the named read falls back to a GET and the
    saga watches from its resourceVersion; the recovery is the same, one request dearer."""
    p = plane_without_watch_lists
    admin = p.kube()
    cluster = Cluster(admin)
    ns, lease_ns = cluster.namespace(), cluster.namespace("lease")
    stuck_release(cluster, ns)
    hc_kube = p.kube(user_agent="simulated-helm-controller")   # not counted
    mark = p.audit_mark()
    try:
        with SimulatedHelmController(Cluster(hc_kube), ns):
            r = run_cli("recover", "-n", ns, "demo", "--lease-namespace", lease_ns,
                        kubeconfig=p.kubeconfig)
    finally:
        hc_kube.close()
        admin.close()
    assert r.code == 0 and "recovered" in r.out, r
    wait_for(lambda: sum(ev["verb"] == "watch" for ev in p.audit_events(
        since=mark, user_agent=UA)) == 2, 10, "both WATCHes' audit lines")
    events = sorted(p.audit_events(since=mark, user_agent=UA),
                    key=lambda ev: ev["requestReceivedTimestamp"])
    sent = [(ev["verb"], (ev.get("objectRef") or {}).get("resource"),
             ev["responseStatus"]["code"]) for ev in events]
    assert sent == [("list", "leases", 200),
                    ("watch", "helmreleases", 422),       # the watch-list, refused
                    ("get", "helmreleases", 200),         # the named read as a GET
                    ("list", "secrets", 200),
                    ("list", "helmreleases", 200),        # the claimants
                    ("watch", "helmreleases", 200),       # from the GET's resourceVersion
                    ("patch", "helmreleases", 200), ("patch", "helmreleases", 200),
                    ("list", "helmreleases", 200),        # the claimants, at the delete
                    ("delete", "secrets", 200), ("create", "events", 201),
                    ("patch", "helmreleases", 200)], sent
    assert "sendInitialEvents=true" not in events[5]["requestURI"]


def _sent(plane, mark, watches: int) -> list[tuple[str, str | None, int]]:
    """(verb, resource, code) of what the CLI sent since ``mark``, by arrival, once the
    ``watches`` WATCHes' audit lines (written at their end) are in."""
    wait_for(lambda: sum(ev["verb"] == "watch" for ev in plane.audit_events(
        since=mark, user_agent=UA)) == watches, 10, f"{watches} WATCHes' audit lines")
    events = sorted(plane.audit_events(since=mark, user_agent=UA),
                    key=lambda ev: ev["requestReceivedTimestamp"])
    return [(ev["verb"], (ev.get("objectRef") or {}).get("resource"),
             ev["responseStatus"]["code"]) for ev in events]


def test_a_refused_watch_list_is_remembered_so_the_next_run_sends_eleven(
        plane_without_watch_lists, tmp_path):
    """Issue 19: only the first run against a server without watch-lists pays for the
    refusal; it is remembered per server under the user's cache directory, so the next
    ``recover -n NS NAME`` sends 11 requests (was 12: the refused WATCH every time; 9
    before the claimants' two LISTs of issue 55)."""
    import os

    p = plane_without_watch_lists
    admin = p.kube()
    cluster = Cluster(admin)
    ns, lease_ns = cluster.namespace(), cluster.namespace("lease")
    stuck_release(cluster, ns, "one")
    stuck_release(cluster, ns, "two")
    servers_dir = Path(os.environ["XDG_CACHE_HOME"]) / "kubectl-flux-plunger" / "servers"
    hc_kube = p.kube(user_agent="simulated-helm-controller")   # not counted
    try:
        with SimulatedHelmController(Cluster(hc_kube), ns):
            mark = p.audit_mark()
            first = run_cli("recover", "-n", ns, "one", "--lease-namespace", lease_ns,
                            kubeconfig=p.kubeconfig)
            assert first.code == 0 and "recovered" in first.out, first
            assert ("watch", "helmreleases", 422) in _sent(p, mark, 2)
            remembered = [json.loads(f.read_text()) for f in servers_dir.iterdir()]
            assert [(m["server"], m["watchList"]) for m in remembered] == [
                (f"https://127.0.0.1:{p.port}", False)], remembered
            mark = p.audit_mark()
            second = run_cli("recover", "-n", ns, "two", "--lease-namespace", lease_ns,
                             kubeconfig=p.kubeconfig)
            assert second.code == 0 and "recovered" in second.out, second
            sent = _sent(p, mark, 1)
    finally:
        hc_kube.close()
        admin.close()
    assert sent == [("list", "leases", 200),
                    ("get", "helmreleases", 200),         # no watch-list tried
                    ("list", "secrets", 200),
                    ("list", "helmreleases", 200),        # the claimants
                    ("watch", "helmreleases", 200),       # from the GET's resourceVersion
                    ("patch", "helmreleases", 200), ("patch", "helmreleases", 200),
                    ("list", "helmreleases", 200),        # the claimants, at the delete
                    ("delete", "secrets", 200), ("create", "events", 201),
                    ("patch", "helmreleases", 200)], sent


def test_serve_on_a_server_remembered_without_watch_lists_recovers_in_eight(
        plane_without_watch_lists, tmp_path):
    """Issue 19: a serve started after a run learnt that the server has no watch-lists
    reads with a GET from its first recovery on: 8 requests about the release (the GET,
    LIST, WATCH, acquire, record, DELETE, Event, relinquish), no refused WATCH."""
    from .test_serve_support import recovered

    p = plane_without_watch_lists
    admin = p.kube()
    cluster = Cluster(admin)
    ns, lease_ns = cluster.namespace(), cluster.namespace("lease")
    stuck_release(cluster, ns, "first")
    hc_kube = p.kube(user_agent="simulated-helm-controller")
    try:
        with SimulatedHelmController(Cluster(hc_kube), ns):
            learnt = run_cli("recover", "-n", ns, "first", "--lease-namespace", lease_ns,
                             kubeconfig=p.kubeconfig)
            assert learnt.code == 0 and "recovered" in learnt.out, learnt
            counted = CountedServe(p, cluster, ns, tmp_path)
            counted.mark()
            stuck_release(cluster, ns)
            about = counted.about("demo", lambda: recovered(cluster, ns, "demo"))
    finally:
        hc_kube.close()
        admin.close()
    assert about == EIGHT_SERVE_WITHOUT_WATCH_LISTS, about


class CountedServe:
    """A real ``serve`` process on its own ServiceAccount with the shipped roles (so the
    audit log tells its requests apart), leading on a Lease in ``ns`` and watching ``ns``.

    ``about(name, settled)`` waits until serve is idle — its queue empty, no fence held and
    nothing about the release logged for a second (a pass in flight has an open watch,
    whose audit line comes at its end) — and ``settled()`` holds, stops serve (what it
    sends on SIGTERM, its drain, is not counted) and returns every request serve sent about
    the release since ``mark()``, by arrival: the release by name, its Helm storage Secrets
    and its Events (``_about``) — not serve's Lease renewals and scope checks, its
    namespace-wide LIST and WATCH or its start-up LIST of Warning Events (the hints, done
    before ``mark()``), which are not per recovery, nor its passes over other releases of the
    namespace.  ``args`` go to serve after those; ``cluster_rules`` replace the shipped
    ClusterRole's; ``logged`` is every request ``about`` counted from.  Without ``mark()``
    everything from serve's start is counted."""

    def __init__(self, plane, cluster, ns: str, tmp_path, *args: str,
                 cluster_rules: list[dict] | None = None):
        import copy

        from kubectl_flux_plunger.core import constants as C
        from testplane.cluster import eventually, unique
        from testplane.rbac import service_account_kubeconfig

        from .test_deploy_manifests import ServeProcess, cluster_name, find, render_kustomize

        docs = render_kustomize()
        name = unique("count")
        kc = service_account_kubeconfig(
            plane, name, namespace=ns,
            cluster_rules=copy.deepcopy(find(docs, "ClusterRole", cluster_name())["rules"]
                                        if cluster_rules is None else cluster_rules),
            namespace_rules={ns: copy.deepcopy(
                find(docs, "Role", "flux-plunger-leader-election")["rules"])})
        self.plane, self.user = plane, f"system:serviceaccount:{ns}:{name}"
        self.serve = ServeProcess(kc, tmp_path / "serve.log", "--leader-elect",
                                  f"--leader-election-namespace={ns}", "-n", ns, *args)
        self.since = 0
        self.logged: list[dict] = []
        try:
            eventually(lambda: cluster.kube.get_lease(ns, C.LEASE_NAME), 30, "serve leading")
            eventually(self.serve.ready, 30, "serve ready (its LIST done)")
            eventually(lambda: "start-up hints: " in self.serve.text(), 30,
                       "serve's start-up hints done (its LIST of Events)")
        except BaseException:
            self.serve.kill()
            raise

    def mark(self) -> None:
        self.since = self.plane.audit_mark()

    def about(self, name: str, settled, *, conflicts: bool = True,
              hints: bool = False) -> list[tuple[str, str]]:
        from testplane.cluster import eventually

        try:
            quiet = _Quiet(lambda: len(_about(
                self.plane.audit_events(since=self.since, user=self.user), name)))
            eventually(lambda: settled() and self.serve.idle() and quiet(), 60,
                       "serve idle and the release settled")
        except BaseException:
            self.serve.kill()
            raise
        # what serve sends from its stop on (the drain) is not counted: the requests the
        # apiserver received before the stop are.  A WATCH is logged when the apiserver
        # notices its end, which under load can trail the client's close by seconds (and
        # so the quiet second above): it is taken by when it was received, once serve is
        # gone and every connection of its closed
        import datetime as dt

        ended = dt.datetime.now(dt.timezone.utc)
        code = self.serve.stop()
        assert code == 0, self.serve.text()
        eventually(_Quiet(lambda: len(self.plane.audit_events(since=self.since, user=self.user))),
                   30, "the audit log of serve's requests complete")
        self.logged = [ev for ev in self.plane.audit_events(since=self.since, user=self.user)
                       if _received(ev) < ended]
        return _about(self.logged, name, conflicts=conflicts, hints=hints)


SEVEN = [("watch", "helmreleases"), ("list", "secrets"), ("patch", "helmreleases"),
         ("patch", "helmreleases"), ("delete", "secrets"), ("create", "events"),
         ("patch", "helmreleases")]
# the same pass on a server without watch-lists met for the first time: the watch-list
# refused (422), the read as a GET, and a WATCH from its resourceVersion after the LIST
NINE_WITHOUT_WATCH_LISTS = [("watch", "helmreleases"), ("get", "helmreleases"),
                            ("list", "secrets"), *SEVEN[:1], *SEVEN[2:]]
# a serve process on such a server: its own sync's watch-list was refused first (issue 23),
# so its passes read with a GET from the first recovery on, then LIST and WATCH from the rv
EIGHT_SERVE_WITHOUT_WATCH_LISTS = [("get", "helmreleases"), ("list", "secrets"),
                                   ("watch", "helmreleases"), *SEVEN[2:]]


def test_serve_as_a_process_recovers_in_seven_requests(plane, cluster, ns, tmp_path):
    """A real ``serve`` process, leading, its watch synced; a release goes stuck and is
    recovered.  Counted from the audit log: every request serve sent about the release is
    the recovery pass's 7 — the watch-list read, storage LIST, acquire, record, DELETE,
    Event, relinquish — and nothing after it: the watch events of serve's own writes (and
    of helm-controller's handshake) are changes the pass already judged, and the release
    awaiting helm-controller's retry is not worth a pass.  (Before the queue's
    resourceVersion expectations this was 9-11: 1-2 read-only passes followed.)"""
    from .test_serve_support import recovered

    counted = CountedServe(plane, cluster, ns, tmp_path)
    counted.mark()
    hc_kube = plane.kube(user_agent="simulated-helm-controller")
    try:
        with SimulatedHelmController(Cluster(hc_kube), ns):
            stuck_release(cluster, ns)
            about = counted.about("demo", lambda: recovered(cluster, ns, "demo"))
    finally:
        hc_kube.close()
    assert about == (SEVEN if plane.watch_lists else EIGHT_SERVE_WITHOUT_WATCH_LISTS), about


def _serve_sync(plane, tmp_path, ns: str) -> tuple[list[tuple[str, int]], list[dict], str]:
    """A real ``serve -n NS`` (no leader election) syncs and is killed (SIGKILL: no drain,
    whose confirming LIST would be counted); returns (verb, status) of every HelmRelease
    request it sent, by arrival, the audit events themselves, and its log."""
    from .test_serve_support import Serve

    admin = plane.kube()
    for name in ("a", "b", "c"):
        Cluster(admin).create_hr(ns, name)
    admin.close()
    mark = plane.audit_mark()
    s = Serve(plane, tmp_path, "serve", ("-n", ns, "--no-leader-elect"))
    try:
        wait_for(s.ready, 60, "serve ready (its sync done)")
    finally:
        s.stop()
    # a WATCH is logged when it ends: here when the killed process's connection closes

    def hr_events() -> list[dict]:
        return [ev for ev in plane.audit_events(since=mark, user_agent=UA)
                if (ev.get("objectRef") or {}).get("resource") == "helmreleases"
                and ev["objectRef"].get("namespace") == ns]
    wait_for(lambda: any(ev["verb"] == "watch" and ev["responseStatus"]["code"] == 200
                         for ev in hr_events()), 30, "the sync's WATCH audit line")
    events = sorted(hr_events(), key=lambda ev: ev["requestReceivedTimestamp"])
    return ([(ev["verb"], ev["responseStatus"]["code"]) for ev in events], events, s.logs())


def test_serve_syncs_and_watches_with_one_watch_list_and_no_list(plane, ns, tmp_path):
    """On a server with watch-lists, serve's sync and its watch are one request: a WATCH
    with sendInitialEvents (its initial events are the LIST), and no LIST at all.  A server
    without them (the compatibility stage's older kube-apiserver) refuses it once, and
    serve syncs with the paged LIST, then WATCHes from its resourceVersion."""
    sent, events, _ = _serve_sync(plane, tmp_path, ns)
    if not plane.watch_lists:
        assert sent == [("watch", 422), ("list", 200), ("watch", 200)], sent
        return
    assert sent == [("watch", 200)], sent
    uri = events[0]["requestURI"]
    for param in ("watch=true", "sendInitialEvents=true", "resourceVersionMatch=NotOlderThan",
                  "allowWatchBookmarks=true", f"/namespaces/{ns}/helmreleases"):
        assert param in uri, uri


def test_serve_on_a_server_without_watch_lists_syncs_with_the_paged_list(
        plane_without_watch_lists, tmp_path):
    """WatchList off: the watch-list is refused (422) once, and serve syncs as it did before
    watch-lists — a LIST, then the WATCH from its resourceVersion."""
    p = plane_without_watch_lists
    admin = p.kube()
    ns = Cluster(admin).namespace()
    admin.close()
    sent, events, logs = _serve_sync(p, tmp_path, ns)
    assert sent == [("watch", 422), ("list", 200), ("watch", 200)], sent
    assert "sendInitialEvents=true" in events[0]["requestURI"]
    assert "sendInitialEvents" not in events[2]["requestURI"]
    assert "resourceVersion=" in events[2]["requestURI"]
    assert "does not serve watch-lists" in logs
