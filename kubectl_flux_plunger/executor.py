"""The thin executor: turns a decision of :mod:`plan` into requests, each carrying the
preconditions of the read that decided it, and re-reads.

Every decision is made on a fresh GET (never a cache).  A 409 means "someone wrote
between our read and our write": the executor re-reads and re-decides, a bounded number
of times, instead of pushing its stale view through.
"""
from __future__ import annotations

import datetime as dt
import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from . import constants as C
from . import detect, ownership, plan, storage, writes
from .events import Recorder
from .kube import Conflict, Kube, KubeError

log = logging.getLogger(__name__)

R = TypeVar("R")
TERMINATING_DETAIL = ("the release began terminating during recovery; storage left intact "
                      "and the suspension lifted so helm-controller uninstalls it")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)




class Stopped(Exception):
    """The caller asked us to stop (shutdown); nothing more is started."""


class Result(str, enum.Enum):
    """What one pass did to one release, closed.  A ``str`` so it prints and serialises as
    its value."""

    RECOVERED = "recovered"
    DEFERRED = "deferred"
    SKIPPED = "skipped"
    AWAITING_RETRY = "awaiting-retry"   # recovered earlier; helm-controller has not retried
    RELINQUISHED = "relinquished"
    FENCE_REMOVED = "fence-removed"
    WAITING = "waiting"
    UNCHANGED = "unchanged"
    GONE = "gone"
    FAILED = "failed"
    PLANNED = "planned"

    def __str__(self) -> str:
        return self.value


# After cleaning up what an interrupted run left, decide again (see Executor.settle).
CLEANUP_RESULTS = frozenset({Result.RELINQUISHED, Result.FENCE_REMOVED})
MAX_PASSES = 3


@dataclass
class Outcome:
    """What one pass did to one release."""

    namespace: str
    name: str
    result: Result
    detail: str
    row: plan.Row | str = ""
    revision: int | None = None
    failed: bool = False
    requeue_after: float | None = None
    steps: list[str] = field(default_factory=list)  # dry-run plan / what was done

    def as_dict(self) -> dict:
        return {"namespace": self.namespace, "name": self.name, "result": str(self.result),
                "detail": self.detail, "row": str(self.row), "revision": self.revision,
                "failed": self.failed, "steps": list(self.steps)}


@dataclass
class Options:
    dry_run_client: bool = False
    fence_warn_after: float = C.FENCE_HELD_WARN_SECONDS
    fence_recheck: float = C.FENCE_RECHECK_SECONDS
    handshake_timeout: float = 30.0   # wait for helm-controller to observe our suspension
    handshake_window: float = 5.0       # one watch window while waiting (stop is checked between)
    allow_recover: bool = True        # resume-owned / drain never start a recovery
    relinquish_timeout: float = 30.0  # keep lifting our suspension while it is ours
    acquire_timeout: float = 10.0     # re-decide an acquire/record racing other writers


def leftover_hint(hr: dict) -> str:
    """What is left after a failed clean-up, and the command that lifts it."""
    md = hr["metadata"]
    return (f"it may be left suspended and fenced by flux-plunger: `kubectl flux-plunger "
            f"resume-owned -n {md['namespace']} {md['name']}` lifts it")


def fence_hint(hr: dict) -> str:
    md = hr["metadata"]
    return (f"flux-plunger's uninstall fence is left on it: `kubectl flux-plunger "
            f"release-fence -n {md['namespace']} {md['name']}` removes it")


class Executor:
    def __init__(self, kube: Kube, recorder: Recorder | None = None, *,
                 options: Options | None = None, clock: Callable[[], dt.datetime] = utcnow,
                 should_stop: Callable[[], bool] = lambda: False):
        self.kube = kube
        self.recorder = recorder or Recorder(kube, enabled=False)
        self.opt = options or Options()
        self.clock = clock
        self.should_stop = should_stop

    # -- entry points ------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> Outcome:
        """One pass over one release: fresh read, decide (SPEC §6), act."""
        hr = self.kube.get_hr(namespace, name)
        return self.apply_decision(namespace, name, hr)

    def apply_decision(self, namespace: str, name: str, hr: dict | None) -> Outcome:
        d = plan.decide(hr, self.clock(), fence_warn_after=self.opt.fence_warn_after,
                        fence_recheck=self.opt.fence_recheck)
        out = Outcome(namespace, name, Result.UNCHANGED, d.reason, row=d.row,
                      requeue_after=d.requeue_after)
        if hr is None:
            out.result = Result.GONE
            return out
        if self.opt.dry_run_client:
            return self._plan_only(hr, d, out)
        if d.event:
            self._event(hr, d.event)
        act = d.action
        if act is plan.Action.RELINQUISH:
            self._relinquish_or_warn(hr, out)
        elif act is plan.Action.REMOVE_FENCE:
            self._remove_fence(hr, out)
        elif act is plan.Action.WAIT_FENCE:
            out.result = Result.WAITING
        elif act is plan.Action.RECOVER:
            if not self.opt.allow_recover:
                out.result, out.detail = Result.SKIPPED, "stuck; recovery not requested by this command"
            else:
                self.recover(hr, out)
        elif d.row is plan.Row.REMOTE_KUBECONFIG:
            out.result = Result.SKIPPED
        return out

    def settle(self, hr: dict, *, only_rows: frozenset[str] | None = None,
               fresh: bool = False) -> Outcome:
        """Determine → act → re-determine until nothing changes (bounded, like
        helm-controller's AtomicRelease): one-shot verbs finish what an interrupted run
        left (our suspension or fence on a live release) and then decide again on a fresh
        read, as the controller would on the update event its own write causes.

        ``hr`` is a listed copy (re-read before anything acts on it) or, with ``fresh``, a
        read just made (used as is: the named read is the fresh read).  ``only_rows``
        limits which rows may act (``resume-owned``)."""
        md = hr["metadata"]
        ns, name = md["namespace"], md["name"]
        prev: Outcome | None = None
        current: dict | None = hr
        out = Outcome(ns, name, Result.UNCHANGED, "")
        try:
            for _ in range(MAX_PASSES):
                d = plan.decide(current, self.clock())
                if (d.action is plan.Action.NOTHING and d.event is None) or (
                        only_rows is not None and d.row not in only_rows):
                    if prev is not None:
                        return prev
                    return Outcome(ns, name, Result.SKIPPED if d.row is plan.Row.REMOTE_KUBECONFIG
                                   else Result.GONE if current is None else Result.UNCHANGED,
                                   d.reason, row=d.row)
                if prev is None and not fresh:
                    # the LIST only chose candidates: every decision that acts is re-made
                    # on a fresh read (the listed copy may be minutes old by now)
                    current = self.kube.get_hr(ns, name)
                out = self.apply_decision(ns, name, current)
                if prev is not None:
                    if out.result == Result.UNCHANGED:
                        return prev              # the clean-up was all there was to do
                    out.steps[:0] = prev.steps
                again = (only_rows is None and out.result in CLEANUP_RESULTS
                         and not self.opt.dry_run_client and not self.kube.dry_run)
                if not again:
                    return out
                prev = out
                current = self.kube.get_hr(ns, name)
                if current is None or detect.is_terminating(current):
                    return out
            return out
        except KubeError as exc:
            return Outcome(ns, name, Result.FAILED, str(exc), failed=True)

    # -- dry run -----------------------------------------------------------------

    def _plan_only(self, hr: dict, d: plan.Decision, out: Outcome) -> Outcome:
        out.result = Result.PLANNED
        if d.action is plan.Action.RELINQUISH:
            out.steps.append("apply (flux-plunger) without spec.suspend"
                             + (" keeping the fence" if writes.relinquish_body(hr)["metadata"]
                                .get("finalizers") else " and without the fence"))
        elif d.action is plan.Action.REMOVE_FENCE:
            out.steps.append(f"remove finalizer {C.FENCE}")
        elif d.action is plan.Action.WAIT_FENCE:
            out.steps.append("wait for helm-controller to uninstall, then remove the fence")
        elif d.action is plan.Action.RECOVER and self.opt.allow_recover:
            choice = self._choose(hr, out)
            if choice is None:
                return out
            rev = choice.revision
            out.result = Result.PLANNED
            out.steps += [
                f"apply (flux-plunger) spec.suspend=true and finalizer {C.FENCE}",
                f"annotate {C.PROCESSED_ANNOTATION}={rev.number}",
                f"delete Secret {rev.namespace}/{rev.name} (uid {rev.uid}, "
                f"Helm status {choice.helm_status})",
                "apply (flux-plunger) without spec.suspend and without the fence",
            ]
        else:
            out.result = Result.UNCHANGED
        return out

    # -- events ------------------------------------------------------------------

    def _event(self, hr: dict, spec: plan.EventSpec) -> None:
        self.recorder.record(hr, spec.reason, spec.type, spec.message)

    # -- primitives --------------------------------------------------------------

    def _fresh(self, hr: dict) -> dict | None:
        md = hr["metadata"]
        fresh = self.kube.get_hr(md["namespace"], md["name"])
        if fresh is not None and fresh["metadata"].get("uid") != md.get("uid"):
            return None  # a different object under the same name: ours is gone
        return fresh

    def retry_on_conflict(self, hr: dict | None, attempt: Callable[[dict], R], *, what: str,
                          timeout: float, transient: bool = False) -> R | None:
        """The one conflict loop of every write primitive.

        ``attempt(current)`` decides on ``current`` and writes (or returns without writing
        when there is nothing left to do).  A 409 or a failed JSON-patch ``test`` means the
        release changed since that read: re-read and call ``attempt`` again with the fresh
        state, until ``timeout`` seconds have passed — bounded by time, never by a count,
        so a burst of foreign writes cannot make us give up on something still ours.  With
        ``transient`` a 429/5xx/unanswered request is retried the same way (the write is
        idempotent: it is re-decided on a fresh read).  Returns ``attempt``'s value, or
        None when the release is gone."""
        deadline = time.monotonic() + timeout
        current, delay = hr, 0.0
        while True:
            if current is None:
                return None
            try:
                return attempt(current)
            except KubeError as exc:
                if exc.not_found and exc.object_missing:
                    return None
                retry = exc.conflict or exc.failed_test_op or (
                    transient and (exc.status == 0 or exc.status == 429 or exc.status >= 500))
                if not retry:
                    raise
                if time.monotonic() >= deadline:
                    raise Conflict(409, "Conflict", f"{what}: the release kept changing (or the "
                                   f"API kept failing) for {timeout:.0f}s ({exc})") from None
            if delay:
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(max(delay * 2, 0.05), 1.0)
            current = self._fresh(current)

    def relinquish(self, hr: dict) -> dict | None:
        """Lift our suspension (fence kept only on a terminating, fenced release).

        Unforced, with rv+uid of ``hr``.  On 409 (or a transient failure) re-read: while we
        still own the suspension, apply again with the fresh evidence, for up to
        ``Options.relinquish_timeout`` seconds; once we no longer own it there is nothing
        to lift.  Returns the object after the write, or None when there was nothing to do."""
        def attempt(current: dict) -> dict | None:
            if not ownership.owns_suspend(current):
                return None
            return self.kube.apply_hr(writes.relinquish_body(current))
        return self.retry_on_conflict(hr, attempt, what="lifting our suspension",
                                      timeout=self.opt.relinquish_timeout, transient=True)

    def _relinquish_or_warn(self, hr: dict, out: Outcome) -> None:
        try:
            self.relinquish(hr)
        except KubeError as exc:
            if not exc.conflict:
                self._event(hr, plan.UNSUSPEND_FAILED)
            out.result, out.failed = Result.FAILED, True
            out.detail = f"could not lift our suspension: {exc}; {leftover_hint(hr)}"
            return
        out.result = Result.RELINQUISHED
        out.steps.append("lifted our suspension")

    def remove_fence(self, hr: dict) -> bool:
        """Drop our fence only (never spec.suspend): a guarded JSON patch testing rv, uid
        and the fence's index.  Re-reads and re-decides on conflict.  True if removed."""
        def attempt(current: dict) -> bool:
            ops = writes.remove_fence_json_patch(current)
            if ops is None:
                return False
            md = current["metadata"]
            self.kube.json_patch_hr(md["namespace"], md["name"], ops)
            return True
        return bool(self.retry_on_conflict(hr, attempt, what="removing the fence",
                                           timeout=self.opt.relinquish_timeout,
                                           transient=True))

    def _remove_fence(self, hr: dict, out: Outcome) -> None:
        try:
            removed = self.remove_fence(hr)
        except KubeError as exc:
            out.result, out.failed = Result.FAILED, True
            out.detail = f"could not remove the fence: {exc}; {fence_hint(hr)}"
            return
        out.result = Result.FENCE_REMOVED if removed else Result.UNCHANGED

    def acquire(self, hr: dict, revision: int) -> dict | None:
        """Suspend + fence in one apply.  Unforced first.  A 409 re-reads and re-decides:
        nothing is acquired once the release is terminating, suspended, no longer needs
        recovery or ``revision`` was processed meanwhile.  A stale resourceVersion (e.g.
        helm-controller wrote status in between) is retried unforced with the fresh one;
        only a field-manager conflict on ``spec.suspend`` at false (a stale owner, e.g. a
        backup controller's Update) is forced.  Returns the object after the write, or None
        when not acquired."""
        force = False

        def attempt(current: dict) -> dict | None:
            nonlocal force
            if current is not hr and (
                    detect.is_terminating(current) or detect.is_suspended(current)
                    or plan.decide(current, self.clock()).action is not plan.Action.RECOVER
                    or detect.already_processed(current, revision)[0]):
                return None
            try:
                return self.kube.apply_hr(writes.acquire_body(current), force=force)
            except Conflict as exc:
                force = exc.field_manager_conflict
                raise
        return self.retry_on_conflict(hr, attempt, what="suspending the release",
                                      timeout=self.opt.acquire_timeout)

    # -- the recovery sequence (SPEC §6) -------------------------------------------

    def list_storage(self, hr: dict) -> list[dict]:
        """The release's Helm storage Secrets (one LIST).  Every read of storage goes
        through here, so a release whose storage lives elsewhere can be routed in one place."""
        ns, release = storage.storage_namespace(hr), storage.release_name(hr)
        return self.kube.list_secrets(ns, storage.label_selector(release))

    def delete_revision(self, hr: dict, rev: storage.Revision) -> None:
        """DELETE the one judged storage Secret, preconditioned on its uid and
        resourceVersion (SPEC §5): a Secret rewritten or re-created since the LIST answers
        409 instead of going.  This is the single place right before a revision goes (a
        backup of ``rev`` belongs here)."""
        self.kube.delete_secret(rev.namespace, rev.name, rev.uid, rev.resource_version)

    def _choose(self, hr: dict, out: Outcome) -> storage.Choice | None:
        """List the release's Helm storage and pick the revision to delete (SPEC §4) past
        the already-processed guard; None (with ``out`` saying why) when there is none."""
        try:
            secrets = self.list_storage(hr)
        except KubeError as exc:
            out.result, out.failed = Result.FAILED, True
            out.detail = (f"cannot list Helm storage in namespace "
                          f"{storage.storage_namespace(hr)}: {exc}")
            return None
        verdict = plan.storage_verdict(hr, secrets)
        choice = verdict.choice
        out.revision = choice.revision.number if choice.revision is not None else None
        if verdict.verdict != "recover":
            out.result, out.detail = Result(verdict.verdict), verdict.detail
            return None
        return choice

    def recover(self, hr: dict, out: Outcome) -> None:
        choice = self._choose(hr, out)
        if choice is None:
            return
        rev = choice.revision
        assert rev is not None and rev.number is not None   # choose_revision's ok contract
        if self.should_stop():
            out.result, out.detail = Result.DEFERRED, "shutting down; recovery not started"
            return
        try:
            held = self.acquire(hr, rev.number)
        except KubeError as exc:
            out.result, out.failed = Result.FAILED, True
            out.detail = f"could not suspend the release: {exc}"
            # the apply may have landed although its answer was lost (timeout, 5xx)
            try:
                self._final_relinquish(self._fresh(hr), out)
            except KubeError as again:
                out.detail += (f"; the release could not be read again ({again}), so it may "
                               f"be left suspended and fenced: {leftover_hint(hr)}")
            return
        if held is None:
            self._event(hr, plan.RECOVERY_DEFERRED)
            out.result = Result.DEFERRED
            out.detail = ("spec.suspend was taken by another manager or the release began "
                          "terminating between read and write")
            return
        out.steps.append("suspended and fenced")
        # From here on every exit relinquishes exactly once.
        current: dict | None = held
        try:
            current = self._holding(held, rev.number, out)
            if current is None or out.result == Result.DEFERRED:
                return
            deleted = self._delete_judged(current, choice, out)
            if deleted is not None:
                self._recorded_event(current, deleted)
        except KubeError as exc:
            out.result, out.failed = Result.FAILED, True
            out.detail = f"recovery interrupted: {exc}"
        except Stopped:
            out.result, out.detail = Result.DEFERRED, "shutting down; recovery aborted before the delete"
        finally:
            self._final_relinquish(current, out)

    def _holding(self, held: dict, revision: int, out: Outcome) -> dict | None:
        """While holding the release: wait for helm-controller's handshake, then record the
        revision rv-locked to the state just judged.  Returns that state, or sets ``out``
        to deferred (and returns the last state seen) when the delete must not happen."""
        # 1. helm-controller must have observed the suspended generation: it is then
        #    not mid-action on this release (a watch from our apply's rv)
        current = self._await_handshake(held)
        if current is None or detect.is_terminating(current):
            out.result, out.detail = Result.DEFERRED, TERMINATING_DETAIL
            return current
        if detect.observed_lags(current) and not self.kube.dry_run:
            out.result = Result.DEFERRED
            out.detail = (f"helm-controller did not acknowledge the suspension within "
                          f"{self.opt.handshake_timeout:.0f}s; storage left intact")
            return current
        # 2. record the revision, locked to the resourceVersion of the state just
        #    judged: its answer is the re-read (any write since → 409 → re-decided)
        current, recorded = self._record(current, revision)
        if current is None or detect.is_terminating(current):
            out.result, out.detail = Result.DEFERRED, TERMINATING_DETAIL
            return current
        if not recorded:
            out.result = Result.DEFERRED
            out.detail = ("the release changed under us during recovery (another writer "
                          "took spec.suspend or changed its spec); storage left intact")
            return current
        out.steps.append(f"recorded revision {revision}")
        if self.should_stop():
            out.result, out.detail = Result.DEFERRED, "shutting down; recovery aborted before the delete"
            return current
        if not self.kube.dry_run and not (detect.is_suspended(current)
                                          and ownership.owns_suspend(current)):
            out.result = Result.DEFERRED
            out.detail = "another manager took spec.suspend during recovery; storage left intact"
        return current

    def _delete_judged(self, current: dict, choice: storage.Choice,
                       out: Outcome) -> storage.Revision | None:
        """DELETE the judged revision.  A 409 (the Secret was rewritten in place since the
        LIST, e.g. Helm marked it deployed) or 404 re-decides on a fresh LIST while we still
        hold the release: the same revision still blocking is deleted with its new
        resourceVersion (once); anything else leaves storage as it is and says why."""
        rev = choice.revision
        assert rev is not None
        release = storage.release_name(current)
        for again in (False, True):
            try:
                self.delete_revision(current, rev)
            except KubeError as exc:
                if not (exc.conflict or exc.not_found):
                    raise
                redo = storage.choose_revision(current, self.list_storage(current))
                same = (redo.ok and redo.revision is not None
                        and redo.revision.number == rev.number and redo.revision.uid == rev.uid)
                if not again and same and redo.revision is not None:
                    rev, choice = redo.revision, redo
                    continue
                out.result = Result.DEFERRED if exc.not_found or redo.ok else Result.SKIPPED
                out.detail = (f"Secret {rev.namespace}/{rev.name} changed after it was judged "
                              f"and was not deleted: {redo.reason}")
                return None
            break
        out.steps.append(f"deleted {rev.namespace}/{rev.name}")
        out.result = Result.RECOVERED
        out.detail = (f"deleted revision {rev.number} ({choice.helm_status}) of release "
                      f"{release}; helm-controller will reconcile it again")
        return rev

    def _recorded_event(self, hr: dict, rev: storage.Revision) -> None:
        """A Normal ``Recovered`` Event naming the revision and Secret deleted."""
        if self.kube.dry_run:
            return
        self.recorder.record(hr, plan.RECOVERED.reason, plan.RECOVERED.type,
                             f"{plan.RECOVERED.message}: revision {rev.number}, Secret "
                             f"{rev.namespace}/{rev.name}")

    def _final_relinquish(self, current: dict | None, out: Outcome) -> None:
        """The one relinquish of every exit after the acquire.  When someone else took
        spec.suspend meanwhile there is nothing of ours to lift, but our fence must not
        outlive us (SPEC §6: live → drop it; terminating and suspended by another manager
        → drop it; terminating and unsuspended → keep it for the uninstall).  When that
        fails, ``out`` says what is left and which command lifts it."""
        if current is None:
            return
        try:
            lifted = self.relinquish(current) if ownership.owns_suspend(current) else None
            if lifted is not None:
                out.steps.append("lifted the suspension")
                return
            fresh = self._fresh(current)
            if fresh is not None and detect.is_fenced(fresh) and (
                    not detect.is_terminating(fresh)
                    or (detect.is_suspended(fresh) and not ownership.owns_suspend(fresh))):
                if self.remove_fence(fresh):
                    out.steps.append("removed the fence")
        except KubeError as exc:
            if not exc.conflict:
                self._event(current, plan.UNSUSPEND_FAILED)
            cleanup = (f"could not lift our suspension ({exc}); {leftover_hint(current)}")
            if out.result != Result.FAILED:
                out.detail = f"{out.detail}; but {cleanup}"
            else:
                out.detail = f"{out.detail}; {cleanup}"
            out.result, out.failed = Result.FAILED, True

    def _record(self, hr: dict, revision: int) -> tuple[dict | None, bool]:
        """Write the processed-version annotation (rv-locked).  On 409 re-read: while the
        release is still ours, live and unchanged in spec, retry with the fresh evidence;
        otherwise return (last read, False) so the caller stops before the delete."""
        generation = hr["metadata"].get("generation")

        def attempt(current: dict) -> tuple[dict | None, bool]:
            if current is not hr and (
                    detect.is_terminating(current) or not ownership.owns_suspend(current)
                    or current["metadata"].get("generation") != generation):
                return current, False
            md = current["metadata"]
            return self.kube.merge_patch_hr(md["namespace"], md["name"],
                                            writes.record_patch(current, revision)), True
        return self.retry_on_conflict(hr, attempt, what="recording the revision",
                                      timeout=self.opt.acquire_timeout) or (None, False)

    def _await_handshake(self, hr: dict) -> dict | None:
        """Wait (bounded) until helm-controller has observed the suspended generation, by
        watching this one release from the rv of our acquire, so no revision goes while it
        may be mid-action.  Returns the last state seen (None when gone); the record that
        follows is locked to that state's rv, so nothing that happened after it can slip by."""
        if self.kube.dry_run:
            return hr   # nothing was persisted: there is nothing to observe
        fresh = hr
        deadline = time.monotonic() + self.opt.handshake_timeout
        while (fresh is not None and not detect.is_terminating(fresh)
               and detect.observed_lags(fresh)):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self.should_stop():
                raise Stopped()
            fresh = self._watch_one(fresh, min(remaining, self.opt.handshake_window))
        return fresh

    def _watch_one(self, hr: dict, window: float) -> dict | None:
        """Follow one release for up to ``window`` seconds from the rv we last saw; return
        its newest state once helm-controller has observed it (or it is going)."""
        md = hr["metadata"]
        current = hr
        try:
            for ev in self.kube.watch_hrs(md["namespace"], None, md["resourceVersion"],
                                          timeout_seconds=max(1, int(window + 0.999)),
                                          field_selector=f"metadata.name={md['name']}"):
                kind, obj = ev.get("type"), ev.get("object") or {}
                if kind == "DELETED":
                    return None
                if kind == "ERROR":
                    return self._fresh(current)      # e.g. 410: re-read and go on
                if kind in ("ADDED", "MODIFIED"):
                    if obj["metadata"].get("uid") != md.get("uid"):
                        return None
                    current = obj
                    if detect.is_terminating(obj) or not detect.observed_lags(obj):
                        return obj
        except KubeError as exc:
            log.warning("watching %s/%s for helm-controller's handshake failed (%s); "
                        "re-reading instead", md["namespace"], md["name"], exc)
            time.sleep(0.2)
            return self._fresh(current)
        return current
