"""The recovery sequence (executor/recover.Recover) step by step, on fakes of what it holds:
the write primitives, the handshake, the watch, the Event recorder (issue 40: the mutants of
its exits — every refusal, failure and race says what it did and what is left, and every
exit after the acquire relinquishes once).  The same sequence against the real apiserver is
tests/apiserver/test_saga_safety.py and test_recovery.py; these pin what those cannot reach
in-process quickly: a failing backup, a Secret rewritten twice, a lost apply, a remote
cluster's name in every word."""
from __future__ import annotations

import copy

import pytest

from kubectl_flux_plunger.core import constants as C
from kubectl_flux_plunger.core import plan, storage
from kubectl_flux_plunger.executor import recover as recover_mod
from kubectl_flux_plunger.executor.backup import BackupError
from kubectl_flux_plunger.executor.outcome import (
    TAKEN_DETAIL,
    TERMINATING_DETAIL,
    Options,
    Report,
    Result,
    Stopped,
)
from kubectl_flux_plunger.executor.recover import REREAD_WAIT, Recover
from kubectl_flux_plunger.kube import KubeError
from kubectl_flux_plunger.kube.remote_kubeconfig import RemoteError, Unsupported

from .builders import OURS, hr, stuck_condition

pytestmark = pytest.mark.unit

SECRET = "sh.helm.release.v1.demo.v2"


def secret(revision: int, status: str, uid: str, rv: str) -> dict:
    s = storage.make_storage_secret("demo", "default", revision, status)
    s["metadata"].update(uid=uid, resourceVersion=rv)
    return s


STORAGE = [secret(1, "superseded", "suid-1", "11"), secret(2, "uninstalling", "suid-2", "12")]


def stuck() -> dict:
    """The fresh read that decided: stuck with "has no deployed releases"."""
    return hr(generation=2, observed_generation=2, last_attempted_generation=2, rv="100",
              conditions=[stuck_condition(2)])


def held(**kw: object) -> dict:
    """The release as our acquire left it: suspended by us, fenced, acknowledged — its
    status as helm-controller left it (a suspended reconcile writes no condition)."""
    args: dict = dict(suspend=True, managed=[OURS], finalizers=[C.FENCE], generation=2,
                      observed_generation=2, last_attempted_generation=2, rv="101",
                      conditions=[stuck_condition(2)])
    args.update(kw)
    return hr(**args)


def lifted() -> dict:
    return hr(generation=3, rv="103")


class Prims:
    """The write primitives: each answer scripted, each call recorded."""

    def __init__(self, *, storage_answers=None, where: str = ""):
        self.storage_answers = list(storage_answers or [STORAGE])
        self.where = where
        self.calls: list[tuple] = []
        self.events: list[str] = []
        self.acquire_answer: object = held()
        self.fresh_answers: list[object] = []
        self.record_answer: object = None  # None: (its argument with rv 102, True)
        self.delete_answers: list[object] = [""]
        self.relinquish_answer: object = lifted()
        self.remove_fence_answer: object = None

    @staticmethod
    def _answer(answer):
        if isinstance(answer, BaseException):
            raise answer
        return copy.deepcopy(answer)

    def list_storage(self, hr_):
        self.calls.append(("list", hr_["metadata"]["resourceVersion"]))
        answer = self.storage_answers.pop(0) if len(self.storage_answers) > 1 else \
            self.storage_answers[0]
        return self._answer(answer)

    def acquire(self, hr_, revision, *, first, reread):
        self.calls.append(("acquire", hr_["metadata"]["resourceVersion"], revision,
                           first["metadata"]["resourceVersion"], reread))
        return self._answer(self.acquire_answer)

    def fresh(self, hr_):
        self.calls.append(("fresh", hr_["metadata"]["resourceVersion"]))
        return self._answer(self.fresh_answers.pop(0) if self.fresh_answers else hr_)

    def event(self, hr_, spec):
        assert hr_["metadata"]["name"] == "demo"   # on the release itself
        self.events.append(spec.reason)

    def record(self, current, revision, standing=None):
        self.calls.append(("record", current["metadata"]["resourceVersion"], revision))
        if self.record_answer is None:
            out = copy.deepcopy(current)
            out["metadata"]["resourceVersion"] = "102"
            return out, True
        return self._answer(self.record_answer)

    def storage_where(self, hr_):
        assert hr_ is not None and hr_["metadata"]["name"] == "demo"
        return self.where

    def delete_revision(self, current, rev):
        assert current is not None and current["metadata"]["name"] == "demo"
        self.calls.append(("delete", current["metadata"]["resourceVersion"], rev.name, rev.uid,
                           rev.resource_version))
        return self._answer(self.delete_answers.pop(0))

    def relinquish(self, current):
        self.calls.append(("relinquish", current["metadata"]["resourceVersion"]))
        return self._answer(self.relinquish_answer)

    def remove_fence(self, fresh):
        self.calls.append(("remove_fence", fresh["metadata"]["resourceVersion"]))
        return self._answer(self.remove_fence_answer)

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]


class Handshake:
    def __init__(self, answer: object = "held"):
        self.answer = answer
        self.seen: list[tuple] = []

    def await_handshake(self, held_, watch):
        self.seen.append((held_["metadata"]["resourceVersion"], watch))
        return held_ if self.answer == "held" else copy.deepcopy(self.answer)


class Recorder:
    def __init__(self):
        self.records: list[tuple] = []

    def record(self, hr_, reason, type_, message, metadata=None):
        self.records.append((reason, type_, message, metadata))


class Kube:
    def __init__(self, dry_run: bool = False):
        self.dry_run = dry_run


class Watch:
    """A ReleaseWatch: what settle() and newer_than() give, and what they were asked."""

    def __init__(self, settled: object = "first", newer: object = None, latest: object = "x"):
        self.settled = settled
        self.newer = newer
        self.latest = latest
        self.asked: list[tuple] = []

    def settle(self):
        return stuck() if self.settled == "first" else self.settled

    def newer_than(self, current, wait):
        self.asked.append((current["metadata"]["resourceVersion"], wait))
        return self.newer


def make(prims: Prims | None = None, *, handshake: Handshake | None = None,
         dry_run: bool = False, stop=lambda: False, **opts: object):
    p = prims or Prims()
    rec = Recorder()
    r = Recover(Kube(dry_run), p, handshake or Handshake(), rec, Options(**opts), stop)
    return r, p, rec


def run(r: Recover, watch: Watch | None = None) -> Report:
    return r.run(stuck(), watch if watch is not None else Watch())


# -- the whole sequence ---------------------------------------------------------------------


def test_a_recovery_deletes_the_judged_revision_between_acquire_and_one_relinquish():
    r, p, rec = make()
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert not rep.ending.failed
    assert rep.ending.detail == ("deleted revision 2 (uninstalling) of release demo; "
                                 "helm-controller will reconcile it again")
    assert rep.steps == ("suspended and fenced", "recorded revision 2",
                         f"deleted default/{SECRET}", "lifted the suspension")
    assert rep.revision == 2 and rep.backup == ""
    assert p.kinds() == ["list", "acquire", "record", "delete", "relinquish"]
    # the delete goes out on the state the record answered, with the judged Secret's uid/rv
    assert p.calls[3] == ("delete", "102", SECRET, "suid-2", "12")
    assert p.calls[1][1:4] == ("100", 2, "100")
    assert rep.wrote is not None and rep.wrote["metadata"]["resourceVersion"] == "103"
    assert [x[:2] for x in rec.records] == [("Recovered", "Normal")]
    _, _, message, metadata = rec.records[0]
    assert message == f"{plan.RECOVERED.message}: revision 2, Secret default/{SECRET}"
    assert metadata == {"deletedRevision": "2", "storageSecret": f"default/{SECRET}",
                        "token": "suid-2"}


def test_a_backup_is_named_in_the_report_the_steps_the_words_and_the_event():
    p = Prims()
    p.delete_answers = ["/backups/demo-v2.yaml"]
    r, p, rec = make(p)
    rep = run(r)
    assert rep.backup == "/backups/demo-v2.yaml"
    assert "saved to /backups/demo-v2.yaml" in rep.steps
    assert rep.steps.index("saved to /backups/demo-v2.yaml") < rep.steps.index(
        f"deleted default/{SECRET}")
    assert rep.ending is not None
    assert rep.ending.detail == ("deleted revision 2 (uninstalling) of release demo "
                                 "(backup: /backups/demo-v2.yaml); helm-controller will "
                                 "reconcile it again")
    assert rec.records[0][2].endswith(f"Secret default/{SECRET}; backup: /backups/demo-v2.yaml")


def test_remote_storage_is_named_with_its_cluster_everywhere():
    where = " in cluster https://remote.example:6443"
    r, p, rec = make(Prims(where=where))
    rep = run(r)
    assert rep.ending is not None
    assert rep.ending.detail == (f"deleted revision 2 (uninstalling) of release demo{where}; "
                                 "helm-controller will reconcile it again")
    assert f"deleted default/{SECRET}{where}" in rep.steps
    assert rec.records[0][2] == f"{plan.RECOVERED.message}: revision 2, Secret default/{SECRET}{where}"


def test_the_events_token_falls_back_to_the_secrets_name_and_resource_version():
    p = Prims(storage_answers=[[secret(1, "superseded", "u1", "11"),
                                secret(2, "uninstalling", "", "12")]])
    r, p, rec = make(p)
    run(r)
    assert rec.records[0][3]["token"] == f"default/{SECRET}/12"


def test_a_server_side_dry_run_records_no_event():
    r, p, rec = make(dry_run=True)
    rep = r.run(stuck(), None)
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert rec.records == []


# -- the delete: a backup that fails, a Secret that changed ----------------------------------


def test_a_failing_backup_deletes_nothing_fails_and_still_relinquishes():
    p = Prims()
    p.delete_answers = [BackupError("cannot write /backups: disk full")]
    r, p, rec = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.FAILED and rep.ending.failed
    assert rep.ending.detail == "cannot write /backups: disk full; nothing deleted"
    assert p.kinds()[-1] == "relinquish" and rec.records == []


def test_a_secret_rewritten_once_is_judged_again_and_deleted_with_its_new_version():
    p = Prims(storage_answers=[STORAGE, [secret(1, "superseded", "suid-1", "11"),
                                         secret(2, "uninstalling", "suid-2", "13")]])
    p.delete_answers = [KubeError(409, "Conflict", "the object has been modified"), ""]
    r, p, rec = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    deletes = [c for c in p.calls if c[0] == "delete"]
    assert [d[4] for d in deletes] == ["12", "13"]
    assert p.kinds().count("list") == 2
    assert rec.records[0][3]["token"] == "suid-2"


def test_a_secret_rewritten_twice_is_left_and_the_recovery_deferred():
    conflict = KubeError(409, "Conflict", "the object has been modified")
    p = Prims()
    p.delete_answers = [conflict, conflict]
    r, p, rec = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail is not None and rep.ending.detail.startswith(
        f"Secret default/{SECRET} changed after it was judged and was not deleted: ")
    assert [c[0] for c in p.calls].count("delete") == 2
    assert p.kinds()[-1] == "relinquish" and rec.records == []


def test_a_secret_gone_before_its_delete_defers():
    p = Prims(storage_answers=[STORAGE, [secret(1, "superseded", "suid-1", "11")]])
    p.delete_answers = [KubeError(404, "NotFound", "gone")]
    r, p, rec = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert p.kinds().count("delete") == 1


def test_a_secret_helm_marked_deployed_meanwhile_is_skipped_not_deleted():
    p = Prims(storage_answers=[STORAGE, [secret(1, "superseded", "suid-1", "11"),
                                         secret(2, "deployed", "suid-2", "13")]])
    p.delete_answers = [KubeError(409, "Conflict", "modified")]
    r, p, rec = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.SKIPPED
    assert p.kinds().count("delete") == 1


def test_a_secret_recreated_with_another_uid_is_not_deleted():
    p = Prims(storage_answers=[STORAGE, [secret(1, "superseded", "suid-1", "11"),
                                         secret(2, "uninstalling", "suid-NEW", "13")]])
    p.delete_answers = [KubeError(409, "Conflict", "modified"), ""]
    r, p, rec = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert p.kinds().count("delete") == 1


def test_a_delete_failing_otherwise_interrupts_the_recovery_and_relinquishes():
    p = Prims()
    p.delete_answers = [KubeError(500, "InternalError", "etcd timeout")]
    r, p, rec = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.FAILED
    assert rep.ending.detail == "recovery interrupted: etcd timeout"
    assert p.kinds()[-1] == "relinquish"


# -- before the acquire: the choice, the stop flag, a release deleted ------------------------


def test_remote_storage_flux_plunger_does_not_follow_is_skipped_as_left_stuck():
    r, p, _ = make(Prims(storage_answers=[Unsupported("spec.kubeConfig.configMapRef")]))
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.SKIPPED
    assert rep.ending.detail == "spec.kubeConfig.configMapRef"
    assert rep.ending.stuck is plan.Stuck.REMOTE_UNSUPPORTED
    assert p.kinds() == ["list"]


def test_a_remote_cluster_that_cannot_be_used_fails():
    r, p, _ = make(Prims(storage_answers=[RemoteError("connection refused")]))
    rep = run(r)
    assert rep.ending is not None and rep.ending.failed
    assert rep.ending.detail == "cannot use the remote cluster: connection refused"
    assert p.kinds() == ["list"]


def test_storage_that_cannot_be_listed_fails_naming_its_namespace():
    r, p, _ = make(Prims(storage_answers=[KubeError(403, "Forbidden", "secrets is forbidden")]))
    rep = run(r)
    assert rep.ending is not None and rep.ending.failed
    assert rep.ending.detail == ("cannot list Helm storage in namespace default: "
                                 "secrets is forbidden")


def test_storage_that_may_not_be_touched_ends_with_its_verdict_and_the_newest_revision():
    r, p, _ = make(Prims(storage_answers=[[secret(1, "superseded", "u1", "11"),
                                           secret(2, "deployed", "u2", "12")]]))
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.SKIPPED
    assert rep.revision == 2
    assert p.kinds() == ["list"]


def test_no_storage_at_all_is_left_stuck_without_a_revision():
    r, p, _ = make(Prims(storage_answers=[[]]))
    rep = run(r)
    assert rep.ending is not None and rep.ending.stuck is plan.Stuck.NO_STORAGE
    assert rep.revision is None


def test_a_stop_before_the_acquire_starts_nothing():
    r, p, rec = make(stop=lambda: True)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail == "shutting down; recovery not started"
    assert rep.revision == 2
    assert p.kinds() == ["list"]


def test_a_release_deleted_before_the_acquire_keeps_its_storage():
    r, p, _ = make()
    rep = run(r, Watch(settled=None))
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail == ("the release was deleted before it could be suspended; "
                                 "storage left intact")
    assert p.kinds() == ["list"]


def test_the_acquire_goes_out_on_the_watchs_settled_state_with_a_reread_from_the_watch():
    w = Watch()
    r, p, _ = make()
    decided = stuck()
    decided["metadata"]["resourceVersion"] = "99"
    r.run(decided, w)
    _, decided, revision, first, reread = p.calls[1]
    assert (decided, revision, first) == ("99", 2, "100")
    assert callable(reread)


def test_without_a_watch_one_is_opened_for_the_recovery_and_closed(monkeypatch):
    opened = []

    class Own(Watch):
        def __init__(self, kube, hr_, timeout):
            super().__init__()
            self.args = (kube, hr_["metadata"]["resourceVersion"], timeout)
            self.closed = False
            opened.append(self)

        def close(self):
            self.closed = True

    monkeypatch.setattr(recover_mod, "ReleaseWatch", Own)
    hs = Handshake()
    r, p, _ = make(handshake=hs, handshake_timeout=7, handshake_window=1.0)
    rep = r.run(stuck(), None)
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert len(opened) == 1 and opened[0].closed
    assert hs.seen == [("101", opened[0])]   # the handshake waits on that watch
    assert callable(p.calls[1][4])           # and the acquire rereads from it
    assert opened[0].args[0] is r.kube and opened[0].args[1] == "100"
    assert opened[0].args[2] == recover_mod.watch_timeout(r.opt)


# -- the acquire ----------------------------------------------------------------------------


def test_an_acquire_taken_by_another_writer_defers_with_an_event_and_writes_nothing_more():
    p = Prims()
    p.acquire_answer = None
    r, p, _ = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail == ("spec.suspend was taken by another manager or the release "
                                 "began terminating between read and write")
    assert p.events == ["RecoveryDeferred"]
    assert p.kinds() == ["list", "acquire"]
    assert rep.steps == ()


def test_an_acquire_whose_answer_was_lost_is_relinquished_on_a_fresh_read():
    p = Prims()
    p.acquire_answer = KubeError(0, "Timeout", "read timed out")
    p.fresh_answers = [held(rv="105")]
    r, p, _ = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.failed
    assert rep.ending.detail == "could not suspend the release: read timed out"
    assert p.kinds() == ["list", "acquire", "fresh", "relinquish"]
    assert p.calls[-1] == ("relinquish", "105")
    assert rep.steps == ("lifted the suspension",)


def test_an_acquire_lost_and_a_release_that_cannot_be_read_says_what_may_be_left():
    p = Prims()
    p.acquire_answer = KubeError(0, "Timeout", "read timed out")
    p.fresh_answers = [KubeError(503, "ServiceUnavailable", "apiserver down")]
    r, p, _ = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.failed
    assert rep.ending.detail == (
        "could not suspend the release: read timed out; the release could not be read again "
        "(apiserver down), so it may be left suspended and fenced: it may be left suspended "
        "and fenced by flux-plunger: `kubectl flux-plunger resume-owned -n default demo` "
        "lifts it")
    assert "relinquish" not in p.kinds()


# -- while holding: the handshake, the record --------------------------------------------------


def test_the_handshake_waits_on_the_held_state_and_the_watch():
    w = Watch()
    hs = Handshake()
    r, p, _ = make(handshake=hs)
    r.run(stuck(), w)
    assert hs.seen == [("101", w)]


@pytest.mark.parametrize("answer", [None, "terminating"])
def test_a_release_gone_or_terminating_at_the_handshake_is_let_go_with_its_storage(answer):
    if answer == "terminating":
        answer = held(deletion_timestamp="2026-01-01T00:00:00Z")
    r, p, rec = make(handshake=Handshake(answer))
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail == TERMINATING_DETAIL
    assert "delete" not in p.kinds() and "record" not in p.kinds()


def test_a_suspension_taken_during_the_handshake_stops_before_the_record():
    taken = hr(suspend=False, finalizers=[C.FENCE], generation=3, observed_generation=3, rv="104")
    r, p, _ = make(handshake=Handshake(taken))
    rep = run(r)
    assert rep.ending is not None and rep.ending.detail == TAKEN_DETAIL
    assert "record" not in p.kinds()


def test_an_unacknowledged_suspension_leaves_storage_intact_naming_the_timeout():
    lagging = held(observed_generation=1, last_attempted_generation=1)
    r, p, _ = make(handshake=Handshake(lagging), handshake_timeout=42)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail == ("helm-controller did not acknowledge the suspension within "
                                 "42s; storage left intact")
    assert "record" not in p.kinds() and "delete" not in p.kinds()
    assert p.kinds()[-1] == "relinquish"


def test_a_dry_run_goes_on_past_a_lagging_or_unowned_handshake():
    lagging = hr(suspend=None, generation=2, observed_generation=1, rv="101")
    r, p, _ = make(handshake=Handshake(lagging), dry_run=True)
    rep = r.run(stuck(), None)
    assert rep.ending is not None and rep.ending.result is Result.RECOVERED
    assert "delete" in p.kinds()


def test_the_record_is_written_on_the_state_the_handshake_saw():
    r, p, _ = make(handshake=Handshake(held(rv="110")))
    run(r)
    assert ("record", "110", 2) in p.calls


@pytest.mark.parametrize("answer, detail", [
    ((None, False), TERMINATING_DETAIL),
    ((held(deletion_timestamp="2026-01-01T00:00:00Z", rv="120"), True), TERMINATING_DETAIL),
    ((held(rv="120"), False), "the release changed under us during recovery (another writer "
                              "took spec.suspend or changed its spec); storage left intact"),
])
def test_a_record_that_lost_the_release_stops_before_the_delete(answer, detail):
    p = Prims()
    p.record_answer = answer
    r, p, _ = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail == detail
    assert "delete" not in p.kinds()


def test_a_stop_after_the_record_aborts_before_the_delete():
    asked = []

    def stop():
        asked.append(1)
        return len(asked) > 1   # not before the acquire; after the record

    r, p, _ = make(stop=stop)
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail == "shutting down; recovery aborted before the delete"
    assert rep.steps[:2] == ("suspended and fenced", "recorded revision 2")
    assert "delete" not in p.kinds() and p.kinds()[-1] == "relinquish"


def test_a_suspension_no_longer_ours_after_the_record_stops_before_the_delete():
    p = Prims()
    p.record_answer = (hr(suspend=True, finalizers=[C.FENCE], generation=2,
                          observed_generation=2, rv="120"), True)
    r, p, _ = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.detail == TAKEN_DETAIL
    assert "delete" not in p.kinds()


def test_a_stop_raised_while_holding_aborts_and_relinquishes():
    class Stopping(Handshake):
        def await_handshake(self, held_, watch):
            raise Stopped()

    r, p, _ = make(handshake=Stopping())
    rep = run(r)
    assert rep.ending is not None and rep.ending.result is Result.DEFERRED
    assert rep.ending.detail == "shutting down; recovery aborted before the delete"
    assert p.kinds()[-1] == "relinquish"


# -- the final relinquish ---------------------------------------------------------------------


def test_a_relinquish_that_fails_says_what_is_left_and_warns():
    p = Prims()
    p.relinquish_answer = KubeError(500, "InternalError", "etcd down")
    r, p, _ = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.failed
    assert rep.ending.detail is not None and rep.ending.detail.endswith(
        "; but could not lift our suspension (etcd down); it may be left suspended and "
        "fenced by flux-plunger: `kubectl flux-plunger resume-owned -n default demo` lifts it")
    assert p.events == ["UnsuspendFailed"]


def test_a_relinquish_that_lost_a_race_warns_no_one():
    p = Prims()
    p.relinquish_answer = KubeError(409, "Conflict", "modified")
    r, p, _ = make(p)
    rep = run(r)
    assert rep.ending is not None and rep.ending.failed
    assert p.events == []


def test_a_suspension_taken_meanwhile_is_not_lifted_but_our_fence_on_a_live_release_goes():
    taken = hr(suspend=False, finalizers=[C.FENCE], generation=3, observed_generation=3,
               rv="104")
    p = Prims()
    p.fresh_answers = [taken]
    p.remove_fence_answer = hr(rv="105")
    r, p, _ = make(p, handshake=Handshake(taken))
    rep = run(r)
    assert "relinquish" not in p.kinds()
    assert p.kinds()[-2:] == ["fresh", "remove_fence"]
    assert rep.steps[-1] == "removed the fence"


def test_nothing_of_ours_left_ends_the_report_as_it_was():
    taken = hr(suspend=False, generation=3, observed_generation=3, rv="104")
    p = Prims()
    p.fresh_answers = [taken]
    r, p, _ = make(p, handshake=Handshake(taken))
    rep = run(r)
    assert rep.steps == ("suspended and fenced",)
    assert rep.ending is not None and rep.ending.detail == TAKEN_DETAIL
    assert "remove_fence" not in p.kinds()


# -- the reread the acquire takes after a 409 --------------------------------------------------


def test_without_a_watch_the_acquire_rereads_by_itself():
    r, _, _ = make()
    assert r._newer(None) is None


def test_the_reread_takes_the_streams_newer_state_waiting_only_when_something_changed():
    newer = held(rv="130")
    w = Watch(newer=newer)
    r, p, _ = make()
    reread = r._newer(w)
    assert reread is not None
    assert reread(held(rv="120"), True)["metadata"]["resourceVersion"] == "130"
    assert reread(held(rv="121"), False)["metadata"]["resourceVersion"] == "130"
    assert w.asked == [("120", REREAD_WAIT), ("121", 0.0)]
    assert REREAD_WAIT > 0


def test_the_reread_without_news_is_none_when_deleted_a_get_when_changed_else_the_same():
    r, p, _ = make()
    assert r._newer(Watch(newer=None, latest=None))(held(rv="120"), True) is None
    w = Watch(newer=None, latest="x")
    p.fresh_answers = [held(rv="140")]
    reread = r._newer(w)
    assert reread(held(rv="120"), True)["metadata"]["resourceVersion"] == "140"
    assert p.calls[-1] == ("fresh", "120")
    same = held(rv="121")
    assert reread(same, False) is same
