"""The Lease survey's reads of the API (issue 40: kube/controller_lease.py's read, survey,
_fallback, read_all and default_lease_namespace, in the pytest process so that a mutant of
them is seen): what one GET reports, readable or not; that one cluster-wide LIST decides
when it answers, that no answer at all is raised and a refusal falls back; the fallback's
namespaces (the lease namespace first, each once), its LIST of each or, where that is
refused too, one GET of each named Lease (each once), which Leases it keeps, and what it
says it read; and where the Lease namespace defaults to.  The same against the real
apiserver's RBAC: tests/apiserver/test_lease_survey.py."""

from __future__ import annotations

import datetime as dt

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import KubeError, Unreachable, config
from kubectl_flux_plunger.kube import controller_lease as cl
from kubectl_flux_plunger.kube.controller_lease import ControllerLease, Controllers

pytestmark = pytest.mark.unit

# far from the wall clock: a survey that ignored ``now`` for the real time would see every
# Lease here expired (or not yet renewed)
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
RENEWED = NOW - dt.timedelta(seconds=2)
SHARD = "b." + C.LEASE_NAME


def lease(ns: str, name: str = C.LEASE_NAME, *, holder: str = "pod_1", selector=None) -> dict:
    md: dict = {"name": name, "namespace": ns}
    if selector is not None:
        md["annotations"] = {C.LEASE_SELECTOR_ANNOTATION: selector}
    return {"metadata": md, "spec": {
        "holderIdentity": holder, "renewTime": RENEWED.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "leaseDurationSeconds": 15}}


def held(ns: str, name: str = C.LEASE_NAME, selector=None) -> ControllerLease:
    """The ControllerLease of ``lease(ns, name)`` as read at NOW."""
    return ControllerLease(ns, "pod_1", RENEWED, 15.0, True, name=name, selector=selector)


def absent(ns: str, name: str = C.LEASE_NAME) -> ControllerLease:
    return ControllerLease(ns, "", None, None, False, name=name)


def refused(ns: str, name: str, error: str) -> ControllerLease:
    return ControllerLease(ns, "", None, None, False, readable=False, error=error, name=name)


class Api:
    """The three Lease reads the survey sends, each recorded with its arguments.
    ``cluster``: what the cluster-wide LIST raises (None: it answers every Lease);
    ``no_list`` / ``no_get``: the namespaces whose LIST / GET is forbidden."""

    def __init__(self, *items: dict, cluster: KubeError | None = None,
                 no_list: tuple[str, ...] = (), no_get: tuple[str, ...] = ()) -> None:
        self.items = list(items)
        self.cluster, self.no_list, self.no_get = cluster, no_list, no_get
        self.sent: list[tuple[str, ...]] = []

    def list_cluster_leases(self) -> list[dict]:
        self.sent.append(("LIST", "*"))
        if self.cluster is not None:
            raise self.cluster
        return self.items

    def list_leases(self, namespace: str) -> list[dict]:
        self.sent.append(("LIST", namespace))
        if namespace in self.no_list:
            raise KubeError(403, "Forbidden", f"cannot list leases in {namespace}")
        return [i for i in self.items if i["metadata"]["namespace"] == namespace]

    def get_lease(self, namespace: str, name: str) -> dict | None:
        self.sent.append(("GET", namespace, name))
        if namespace in self.no_get:
            raise KubeError(403, "Forbidden", f"cannot get {namespace}/{name}")
        md = {"namespace": namespace, "name": name}
        return next((i for i in self.items if i["metadata"] == {**i["metadata"], **md}), None)


FORBIDDEN = KubeError(403, "Forbidden", "leases is forbidden at the cluster scope")


# -- read: one GET --------------------------------------------------------------------------

def test_read_gets_the_named_lease_of_the_namespace_as_of_now() -> None:
    api = Api(lease("fp", "custom"), lease("other", "custom", holder="pod_2"))
    assert cl.read(api, "fp", NOW, "custom") == held("fp", "custom")
    assert api.sent == [("GET", "fp", "custom")]
    assert cl.read(Api(lease("fp")), "fp", NOW) == held("fp")     # the contract's by default


def test_read_of_a_missing_lease_is_readable_and_held_by_nobody() -> None:
    assert cl.read(Api(), "fp", NOW, "custom") == absent("fp", "custom")


def test_read_reports_a_refused_get_with_its_error_instead_of_raising() -> None:
    got = cl.read(Api(lease("fp"), no_get=("fp",)), "fp", NOW, "custom")
    assert got == refused("fp", "custom", "cannot get fp/custom")
    assert not got.readable and not got.running


def test_read_without_now_takes_the_wall_clock() -> None:
    fresh = lease("fp")
    fresh["spec"]["renewTime"] = dt.datetime.now(dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    fresh["spec"]["leaseDurationSeconds"] = 3600
    assert cl.read(Api(fresh), "fp").running


# -- survey: the cluster-wide LIST ----------------------------------------------------------

def test_a_cluster_wide_list_that_answers_is_the_only_request_and_decides() -> None:
    api = Api(lease("fp"), lease("apps", SHARD, selector="k=b"), lease("apps", "custom"))
    found = cl.survey(api, "fp", NOW, names=("custom",), also=("apps",))
    assert api.sent == [("LIST", "*")]
    assert found == Controllers("fp", (held("fp"), held("apps", SHARD, "k=b"),
                                       held("apps", "custom")))


def test_the_survey_without_now_takes_the_wall_clock() -> None:
    fresh = lease("fp")
    fresh["spec"]["renewTime"] = dt.datetime.now(dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    fresh["spec"]["leaseDurationSeconds"] = 3600
    assert [c.running for c in cl.survey(Api(fresh), "fp").leases] == [True]


def test_a_cluster_wide_list_that_gets_no_answer_is_raised_not_fallen_back_from() -> None:
    api = Api(lease("fp"), cluster=Unreachable(0, "", "connection refused"))
    with pytest.raises(Unreachable, match="connection refused"):
        cl.survey(api, "fp", NOW, also=("apps",))
    assert api.sent == [("LIST", "*")]


# -- the fallback: each namespace on its own --------------------------------------------------

def test_a_refused_cluster_wide_list_falls_back_to_a_list_of_each_namespace_once() -> None:
    api = Api(lease("fp"), lease("apps", SHARD, selector="k=b"), lease("elsewhere"),
              cluster=FORBIDDEN)
    found = cl.survey(api, "fp", NOW, also=("apps", "fp", "apps"))
    assert api.sent == [("LIST", "*"), ("LIST", "fp"), ("LIST", "apps")]
    assert found == Controllers(
        "fp", (held("fp"), held("apps", SHARD, "k=b")),
        list_error="leases is forbidden at the cluster scope", fallback=("fp", "apps"),
        listed=("fp", "apps"))
    assert found.warning().endswith("only in namespace fp and namespace apps")


def test_the_fallback_counts_the_lease_names_given_in_each_listed_namespace() -> None:
    api = Api(lease("apps", "custom"), cluster=FORBIDDEN)
    found = cl.survey(api, "fp", NOW, names=("custom",), also=("apps",))
    assert found.leases == (absent("fp"), held("apps", "custom"))
    assert cl.survey(Api(*api.items, cluster=FORBIDDEN), "fp", NOW, also=("apps",)).leases \
        == (absent("fp"),)


def test_a_refused_namespace_list_gets_each_named_lease_once_and_goes_on() -> None:
    api = Api(lease("fp"), lease("fp", "custom"), lease("apps", SHARD, selector="k=b"),
              cluster=FORBIDDEN, no_list=("fp",))
    found = cl.survey(api, "fp", NOW, names=("custom", C.LEASE_NAME, "custom"),
                      also=("apps",))
    assert api.sent == [("LIST", "*"), ("LIST", "fp"), ("GET", "fp", C.LEASE_NAME),
                        ("GET", "fp", "custom"), ("LIST", "apps")]
    assert found == Controllers(
        "fp", (held("fp"), held("fp", "custom"), held("apps", SHARD, "k=b")),
        list_error="leases is forbidden at the cluster scope", fallback=("fp", "apps"),
        listed=("apps",))


def test_the_fallback_keeps_elsewhere_only_held_or_unreadable_leases() -> None:
    """The lease namespace's contract Lease always (status shows it, held or not); in the
    other namespaces, a Lease nobody holds is dropped and one that cannot be read is kept."""
    api = Api(lease("apps", SHARD, holder="", selector="k=b"), lease("team", "custom"),
              cluster=FORBIDDEN, no_list=("fp", "locked"), no_get=("locked",))
    found = cl.survey(api, "fp", NOW, names=("custom",), also=("apps", "team", "locked"))
    assert found.leases == (
        absent("fp"), absent("fp", "custom"),                  # the lease namespace: all
        held("team", "custom"),
        refused("locked", C.LEASE_NAME, f"cannot get locked/{C.LEASE_NAME}"),
        refused("locked", "custom", "cannot get locked/custom"))
    assert found.listed == ("apps", "team") and not found.blind()


def test_nothing_readable_at_all_is_blind() -> None:
    api = Api(cluster=FORBIDDEN, no_list=("fp", "apps"), no_get=("fp", "apps"))
    found = cl.survey(api, "fp", NOW, also=("apps",))
    assert found.leases == (refused("fp", C.LEASE_NAME, f"cannot get fp/{C.LEASE_NAME}"),
                            refused("apps", C.LEASE_NAME, f"cannot get apps/{C.LEASE_NAME}"))
    assert found.listed == () and found.blind()


# -- read_all: status's list -----------------------------------------------------------------

def test_read_all_is_the_surveys_leases_in_order() -> None:
    api = Api(lease("apps", "custom"), cluster=FORBIDDEN)
    assert cl.read_all(api, "fp", NOW, names=("custom",), also=("apps",)) == [
        absent("fp"), held("apps", "custom")]
    assert api.sent == [("LIST", "*"), ("LIST", "fp"), ("LIST", "apps")]
    fresh = lease("fp")
    fresh["spec"]["renewTime"] = dt.datetime.now(dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    fresh["spec"]["leaseDurationSeconds"] = 3600
    assert [c.running for c in cl.read_all(Api(fresh), "fp")] == [True]


# -- default_lease_namespace -----------------------------------------------------------------

def test_the_default_lease_namespace_is_the_pods_own_else_the_shipped_one(
        monkeypatch, tmp_path) -> None:
    pod_ns = tmp_path / "namespace"
    monkeypatch.setattr(config, "IN_CLUSTER_NAMESPACE", str(pod_ns))
    assert cl.default_lease_namespace() == "flux-plunger"          # not in a pod
    pod_ns.write_text("controllers\n")
    assert cl.default_lease_namespace() == "controllers"
