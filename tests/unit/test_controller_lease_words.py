"""What a Lease says, exactly (issue 40: each test here kills mutants of the pure half of
kube/controller_lease.py the unit tier let survive): the instant a Lease expires, which
Leases are flux-plunger's by their annotations alone, and the words status, the deferral
and the fallback warning print, which are the operator's only account of why a release
was left alone."""

from __future__ import annotations

import datetime as dt

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube.controller_lease import ControllerLease, Controllers, from_items

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


def stamp(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease(name: str = C.LEASE_NAME, *, ago: float | None = 2, duration: object = 15,
          holder: str = "pod_1", annotations: dict | None = None) -> dict:
    md: dict = {"name": name} if name else {}
    if annotations is not None:
        md["annotations"] = annotations
    spec: dict = {"holderIdentity": holder, "leaseDurationSeconds": duration}
    if ago is not None:
        spec["renewTime"] = stamp(ago)
    return {"metadata": md, "spec": spec}


@pytest.mark.parametrize(("ago", "running"), [(14, True), (15, False), (16, False)])
def test_a_lease_expires_the_instant_its_duration_is_over(ago, running) -> None:
    (c,) = from_items([lease(ago=ago)], "fp", NOW).leases
    assert c.running is running
    assert c.lease_duration == 15.0


@pytest.mark.parametrize("annotation", [C.LEASE_SELECTOR_ANNOTATION,
                                        C.LEASE_NAMESPACE_ANNOTATION])
def test_a_lease_is_ours_by_either_scope_annotation_alone(annotation) -> None:
    found = from_items([lease("custom", annotations={annotation: ""}),
                        lease("helm-controller-leader-election", annotations={"x": "y"})],
                       "fp", NOW)
    assert [c.name for c in found.leases] == [C.LEASE_NAME, "custom"]


def test_a_nameless_lease_of_ours_is_listed_without_a_name() -> None:
    found = from_items([lease("", annotations={C.LEASE_SELECTOR_ANNOTATION: "a=b"})],
                       "fp", NOW)
    assert [(c.namespace, c.name) for c in found.leases] == [("fp", C.LEASE_NAME), ("fp", "")]


def test_without_the_contract_lease_the_survey_still_names_it() -> None:
    found = from_items([], "fp", NOW)
    assert found.namespace == "fp"
    (first,) = found.leases
    assert not first.running
    assert first.describe(NOW) == f"no flux-plunger controller holds Lease fp/{C.LEASE_NAME}"


def test_how_a_lease_is_described() -> None:
    running, expired, never = from_items(
        [lease("a." + C.LEASE_NAME, ago=2), lease("b." + C.LEASE_NAME, ago=120),
         lease("c." + C.LEASE_NAME, ago=None)], "fp", NOW).leases[1:]
    assert running.describe(NOW) == (
        f"flux-plunger controller pod_1 holds Lease fp/a.{C.LEASE_NAME} "
        "(running, last renewed 2s ago)")
    assert expired.describe(NOW) == (
        f"flux-plunger controller pod_1 holds Lease fp/b.{C.LEASE_NAME} "
        "(expired, last renewed 120s ago)")
    assert never.age(NOW) is None
    assert never.describe(NOW) == (
        f"flux-plunger controller pod_1 holds Lease fp/c.{C.LEASE_NAME} "
        "(expired, never renewed)")
    unread = ControllerLease("fp", "", None, None, False, readable=False, error="forbidden")
    assert unread.describe(NOW) == f"cannot read Lease fp/{C.LEASE_NAME}: forbidden"


def held(**kw) -> ControllerLease:
    return ControllerLease("fp", "pod_1", NOW, 15.0, True, **kw)


@pytest.mark.parametrize(("c", "words"), [
    (held(), " (it records no scope, as the reference controller's: taken to watch every "
             "release)"),
    (held(watch_namespace="apps"), " (watching -n apps)"),
    (held(selector="a=b"), " (watching -l 'a=b')"),
    (held(selector="", watch_namespace=""), " (watching every release)"),
    (held(selector="k in (", watch_namespace="apps"),
     " (watching -n apps -l 'k in (', a selector that does not parse: taken to watch every "
     "release)"),
])
def test_what_a_controller_is_taken_to_watch(c, words) -> None:
    assert c.coverage() == words


def test_the_fallback_warning_names_what_was_read_and_what_was_not() -> None:
    found = Controllers(
        "fp",
        (held(), ControllerLease("other", "pod_2", NOW, 15.0, True, name="custom-id"),
         ControllerLease("x", "", None, None, False, readable=False, error="forbidden"),
         ControllerLease("y", "", None, None, False, readable=False, error="forbidden")),
        list_error="forbidden", fallback=("fp", "other", "x", "y"), listed=("fp",))
    assert found.warning() == (
        "cannot list the Leases of the cluster (forbidden); looking for running flux-plunger "
        f"controllers only in namespace fp and Lease other/custom-id (cannot read "
        f"x/{C.LEASE_NAME}, y/{C.LEASE_NAME})")
    everything_read = Controllers("fp", (held(),), list_error="forbidden", listed=("fp",))
    assert everything_read.warning() == (
        "cannot list the Leases of the cluster (forbidden); looking for running flux-plunger "
        "controllers only in namespace fp")
