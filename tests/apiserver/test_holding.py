"""Holding a release (issue 55, SPEC §6) against the real apiserver: a Helm release claimed by
two HelmReleases is written to by nobody; a second claimant created during the handshake and
a release renamed during it leave the storage intact and both HelmReleases released; a
tenant identity that may not delete the storage is ``outside-authority``.  The same with the
real helm-controller and Flux's lockdown flags: tests/e2e/test_tenants_e2e.py."""
from __future__ import annotations

import json
import threading

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core.ownership import owns_suspend
from kubectl_flux_plunger.executor.recover import RETARGETED_DETAIL
from kubectl_flux_plunger.kube.authority import TenantAuthority
from kubectl_flux_plunger.kube.claimants import ListedClaimants
from testplane.cluster import SimulatedHelmController
from testplane.plane import wait_for
from testplane.rbac import service_account_kubeconfig

from .conftest import stuck_release
from .test_saga_safety import _on

V1, V2 = "sh.helm.release.v1.shared.v1", "sh.helm.release.v1.shared.v2"


def untouched(cluster, ns: str, name: str) -> None:
    """Nothing of ours on the HelmRelease: not suspended, no fence, no field of ours."""
    hr = cluster.get(ns, name)
    assert not hr["spec"].get("suspend"), hr["spec"]
    assert C.FENCE not in (hr["metadata"].get("finalizers") or []), hr["metadata"]
    assert not owns_suspend(hr), hr["metadata"].get("managedFields")


def the_copy(cluster, owner: str, team: str) -> None:
    """``team/copy`` naming ``owner``'s release ``shared``, stuck the same way."""
    cluster.create_hr(team, "copy", spec={"releaseName": "shared", "storageNamespace": owner})
    cluster.make_stuck(team, "copy", release="shared")


def test_a_copy_in_another_namespace_makes_recover_write_nothing(cli, cluster):
    owner, team = cluster.namespace("owner"), cluster.namespace("team-b")
    stuck_release(cluster, owner, "shared")
    the_copy(cluster, owner, team)
    with SimulatedHelmController(cluster, owner), SimulatedHelmController(cluster, team):
        r = cli("recover", "-n", team, "copy", "--lease-namespace", team)
        dry = cli("recover", "-n", owner, "shared", "--dry-run", "--lease-namespace", team)
    assert "claimed twice" in r.out and f"{owner}/shared" in r.out, r
    assert "0 recovered" in r.out or "recovered 0" in r.out, r
    assert "claimed twice" in dry.out and f"{team}/copy" in dry.out, dry
    assert cluster.secret_names(owner, "shared") == [V1, V2]
    untouched(cluster, owner, "shared")
    untouched(cluster, team, "copy")
    skipped = [e for e in cluster.events(team, "copy") if e["reason"] == "RecoverySkipped"]
    assert [e["type"] for e in skipped] == ["Warning"], cluster.events(team, "copy")
    st = cli("status", "-A", "-o", "json", "--lease-namespace", team)
    assert st.code == 0, st
    rows = {(i["metadata"]["namespace"], i["metadata"]["name"]): i
            for i in json.loads(st.out)["items"]}
    assert rows[owner, "shared"]["state"] == "claimed-twice"
    assert rows[owner, "shared"]["claimants"] == [f"{team}/copy"]
    assert rows[team, "copy"]["claimants"] == [f"{owner}/shared"]


def test_a_second_claimant_created_during_the_handshake_leaves_the_storage(
        make_executor, plane, cluster, ns):
    owner, team = ns, cluster.namespace("team-b")
    stuck_release(cluster, owner, "shared")
    k = plane.kube()
    executor = make_executor(claimants=ListedClaimants(k))
    fired = _on(executor, lambda v, p: v == "PATCH",       # the record: after the handshake
                lambda n: the_copy(cluster, owner, team))
    with SimulatedHelmController(cluster, owner):
        out = executor.reconcile(owner, "shared")
    k.close()
    # deferred, not skipped: our own suspension made helm-controller's failure stale, so
    # the claimed-twice skip is announced by the next pass, once the failure is current
    assert fired and out.result == "deferred", out
    assert out.detail.startswith("decided again before the delete, nothing deleted: claimed "
                                 f"twice: HelmRelease {team}/copy"), out
    assert cluster.secret_names(owner, "shared") == [V1, V2]
    untouched(cluster, owner, "shared")                    # relinquished
    untouched(cluster, team, "copy")                       # never touched


def test_a_release_renamed_during_the_handshake_is_not_recovered(make_executor, cluster, ns):
    stuck_release(cluster, ns, "shared")
    executor = make_executor()
    done = threading.Event()

    def rename_then_acknowledge() -> None:
        # helm-controller acknowledges the suspended generation only after the operator
        # renamed the release: the handshake ends on the renamed spec
        wait_for(lambda: (cluster.get(ns, "shared")["spec"].get("suspend") is True),
                 30, "the suspension")
        cluster.merge(ns, "shared", {"spec": {"releaseName": "renamed"}})
        gen = cluster.get(ns, "shared")["metadata"]["generation"]
        cluster.set_status(ns, "shared", {"observedGeneration": gen})
        done.set()

    helper = threading.Thread(target=rename_then_acknowledge, daemon=True)
    with SimulatedHelmController(cluster, ns, acknowledge=False):
        helper.start()
        out = executor.reconcile(ns, "shared")
    helper.join(30)
    assert done.is_set()
    assert out.result == "deferred" and out.detail == RETARGETED_DETAIL, out
    assert cluster.secret_names(ns, "shared") == [V1, V2]
    hr = cluster.get(ns, "shared")
    assert not hr["spec"].get("suspend") and not owns_suspend(hr)


def test_a_tenant_that_may_not_delete_the_storage_is_outside_authority(
        make_executor, plane, cluster, ns):
    stuck_release(cluster, ns, "shared")
    # the tenant's ServiceAccount may read Secrets in the namespace, not delete them
    service_account_kubeconfig(plane, "tenant", namespace=ns, cluster_rules=[],
                               namespace_rules={ns: [{"apiGroups": [""], "resources": ["secrets"],
                                                      "verbs": ["get", "list"]}]})
    k = plane.kube()
    refusing = make_executor(authority=TenantAuthority(k, "tenant"))
    with SimulatedHelmController(cluster, ns):
        out = refusing.reconcile(ns, "shared")
        assert out.result == "skipped", out
        assert f"system:serviceaccount:{ns}:tenant" in out.detail, out
        assert cluster.secret_names(ns, "shared") == [V1, V2]
        untouched(cluster, ns, "shared")
        # the same release under an identity that may: recovered as before
        admin = make_executor(authority=TenantAuthority(k, None))
        assert admin.reconcile(ns, "shared").result == "recovered"
    k.close()
    assert cluster.secret_names(ns, "shared") == [V1]


def test_serves_index_is_fed_by_its_real_watch_and_follows_a_delete(plane, cluster, ns):
    """serve watching every HelmRelease (no -n, no -l) answers "who else claims it?" from
    its own watch, no LIST: the sync fills the index, a created claimant arrives as an
    event, a DELETE takes it out; asked as of a resourceVersion, it waits for the stream."""
    from kubectl_flux_plunger.core.scope import Scope
    from kubectl_flux_plunger.serve.queue import WorkQueue
    from kubectl_flux_plunger.serve.watch import Watcher

    owner, team = ns, cluster.namespace("team-b")
    stuck_release(cluster, owner, "shared")
    k, stop = plane.kube(), threading.Event()
    # one page holds every HelmRelease the earlier tests left in this shared apiserver, so
    # the LIST sync (a server without watch-lists) is one request, not one per 100
    watcher = Watcher(k, WorkQueue(), Scope(), resync_period=3600, watch_seconds=5,
                      page_size=1_000_000)
    assert watcher.claims is not None
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        shared = cluster.get(owner, "shared")
        assert watcher.others(shared) == ()                     # after the sync
        the_copy(cluster, owner, team)
        rv = cluster.get(team, "copy")["metadata"]["resourceVersion"]
        assert watcher.others(shared, after=rv) == (f"{team}/copy",)
        cluster.delete_hr(team, "copy")
        # terminating, held by helm-controller's finalizer: it still claims the release
        # (helm-controller's next step for it is the uninstall)
        rv = cluster.get(team, "copy")["metadata"]["resourceVersion"]
        assert watcher.others(shared, after=rv) == (f"{team}/copy",)
        cluster.remove_finalizer(team, "copy", C.HELM_CONTROLLER_FINALIZER)
        rv = cluster.merge(owner, "shared", {"metadata": {"labels": {"seen": "yes"}}})[
            "metadata"]["resourceVersion"]                    # a write after the DELETE
        assert watcher.others(shared, after=rv) == ()
        # the sync a watch-list where the server serves them: not one LIST was sent
        assert k.stats.snapshot().get("LIST", 0) == (0 if plane.watch_lists else 1)
    finally:
        stop.set()
        thread.join(10)
        k.close()


def test_a_namespace_admin_is_warned_that_claimants_elsewhere_are_not_seen(plane, cluster, ns):
    """Refused the cluster-wide LIST of HelmReleases, `recover` lists the release's own and
    storage namespaces, says so in one warning line, and goes on (as with the Leases)."""
    from tests.conftest import run_cli

    from .test_cli_verbs import CLI_RULES

    stuck_release(cluster, ns, "shared")
    kc = service_account_kubeconfig(plane, "ns-admin", namespace=ns,
                                    namespace_rules={ns: CLI_RULES})
    with SimulatedHelmController(cluster, ns):
        r = run_cli("recover", "-n", ns, "shared", "--lease-namespace", ns, kubeconfig=kc)
    assert r.code == 0 and "shared recovered" in r.out, r
    said = [line for line in r.err.splitlines()
            if "cannot list HelmReleases in all namespaces" in line]
    assert len(said) == 1 and "own and storage namespaces" in said[0], r.err
    assert cluster.secret_names(ns, "shared") == [V1]
