"""A stuck release flux-plunger will not fix is announced (SPEC §6): a Warning
``RecoverySkipped`` Event on the real apiserver, one static message per cause so repeats fold
into one counted Event — for a corrupt newest revision, remote storage flux-plunger does not
support, and odd storage once helm-controller has retried; never for storage
helm-controller goes on from, nor for the stale message right after a recovery of ours.  The
executor of serve and of ``recover`` alike (``recover`` records it as it records
RecoveryFailed; ``--dry-run`` records nothing).  Nothing is deleted in any of them."""
from __future__ import annotations

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import plan, storage
from kubectl_flux_plunger.kube import JSON, core_path
from kubectl_flux_plunger.core.plan import RECOVERY_SKIPPED, Stuck
from testplane.cluster import eventually

from .conftest import corrupt_revision, stuck_release


def skipped_events(cluster, ns, name="demo"):
    return [e for e in cluster.events(ns, name) if e["reason"] == "RecoverySkipped"]


def add_secret(cluster, ns, body):
    cluster.kube.request("CREATE", "POST", core_path("secrets", ns), body=body,
                         content_type=JSON)


def test_a_corrupt_newest_revision_is_one_warning_folded_on_repeats(executor, cluster, ns, hc):
    stuck_release(cluster, ns, revisions=[(1, "superseded")])
    corrupt_revision(cluster, ns)
    for _ in range(3):
        out = executor.reconcile(ns, "demo")
        assert out.result == "skipped" and "corrupt payload" in out.detail, out
        assert out.left_stuck is Stuck.CORRUPT_PAYLOAD
    events = eventually(lambda: skipped_events(cluster, ns), 10, "a RecoverySkipped Event")
    assert len(events) == 1, events
    event = events[0]
    assert event["type"] == "Warning" and event["count"] == 3
    assert event["message"] == RECOVERY_SKIPPED[Stuck.CORRUPT_PAYLOAD].message
    assert event["source"]["component"] == C.EVENT_COMPONENT
    assert len(cluster.secret_names(ns, "demo")) == 2
    assert cluster.get(ns, "demo")["spec"].get("suspend") is None


def test_remote_storage_flux_plunger_does_not_support_is_announced(executor, cluster, ns, hc):
    stuck_release(cluster, ns, spec={"kubeConfig": {"configMapRef": {"name": "aws-eks"}}})
    out = executor.reconcile(ns, "demo")
    assert out.result == "skipped" and out.left_stuck is Stuck.REMOTE_UNSUPPORTED, out
    (event,) = eventually(lambda: skipped_events(cluster, ns), 10, "a RecoverySkipped Event")
    assert event["message"] == RECOVERY_SKIPPED[Stuck.REMOTE_UNSUPPORTED].message


def test_storage_helm_controller_goes_on_from_is_not_announced(executor, cluster, ns, hc):
    stuck_release(cluster, ns, revisions=[(1, "superseded"), (2, "failed")])
    out = executor.reconcile(ns, "demo")
    assert out.result == "skipped" and out.left_stuck is None, out
    # a second release in the namespace proves Events are written at all meanwhile
    stuck_release(cluster, ns, "other", revisions=[])
    other = executor.reconcile(ns, "other")
    assert other.left_stuck is Stuck.NO_STORAGE, other
    eventually(lambda: skipped_events(cluster, ns, "other"), 10, "the other's Event")
    assert skipped_events(cluster, ns) == []


def test_right_after_our_recovery_the_stale_message_is_not_announced_until_helm_retried(
        executor, cluster, ns, hc):
    """The recovery deletes the one numbered revision and leaves a Secret without a revision
    number behind: the old "has no deployed releases" stays until helm-controller retries,
    and the pass after ours says nothing; once helm-controller tried again and still fails,
    the odd storage is announced."""
    stuck_release(cluster, ns, revisions=[(2, "uninstalling")])
    odd = storage.make_storage_secret("demo", ns, 9, "uninstalling")
    odd["metadata"]["name"] = "sh.helm.release.v1.demo.vx"
    del odd["metadata"]["labels"]["version"]
    add_secret(cluster, ns, odd)
    assert executor.reconcile(ns, "demo").result == "recovered"
    after = executor.reconcile(ns, "demo")
    assert after.result == "skipped" and "has no revision number" in after.detail, after
    assert after.left_stuck is None
    assert skipped_events(cluster, ns) == []
    cluster.make_stuck(ns, "demo")         # helm-controller's retry of the new generation
    again = executor.reconcile(ns, "demo")
    assert again.left_stuck is Stuck.UNNUMBERED_REVISION, again
    (event,) = eventually(lambda: skipped_events(cluster, ns), 10, "a RecoverySkipped Event")
    assert event["message"] == RECOVERY_SKIPPED[Stuck.UNNUMBERED_REVISION].message
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.vx"]


def test_recover_prints_the_skip_and_records_it_a_dry_run_records_nothing(cluster, ns, hc, cli):
    stuck_release(cluster, ns, revisions=[(1, "superseded")])
    corrupt_revision(cluster, ns)
    dry = cli("recover", "demo", "-n", ns, "--dry-run=client")
    assert "corrupt payload" in dry.out, dry
    assert skipped_events(cluster, ns) == []
    res = cli("recover", "demo", "-n", ns)
    assert res.code == 1, res                 # a skip is not a success (as before)
    assert "demo skipped: newest revision 2 has a corrupt payload" in res.out, res
    (event,) = eventually(lambda: skipped_events(cluster, ns), 10, "a RecoverySkipped Event")
    assert event["type"] == "Warning"
    assert event["message"] == plan.RECOVERY_SKIPPED[Stuck.CORRUPT_PAYLOAD].message
    assert len(cluster.secret_names(ns, "demo")) == 2
