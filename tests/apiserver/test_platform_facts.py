"""The Kubernetes API behaviour flux-plunger's safety rests on, pinned against the real
kube-apiserver: SSA ownership in managedFields, rv/uid preconditions in an apply body,
finalizer list-set semantics, and terminating objects refusing new finalizers."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.kube import KubeError
from kubectl_flux_plunger.core.ownership import owns_suspend


def _suspend_apply(hr, value=True, fence=False, rv=True, uid=None):
    md = {"name": hr["metadata"]["name"], "namespace": hr["metadata"]["namespace"]}
    if rv:
        md["resourceVersion"] = hr["metadata"]["resourceVersion"]
    md["uid"] = uid or hr["metadata"]["uid"]
    if fence:
        md["finalizers"] = [C.FENCE]
    body = {"apiVersion": C.HR_API_VERSION, "kind": C.HR_KIND, "metadata": md}
    if value is not None:
        body["spec"] = {"suspend": value}
    return body


def _suspend_entries(hr):
    return [(m["manager"], m["operation"]) for m in hr["metadata"].get("managedFields", [])
            if "f:suspend" in (m.get("fieldsV1", {}).get("f:spec") or {})]


def test_ssa_apply_records_an_apply_entry_owning_spec_suspend(cluster, ns):
    hr = cluster.create_hr(ns)
    out = cluster.apply(_suspend_apply(hr), manager=C.FIELD_MANAGER)
    assert out["spec"]["suspend"] is True
    assert (C.FIELD_MANAGER, "Apply") in _suspend_entries(out)
    assert owns_suspend(out)


def test_another_managers_different_value_moves_the_field_away(cluster, ns):
    hr = cluster.create_hr(ns)
    cluster.apply(_suspend_apply(hr), manager=C.FIELD_MANAGER)
    out = cluster.suspend(ns, "demo", False, manager="backup-restore")
    assert out["spec"]["suspend"] is False
    assert (C.FIELD_MANAGER, "Apply") not in _suspend_entries(out)
    assert ("backup-restore", "Update") in _suspend_entries(out)
    assert not owns_suspend(out)


def test_same_value_applied_by_another_manager_makes_it_co_owned(cluster, ns):
    hr = cluster.create_hr(ns)
    cur = cluster.apply(_suspend_apply(hr), manager=C.FIELD_MANAGER)
    out = cluster.apply(_suspend_apply(cur, rv=False), manager="operator")
    entries = _suspend_entries(out)
    assert (C.FIELD_MANAGER, "Apply") in entries and ("operator", "Apply") in entries


def test_same_value_merge_patched_by_another_manager_is_not_ownership(cluster, ns):
    """An Update that changes nothing records no ownership: only a different value moves
    the field, so a co-owner can only come from an apply."""
    hr = cluster.create_hr(ns)
    cluster.apply(_suspend_apply(hr), manager=C.FIELD_MANAGER)
    out = cluster.suspend(ns, "demo", True, manager="operator")
    assert _suspend_entries(out) == [(C.FIELD_MANAGER, "Apply")]


def test_apply_with_a_stale_resource_version_is_a_conflict(cluster, ns):
    hr = cluster.create_hr(ns)
    cluster.merge(ns, "demo", {"metadata": {"labels": {"touched": "yes"}}})
    with pytest.raises(KubeError) as err:
        cluster.apply(_suspend_apply(hr), manager=C.FIELD_MANAGER)
    assert err.value.status == 409
    assert cluster.get(ns, "demo")["spec"].get("suspend") is None


def test_apply_with_the_uid_of_a_deleted_object_creates_nothing(cluster, ns):
    hr = cluster.create_hr(ns, finalizers=[])
    cluster.delete_hr(ns, "demo")
    assert cluster.get(ns, "demo") is None
    with pytest.raises(KubeError) as err:
        cluster.apply(_suspend_apply(hr, rv=False), manager=C.FIELD_MANAGER)
    assert err.value.status in (404, 409, 422)
    assert cluster.get(ns, "demo") is None


def test_apply_with_a_wrong_uid_is_refused(cluster, ns):
    hr = cluster.create_hr(ns)
    with pytest.raises(KubeError) as err:
        cluster.apply(_suspend_apply(hr, rv=False, uid="00000000-0000-0000-0000-000000000000"),
                      manager=C.FIELD_MANAGER)
    assert err.value.status == 422 and "metadata.uid" in err.value.message
    assert cluster.get(ns, "demo")["spec"].get("suspend") is None


def test_finalizers_are_a_set_under_ssa(cluster, ns):
    hr = cluster.create_hr(ns)   # carries helm-controller's finalizer, written by another manager
    out = cluster.apply(_suspend_apply(hr, fence=True), manager=C.FIELD_MANAGER)
    assert out["metadata"]["finalizers"] == [C.HELM_CONTROLLER_FINALIZER, C.FENCE]
    out = cluster.apply(_suspend_apply(out, value=None), manager=C.FIELD_MANAGER)
    assert out["metadata"]["finalizers"] == [C.HELM_CONTROLLER_FINALIZER]
    # omitting spec.suspend as its sole owner removes the field (reverts to unsuspended)
    assert out["spec"].get("suspend") is None


def test_omitting_a_co_owned_suspend_leaves_the_value(cluster, ns):
    hr = cluster.create_hr(ns)
    cur = cluster.apply(_suspend_apply(hr), manager=C.FIELD_MANAGER)
    cur = cluster.apply(_suspend_apply(cur, rv=False), manager="operator")
    out = cluster.apply(_suspend_apply(cur, value=None), manager=C.FIELD_MANAGER)
    assert out["spec"]["suspend"] is True
    assert not owns_suspend(out)


def test_a_terminating_object_refuses_a_new_finalizer_but_keeps_an_existing_one(cluster, ns):
    cluster.create_hr(ns)
    cluster.delete_hr(ns, "demo")
    cur = cluster.get(ns, "demo")
    assert cur["metadata"].get("deletionTimestamp")
    with pytest.raises(KubeError) as err:
        cluster.apply(_suspend_apply(cur, value=None, fence=True), manager=C.FIELD_MANAGER)
    assert err.value.status == 422
    assert C.FENCE not in cluster.get(ns, "demo")["metadata"]["finalizers"]
    # a fence added while live is kept on a terminating object by applying it again
    hr2 = cluster.create_hr(ns, "kept")
    cluster.apply(_suspend_apply(hr2, fence=True), manager=C.FIELD_MANAGER)
    cluster.delete_hr(ns, "kept")
    cur = cluster.get(ns, "kept")
    out = cluster.apply(_suspend_apply(cur, value=None, fence=True), manager=C.FIELD_MANAGER)
    assert C.FENCE in out["metadata"]["finalizers"]
    assert out["spec"].get("suspend") is None
    assert out["metadata"]["generation"] > cur["metadata"]["generation"]
