"""Holding a release (issue 55, SPEC §6): which Helm release a HelmRelease claims
(core/claims.py), who else claims it (the index serve keeps and the one-shot verbs list), and
how the storage verdict holds against other claimants and the tenant's authority
(plan.storage_verdict with a Holding)."""
from __future__ import annotations

import threading

import pytest

from kubectl_flux_plunger.core import claims, plan, storage
from kubectl_flux_plunger.core.claims import ClaimIndex, Holding, claims_of, target_of

from .builders import hr, history, stuck_condition

pytestmark = pytest.mark.unit

STORAGE = [storage.make_storage_secret("shared", "owner", 1, "superseded"),
           storage.make_storage_secret("shared", "owner", 2, "uninstalling")]


def release(name="shared", namespace="owner", **spec) -> dict:
    """A HelmRelease, stuck ("has no deployed releases") and failing at its generation."""
    return hr(name, namespace, spec_extra=spec, generation=2, observed_generation=2,
              last_attempted_generation=2, conditions=[stuck_condition(2)])


def only(claimed: frozenset) -> str:
    assert len(claimed) == 1
    return claims.describe(next(iter(claimed)))


def test_a_plain_release_claims_its_own_name_in_its_own_namespace():
    assert only(claims_of(release())) == "release shared in namespace owner"


def test_the_spec_names_release_target_and_storage_the_way_helm_controller_does():
    copy = release("copy", "team-b", releaseName="shared", storageNamespace="owner")
    assert claims_of(copy) == claims_of(release())
    targeted = release("app", "flux-system", targetNamespace="apps")
    assert only(claims_of(targeted)) == "release apps-app in namespace flux-system"
    long = release("n" * 60, "x")
    assert only(claims_of(long)) == f"release {storage.shorten_name('n' * 60)} in namespace x"


def test_a_pending_rename_claims_both_the_recorded_and_the_configured_release():
    renamed = release(releaseName="new")
    renamed["status"].update(history(2, "uninstalling", name="shared"))
    renamed["status"]["storageNamespace"] = "owner"
    assert sorted(claims.describe(c) for c in claims_of(renamed)) == [
        "release new in namespace owner", "release shared in namespace owner"]
    assert claims.retargeting(renamed) and not claims.retargeting(release())


def test_a_pending_rename_is_not_recovered_helm_controller_uninstalls_the_old_release_first():
    renamed = release(releaseName="new")
    renamed["status"].update(history(2, "uninstalling", name="shared"))
    renamed["status"]["storageNamespace"] = "owner"
    verdict = plan.storage_verdict(renamed, STORAGE)
    assert verdict.verdict is plan.Verdict.SKIPPED and verdict.stuck is None
    assert verdict.detail == claims.RETARGETING_DETAIL
    # the same storage under the recorded name alone: recovered
    settled = release()
    settled["status"].update(history(2, "uninstalling", name="shared"))
    assert plan.storage_verdict(settled, STORAGE).verdict is plan.Verdict.RECOVER


def test_remote_storage_is_another_cluster_named_by_its_kubeconfig_reference():
    local = release()
    remote = release(kubeConfig={"secretRef": {"name": "prod", "key": "value"}})
    other = release(kubeConfig={"secretRef": {"name": "stage"}})
    wi = release(kubeConfig={"configMapRef": {"name": "wi"}})
    odd = release(kubeConfig={"unknown": True})
    found = [claims_of(x) for x in (local, remote, other, wi, odd)]
    assert len(set().union(*found)) == 5
    assert only(found[1]) == "release shared in namespace owner of secretRef:owner/prod/value"
    assert claims.cluster_of(odd) == "kubeConfig:owner"


def test_odd_shapes_never_raise():
    bare = {"metadata": "x", "spec": [], "status": None}
    assert claims.key_of(bare) == "/"
    assert claims_of(bare) == claims_of({})
    assert target_of(bare) == target_of({})


def test_the_target_changes_with_name_target_storage_namespace_or_kubeconfig():
    base = release(releaseName="shared")
    assert target_of(base) == target_of(release(releaseName="shared"))
    for change in ({"releaseName": "other"}, {"targetNamespace": "t"},
                   {"storageNamespace": "s"}, {"kubeConfig": {"secretRef": {"name": "k"}}},
                   {"chartRef": {"kind": "OCIRepository", "name": "other"}},
                   {"chart": {"spec": {"chart": "other"}}}):
        assert target_of(base) != target_of(release(**{"releaseName": "shared", **change}))
    assert target_of(release()) != target_of(release(targetNamespace="t", releaseName="shared"))


def test_the_index_names_the_other_claimants_and_forgets_what_changed_or_went():
    owner, copy, alone = (release(), release("copy", "team-b", releaseName="shared",
                                            storageNamespace="owner"), release("alone", "c"))
    index = ClaimIndex()
    index.replace([owner, copy, alone])
    assert len(index) == 3
    assert index.others(owner) == ["team-b/copy"]
    assert index.others(copy) == ["owner/shared"]
    assert index.others(alone) == []
    index.put(release("copy", "team-b", releaseName="elsewhere"))  # repointed
    assert index.others(owner) == []
    index.put(copy)
    index.drop(copy)
    assert index.others(owner) == [] and len(index) == 2
    index.drop(copy)  # twice: nothing left to drop
    fresh = ClaimIndex()
    fresh.put(copy)
    index.absorb(fresh)
    assert index.others(owner) == ["team-b/copy"] and len(index) == 1


def test_an_event_that_changes_no_claim_leaves_the_index_as_it_is():
    # a status write: the same claims.  Dropping the key and adding it again would spend a
    # slot of both dicts per event, and Python doubles a dict's table once its slots run out
    # (the 3.7 MiB step at 50,000 releases) — so the key keeps its place
    index = ClaimIndex()
    index.replace([release(), release("b", "team-b")])
    claims_before = dict(index._by_claim)
    index.put(release())
    assert list(index._by_key) == ["owner/shared", "team-b/b"]
    assert list(index._by_claim) == list(claims_before)
    assert all(index._by_claim[c] is claims_before[c] for c in claims_before)
    index.put(release(releaseName="renamed"))          # a change moves it
    assert list(index._by_key) == ["team-b/b", "owner/shared"]


def test_the_index_answers_for_the_release_as_read_now_not_as_indexed():
    index = ClaimIndex()
    index.replace([release(), release("other", "o")])
    moved = release(releaseName="other", storageNamespace="o")  # owner/shared, repointed
    assert index.others(moved) == ["o/other"]


def test_the_index_is_safe_to_read_while_it_is_written():
    index = ClaimIndex()
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            x = release(f"r{i % 50}", "ns", releaseName="shared", storageNamespace="owner")
            index.put(x)
            index.drop(x)
            i += 1

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(2000):
            assert isinstance(index.others(release()), list)
    finally:
        stop.set()
        t.join()


# -- the verdict, held -------------------------------------------------------------------


def test_with_another_claimant_the_stuck_release_is_skipped_and_announced_naming_it():
    v = plan.storage_verdict(release(), STORAGE, Holding(("team-b/copy",)))
    assert v.verdict is plan.Verdict.SKIPPED and v.stuck is plan.Stuck.CLAIMED_TWICE
    assert "team-b/copy" in v.detail and "release shared in namespace owner" in v.detail
    assert v.choice.ok  # the storage alone would have been recovered


def test_a_claimant_of_a_stale_failure_is_skipped_without_an_announcement():
    stale = release()
    stale["metadata"]["generation"] = 3  # our relinquish bumped it; not attempted since
    v = plan.storage_verdict(stale, STORAGE, Holding(("team-b/copy",)))
    assert v.verdict is plan.Verdict.SKIPPED and v.stuck is None


def test_a_refused_authority_skips_only_what_would_be_recovered():
    v = plan.storage_verdict(release(), STORAGE, Holding(refused="sa may not delete"))
    assert v.verdict is plan.Verdict.SKIPPED and v.stuck is plan.Stuck.OUTSIDE_AUTHORITY
    assert v.detail == "outside authority: sa may not delete"
    deployed = [storage.make_storage_secret("shared", "owner", 1, "deployed")]
    kept = plan.storage_verdict(release(), deployed, Holding(refused="no"))
    assert kept.verdict is plan.Verdict.SKIPPED and kept.stuck is None
    assert kept.detail == plan.storage_verdict(release(), deployed).detail


def test_awaiting_retry_stands_whoever_else_claims_the_release():
    done = release(releaseName="shared")
    done["metadata"]["annotations"] = {"flux-plunger.cozystack.io/last-processed-version": "3"}
    done["metadata"]["generation"] = 3
    v = plan.storage_verdict(done, STORAGE, Holding(("x/y",), "no"))
    assert v.verdict is plan.Verdict.AWAITING_RETRY


def test_no_holding_is_todays_verdict():
    assert plan.storage_verdict(release(), STORAGE) == plan.storage_verdict(
        release(), STORAGE, Holding())
    assert plan.storage_verdict(release(), STORAGE).verdict is plan.Verdict.RECOVER


def test_every_new_cause_has_its_static_warning():
    for cause in (plan.Stuck.CLAIMED_TWICE, plan.Stuck.OUTSIDE_AUTHORITY):
        spec = plan.RECOVERY_SKIPPED[cause]
        assert spec.type == "Warning" and spec.reason == "RecoverySkipped"
        assert "{" not in spec.message and "/" not in spec.message.replace("n/a", "")
