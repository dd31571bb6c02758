"""Holding a release (issue 55, SPEC §6) where it is decided: the recovery's decision made
again at the delete (executor/recover.Recover._decide_again), the claimants the one-shot
verbs list (kube/claimants.ListedClaimants), serve's watch index (serve/watch.Watcher.others)
and the tenant's authority (kube/authority.TenantAuthority).  The same against the real
apiserver: tests/apiserver/test_holding.py."""
from __future__ import annotations

import copy
import datetime as dt
import threading

import pytest

from kubectl_flux_plunger.core import plan
from kubectl_flux_plunger.core.scope import Scope
from kubectl_flux_plunger.executor.outcome import Options, Result
from kubectl_flux_plunger.executor.recover import RETARGETED_DETAIL
from kubectl_flux_plunger.kube import KubeError
from kubectl_flux_plunger.kube.authority import SAR_PATH, TenantAuthority, review, tenant_user
from kubectl_flux_plunger.kube.claimants import ListedClaimants
from kubectl_flux_plunger.serve.queue import WorkQueue
from kubectl_flux_plunger.serve.watch import Watcher
from kubectl_flux_plunger.verbs import status

from .builders import hr, ready_condition
from .test_executor_recover import STORAGE, Prims, held, make, run, stuck

pytestmark = pytest.mark.unit


# -- the recovery: decided, decided again at the delete -------------------------------------


class Claimants:
    """``Options.claimants``: the other claimants before anything is written (``after``
    None) and at the delete (``after`` the record's resourceVersion)."""

    def __init__(self, before=(), at_delete=(), fail: KubeError | None = None):
        self.before, self.at_delete, self.fail = tuple(before), tuple(at_delete), fail
        self.asked: list[str | None] = []

    def others(self, hr_, *, after=None):
        self.asked.append(after)
        if self.fail is not None:
            raise self.fail
        return self.at_delete if after else self.before


class Authority:
    def __init__(self, refusal: str = ""):
        self.refusal_, self.asked = refusal, 0

    def refusal(self, hr_):
        self.asked += 1
        return self.refusal_


def test_one_claimant_is_recovered_and_the_claimants_are_asked_again_after_the_record():
    claimants = Claimants()
    r, p, _ = make(claimants=claimants, authority=Authority())
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert claimants.asked == [None, "102"]  # the second as of the record's answer
    assert p.kinds() == ["list", "acquire", "record", "delete", "relinquish"]


def test_a_second_claimant_before_anything_is_written_skips_and_writes_nothing():
    r, p, rec = make(claimants=Claimants(before=["team-b/copy"]))
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.SKIPPED
    assert rep.ending.stuck is not None and rep.ending.stuck is plan.Stuck.CLAIMED_TWICE
    assert "team-b/copy" in (rep.ending.detail or "")
    assert p.kinds() == ["list"] and rec.records == []


def test_a_second_claimant_appearing_during_the_handshake_deletes_nothing_and_relinquishes():
    r, p, rec = make(claimants=Claimants(at_delete=["team-b/copy"]))
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.SKIPPED
    assert rep.ending.stuck is not None and rep.ending.stuck is plan.Stuck.CLAIMED_TWICE
    assert p.kinds() == ["list", "acquire", "record", "relinquish"]
    assert rec.records == []


def test_claimants_that_cannot_be_told_fail_before_anything_is_written():
    r, p, _ = make(claimants=Claimants(fail=KubeError(403, "Forbidden", "no list")))
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.FAILED
    assert rep.ending.detail == "cannot tell who else holds the release: no list"
    assert p.kinds() == ["list"]


def test_claimants_that_cannot_be_told_at_the_delete_interrupt_and_relinquish():
    class Late(Claimants):
        def others(self, hr_, *, after=None):
            if after:
                raise KubeError(0, "Timeout", "the watch did not reach it")
            return ()

    r, p, _ = make(claimants=Late())
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.FAILED
    assert "delete" not in p.kinds() and p.kinds()[-1] == "relinquish"


def test_a_refused_tenant_is_outside_authority_and_nothing_is_written():
    authority = Authority("system:serviceaccount:team-b:default may not delete Secrets")
    r, p, rec = make(authority=authority)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.SKIPPED
    assert rep.ending.stuck is not None
    assert rep.ending.stuck is plan.Stuck.OUTSIDE_AUTHORITY
    assert "may not delete Secrets" in (rep.ending.detail or "")
    assert p.kinds() == ["list"] and rec.records == []


def test_a_release_renamed_while_held_is_relinquished_with_nothing_deleted():
    p = Prims()
    renamed = held(rv="102", spec_extra={"releaseName": "other"})
    p.record_answer = (renamed, True)
    r, p, rec = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail == RETARGETED_DETAIL
    assert "delete" not in p.kinds() and p.kinds()[-1] == "relinquish"


@pytest.mark.parametrize("field,value", [("targetNamespace", "apps"),
                                         ("storageNamespace", "elsewhere"),
                                         ("kubeConfig", {"secretRef": {"name": "prod"}})])
def test_every_retarget_while_held_deletes_nothing(field, value):
    p = Prims()
    p.record_answer = (held(rv="102", spec_extra={field: value}), True)
    r, p, _ = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.detail == RETARGETED_DETAIL
    assert "delete" not in p.kinds()


def test_a_release_no_longer_stuck_at_the_delete_is_left_as_it_is():
    p = Prims()
    p.record_answer = (held(rv="102", conditions=[ready_condition()]), True)
    r, p, _ = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert "no longer shows the release stuck" in (rep.ending.detail or "")
    assert "delete" not in p.kinds() and p.kinds()[-1] == "relinquish"


def test_a_refusal_at_the_delete_defers_with_the_reason():
    class Flip(Authority):
        def refusal(self, hr_):
            self.asked += 1
            return "" if self.asked == 1 else "the tenant lost its role"

    r, p, _ = make(authority=Flip())
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.SKIPPED
    assert rep.ending.stuck is not None
    assert rep.ending.stuck is plan.Stuck.OUTSIDE_AUTHORITY
    assert "delete" not in p.kinds()


def test_a_dry_run_plans_on_the_first_decision():
    claimants = Claimants()
    r, p, _ = make(dry_run=True, claimants=claimants)
    rep = r.run(stuck(), None)
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert claimants.asked == [None]


# -- the one-shot verbs' LIST --------------------------------------------------------------


def claimant(name: str, namespace: str, **spec) -> dict:
    return hr(name, namespace, spec_extra=spec)


OWNER = claimant("shared", "owner")
COPY = claimant("copy", "team-b", releaseName="shared", storageNamespace="owner")


class Lister:
    """``Kube.list_hrs``: cluster-wide answers in turn, or a 403 there."""

    def __init__(self, answers: list[list[dict]], *, forbidden: bool = False,
                 by_namespace: dict | None = None):
        self.answers, self.forbidden = list(answers), forbidden
        self.by_namespace = by_namespace or {}
        self.calls: list[str | None] = []

    def list_hrs(self, namespace, selector):
        self.calls.append(namespace)
        if namespace is None:
            if self.forbidden:
                raise KubeError(403, "Forbidden", "cannot list helmreleases at the cluster scope")
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if namespace in self.by_namespace and isinstance(self.by_namespace[namespace],
                                                         Exception):
            raise self.by_namespace[namespace]
        return self.by_namespace.get(namespace, [])


def test_the_first_check_lists_once_per_run_and_the_delete_check_lists_again():
    kube = Lister([[OWNER], [OWNER, COPY]])
    listed = ListedClaimants(kube)  # type: ignore[arg-type]
    assert listed.others(OWNER) == ()
    assert listed.others(OWNER) == ()            # the run's one LIST, kept
    assert listed.others(OWNER, after="7") == ("team-b/copy",)  # fresh: the copy is seen
    assert kube.calls == [None, None]
    assert listed.others(COPY) == ("owner/shared",)   # from the kept LIST, no third
    assert kube.calls == [None, None]
    assert listed.warning == ""


def test_serve_keeps_a_list_only_briefly_so_a_later_claimant_is_seen_before_any_write():
    now = [0.0]
    kube = Lister([[OWNER], [OWNER, COPY]])
    listed = ListedClaimants(kube, keep=30, clock=lambda: now[0])  # type: ignore[arg-type]
    assert listed.others(OWNER) == ()
    now[0] = 29.0
    assert listed.others(OWNER) == () and kube.calls == [None]
    now[0] = 31.0
    assert listed.others(OWNER) == ("team-b/copy",)     # listed anew before the next write
    assert kube.calls == [None, None]


def test_the_narrow_view_is_said_once_as_soon_as_it_is_known():
    said: list[str] = []
    kube = Lister([], forbidden=True, by_namespace={"team-b": [COPY], "owner": [OWNER]})
    listed = ListedClaimants(kube, on_warning=said.append)  # type: ignore[arg-type]
    listed.others(COPY)
    assert len(said) == 1 and said[0].startswith("cannot list HelmReleases in all namespaces")
    listed.others(COPY, after="9")
    assert len(said) == 1


def test_a_seeded_run_sends_no_list_before_the_delete():
    kube = Lister([[OWNER]])
    listed = ListedClaimants(kube)  # type: ignore[arg-type]
    listed.seed([OWNER, COPY])
    assert listed.others(COPY) == ("owner/shared",)
    assert kube.calls == []


def test_a_refused_cluster_list_looks_in_the_releases_own_and_storage_namespaces_and_warns():
    kube = Lister([], forbidden=True, by_namespace={"team-b": [COPY], "owner": [OWNER]})
    listed = ListedClaimants(kube)  # type: ignore[arg-type]
    assert listed.others(COPY) == ("owner/shared",)
    assert kube.calls == [None, "team-b", "owner"]
    assert "cannot list HelmReleases in all namespaces" in listed.warning
    listed.others(COPY)                           # a narrow answer is never kept for the run
    assert kube.calls.count(None) == 2


def test_a_refusal_in_the_namespaces_too_is_the_callers_error():
    kube = Lister([], forbidden=True,
                  by_namespace={"owner": KubeError(403, "Forbidden", "no")})
    with pytest.raises(KubeError):
        ListedClaimants(kube).others(OWNER)  # type: ignore[arg-type]


def test_any_other_error_of_the_cluster_list_is_the_callers_error():
    class Down(Lister):
        def list_hrs(self, namespace, selector):
            raise KubeError(500, "InternalError", "etcd")

    listed = ListedClaimants(Down([]))  # type: ignore[arg-type]
    with pytest.raises(KubeError):
        listed.others(OWNER)
    assert listed.warning == ""


# -- serve's watch index -------------------------------------------------------------------


def watcher(scope: Scope | None = None) -> Watcher:
    return Watcher(object(), WorkQueue(), scope or Scope(), resync_period=3600)  # type: ignore[arg-type]


def test_serve_keeps_the_index_only_when_it_sees_every_helmrelease():
    assert watcher().claims is not None
    assert watcher(Scope(namespace="apps")).claims is None
    narrow = watcher(Scope(namespace="apps"))
    with pytest.raises(KubeError):
        narrow.others(OWNER)


def test_the_index_answers_once_synced_and_follows_the_events():
    w = watcher()
    with pytest.raises(KubeError) as not_yet:
        w.others(OWNER, timeout=0.01)            # before the first sync: cannot tell
    assert not_yet.value.reason == "Timeout"
    w.claims.put(OWNER)  # type: ignore[union-attr]
    w.synced.set()
    w._moved("10")
    assert w.others(OWNER) == ()
    w._seen(copy.deepcopy(COPY))
    assert w.others(OWNER) == ("team-b/copy",)
    w._seen(copy.deepcopy(COPY), deleted=True)
    assert w.others(OWNER) == ()


def test_the_check_at_the_delete_waits_until_the_stream_has_passed_the_record():
    w = watcher()
    w.claims.put(OWNER)  # type: ignore[union-attr]
    w.synced.set()
    w._moved("10")
    with pytest.raises(KubeError):
        w.others(OWNER, after="12", timeout=0.01)   # the stream has not reached it

    answer: list = []
    asking = threading.Thread(target=lambda: answer.append(w.others(OWNER, after="12",
                                                                    timeout=30)))
    asking.start()
    w._seen(copy.deepcopy(COPY))                  # created before the record's write …
    w._moved("12")                                # … and the stream passes the record
    asking.join(timeout=30)
    assert answer == [("team-b/copy",)]


# -- the tenant's authority ----------------------------------------------------------------


def test_the_tenant_is_the_service_account_helm_controller_impersonates():
    plain = hr("app", "team-b")
    named = hr("app", "team-b", spec_extra={"serviceAccountName": "deployer"})
    assert tenant_user(plain, None) is None
    assert tenant_user(plain, "default") == "system:serviceaccount:team-b:default"
    assert tenant_user(named, "default") == "system:serviceaccount:team-b:deployer"
    assert tenant_user(named, None) == "system:serviceaccount:team-b:deployer"


def test_the_review_asks_whether_the_service_account_may_delete_secrets_there():
    body = review("system:serviceaccount:team-b:default", "owner")
    assert body["spec"]["user"] == "system:serviceaccount:team-b:default"
    assert body["spec"]["groups"] == ["system:serviceaccounts",
                                      "system:serviceaccounts:team-b", "system:authenticated"]
    assert body["spec"]["resourceAttributes"] == {
        "namespace": "owner", "verb": "delete", "group": "", "version": "v1",
        "resource": "secrets"}


class Reviews:
    def __init__(self, allowed: bool | list[bool]):
        self.allowed = allowed if isinstance(allowed, list) else [allowed]
        self.sent: list[dict] = []

    def request(self, verb, method, path, body=None, content_type=None):
        assert (verb, method, path) == ("CREATE", "POST", SAR_PATH)
        self.sent.append(body)
        allowed = self.allowed.pop(0) if len(self.allowed) > 1 else self.allowed[0]
        return {"status": {"allowed": allowed}}


def test_an_allowed_tenant_is_no_refusal_and_the_answer_is_kept_for_a_while():
    now = [1000.0]
    kube = Reviews([True, False])
    auth = TenantAuthority(kube, "default", ttl=300, clock=lambda: now[0])  # type: ignore[arg-type]
    b = hr("app", "team-b")
    assert auth.refusal(b) == ""
    now[0] += 299
    assert auth.refusal(b) == ""
    assert len(kube.sent) == 1                    # one review per identity and namespace
    now[0] += 2
    assert "may not delete Secrets in namespace team-b" in auth.refusal(b)
    assert len(kube.sent) == 2


def test_a_refused_tenant_is_named_with_the_storage_namespace():
    auth = TenantAuthority(Reviews(False), "default")  # type: ignore[arg-type]
    copy_ = hr("copy", "team-a", spec_extra={"storageNamespace": "team-b",
                                              "releaseName": "app"})
    assert auth.refusal(copy_) == (
        "system:serviceaccount:team-a:default, as whom helm-controller acts for this "
        "HelmRelease, may not delete Secrets in namespace team-b")


def test_without_a_tenant_identity_or_for_remote_storage_no_review_is_sent():
    kube = Reviews(False)
    assert TenantAuthority(kube).refusal(hr("app", "team-b")) == ""  # type: ignore[arg-type]
    remote = hr("app", "team-b", spec_extra={"kubeConfig": {"secretRef": {"name": "prod"}}})
    assert TenantAuthority(kube, "default").refusal(remote) == ""  # type: ignore[arg-type]
    assert kube.sent == []


# -- status: the states a held release shows -----------------------------------------------


class Store:
    """The storage client ``status`` lists: the stuck release's two revisions."""

    def list_secrets(self, namespace, selector):
        return copy.deepcopy(STORAGE)


class Remotes:
    def storage_kube(self, hr_):
        return Store()


def status_row(held_options):
    now = dt.datetime.now(dt.timezone.utc)
    return status._row(Remotes(), stuck(), "stuck", now, None, held_options)  # type: ignore[arg-type]


def test_status_shows_claimed_twice_naming_the_other_claimants():
    row = status_row(Options(claimants=Claimants(before=["team-b/copy"])))
    assert row.state == "claimed-twice"
    assert row.claimants == ["team-b/copy"]
    assert "team-b/copy" in row.note


def test_status_shows_outside_authority_with_the_refusal():
    row = status_row(Options(authority=Authority("the tenant may not delete Secrets")))
    assert row.state == "outside-authority"
    assert "the tenant may not delete Secrets" in row.note
    assert row.claimants == []


def test_status_of_a_release_held_by_nobody_else_stays_stuck():
    row = status_row(Options(claimants=Claimants(), authority=Authority()))
    assert row.state == "stuck" and row.revision == 2
    assert status_row(None).state == "stuck"


def test_status_shows_given_up_and_backing_off_with_the_budget():
    """The recovery budget (issue 57) as status shows it: the record's own limit and wait."""
    from kubectl_flux_plunger.core import budget
    from kubectl_flux_plunger.core import constants as C

    now = dt.datetime.now(dt.timezone.utc)

    def row_after(recoveries: int, at: dt.datetime) -> status.Row:
        release = stuck()
        release["metadata"].setdefault("annotations", {})[C.BUDGET_ANNOTATION] = (
            budget.record_value(release, recoveries, at, 3, 30.0))
        release["metadata"]["annotations"][C.PROCESSED_ANNOTATION] = "3"
        return status._row(Remotes(), release, "stuck", now, None, None)  # type: ignore[arg-type]

    given_up = row_after(3, now - dt.timedelta(hours=1))
    assert given_up.state == "given-up"
    assert given_up.note.startswith("given up: 3 failed recoveries in a row (limit 3)")
    assert given_up.budget is not None
    assert (given_up.budget["state"], given_up.budget["failedRecoveries"]) == ("given-up", 3)
    backing_off = row_after(1, now)
    assert backing_off.state == "backing-off"
    assert backing_off.budget is not None and backing_off.budget["nextRecovery"] is not None
    due = row_after(1, now - dt.timedelta(minutes=5))
    assert due.state == "stuck" and due.budget is not None and due.budget["state"] == "due"
    assert status_row(None).budget is None


def test_status_says_when_it_cannot_tell_who_else_holds_the_release():
    row = status_row(Options(claimants=Claimants(fail=KubeError(403, "Forbidden", "no list"))))
    assert row.state == "stuck" and row.revision == 2 and row.helm_status == "uninstalling"
    assert row.note.endswith("; cannot tell who else holds the release: no list"), row.note


def test_status_of_unreadable_storage_says_so():
    class Down:
        def storage_kube(self, hr_):
            class Store:
                def list_secrets(self, namespace, selector):
                    raise KubeError(500, "InternalError", "etcd")
            return Store()

    now = dt.datetime.now(dt.timezone.utc)
    row = status._row(Down(), stuck(), "stuck", now, None, Options())  # type: ignore[arg-type]
    assert row.helm_status == "<unreadable>" and row.note == "cannot list Helm storage: etcd"
