"""The executor's write primitives (executor/primitives.py) against a fake client that records
the exact requests: each write carries the read that decided it, a 409 re-reads and
re-decides, the retries are bounded by time, and nothing is written on a state it may not
write on (issue 40: the mutants of primitives)."""
from __future__ import annotations

import pytest

from kubectl_flux_plunger.executor.backup import BackupError
from kubectl_flux_plunger.core import constants, plan, storage, writes
from kubectl_flux_plunger.executor import primitives
from kubectl_flux_plunger.executor.outcome import Options
from kubectl_flux_plunger.executor.primitives import Primitives, create_storage_secret
from kubectl_flux_plunger.kube import JSON, Conflict, KubeError
from kubectl_flux_plunger.kube.errors import GENERIC_422, kube_error
from kubectl_flux_plunger.kube.remote import RemoteKube

from .builders import NOW, OURS, hr, ready_condition, stuck_condition

FENCE = constants.FENCE
STUCK = [stuck_condition()]
FOREIGN = ("velero", "Update", True)
MISSING = {"details": {"name": "demo", "kind": "helmreleases"}}


def error(status: int, body: dict | None = None, message: str = "boom") -> KubeError:
    return kube_error(status, "Reason", message, body)


def stale() -> KubeError:
    """A 409 on a stale resourceVersion (the precondition of our read failed)."""
    return error(409, message="the object has been modified")


def manager_conflict() -> KubeError:
    """A server-side apply 409: another manager owns a field we set."""
    return error(409, {"details": {"causes": [{"reason": "FieldManagerConflict"}]}})


class FakeKube:
    """Records every request (name, arguments); answers writes and GETs from scripts, in
    order: an object is returned, an exception raised.  Running out of answers fails the
    test (a request nobody expected)."""

    def __init__(self, *, answers=(), reads=(), dry_run=False):
        self.calls: list[tuple] = []
        self.answers = list(answers)
        self.reads = list(reads)
        self.dry_run = dry_run

    @staticmethod
    def _next(script):
        assert script, "an unexpected request"
        answer = script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def get_hr(self, namespace, name):
        self.calls.append(("get_hr", namespace, name))
        return self._next(self.reads)

    def apply_hr(self, body, *, force=False):
        self.calls.append(("apply_hr", body, force))
        return self._next(self.answers)

    def json_patch_hr(self, namespace, name, ops):
        self.calls.append(("json_patch_hr", namespace, name, ops))
        return self._next(self.answers)

    def merge_patch_hr(self, namespace, name, patch):
        self.calls.append(("merge_patch_hr", namespace, name, patch))
        return self._next(self.answers)

    def list_secrets(self, namespace, label_selector):
        self.calls.append(("list_secrets", namespace, label_selector))
        return self._next(self.answers)

    def delete_secret(self, namespace, name, uid, resource_version=None):
        self.calls.append(("delete_secret", namespace, name, uid, resource_version))
        return self._next(self.answers)

    def request(self, verb, method, path, *, body=None, content_type=None, query=None):
        self.calls.append(("request", verb, method, path, body, content_type, query))
        return self._next(self.answers)

    def writes(self) -> list[tuple]:
        return [call for call in self.calls if call[0] != "get_hr"]


class Remote(RemoteKube):
    """A remote cluster's client without a connection (only ``cluster`` is read)."""

    def __init__(self, fake: FakeKube):  # noqa: D107 - no transport: the fake answers
        self.fake = fake

    @property
    def cluster(self) -> str:
        return "https://remote.example:6443"

    def __getattr__(self, name):
        return getattr(self.fake, name)

    def request(self, *args, **kwargs):
        return self.fake.request(*args, **kwargs)

    def delete_secret(self, *args, **kwargs):
        return self.fake.delete_secret(*args, **kwargs)

    def list_secrets(self, *args, **kwargs):
        return self.fake.list_secrets(*args, **kwargs)


class FakeRemotes:
    def __init__(self, store):
        self.store = store
        self.asked: list[tuple] = []

    def storage_kube(self, hr, *, reuse=False):
        self.asked.append((hr["metadata"]["name"], reuse))
        return self.store


class FakeRecorder:
    def __init__(self):
        self.recorded: list[tuple] = []

    def record(self, hr, reason, type_, message):
        self.recorded.append((hr["metadata"]["name"], reason, type_, message))


class FakeBackup:
    def __init__(self, fail: bool = False):
        self.fail = fail
        self.saved: list[tuple] = []

    def describe(self) -> str:
        return "a fake"

    def save(self, secret, hr, cluster):
        if self.fail:
            raise BackupError("disk full")
        self.saved.append((secret, hr["metadata"]["name"], cluster))
        return "file /b/x.json"


class FakeTime:
    """monotonic() and sleep() of primitives: time passes only by sleeping."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(primitives, "time", fake)
    return fake


def prims(kube, *, store=None, **options) -> Primitives:
    options.setdefault("relinquish_timeout", 30.0)
    options.setdefault("acquire_timeout", 10.0)
    return Primitives(kube, FakeRemotes(store or kube), FakeRecorder(), Options(**options),
                      lambda: NOW)


def stuck(rv: str = "100", **kw) -> dict:
    return hr(suspend=False, conditions=STUCK, rv=rv, **kw)


def suspended_by_us(rv: str = "100", **kw) -> dict:
    return hr(suspend=True, managed=[OURS], finalizers=[FENCE], conditions=STUCK, rv=rv, **kw)


# -- fresh, event, list_storage ----------------------------------------------------------


def test_fresh_reads_the_release_by_its_namespace_and_name():
    newer = stuck(rv="101")
    kube = FakeKube(reads=[newer])
    assert prims(kube).fresh(stuck(namespace="apps")) is newer
    assert kube.calls == [("get_hr", "apps", "demo")]


def test_fresh_is_none_for_a_release_re_created_under_the_same_name_or_gone():
    kube = FakeKube(reads=[stuck(uid="uid-2"), None])
    assert prims(kube).fresh(stuck()) is None
    assert prims(kube).fresh(stuck()) is None


def test_event_records_the_specs_reason_type_and_message_on_the_release():
    p = prims(FakeKube())
    p.event(stuck(), plan.EventSpec("Suspended", "Warning", "held by flux-plunger"))
    assert p.recorder.recorded == [("demo", "Suspended", "Warning", "held by flux-plunger")]


def test_list_storage_lists_the_releases_helm_secrets_in_its_storage_namespace():
    release = stuck(namespace="apps", spec_extra={
        "releaseName": "web", "storageNamespace": "store"})
    kube = FakeKube(answers=[["s1"]])
    assert primitives.list_storage(kube, release) == ["s1"]
    assert kube.calls == [("list_secrets", "store", "owner=helm,name=web")]


def test_the_executors_list_goes_to_the_cluster_that_keeps_the_storage():
    local, remote = FakeKube(), FakeKube(answers=[["s1"]])
    p = prims(local, store=remote)
    assert p.list_storage(stuck()) == ["s1"]
    assert remote.calls == [("list_secrets", "default", "owner=helm,name=demo")]
    assert local.calls == [] and p.remotes.asked == [("demo", False)]


def test_storage_where_names_a_remote_cluster_and_nothing_for_the_local_one():
    local = FakeKube()
    assert prims(local).storage_where(stuck()) == ""
    p = prims(local, store=Remote(FakeKube()))
    assert p.storage_where(stuck()) == " in cluster https://remote.example:6443"
    assert p.remotes.asked == [("demo", True)]  # the client the LIST resolved


# -- the conflict loop --------------------------------------------------------------------


def test_a_conflict_re_reads_at_once_then_backs_off_doubling_up_to_a_second(clock):
    reads = [stuck(rv=str(101 + i)) for i in range(8)]
    kube = FakeKube(reads=list(reads))
    seen: list[str] = []

    def attempt(current):
        seen.append(current["metadata"]["resourceVersion"])
        if len(seen) <= 8:
            raise stale()
        return "written"

    result = prims(kube).retry_on_conflict(stuck(), attempt, what="x", timeout=60)
    assert result == "written"
    assert seen == ["100", *(r["metadata"]["resourceVersion"] for r in reads)]
    assert clock.sleeps == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_a_failed_json_patch_test_is_a_change_and_is_re_decided(clock):
    kube = FakeKube(reads=[stuck(rv="101")])
    seen: list[str] = []

    def attempt(current):
        seen.append(current["metadata"]["resourceVersion"])
        if len(seen) == 1:
            raise error(422, message=GENERIC_422)
        return "written"

    assert prims(kube).retry_on_conflict(stuck(), attempt, what="x", timeout=5) == "written"
    assert seen == ["100", "101"]


def test_the_loop_gives_up_with_a_409_naming_what_once_the_time_is_spent(clock):
    kube = FakeKube(reads=[stuck(rv=str(101 + i)) for i in range(20)])
    attempts: list[float] = []

    def attempt(current):
        attempts.append(clock.now)
        raise stale()

    with pytest.raises(Conflict) as caught:
        prims(kube).retry_on_conflict(stuck(), attempt, what="writing it", timeout=3)
    assert (caught.value.status, caught.value.reason) == (409, "Conflict")
    assert str(caught.value) == (
        "writing it: the release kept changing (or the API kept failing) for 3s "
        "(the object has been modified)")
    # 0, 0.05, 0.15, 0.35, 0.75, 1.55, 2.55 and the last one at the deadline itself
    assert [round(t - 1000.0, 6) for t in attempts] == [
        0.0, 0.0, 0.05, 0.15, 0.35, 0.75, 1.55, 2.55, 3.0]
    assert clock.sleeps[-1] == 0.45  # the last wait ends at the deadline, not past it


def test_without_transient_a_failing_api_is_raised_at_once(clock):
    kube = FakeKube()
    calls = []

    def attempt(current):
        calls.append(current)
        raise error(503)

    with pytest.raises(KubeError) as caught:
        prims(kube).retry_on_conflict(stuck(), attempt, what="x", timeout=5)
    assert caught.value.status == 503 and len(calls) == 1 and kube.calls == []


def test_with_transient_a_failing_api_is_retried_on_a_fresh_read(clock):
    kube = FakeKube(reads=[stuck(rv="101")])
    seen: list[str] = []

    def attempt(current):
        seen.append(current["metadata"]["resourceVersion"])
        if len(seen) == 1:
            raise error(503)
        return "written"

    result = prims(kube).retry_on_conflict(stuck(), attempt, what="x", timeout=5,
                                           transient=True)
    assert result == "written" and seen == ["100", "101"]


@pytest.mark.parametrize("transient", [False, True])
def test_what_retrying_cannot_change_is_raised_at_once(clock, transient):
    calls = []

    def attempt(current):
        calls.append(current)
        raise error(403)

    with pytest.raises(KubeError) as caught:
        prims(FakeKube()).retry_on_conflict(stuck(), attempt, what="x", timeout=5,
                                            transient=transient)
    assert caught.value.status == 403 and len(calls) == 1


def test_a_transient_failure_of_the_re_read_keeps_the_last_state_and_reads_again(clock):
    kube = FakeKube(reads=[error(503), stuck(rv="102")])
    seen: list[str] = []

    def attempt(current):
        seen.append(current["metadata"]["resourceVersion"])
        if len(seen) == 1:
            raise stale()
        return "written"

    result = prims(kube).retry_on_conflict(stuck(), attempt, what="x", timeout=5,
                                           transient=True)
    assert result == "written" and seen == ["100", "102"]
    assert clock.sleeps == [0.05]  # the failed read waits before the next one
    assert [c[0] for c in kube.calls] == ["get_hr", "get_hr"]


def test_a_release_gone_is_none_whether_the_write_or_the_re_read_finds_it_gone(clock):
    def gone(current):
        raise error(404, MISSING)

    assert prims(FakeKube()).retry_on_conflict(stuck(), gone, what="x", timeout=5) is None

    def conflict(current):
        raise stale()

    kube = FakeKube(reads=[None])
    assert prims(kube).retry_on_conflict(stuck(), conflict, what="x", timeout=5) is None
    assert prims(kube).retry_on_conflict(None, conflict, what="x", timeout=5) is None


def test_a_404_for_a_missing_api_is_not_a_gone_release(clock):
    def attempt(current):
        raise error(404, {})

    with pytest.raises(KubeError) as caught:
        prims(FakeKube()).retry_on_conflict(stuck(), attempt, what="x", timeout=5,
                                            transient=True)
    assert caught.value.status == 404


def test_stop_is_asked_before_every_attempt_and_raises_before_writing(clock):
    kube = FakeKube(reads=[stuck(rv="101")])
    answers = iter([False, True])
    asked: list[int] = []
    attempts: list[str] = []

    def stop():
        asked.append(len(kube.calls))
        return next(answers)

    def attempt(current):
        attempts.append(current["metadata"]["resourceVersion"])
        raise stale()

    with pytest.raises(KubeError) as caught:
        prims(kube).retry_on_conflict(stuck(), attempt, what="lifting it", timeout=5,
                                      stop=stop)
    assert (caught.value.status, caught.value.reason) == (0, "Stopped")
    assert str(caught.value) == "lifting it: stopped before writing"
    assert attempts == ["100"]
    assert asked == [0, 1]  # before the first attempt, and after the re-read (not before)


def test_reread_replaces_the_get(clock):
    newer = stuck(rv="105")
    kube = FakeKube()
    seen: list[str] = []

    def attempt(current):
        seen.append(current["metadata"]["resourceVersion"])
        if len(seen) == 1:
            raise stale()
        return "written"

    result = prims(kube).retry_on_conflict(stuck(), attempt, what="x", timeout=5,
                                           reread=lambda current: newer)
    assert result == "written" and seen == ["100", "105"] and kube.calls == []


# -- relinquish ---------------------------------------------------------------------------


def test_relinquish_applies_the_relinquish_body_of_the_read_unforced(clock):
    read = suspended_by_us()
    kube = FakeKube(answers=["after"])
    assert prims(kube).relinquish(read) == "after"
    assert kube.calls == [("apply_hr", writes.relinquish_body(read), False)]


def test_relinquish_writes_nothing_on_a_suspension_it_does_not_own(clock):
    kube = FakeKube()
    assert prims(kube).relinquish(hr(suspend=True, managed=[FOREIGN])) is None
    assert kube.calls == []


def test_relinquish_retries_a_failing_api_with_the_fresh_evidence(clock):
    newer = suspended_by_us(rv="101")
    kube = FakeKube(answers=[error(503), "after"], reads=[newer])
    assert prims(kube).relinquish(suspended_by_us()) == "after"
    assert kube.writes()[-1] == ("apply_hr", writes.relinquish_body(newer), False)


def test_relinquish_stops_once_a_re_read_shows_the_suspension_is_no_longer_ours(clock):
    kube = FakeKube(answers=[stale()], reads=[hr(suspend=True, managed=[FOREIGN])])
    assert prims(kube).relinquish(suspended_by_us()) is None
    assert len(kube.writes()) == 1


def test_relinquish_keeps_trying_for_the_relinquish_timeout(clock):
    kube = FakeKube(answers=[stale()] * 60, reads=[suspended_by_us(rv=str(101 + i))
                                                   for i in range(60)])
    with pytest.raises(Conflict, match="^lifting our suspension: .* for 30s"):
        prims(kube, relinquish_timeout=30.0, acquire_timeout=10.0).relinquish(
            suspended_by_us())
    assert clock.now - 1000.0 == pytest.approx(30.0)


# -- remove_fence -------------------------------------------------------------------------


def fenced(rv: str = "100") -> dict:
    return hr(suspend=False, finalizers=[FENCE], conditions=STUCK, rv=rv, namespace="apps")


def test_remove_fence_sends_the_guarded_patch_after_check_passes(clock):
    read = fenced()
    kube = FakeKube(answers=["after"])
    checked: list[str] = []

    def check(state):
        checked.append(state["metadata"]["resourceVersion"])
        assert kube.calls == []  # before the write

    assert prims(kube).remove_fence(read, check=check) == "after"
    assert checked == ["100"]
    assert kube.calls == [("json_patch_hr", "apps", "demo",
                           writes.remove_fence_json_patch(read))]


def test_remove_fence_without_a_fence_writes_and_checks_nothing(clock):
    kube = FakeKube()
    checked = []
    assert prims(kube).remove_fence(stuck(), check=checked.append) is None
    assert kube.calls == [] and checked == []


def test_a_check_that_raises_stops_the_fence_removal_before_the_write(clock):
    kube = FakeKube()

    def check(state):
        raise RuntimeError("a controller covers it now")

    with pytest.raises(RuntimeError):
        prims(kube).remove_fence(fenced(), check=check)
    assert kube.calls == []


def test_remove_fence_retries_a_failing_api_on_a_fresh_read(clock):
    newer = fenced(rv="101")
    kube = FakeKube(answers=[error(500), "after"], reads=[newer])
    assert prims(kube).remove_fence(fenced()) == "after"
    assert kube.writes()[-1][3] == writes.remove_fence_json_patch(newer)


@pytest.mark.parametrize("timeout, spent", [(None, 30.0), (4.0, 4.0)])
def test_remove_fence_gives_up_after_its_timeout_or_the_relinquish_timeout(
        clock, timeout, spent):
    kube = FakeKube(answers=[stale()] * 60, reads=[fenced(rv=str(101 + i)) for i in range(60)])
    with pytest.raises(Conflict, match="^removing the fence: "):
        prims(kube).remove_fence(fenced(), timeout=timeout)
    assert clock.now - 1000.0 == pytest.approx(spent)


def test_remove_fence_stops_before_writing_when_told(clock):
    kube = FakeKube()
    with pytest.raises(KubeError, match="^removing the fence: stopped before writing"):
        prims(kube).remove_fence(fenced(), stop=lambda: True)
    assert kube.calls == []


# -- lift_sole_suspension -----------------------------------------------------------------


def sole(rv: str = "100") -> dict:
    return hr(suspend=True, managed=[OURS], finalizers=[FENCE], rv=rv, namespace="apps")


def test_lift_sole_suspension_sends_the_guarded_unsuspend_patch_after_the_guard(clock):
    read = sole()
    kube = FakeKube(answers=["after"])
    guarded = []
    assert prims(kube).lift_sole_suspension(read, 5.0, guard=guarded.append) == "after"
    assert guarded == [read]
    assert kube.calls == [("json_patch_hr", "apps", "demo", writes.unsuspend_json_patch(read))]


@pytest.mark.parametrize("release", [
    pytest.param(hr(suspend=False, managed=[OURS]), id="not-suspended"),
    pytest.param(hr(suspend=True, managed=[OURS, FOREIGN]), id="co-owned"),
    pytest.param(hr(suspend=True, managed=[FOREIGN]), id="not-ours"),
])
def test_lift_sole_suspension_leaves_what_is_not_ours_alone(clock, release):
    kube = FakeKube()
    guarded = []
    assert prims(kube).lift_sole_suspension(release, 5.0, guard=guarded.append) is release
    assert kube.calls == [] and guarded == []


def test_a_guard_that_raises_stops_the_lift_before_the_write(clock):
    kube = FakeKube()

    def guard(state):
        raise RuntimeError("not on this state")

    with pytest.raises(RuntimeError):
        prims(kube).lift_sole_suspension(sole(), 5.0, guard=guard)
    assert kube.calls == []


def test_lift_sole_suspension_retries_a_failing_api_until_its_timeout(clock):
    kube = FakeKube(answers=[error(503)] * 60, reads=[sole(rv=str(101 + i)) for i in range(60)])
    with pytest.raises(Conflict, match="^lifting flux-plunger's suspension: .* for 4s"):
        prims(kube).lift_sole_suspension(sole(), 4.0)
    assert clock.now - 1000.0 == pytest.approx(4.0)


def test_lift_sole_suspension_stops_before_writing_when_told(clock):
    kube = FakeKube()
    with pytest.raises(KubeError, match="stopped before writing"):
        prims(kube).lift_sole_suspension(sole(), 5.0, stop=lambda: True)
    assert kube.calls == []


# -- acquire ------------------------------------------------------------------------------


def test_acquire_applies_suspend_and_fence_on_the_read_that_decided_unforced(clock):
    read = hr(conditions=[ready_condition()])  # not re-decided: the caller decided on it
    kube = FakeKube(answers=["after"])
    assert prims(kube).acquire(read, 3) == "after"
    assert kube.calls == [("apply_hr", writes.acquire_body(read), False)]


def test_a_stale_read_is_re_read_and_applied_unforced_with_the_fresh_evidence(clock):
    newer = stuck(rv="101")
    kube = FakeKube(answers=[stale(), "after"], reads=[newer])
    assert prims(kube).acquire(stuck(), 3) == "after"
    assert kube.writes()[-1] == ("apply_hr", writes.acquire_body(newer), False)
    assert clock.sleeps == []  # the first re-read is at once


def test_only_a_field_manager_conflict_is_forced_and_a_stale_read_then_unforces(clock):
    reads = [stuck(rv="101"), stuck(rv="102")]
    kube = FakeKube(answers=[manager_conflict(), stale(), "after"], reads=list(reads))
    assert prims(kube).acquire(stuck(), 3) == "after"
    assert [(c[1]["metadata"]["resourceVersion"], c[2]) for c in kube.writes()] == [
        ("100", False), ("101", True), ("102", False)]


def test_reread_is_told_whether_the_409_was_a_stale_read(clock):
    told: list[tuple[str, bool]] = []

    def reread(state, changed):
        told.append((state["metadata"]["resourceVersion"], changed))
        return stuck(rv=str(int(state["metadata"]["resourceVersion"]) + 1))

    kube = FakeKube(answers=[stale(), manager_conflict(), "after"])
    assert prims(kube).acquire(stuck(), 3, reread=reread) == "after"
    assert told == [("100", True), ("101", False)]
    assert kube.calls[-1][1]["metadata"]["resourceVersion"] == "102"


@pytest.mark.parametrize("first", [
    pytest.param(stuck(rv="101", deletion_timestamp="2026-11-29T19:30:00Z",
                       finalizers=["finalizers.fluxcd.io"]), id="terminating"),
    pytest.param(hr(suspend=True, managed=[FOREIGN], conditions=STUCK, rv="101"),
                 id="suspended"),
    pytest.param(hr(conditions=[ready_condition()], rv="101"), id="healthy"),
    pytest.param(stuck(rv="101", annotations={constants.PROCESSED_ANNOTATION: "4"}),
                 id="processed"),
])
def test_a_newer_state_is_re_decided_and_nothing_is_acquired_on_it(clock, first):
    kube = FakeKube(answers=[stale()], reads=[first])
    assert prims(kube).acquire(stuck(), 3, first=first) is None
    assert kube.calls == []
    assert prims(kube).acquire(stuck(), 3) is None  # the same after a 409's re-read
    assert [c[0] for c in kube.calls] == ["apply_hr", "get_hr"]


def test_a_newer_state_still_to_recover_is_written_on(clock):
    first = stuck(rv="101", annotations={constants.PROCESSED_ANNOTATION: "3"})
    kube = FakeKube(answers=["after"])
    assert prims(kube).acquire(stuck(), 3, first=first) == "after"
    assert kube.calls == [("apply_hr", writes.acquire_body(first), False)]


def test_acquire_gives_up_after_the_acquire_timeout_and_raises_a_failing_api(clock):
    kube = FakeKube(answers=[stale()] * 60, reads=[stuck(rv=str(101 + i)) for i in range(60)])
    with pytest.raises(Conflict, match="^suspending the release: .* for 10s"):
        prims(kube, relinquish_timeout=30.0, acquire_timeout=10.0).acquire(stuck(), 3)
    assert clock.now - 1000.0 == pytest.approx(10.0)
    kube = FakeKube(answers=[error(503)])
    with pytest.raises(KubeError) as caught:
        prims(kube).acquire(stuck(), 3)
    assert caught.value.status == 503 and len(kube.calls) == 1


# -- record -------------------------------------------------------------------------------


def test_record_merge_patches_the_revision_locked_on_the_read(clock):
    read = suspended_by_us()
    kube = FakeKube(answers=["after"])
    assert prims(kube).record(read, 4) == ("after", True)
    assert kube.calls == [("merge_patch_hr", "default", "demo", writes.record_patch(read, 4))]


def test_record_retries_with_the_fresh_evidence_while_the_release_is_still_ours(clock):
    newer = suspended_by_us(rv="101")
    kube = FakeKube(answers=[stale(), "after"], reads=[newer])
    assert prims(kube).record(suspended_by_us(), 4) == ("after", True)
    assert kube.writes()[-1][3] == writes.record_patch(newer, 4)


@pytest.mark.parametrize("newer", [
    pytest.param(suspended_by_us(rv="101", deletion_timestamp="2026-11-29T19:30:00Z"),
                 id="terminating"),
    pytest.param(hr(suspend=True, managed=[FOREIGN], finalizers=[FENCE], rv="101"),
                 id="not-ours"),
    pytest.param(suspended_by_us(rv="101", generation=2), id="spec-changed"),
])
def test_record_stops_on_a_re_read_it_may_not_write_on(clock, newer):
    kube = FakeKube(answers=[stale()], reads=[newer])
    assert prims(kube).record(suspended_by_us(), 4) == (newer, False)
    assert len(kube.writes()) == 1


def test_record_of_a_release_gone_is_nothing_recorded(clock):
    kube = FakeKube(answers=[stale()], reads=[None])
    assert prims(kube).record(suspended_by_us(), 4) == (None, False)


def test_record_gives_up_after_the_acquire_timeout(clock):
    kube = FakeKube(answers=[stale()] * 60,
                    reads=[suspended_by_us(rv=str(101 + i)) for i in range(60)])
    with pytest.raises(Conflict, match="^recording the revision: .* for 10s"):
        prims(kube, relinquish_timeout=30.0, acquire_timeout=10.0).record(
            suspended_by_us(), 4)


# -- delete_revision ----------------------------------------------------------------------


REV = storage.Revision("sh.helm.release.v1.demo.v3", "store", "sec-uid", "77", 3, "failed")
SECRET = {"metadata": {"name": REV.name, "namespace": "store", "uid": "sec-uid",
                       "resourceVersion": "77"}}
SECRET_PATH = "/api/v1/namespaces/store/secrets/sh.helm.release.v1.demo.v3"


def test_delete_revision_deletes_preconditioned_on_the_judged_uid_and_resource_version():
    kube = FakeKube(answers=[{}])
    assert prims(kube).delete_revision(stuck(), REV) == ""
    assert kube.calls == [("delete_secret", "store", REV.name, "sec-uid", "77")]


def test_with_a_backup_the_judged_secret_is_read_and_saved_before_its_delete():
    kube, backup = FakeKube(answers=[SECRET, {}]), FakeBackup()
    assert prims(kube, backup=backup).delete_revision(stuck(), REV) == "file /b/x.json"
    assert kube.calls == [
        ("request", "GET", "GET", SECRET_PATH, None, None, None),
        ("delete_secret", "store", REV.name, "sec-uid", "77"),
    ]
    assert backup.saved == [(SECRET, "demo", "local")]


def test_a_remote_secret_is_saved_naming_its_cluster_and_deleted_there():
    local, remote = FakeKube(), FakeKube(answers=[SECRET, {}])
    backup = FakeBackup()
    p = prims(local, store=Remote(remote), backup=backup)
    p.delete_revision(stuck(), REV)
    assert backup.saved == [(SECRET, "demo", "https://remote.example:6443")]
    assert [c[0] for c in remote.calls] == ["request", "delete_secret"] and local.calls == []
    assert p.remotes.asked == [("demo", True)]


@pytest.mark.parametrize("uid, rv", [("other-uid", "77"), ("sec-uid", "78")])
def test_a_secret_changed_since_it_was_judged_is_neither_saved_nor_deleted(uid, rv):
    changed = {"metadata": {**SECRET["metadata"], "uid": uid, "resourceVersion": rv}}
    kube, backup = FakeKube(answers=[changed]), FakeBackup()
    with pytest.raises(Conflict) as caught:
        prims(kube, backup=backup).delete_revision(stuck(), REV)
    assert (caught.value.status, caught.value.reason) == (409, "Conflict")
    assert str(caught.value) == f"Secret store/{REV.name} changed since it was judged"
    assert backup.saved == [] and [c[0] for c in kube.calls] == ["request"]


def test_a_secret_read_without_metadata_is_a_changed_secret():
    kube = FakeKube(answers=[{}])
    with pytest.raises(Conflict):
        prims(kube, backup=FakeBackup()).delete_revision(stuck(), REV)


def test_a_failed_backup_deletes_nothing():
    kube = FakeKube(answers=[SECRET])
    with pytest.raises(BackupError):
        prims(kube, backup=FakeBackup(fail=True)).delete_revision(stuck(), REV)
    assert [c[0] for c in kube.calls] == ["request"]


def test_a_dry_run_neither_reads_nor_saves_a_backup():
    kube, backup = FakeKube(answers=[{}], dry_run=True), FakeBackup()
    assert prims(kube, backup=backup).delete_revision(stuck(), REV) == ""
    assert [c[0] for c in kube.calls] == ["delete_secret"] and backup.saved == []


# -- create_storage_secret ----------------------------------------------------------------


NEW = {"metadata": {"namespace": "store", "name": "sh.helm.release.v1.demo.v2"}}
NEW_PATH = "/api/v1/namespaces/store/secrets/sh.helm.release.v1.demo.v2"


def test_an_existing_secret_is_never_overwritten():
    kube = FakeKube(answers=[{"metadata": {}}])
    assert create_storage_secret(kube, NEW, "") is False
    assert kube.calls == [("request", "GET", "GET", NEW_PATH, None, None, None)]


@pytest.mark.parametrize("dry_run, query", [("", None), ("server", {"dryRun": "All"})])
def test_a_missing_secret_is_created_as_json(dry_run, query):
    kube = FakeKube(answers=[error(404, MISSING), {}])
    assert create_storage_secret(kube, NEW, dry_run) is True
    assert kube.calls[1] == ("request", "CREATE", "POST", "/api/v1/namespaces/store/secrets",
                             NEW, JSON, query)


def test_a_client_dry_run_only_looks():
    kube = FakeKube(answers=[error(404, MISSING)])
    assert create_storage_secret(kube, NEW, "client") is True
    assert len(kube.calls) == 1


def test_a_secret_created_meanwhile_is_not_created():
    kube = FakeKube(answers=[error(404, MISSING), error(409)])
    assert create_storage_secret(kube, NEW, "") is False


@pytest.mark.parametrize("answers, status", [
    pytest.param([error(403)], 403, id="get-forbidden"),
    pytest.param([error(404, {})], 404, id="api-missing"),
    pytest.param([error(404, MISSING), error(500)], 500, id="create-fails"),
])
def test_any_other_failure_is_raised(answers, status):
    with pytest.raises(KubeError) as caught:
        create_storage_secret(FakeKube(answers=answers), NEW, "")
    assert caught.value.status == status
