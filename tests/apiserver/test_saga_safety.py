"""The narrow paths of the recovery saga (issue 8 §1), each against the real apiserver:
a Secret rewritten in place during the handshake, relinquish racing a burst of foreign
writes, clean-up failures that must say what is left, counters, odd input."""
from __future__ import annotations

import base64

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import storage
from kubectl_flux_plunger.kube import JSON, KubeError, core_path
from kubectl_flux_plunger.core.ownership import owns_suspend
from kubectl_flux_plunger.core.plan import Stuck
from kubectl_flux_plunger.serve.metrics import Metrics

from .conftest import read_counts, stuck_release


def _on(executor, when, action, times=1):
    """Run ``action(n)`` right before the first ``times`` requests matching ``when``."""
    fired: list[tuple[str, str]] = []
    previous = executor.kube.before_request

    def hook(verb, path):
        if previous:
            previous(verb, path)
        if len(fired) < times and when(verb, path):
            fired.append((verb, path))
            action(len(fired))
    executor.kube.before_request = hook
    return fired


def _rewrite_secret(cluster, ns, name, status):
    """Helm's in-place update of a release Secret: same name and uid, new payload/labels."""
    path = core_path("secrets", ns, name)
    secret = cluster.kube.request("GET", "GET", path)
    number = int(secret["metadata"]["labels"]["version"])
    fresh = storage.make_storage_secret("demo", ns, number, status)
    secret["data"] = fresh["data"]
    secret["metadata"]["labels"]["status"] = status
    return cluster.kube.request("UPDATE", "PUT", path, body=secret, content_type=JSON)


# -- the DELETE carries the judged Secret's resourceVersion ------------------------------

def test_a_secret_rewritten_to_deployed_during_the_handshake_is_not_deleted(executor, cluster,
                                                                           ns, hc):
    stuck_release(cluster, ns)
    uid = cluster.kube.request("GET", "GET", core_path(
        "secrets", ns, "sh.helm.release.v1.demo.v2"))["metadata"]["uid"]
    fired = _on(executor, lambda v, p: v == "PATCH",      # the record: after the handshake
                lambda n: _rewrite_secret(cluster, ns, "sh.helm.release.v1.demo.v2", "deployed"))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "skipped" and not out.failed, out
    assert "changed after it was judged" in out.detail and "is deployed" in out.detail, out
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1",
                                                "sh.helm.release.v1.demo.v2"]
    left = cluster.kube.request("GET", "GET", core_path("secrets", ns, "sh.helm.release.v1.demo.v2"))
    assert left["metadata"]["uid"] == uid                  # the same object, rewritten
    hr = cluster.get(ns, "demo")
    assert hr["spec"].get("suspend") is None and C.FENCE not in hr["metadata"]["finalizers"]


def test_a_secret_relabelled_but_still_blocking_is_deleted_after_re_deciding(executor, cluster,
                                                                            ns, hc):
    stuck_release(cluster, ns)
    fired = _on(executor, lambda v, p: v == "PATCH",
                lambda n: _rewrite_secret(cluster, ns, "sh.helm.release.v1.demo.v2", "unknown"))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "recovered", out
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    assert executor.kube.stats.snapshot()["DELETE"] == 2   # 409 on the stale rv, then gone


# -- relinquish keeps going while the suspension is still ours ---------------------------

def test_relinquish_outlasts_a_burst_of_writes_after_a_delete(executor, cluster, ns, hc):
    """The replayed randomized run: the HelmRelease is deleted right after the Secret
    DELETE; helm-controller writes status and drops its finalizer while we relinquish —
    four 409s in a row.  The suspension is lifted anyway (the fence stays: terminating)."""
    stuck_release(cluster, ns)
    deleted: list[int] = []
    _on(executor, lambda v, p: v == "DELETE",
        lambda n: deleted.append(n), times=1)
    writes = [
        lambda: cluster.delete_hr(ns, "demo"),
        lambda: cluster.set_status(ns, "demo", {"lastAttemptedConfigDigest": "sha256:a"}),
        lambda: (cluster.remove_finalizer(ns, "demo", C.HELM_CONTROLLER_FINALIZER),
                 cluster.set_status(ns, "demo", {"lastAttemptedConfigDigest": "sha256:b"})),
        lambda: cluster.set_status(ns, "demo", {"lastAttemptedConfigDigest": "sha256:c"}),
    ]
    fired = _on(executor, lambda v, p: v == "APPLY" and bool(deleted),
                lambda n: writes[n - 1](), times=len(writes))
    out = executor.reconcile(ns, "demo")
    assert len(fired) == 4 and out.result == "recovered" and not out.failed, out
    assert "will retry" not in out.detail
    hr = cluster.get(ns, "demo")
    assert hr is not None and hr["metadata"].get("deletionTimestamp")
    assert hr["spec"].get("suspend") is None and not owns_suspend(hr)
    assert hr["metadata"]["finalizers"] == [C.FENCE]      # kept until the uninstall


# -- a clean-up failure says what is left and what lifts it -------------------------------

def test_a_failed_final_relinquish_names_what_is_left_and_resume_owned(make_executor, cluster,
                                                                      ns, hc):
    executor = make_executor(relinquish_timeout=1)
    stuck_release(cluster, ns)
    applies: list[int] = []

    def refuse_the_relinquish(verb, path):
        if verb == "APPLY":
            applies.append(1)
            if len(applies) >= 2:
                raise KubeError(403, "Forbidden", "apply forbidden by a test")
    executor.kube.before_request = refuse_the_relinquish
    out = executor.reconcile(ns, "demo")
    assert out.failed and out.result == "failed", out
    assert "left suspended and fenced" in out.detail, out
    assert f"resume-owned -n {ns} demo" in out.detail, out
    assert "will retry" not in out.detail
    hr = cluster.get(ns, "demo")
    assert hr["spec"]["suspend"] is True and owns_suspend(hr)   # what the line says


def test_a_lost_acquire_answer_with_an_unreadable_release_names_resume_owned(executor, cluster,
                                                                            ns, hc):
    from .conftest import hold

    stuck_release(cluster, ns)
    state = {"applied": False}

    def land_lose_then_fail_reads(verb, path):
        if verb == "APPLY" and not state["applied"]:
            state["applied"] = True
            hold(cluster, ns)                                   # lands ...
            raise KubeError(0, "Unreachable", "read timed out")  # ... answer lost
        if verb == "GET" and state["applied"]:
            raise KubeError(0, "Unreachable", "connection refused")
    executor.kube.before_request = land_lose_then_fail_reads
    out = executor.reconcile(ns, "demo")
    assert out.failed and "could not suspend" in out.detail, out
    assert "may be left suspended and fenced" in out.detail, out
    assert f"resume-owned -n {ns} demo" in out.detail, out


# -- counters mean what they say ---------------------------------------------------------

def test_awaiting_helm_controller_is_not_counted_as_a_skipped_recovery(executor, cluster, ns, hc):
    stuck_release(cluster, ns, revisions=((1, "uninstalling"),))   # its only revision
    metrics = Metrics()
    first = executor.reconcile(ns, "demo")
    metrics.observe(first)
    assert first.result == "recovered", first
    assert cluster.secret_names(ns, "demo") == []
    again = executor.reconcile(ns, "demo")     # stale stuck message, empty storage
    metrics.observe(again)
    assert again.result == "awaiting-retry" and not again.failed, again
    snap = metrics.snapshot()
    assert snap["recoveries"] == {"recovered": 1}, snap
    assert snap["reconciles"].get("awaiting-retry") == 1


# -- odd input: one clear reason each, never a crash --------------------------------------

def _secret(ns, number, data_release):
    body = storage.make_storage_secret("demo", ns, number, "uninstalling")
    body["data"]["release"] = data_release
    return body


def _create(cluster, ns, body):
    cluster.kube.request("CREATE", "POST", core_path("secrets", ns), body=body, content_type=JSON)


def test_a_payload_without_info_status_is_a_corrupt_payload(executor, cluster, ns, hc):
    stuck_release(cluster, ns, revisions=((1, "superseded"),))
    blob = storage.encode_payload({"name": "demo", "version": 2, "info": {}})
    _create(cluster, ns, _secret(ns, 2, blob))
    out = executor.reconcile(ns, "demo")
    assert out.result == "skipped" and out.detail == (
        "newest revision 2 has a corrupt payload: no info.status"), out
    assert len(cluster.secret_names(ns, "demo")) == 2


def test_an_invalid_utf8_payload_is_one_clear_reason(executor, cluster, ns, hc):
    stuck_release(cluster, ns, revisions=((1, "superseded"),))
    blob = base64.b64encode(base64.b64encode(b'{"info": "\xff\xfe"}')).decode()
    _create(cluster, ns, _secret(ns, 2, blob))
    out = executor.reconcile(ns, "demo")
    assert out.result == "skipped" and out.detail == (
        "newest revision 2 has a corrupt payload: the release is not UTF-8 text"), out
    assert "codec" not in out.detail


def test_an_annotation_of_thousands_of_digits_never_crashes_a_pass(executor, cluster, ns, hc):
    stuck_release(cluster, ns, annotations={C.PROCESSED_ANNOTATION: "9" * 5000})
    out = executor.reconcile(ns, "demo")       # unparsable: says nothing about revision 2
    assert out.result == "recovered", out
    big = storage.make_storage_secret("demo", ns, 3, "uninstalling")
    big["metadata"]["labels"]["version"] = "7" * 60       # labels stop at 63 characters
    big["metadata"]["name"] = "sh.helm.release.v1.demo.v" + "7" * 200
    _create(cluster, ns, big)
    assert executor.reconcile(ns, "demo").result in ("awaiting-retry", "skipped")


def test_a_failed_json_patch_test_is_told_from_an_admission_denial(cluster, ns):
    """The apiserver answers a failed ``test`` op with 422 "testing value … failed": the
    one 422 that is worth a re-read (release-fence and the fence removal retry it)."""
    from kubectl_flux_plunger.core import writes
    from kubectl_flux_plunger.kube import Invalid

    cluster.create_hr(ns, "demo", finalizers=[C.FENCE])
    stale = cluster.get(ns, "demo")
    cluster.merge(ns, "demo", {"metadata": {"labels": {"x": "y"}}})
    try:
        cluster.kube.json_patch_hr(ns, "demo", writes.remove_fence_json_patch(stale))
    except Invalid as exc:
        assert exc.status == 422 and exc.failed_test_op, repr(exc.body)
    else:
        raise AssertionError("a patch testing a stale resourceVersion was applied")


def test_a_recovery_leaves_a_recovered_event_naming_the_revision_and_secret(executor, cluster,
                                                                           ns, hc):
    stuck_release(cluster, ns)
    assert executor.reconcile(ns, "demo").result == "recovered"
    (event,) = [e for e in cluster.events(ns, "demo") if e["reason"] == "Recovered"]
    assert event["type"] == "Normal" and event["source"]["component"] == C.EVENT_COMPONENT
    assert event["message"].endswith(
        f"revision 2, Secret {ns}/sh.helm.release.v1.demo.v2"), event["message"]
    assert event["involvedObject"]["uid"] == cluster.get(ns, "demo")["metadata"]["uid"]


# -- the acquire goes out on the newest state (issue 13 item 1) ------------------------------

def test_a_status_write_after_the_read_does_not_make_the_acquire_conflict(executor, cluster,
                                                                          ns, hc, plane):
    """helm-controller writes status between our read and our acquire (here: while we
    list the storage): the stream the saga watches on (the watch-list the read came from;
    without watch-lists, the WATCH from the GET's resourceVersion) carries that write, and
    the unforced acquire goes out on it."""
    stuck_release(cluster, ns)
    fired = _on(executor, lambda v, p: v == "LIST",
                lambda n: cluster.set_status(ns, "demo", {"lastAttemptedConfigDigest": "x"}))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "recovered", out
    counts = executor.kube.stats.snapshot()
    read = read_counts(plane)
    assert counts["APPLY"] == 2 and counts["WATCH"] == read["WATCH"], counts   # no 409
    assert counts.get("GET", 0) == read["GET"], counts                         # no re-read


def test_a_409_is_re_decided_on_the_state_the_watch_carries(executor, cluster, ns, hc, plane):
    stuck_release(cluster, ns)
    fired = _on(executor, lambda v, p: v == "APPLY",
                lambda n: cluster.set_status(ns, "demo", {"lastAttemptedConfigDigest": "y"}))
    out = executor.reconcile(ns, "demo")
    assert fired and out.result == "recovered", out
    counts = executor.kube.stats.snapshot()
    assert counts["APPLY"] == 3, counts             # 409, acquired, relinquish
    # the newer state came from the stream: no GET but the named read's (no watch-lists)
    assert counts.get("GET", 0) == read_counts(plane)["GET"], counts


def test_a_release_deleted_before_the_acquire_is_never_suspended(executor, cluster, ns, hc,
                                                                  plane):
    stuck_release(cluster, ns)
    mark = plane.audit_mark()
    fired = _on(executor, lambda v, p: v == "LIST", lambda n: cluster.delete_hr(ns, "demo"))
    out = executor.reconcile(ns, "demo")
    # deferred (the release gone when it looks again) — or, when helm-controller's uninstall
    # of the deleted release removed its storage before the storage LIST was answered (seen
    # once on a loaded machine), skipped for want of storage: nothing to delete either way
    assert fired and not out.failed, out
    assert out.result == "deferred" or (
        out.result == "skipped" and out.left_stuck == Stuck.NO_STORAGE
        and cluster.secret_names(ns, "demo") == []), out
    # never suspended: no apply of ours was accepted.  (One may be sent and refused with a
    # 409, when the deletion's event has not reached the watch before the acquire.)
    accepted = [ev for ev in plane.audit_events(since=mark)
                if (ev.get("objectRef") or {}).get("namespace") == ns
                and "fieldManager=flux-plunger" in ev["requestURI"]
                and ev["responseStatus"]["code"] < 300]
    assert accepted == [], [(ev["verb"], ev["requestURI"]) for ev in accepted]
    assert hc.dropped_without_uninstall == []       # helm-controller's uninstall ran
