"""serve's start-up hints (issue 32): which Warning Events count as a recent stuck report,
in what order the releases are queued, the selector's GET, and a LIST that fails.  Against
the real apiserver and helm-controller: tests/apiserver/test_serve_hints.py and
tests/e2e/test_serve_hints_e2e.py."""
from __future__ import annotations

import logging

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import KubeError, kube_error
from kubectl_flux_plunger.core.selector import parse
from kubectl_flux_plunger.serve.startup_hints import (FIELD_SELECTOR, RECENT_SECONDS, StartupHints,
                                              last_seen, reported)
from kubectl_flux_plunger.serve.queue import WorkQueue

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0        # 2027-01-15T08:00:00Z
STUCK = ('Helm upgrade failed for release apps/demo with chart demo@0.1.0: "demo" has no '
         'deployed releases')


def stamp(seconds_ago: float) -> str:
    import datetime as dt

    t = dt.datetime.fromtimestamp(NOW - seconds_ago, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def report(name: str, seconds_ago: float = 10, *, namespace: str = "apps",
           message: str = STUCK, type_: str = "Warning", kind: str = C.HR_KIND,
           api_version: str = C.HR_API_VERSION, component: str = "helm-controller",
           **fields) -> dict:
    """An Event as helm-controller records it (core/v1, the legacy recorder's fields)."""
    ev = {"metadata": {"name": f"{name}.1", "namespace": namespace,
                       "creationTimestamp": stamp(seconds_ago + 300)},
          "involvedObject": {"kind": kind, "apiVersion": api_version, "name": name,
                             "namespace": namespace},
          "type": type_, "reason": "UpgradeFailed", "message": message,
          "source": {"component": component}, "lastTimestamp": stamp(seconds_ago)}
    ev.update(fields)
    return ev


def test_a_recent_stuck_report_names_its_release():
    assert reported([report("demo")], NOW) == ["apps/demo"]


@pytest.mark.parametrize("spelling", ["reuse", "re-use"])
def test_a_failed_install_over_an_uninstalled_revision_is_a_stuck_report(spelling):
    """helm-controller's InstallFailed Warning when Helm refuses the name (issue 56)."""
    message = (f"Helm install failed for release apps/web with chart web@0.1.0: release name "
               f"check failed: cannot {spelling} a name that is still in use")
    assert reported([report("web", message=message, reason="InstallFailed")], NOW) == ["apps/web"]
    # another install failure is not
    other = "Helm install failed for release apps/web with chart web@0.1.0: timed out"
    assert reported([report("web", message=other, reason="InstallFailed")], NOW) == []


@pytest.mark.parametrize("event", [
    report("old", RECENT_SECONDS + 60),                      # from an attempt long ago
    report("healthy", message="Helm upgrade succeeded"),      # another warning
    report("normal", type_="Normal"),
    report("other", kind="Kustomization"),
    report("other-group", api_version="example.com/v1"),
    report("ours", component=C.EVENT_COMPONENT),             # flux-plunger's own Events
    report("ours-too", component="", reportingComponent=C.EVENT_COMPONENT),
    {**report("timeless"), "lastTimestamp": None, "metadata": {"namespace": "apps"}},
    {**report("nameless"), "involvedObject": {"kind": C.HR_KIND,
                                              "apiVersion": C.HR_API_VERSION}},
], ids=lambda e: e["involvedObject"].get("name", "nameless"))
def test_what_is_not_a_recent_stuck_report(event):
    assert reported([event], NOW) == []


def test_the_newest_time_an_event_carries_is_when_it_was_last_seen():
    old = report("demo", RECENT_SECONDS + 600)
    # an events.k8s.io series (a repeat) or an eventTime can be newer than lastTimestamp
    assert last_seen({**old, "series": {"lastObservedTime": stamp(5) + ""}}) == NOW - 5
    assert last_seen({**old, "eventTime": "2027-01-15T07:59:59.500000Z"}) == NOW - 0.5
    assert last_seen({"metadata": {"creationTimestamp": stamp(7)}}) == NOW - 7
    assert last_seen({"metadata": {}, "lastTimestamp": "not a time"}) is None
    assert reported([{**old, "series": {"lastObservedTime": stamp(5)}}], NOW) == ["apps/demo"]


def test_releases_are_queued_newest_report_first_each_once():
    events = [report("a", 300), report("b", 30), report("a", 20, metadata={
        "name": "a.2", "namespace": "apps"}), report("c", 600, namespace="other")]
    assert reported(events, NOW) == ["apps/a", "apps/b", "other/c"]


class Source:
    """The Events and HelmReleases a test scripts, and the requests the hints send."""

    def __init__(self, events=(), releases=None, error: KubeError | None = None):
        self.events, self.releases, self.error = list(events), releases or {}, error
        self.calls: list[tuple] = []

    def iter_events(self, namespace, field_selector):
        self.calls.append(("LIST events", namespace, field_selector))
        if self.error is not None:
            raise self.error
        yield from self.events

    def get_hr(self, namespace, name):
        self.calls.append(("GET", f"{namespace}/{name}"))
        return self.releases.get(f"{namespace}/{name}")


def hints(source, queue, *, namespace=None, selector=None) -> StartupHints:
    return StartupHints(source, queue, namespace=namespace,
                        selector=parse(selector) if selector else None, clock=lambda: NOW)


def test_hinted_releases_go_ahead_of_the_keys_the_sync_queued():
    queue = WorkQueue()
    for key in ("apps/first", "apps/second"):
        queue.add(key)                      # the sync got there first
    source = Source([report("demo"), report("second", 5)])
    assert hints(source, queue, namespace="apps").run() == ["apps/second", "apps/demo"]
    assert [queue.get(timeout=0) for _ in range(3)] == ["apps/second", "apps/demo",
                                                        "apps/first"]
    # one LIST in the install's scope, no read of the releases: the worker's read decides
    assert source.calls == [("LIST events", "apps", FIELD_SELECTOR)]
    assert FIELD_SELECTOR == "involvedObject.kind=HelmRelease,type=Warning"


def test_with_a_selector_a_fresh_get_keeps_a_release_outside_it_from_the_workers():
    inside = {"metadata": {"name": "in", "namespace": "apps", "labels": {"shard": "one"}}}
    outside = {"metadata": {"name": "out", "namespace": "apps", "labels": {"shard": "two"}}}
    source = Source([report("in"), report("out"), report("gone")],
                    {"apps/in": inside, "apps/out": outside})
    queue = WorkQueue()
    assert hints(source, queue, selector="shard=one").run() == ["apps/in"]
    assert source.calls[1:] == [("GET", "apps/in"), ("GET", "apps/out"), ("GET", "apps/gone")]
    assert queue.get(timeout=0) == "apps/in" and queue.get(timeout=0) is None


def test_a_get_that_fails_drops_that_hint_only():
    class Failing(Source):
        def get_hr(self, namespace, name):
            super().get_hr(namespace, name)
            if name == "flaky":
                raise kube_error(503, "ServiceUnavailable", "try later")
            return {"metadata": {"name": name, "labels": {"shard": "one"}}}

    queue = WorkQueue()
    got = hints(Failing([report("flaky", 1), report("fine", 2)]), queue,
                selector="shard=one").run()
    assert got == ["apps/fine"]


@pytest.mark.parametrize("status", [403, 500, 0])
def test_a_list_that_fails_is_one_warning_and_no_hints(status, caplog):
    source = Source([report("demo")], error=kube_error(
        status, "Forbidden" if status == 403 else "Error",
        'events is forbidden: User "system:serviceaccount:fp:fp" cannot list resource '
        '"events" in API group "" at the cluster scope' if status == 403 else "boom"))
    queue = WorkQueue()
    with caplog.at_level(logging.INFO, logger="kubectl_flux_plunger.serve.hints"):
        assert hints(source, queue).run() == []
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and len(caplog.records) == 1, caplog.records
    assert warnings[0].getMessage().startswith(
        "start-up hints: cannot list the Warning Events on HelmReleases (")
    assert queue.get(timeout=0) is None


def test_a_bug_in_the_hints_is_logged_and_serve_goes_on(caplog):
    class Broken(Source):
        def iter_events(self, namespace, field_selector):
            yield "not an object"               # a mapping is expected

    with caplog.at_level(logging.ERROR, logger="kubectl_flux_plunger.serve.hints"):
        assert hints(Broken(), WorkQueue()).run() == []
    assert [r.getMessage() for r in caplog.records] == [
        "start-up hints failed; going on without them"]


def test_nothing_is_queued_once_the_queue_shuts_down():
    queue = WorkQueue()
    queue.shutdown()
    assert hints(Source([report("demo")]), queue).run() == []
