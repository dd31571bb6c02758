"""The writing verbs and serve find every running flux-plunger in the cluster, whatever
namespace its Lease is in (issue 36), against the real apiserver, with a serve process per
controller (the chart rendered by real Helm, each on a ServiceAccount bound to exactly its
install's rendered roles, as in test_shards.py):

1. the crash clean-up (resume-owned), recover and release-fence, run with no Lease flags
   while a controller whose Lease is in another namespace (a "flux-system" of its own) holds
   a release mid-recovery, leave that release alone and exit 1 — for a shard there, for a
   plain install there (no selector; watchNamespace the release's), and for the reference
   controller's Lease there; status names that controller;
2. an expired Lease elsewhere does not count, and a release outside every live scope is
   acted on in the same run;
3. an identity that may not list Leases cluster-wide (a namespace admin) gets one warning
   and the fallback (the lease namespace and the release's own), where a live Lease still
   counts; one that can read no Lease at all is refused — one error line, exit 1, nothing
   written — unless --force; status only warns;
4. serve reports an overlap with a controller whose Lease is in another namespace (gauge,
   log line, the ScopeOverlap Event on its own Lease), also when it watches one namespace
   only and its Lease is elsewhere (the Event is written in its Lease's namespace).

Each fails with the survey cut back to one namespace (the lease namespace)."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from kubectl_flux_plunger.core import constants as C
from testplane.cluster import unique
from testplane.rbac import service_account_kubeconfig

from ..conftest import run_cli
from .conftest import hold, stuck_release
from .test_cli_verbs import CLI_RULES
from .test_deploy_manifests import _forbidden, helm  # noqa: F401
from .test_shards import (KEY, deferred_line, held_by_us, overlaps, reference_lease, scope_events,
                          started, warned)


def shard_lease(cluster, ns: str, name: str, selector: str, *, renewed_ago: float = 0.0,
                duration: int = 60) -> dict:
    """A Lease as serve writes it (holder, renewal, the scope annotations), by hand."""
    at = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=renewed_ago)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    return cluster.kube.create_lease(ns, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": ns, "annotations": {
            C.LEASE_SELECTOR_ANNOTATION: selector, C.LEASE_NAMESPACE_ANNOTATION: ""}},
        "spec": {"holderIdentity": f"{name}-pod", "leaseDurationSeconds": duration,
                 "acquireTime": at, "renewTime": at}})


def rv(cluster, ns: str, name: str) -> str:
    return cluster.get(ns, name)["metadata"]["resourceVersion"]


# -- 1: a controller leading in another namespace holds a release mid-recovery -------------

@pytest.fixture
def elsewhere(plane, helm, cluster, request):  # noqa: F811
    """``elsewhere(namespace, release, *sets)``: a chart install rendered into ``namespace``
    (its Lease there), started by the test; stopped (SIGKILL) at the end."""
    yield from started(plane, helm, cluster, request)


@pytest.mark.parametrize("controller", ["shard", "plain", "reference"])
def test_the_verbs_leave_alone_what_a_controller_leading_elsewhere_holds(
        plane, cluster, ns, elsewhere, tmp_path, controller):
    ctl = cluster.namespace("flux-system")        # neither the release's nor flux-plunger
    proc = None
    if controller == "reference":
        cluster.create_hr(ns, "bravo")
        hold(cluster, ns, "bravo")                # its recovery in flight
        lease = C.LEASE_NAME
        holder = reference_lease(cluster, ctl)["spec"]["holderIdentity"]
    else:
        key = unique("b")
        # the plain install (no selector) watches the release's namespace only: one watching
        # every namespace would take up the stuck leftovers of the session's other tests
        sets, labels = (((f'shard="{key}"',), {KEY: key}) if controller == "shard"
                        else ((f'watchNamespace="{ns}"',), {}))
        # helm install flux-plunger[-shard] -n <ctl>: its Lease in its release namespace
        i = elsewhere(ctl, f"flux-plunger-{key}" if controller == "shard" else "flux-plunger",
                      *sets)
        proc = i.start(tmp_path, "--handshake-timeout=120s")
        proc.wait_for(i.leads, 30, f"the {controller} install leads in {ctl}")
        lease = i.lease
        stuck_release(cluster, ns, "bravo", labels=labels)
        proc.wait_for(lambda: held_by_us(cluster, ns, "bravo"), 30, "it holds bravo")
        holder = cluster.kube.get_lease(ctl, lease)["spec"]["holderIdentity"]
    before = rv(cluster, ns, "bravo")
    kc = plane.kubeconfig
    for args in (("resume-owned", "-n", ns), ("recover", "-n", ns),
                 ("recover", "-n", ns, "bravo")):
        r = run_cli(*args, kubeconfig=kc)            # no --lease-namespace, no --lease-name
        assert r.code == 1, r
        line = deferred_line(r.out, "bravo")
        assert f"flux-plunger controller {holder} holds Lease {ctl}/{lease}" in line, r
    r = run_cli("release-fence", "-n", ns, kubeconfig=kc)
    assert r.code == 1 and f"holds Lease {ctl}/{lease}" in r.err, r
    assert rv(cluster, ns, "bravo") == before         # not a single write
    assert held_by_us(cluster, ns, "bravo")
    if controller != "reference":
        assert "sh.helm.release.v1.bravo.v2" in cluster.secret_names(ns, "bravo")
    doc = json.loads(run_cli("status", "-n", ns, "-o", "json", kubeconfig=kc).out)
    (item,) = [i for i in doc["items"] if i["metadata"]["name"] == "bravo"]
    assert item["controller"] == lease and item["state"] == "recovering"
    if proc is not None:
        assert proc.stop() == 0                       # drained: its suspension lifted


# -- 2: an expired Lease elsewhere does not count; what no live scope covers is acted on -----

def test_an_expired_lease_elsewhere_does_not_count_and_the_uncovered_is_acted_on(
        plane, cluster, ns):
    far, farther = cluster.namespace("flux-system"), cluster.namespace("shards")
    reference_lease(cluster, far, renewed_ago=116)                 # stopped renewing: expired
    shard_lease(cluster, farther, "b.flux-plunger.cozystack.io", f"{KEY}=b")          # live
    shard_lease(cluster, farther, "c.flux-plunger.cozystack.io", f"{KEY}=c", renewed_ago=120)
    for name, labels in (("bravo", {KEY: "b"}), ("charlie", {KEY: "c"}), ("free", {})):
        cluster.create_hr(ns, name, labels=labels)
        hold(cluster, ns, name)
    before = rv(cluster, ns, "bravo")
    r = run_cli("resume-owned", "-n", ns, kubeconfig=plane.kubeconfig)
    assert r.code == 1, r                                          # bravo deferred
    assert f"holds Lease {farther}/b.flux-plunger.cozystack.io" in deferred_line(r.out, "bravo")
    assert "charlie relinquished" in r.out and "free relinquished" in r.out, r
    assert r.err == "", r                                          # the one LIST answered
    assert rv(cluster, ns, "bravo") == before
    for name in ("charlie", "free"):
        hr = cluster.get(ns, name)
        assert not hr["spec"].get("suspend") and C.FENCE not in hr["metadata"]["finalizers"]


# -- 3: no cluster-wide list: the fallback; no Lease at all: a refusal --------------------

def test_without_the_cluster_wide_list_the_verbs_fall_back_and_without_any_lease_refuse(
        plane, cluster, ns):
    lease_ns = cluster.namespace("lease")
    no_list = [r for r in CLI_RULES if r["apiGroups"] != ["coordination.k8s.io"]]
    leases = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
               "verbs": ["get", "list"]}]
    # a namespace admin: may list Leases in the lease namespace and the release's own only
    admin = service_account_kubeconfig(plane, unique("nsadmin"), namespace=ns,
                                       cluster_rules=no_list,
                                       namespace_rules={ns: leases, lease_ns: leases})
    blind = service_account_kubeconfig(plane, unique("blind"), namespace=ns,
                                       cluster_rules=no_list)
    shard_lease(cluster, ns, "b.flux-plunger.cozystack.io", f"{KEY}=b")   # a shard leading here
    for name, labels in (("bravo", {KEY: "b"}), ("free", {})):
        cluster.create_hr(ns, name, labels=labels)
        hold(cluster, ns, name)
    r = run_cli("resume-owned", "-n", ns, "--lease-namespace", lease_ns, kubeconfig=admin)
    assert r.code == 1, r
    (warning,) = r.err.splitlines()
    assert warning.startswith("warning: cannot list the Leases of the cluster (") and \
        warning.endswith(f"looking for running flux-plunger controllers only in namespace "
                         f"{lease_ns} and namespace {ns}"), r
    assert f"holds Lease {ns}/b.flux-plunger.cozystack.io" in deferred_line(r.out, "bravo")
    assert "free relinquished" in r.out, r
    # no Lease readable at all: refused before anything is written, unless --force
    hold(cluster, ns, "free")
    before = {n: rv(cluster, ns, n) for n in ("bravo", "free")}
    for verb in ("resume-owned", "recover", "release-fence"):
        r = run_cli(verb, "-n", ns, kubeconfig=blind)
        assert r.code == 1 and r.out == "", r
        (line,) = r.err.splitlines()
        assert line.startswith("error: cannot read any flux-plunger controller's Lease (") and \
            "no HelmRelease was written" in line and "--force" in line, r
        assert {n: rv(cluster, ns, n) for n in before} == before
    st = run_cli("status", "-n", ns, kubeconfig=blind)               # status only warns
    assert st.code == 0 and st.err.startswith(
        "warning: cannot read any flux-plunger controller's Lease ("), st
    r = run_cli("resume-owned", "-n", ns, "free", "--force", kubeconfig=blind)
    assert r.code == 0 and "free relinquished" in r.out, r


# -- 4: serve's overlap check sees a controller leading in another namespace ---------------

@pytest.mark.parametrize("watching", ["cluster", "one namespace"])
def test_serve_reports_an_overlap_with_a_controller_leading_in_another_namespace(
        plane, cluster, ns, elsewhere, tmp_path, watching):
    key = unique("k")
    x_ns, y_ns = cluster.namespace("flux-system"), cluster.namespace("plunger")
    sets = [f'selector="{KEY}={key}"']
    if watching == "one namespace":   # x watches ns only: its Lease (and Event) elsewhere
        sets.append(f'watchNamespace="{ns}"')
    x = elsewhere(x_ns, "flux-plunger", *sets)
    y = elsewhere(y_ns, "flux-plunger", f'selector="{KEY}={key}"')
    assert x.lease == y.lease == C.LEASE_NAME                      # the same name, elsewhere
    logs = {i: tmp_path / i for i in ("x", "y")}    # one release name: a log directory each
    for d in logs.values():
        d.mkdir()
    px = x.start(logs["x"], "--scope-overlap-check-interval=1s")
    py = y.start(logs["y"], "--scope-overlap-check-interval=1s")
    px.wait_for(x.leads, 30, "x leads")
    py.wait_for(y.leads, 30, "y leads")
    for me, proc, other in ((x, px, y), (y, py, x)):
        proc.wait_for(lambda proc=proc: overlaps(proc) == 1.0, 30, f"{me.ns}'s gauge")
        proc.wait_for(lambda me=me: scope_events(cluster, me.ns, me.lease), 30,
                      f"the ScopeOverlap Event on {me.ns}/{me.lease}")
        (line,) = warned(proc)
        (named,) = line["overlaps"]
        assert named.startswith(f"Lease {other.ns}/{other.lease} held by "), named
        assert _forbidden(proc.text()) == [], proc.text()   # listed and written as granted
    assert py.stop() == 0
    px.wait_for(lambda: overlaps(px) == 0.0, 30, "x's gauge back to 0")
