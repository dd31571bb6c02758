"""The Lease survey against the real apiserver's RBAC, in the pytest process (issue 40: a
mutant of kube/controller_lease.py's survey can only be seen here, where the CLI tests of
test_leases_everywhere.py run it in a subprocess): for an identity that may not list Leases
cluster-wide, the real 403 is a refusal to fall back from, not an outage — a namespace
admin's survey lists the lease namespace and the releases' own and finds the controller
leading there (and nothing of a namespace it may not read); one that may only GET reads the
named Leases; one that may read no Lease is blind, each Lease reported with the server's
refusal.  The same with a fake client, case by case: tests/unit/test_lease_survey.py."""
from __future__ import annotations

import datetime as dt

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import Kube
from kubectl_flux_plunger.kube.controller_lease import read_all, survey
from testplane.cluster import unique
from testplane.rbac import service_account_kubeconfig

SHARD = "b." + C.LEASE_NAME


def leases(*verbs: str) -> list[dict]:
    return [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": list(verbs)}]


def shard_lease(cluster, ns: str, name: str = SHARD) -> None:
    """A Lease as serve writes it, renewed now."""
    at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.kube.create_lease(ns, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": ns, "annotations": {
            C.LEASE_SELECTOR_ANNOTATION: "k=b", C.LEASE_NAMESPACE_ANNOTATION: ""}},
        "spec": {"holderIdentity": f"{name}-pod", "leaseDurationSeconds": 3600,
                 "acquireTime": at, "renewTime": at}})


@pytest.fixture
def as_user(plane, ns):
    """``as_user(prefix, rules_by_namespace)``: an in-process client for a new
    ServiceAccount bound to exactly those namespaced rules (none cluster-wide)."""
    made: list[Kube] = []

    def _make(prefix: str, rules: dict[str, list[dict]]) -> Kube:
        path = service_account_kubeconfig(plane, unique(prefix), namespace=ns,
                                          namespace_rules=rules)
        made.append(Kube.from_kubeconfig(str(path)))
        return made[-1]

    yield _make
    for k in made:
        k.close()


def test_a_namespace_admins_survey_falls_back_to_the_namespaces_it_may_list(cluster, ns,
                                                                           as_user):
    lease_ns, hidden = cluster.namespace("lease"), cluster.namespace("hidden")
    shard_lease(cluster, ns)
    shard_lease(cluster, hidden)                      # leading where the admin cannot look
    admin = as_user("nsadmin", {ns: leases("get", "list"), lease_ns: leases("get", "list")})
    found = survey(admin, lease_ns, also=(ns,))
    assert "forbidden" in found.list_error and "cluster scope" in found.list_error, found
    assert found.fallback == (lease_ns, ns) and found.listed == (lease_ns, ns)
    assert [(c.namespace, c.name, c.holder) for c in found.leases] == [
        (lease_ns, C.LEASE_NAME, ""), (ns, SHARD, f"{SHARD}-pod")]
    assert [c.name for c in found.live()] == [SHARD] and not found.unreadable()
    assert found.live()[0].selector == "k=b"


def test_an_identity_that_may_only_get_reads_the_named_leases(cluster, ns, as_user):
    lease_ns = cluster.namespace("lease")
    shard_lease(cluster, lease_ns)
    getter = as_user("getter", {lease_ns: leases("get")})
    found = survey(getter, lease_ns, names=(SHARD,))
    assert found.list_error and found.listed == () and not found.blind()
    assert [(c.name, c.readable, c.holder) for c in found.leases] == [
        (C.LEASE_NAME, True, ""), (SHARD, True, f"{SHARD}-pod")]
    assert [c.name for c in found.live()] == [SHARD]


def test_an_identity_that_may_read_no_lease_is_blind(cluster, ns, as_user):
    lease_ns = cluster.namespace("lease")
    shard_lease(cluster, lease_ns, C.LEASE_NAME)
    blind = as_user("blind", {})
    found = read_all(blind, lease_ns, also=(ns,))
    assert [(c.namespace, c.name, c.readable) for c in found] == [
        (lease_ns, C.LEASE_NAME, False), (ns, C.LEASE_NAME, False)]
    assert all("forbidden" in c.error for c in found), found
    assert survey(blind, lease_ns).blind()
