"""Event folding on a fake Event store: one deterministic name per (uid, reason, type), a
repeat bumps the count instead of creating an Event, another writer's Event (409 on create)
is bumped from its own count, an Event deleted meanwhile (404 on patch) is created again,
and failures are logged, never raised.

The apiserver tier writes real Events (tests/apiserver/test_serve_events.py)."""

from __future__ import annotations

import copy
import logging

import pytest

from kubectl_flux_plunger.report.events import Recorder, event_name
from kubectl_flux_plunger.kube import KubeError

from .builders import hr

pytestmark = pytest.mark.unit


class Events:
    """Events of one namespace as the apiserver keeps them (create of an existing name: 409,
    patch of a missing one: 404)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.calls: list[str] = []
        self.fail: KubeError | None = None

    def get_event(self, namespace: str, name: str) -> dict | None:
        self.calls.append("GET")
        obj = self.objects.get(name)
        return copy.deepcopy(obj) if obj is not None else None

    def create_event(self, namespace: str, body: dict) -> dict:
        self.calls.append("CREATE")
        if self.fail is not None:
            raise self.fail
        name = body["metadata"]["name"]
        if name in self.objects:
            raise KubeError(409, "AlreadyExists", f"events {name!r} already exists")
        self.objects[name] = copy.deepcopy(body)
        return copy.deepcopy(body)

    def patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        self.calls.append("PATCH")
        if name not in self.objects:
            raise KubeError(404, "NotFound", f"events {name!r} not found",
                            {"details": {"name": name, "kind": "events"}})
        self.objects[name].update(patch)
        return copy.deepcopy(self.objects[name])


RELEASE = hr("web", namespace="apps", uid="uid-7")


def test_names_are_deterministic_per_uid_reason_and_type():
    name = event_name(RELEASE, "UninstallFenceHeld", "Warning")
    assert name == event_name(RELEASE, "UninstallFenceHeld", "Warning")
    assert name.startswith("web.fp-") and len(name) == len("web.fp-") + 12
    assert name != event_name(RELEASE, "UninstallFenceHeld", "Normal")
    assert name != event_name(RELEASE, "RecoveryDeferred", "Warning")
    assert name != event_name(hr("web", namespace="apps", uid="uid-8"),
                              "UninstallFenceHeld", "Warning")


def test_a_repeat_bumps_the_count_of_one_event():
    events = Events()
    rec = Recorder(events, instance="pod-1")
    for _ in range(3):
        rec.record(RELEASE, "UninstallFenceHeld", "Warning", "held")
    assert events.calls == ["CREATE", "PATCH", "PATCH"]
    (event,) = events.objects.values()
    assert event["count"] == 3
    assert event["involvedObject"] == {"apiVersion": "helm.toolkit.fluxcd.io/v2",
                                       "kind": "HelmRelease", "name": "web",
                                       "namespace": "apps", "uid": "uid-7"}
    assert event["reportingInstance"] == "pod-1"
    assert event["source"] == {"component": "flux-plunger"}


def test_another_writer_s_event_is_bumped_from_its_count():
    events = Events()
    Recorder(events).record(RELEASE, "RecoveryDeferred", "Normal", "deferred")
    events.objects[event_name(RELEASE, "RecoveryDeferred", "Normal")]["count"] = 5
    Recorder(events).record(RELEASE, "RecoveryDeferred", "Normal", "deferred")   # a new process
    assert events.calls == ["CREATE", "CREATE", "GET", "PATCH"]
    assert next(iter(events.objects.values()))["count"] == 6


def test_an_event_deleted_meanwhile_is_created_again():
    events = Events()
    rec = Recorder(events)
    rec.record(RELEASE, "RecoveryDeferred", "Normal", "deferred")
    events.objects.clear()                                  # e.g. expired (--event-ttl)
    rec.record(RELEASE, "RecoveryDeferred", "Normal", "deferred")
    assert events.calls == ["CREATE", "PATCH", "CREATE"]
    assert next(iter(events.objects.values()))["count"] == 1


def test_failures_are_logged_not_raised(caplog):
    events = Events()
    events.fail = KubeError(403, "Forbidden", "events is forbidden")
    with caplog.at_level(logging.WARNING, logger="kubectl_flux_plunger.report.events"):
        Recorder(events).record(RELEASE, "RecoveryDeferred", "Normal", "deferred")
    assert "could not record event RecoveryDeferred on apps/web: events is forbidden" in \
        caplog.text


def test_disabled_or_without_a_release_nothing_is_written():
    events = Events()
    Recorder(events, enabled=False).record(RELEASE, "RecoveryDeferred", "Normal", "deferred")
    Recorder(events).record({}, "RecoveryDeferred", "Normal", "deferred")
    assert events.calls == []
