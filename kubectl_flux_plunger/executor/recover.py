"""The RECOVER action, the recovery sequence of SPEC §6: list storage and choose, acquire,
handshake, record, delete the judged revision, relinquish — exactly one relinquish on every
exit after the acquire, and a line that says what is left when that fails.

Each step returns what it decided instead of writing into an ``Outcome``: the ``Report`` so
far (steps done, revision judged, backup), ended (``Report.end`` with an ``Ending``: result,
words, failed) where the sequence stops, or left open to go on.  The entry
(``Executor.apply_decision``) makes the one ``Outcome`` of the report it gets back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..core import budget, claims, detect, ownership, plan, storage
from ..core.objects import Obj
from ..kube import Kube, KubeError
from ..kube.remote import RemoteError, Unsupported
from ..report.events import Recorder
from .backup import BackupError
from .handshake import Handshake, ReleaseWatch, watch_timeout
from .outcome import (
    TAKEN_DETAIL,
    TERMINATING_DETAIL,
    Ending,
    Options,
    Report,
    Result,
    Stopped,
    deferred,
    failed,
    leftover_hint,
)
from .primitives import Primitives, held_verdict
from .steps import ACQUIRE, DELETE, RECORD, RELINQUISH, drop_fence_not_ours, step_args

# how long a 409 waits for the stream to carry the newer state before a GET
REREAD_WAIT = 2.0

RETARGETED_DETAIL = (
    "the release's name, target namespace, storage namespace, kubeconfig or chart changed "
    "while it was held (helm-controller acts on the old target first); storage left intact"
)


class Recover:
    """The recovery sequence, step by step.  Each step returns what it decided — the
    ``Report`` so far, ended (``Report.end``) where the sequence stops — and never writes
    into an ``Outcome``: the entry makes the one ``Outcome`` of the report.

    Holds what the steps use: the client, the write primitives, the handshake, the Event
    recorder, the options and the stop flag."""

    def __init__(
        self,
        kube: Kube,
        prims: Primitives,
        handshake: Handshake,
        recorder: Recorder,
        options: Options,
        should_stop: Callable[[], bool],
    ):
        self.kube = kube
        self.prims = prims
        self.handshake = handshake
        self.recorder = recorder
        self.opt = options
        self.should_stop = should_stop

    def choose(self, hr: Obj) -> tuple[storage.Choice | None, Report]:
        """List the release's Helm storage and pick the revision to delete (SPEC §4) past
        the already-processed guard and the recovery budget: (the choice, the report naming
        the revision judged), or (None, the report ended with why there is none)."""
        return self._choose(hr)[:2]

    def _choose(
        self, hr: Obj
    ) -> tuple[storage.Choice | None, Report, list[Obj], budget.Standing | None]:
        """``choose``, the storage listed (the decision is made again on it) and where the
        release stands with its budget (the record writes it)."""
        try:
            secrets = self.prims.list_storage(hr)
        except Unsupported as exc:
            stuck = plan.left_stuck(hr, plan.Stuck.REMOTE_UNSUPPORTED)
            return None, Report(Ending(Result.SKIPPED, str(exc), stuck=stuck)), [], None
        except RemoteError as exc:
            return None, Report(failed(f"cannot use the remote cluster: {exc}")), [], None
        except KubeError as exc:
            where = storage.storage_namespace(hr)
            listed = failed(f"cannot list Helm storage in namespace {where}: {exc}")
            return None, Report(listed), [], None
        policy = self.opt.budget
        standing = None if policy is None else budget.standing(hr, self.prims.clock(), policy)
        try:
            verdict = self._verdict(hr, secrets, standing=standing)
        except KubeError as exc:
            who = failed(f"cannot tell who else holds the release: {exc}")
            return None, Report(who), [], None
        choice = verdict.choice
        report = Report(revision=choice.revision.number if choice.revision is not None else None)
        if verdict.verdict is not plan.Verdict.RECOVER:
            wait = standing.seconds_left(self.prims.clock()) if standing is not None else 0.0
            ending = Ending(
                Result(verdict.verdict.value),
                verdict.detail,
                stuck=verdict.stuck,
                requeue_after=max(wait, 1.0) if verdict.verdict is plan.Verdict.DEFERRED else None,
            )
            return None, report.end(ending), secrets, None
        return choice, report, secrets, verdict.standing

    def _verdict(
        self,
        hr: Obj,
        secrets: list[Obj],
        after: str | None = None,
        standing: budget.Standing | None = None,
    ) -> plan.StorageVerdict:
        """The storage verdict held against the other claimants, the tenant's authority
        and the recovery budget's ``standing`` (``primitives.held_verdict``)."""
        return held_verdict(hr, secrets, self.opt, after, standing)[0]

    def run(self, hr: Obj, watch: ReleaseWatch | None = None) -> Report:
        """The recovery sequence on ``hr``, the fresh read that decided; ``watch`` is the
        watch-list that read came from (the caller closes it), else one is opened here."""
        choice, report, secrets, standing = self._choose(hr)
        if choice is None:
            return report
        rev = choice.revision
        assert rev is not None and rev.number is not None  # choose_revision's ok contract
        if self.should_stop():
            return report.end(deferred("shutting down; recovery not started"))
        if watch is not None or self.kube.dry_run:  # a dry run persists nothing to watch
            done = self._recover_watched(hr, (choice, secrets, standing), report, watch)
            return _spent(done, standing)
        # one WATCH from the deciding read: the acquire goes out on the newest state, a
        # 409 is re-decided on what the stream carries, and the handshake waits on it
        own = ReleaseWatch(self.kube, hr, watch_timeout(self.opt))
        try:
            done = self._recover_watched(hr, (choice, secrets, standing), report, own)
            return _spent(done, standing)
        finally:
            own.close()

    def _newer(self, watch: ReleaseWatch | None) -> Callable[[Obj, bool], Obj | None] | None:
        """Where the acquire takes the state after a 409: the stream when there is one."""
        if watch is None:
            return None

        def reread(current: Obj, changed: bool) -> Obj | None:
            newer = watch.newer_than(current, REREAD_WAIT if changed else 0.0)
            if newer is not None:
                return newer
            if watch.latest is None:
                return None  # deleted meanwhile
            return self.prims.fresh(current) if changed else current

        return reread

    def _recover_watched(
        self,
        hr: Obj,
        decided: tuple[storage.Choice, list[Obj], budget.Standing | None],
        report: Report,
        watch: ReleaseWatch | None,
    ) -> Report:
        """From the acquire on: ``decided`` is the choice, the storage it was made on and
        the release's standing with its recovery budget (the record writes it)."""
        choice, secrets, standing = decided
        rev = choice.revision
        assert rev is not None and rev.number is not None
        first = watch.settle() if watch is not None else hr
        if first is None:
            return report.end(
                deferred(
                    "the release was deleted before it could be suspended; storage left intact"
                )
            )
        try:
            held = self.prims.acquire(hr, rev.number, first=first, reread=self._newer(watch))
        except KubeError as exc:
            lost = f"could not suspend the release: {exc}"
            # the apply may have landed although its answer was lost (timeout, 5xx)
            try:
                fresh = self.prims.fresh(hr)
            except KubeError as again:
                return report.end(
                    failed(
                        f"{lost}; the release could not be read again ({again}), so it may "
                        f"be left suspended and fenced: {leftover_hint(hr)}"
                    )
                )
            return self._final_relinquish(fresh, report.end(failed(lost)))
        if held is None:
            self.prims.event(hr, plan.RECOVERY_DEFERRED)
            return report.end(
                deferred(
                    "spec.suspend was taken by another manager or the release began "
                    "terminating between read and write"
                )
            )
        report = report.did(ACQUIRE.done)
        # From here on every exit relinquishes exactly once.
        current: Obj | None = held
        try:
            current, report = self._holding(held, rev.number, report, watch, standing)
            if current is not None and report.ending is None:
                choice, report = self._decide_again(hr, current, (choice, secrets), report)
            if current is not None and report.ending is None:
                report = self._delete_judged(current, choice, report)
        except KubeError as exc:
            report = report.end(failed(f"recovery interrupted: {exc}"))
        except Stopped:
            report = report.end(deferred("shutting down; recovery aborted before the delete"))
        finally:
            report = self._final_relinquish(current, report)
        return report

    def _holding(
        self,
        held: Obj,
        revision: int,
        report: Report,
        watch: ReleaseWatch | None = None,
        standing: budget.Standing | None = None,
    ) -> tuple[Obj | None, Report]:
        """While holding the release: wait for helm-controller's handshake, then record the
        revision rv-locked to the state just judged.  Returns that state and the report
        (the record done), or the last state seen and the report ended as deferred when
        the delete must not happen."""
        # 1. helm-controller must have observed the suspended generation: it is then
        #    not mid-action on this release (a watch from our apply's rv)
        current = self.handshake.await_handshake(held, watch)
        if current is None or detect.is_terminating(current):
            return current, report.end(deferred(TERMINATING_DETAIL))
        if not self.kube.dry_run and not plan.suspended_by_us(current):
            return current, report.end(deferred(TAKEN_DETAIL))  # e.g. a `flux resume`
        if detect.observed_lags(current) and not self.kube.dry_run:
            return current, report.end(
                deferred(
                    f"helm-controller did not acknowledge the suspension within "
                    f"{self.opt.handshake_timeout:.0f}s; storage left intact"
                )
            )
        # 2. record the revision, locked to the resourceVersion of the state just
        #    judged: its answer is the re-read (any write since → 409 → re-decided)
        current, recorded = self.prims.record(current, revision, standing)
        if current is None or detect.is_terminating(current):
            return current, report.end(deferred(TERMINATING_DETAIL))
        if not recorded:
            return current, report.end(
                deferred(
                    "the release changed under us during recovery (another writer "
                    "took spec.suspend or changed its spec); storage left intact"
                )
            )
        report = report.did(RECORD.done.format(revision=revision))
        if self.should_stop():
            return current, report.end(
                deferred("shutting down; recovery aborted before the delete")
            )
        if not self.kube.dry_run and not (
            detect.is_suspended(current) and ownership.owns_suspend(current)
        ):
            return current, report.end(deferred(TAKEN_DETAIL))
        return current, report

    def _decide_again(
        self,
        decided: Obj,
        current: Obj,
        judged: tuple[storage.Choice, list[Obj]],
        report: Report,
    ) -> tuple[storage.Choice, Report]:
        """The decision that leads to the DELETE, made again on the last read (SPEC §6):
        ``current``, the answer of the record, against ``decided``, the read the recovery
        started on, and ``judged``, the choice and the storage it was made on.  The same
        target (``claims.target_of``: release name, namespaces, kubeconfig, chart), the same face,
        no other claimant — as the claimants stand once they reflect ``current`` — and the
        same revision chosen.  The storage half needs no second read: the DELETE carries
        the judged Secret's uid and resourceVersion, so a Secret changed since the LIST
        is a 409 that ``_delete_judged`` re-decides on a fresh LIST.  Returns the choice to
        delete, or the report ended with why nothing is deleted."""
        choice, secrets = judged
        if self.kube.dry_run:
            return choice, report  # nothing was held: the first decision is the plan
        if claims.target_of(current) != claims.target_of(decided):
            return choice, report.end(deferred(RETARGETED_DETAIL))
        if detect.stuck_face(current) is not detect.stuck_face(decided):
            return choice, report.end(
                deferred(
                    "helm-controller no longer shows the release stuck the way it did when "
                    "the recovery started (it finished an action meanwhile); storage left intact"
                )
            )
        rv = (current.get("metadata") or {}).get("resourceVersion")
        verdict = self._verdict(current, secrets, after=rv or None)
        redo, rev = verdict.choice, choice.revision
        same = (
            verdict.verdict is plan.Verdict.RECOVER
            and redo.revision is not None
            and rev is not None
            and (redo.revision.number, redo.revision.uid) == (rev.number, rev.uid)
        )
        if same:
            return redo, report
        if verdict.verdict is plan.Verdict.SKIPPED and verdict.stuck is not None:
            return choice, report.end(Ending(Result.SKIPPED, verdict.detail, stuck=verdict.stuck))
        return choice, report.end(
            deferred(f"decided again before the delete, nothing deleted: {verdict.detail}")
        )

    def _delete_judged(self, current: Obj, choice: storage.Choice, report: Report) -> Report:
        """DELETE the judged revision.  A 409 (the Secret was rewritten in place since the
        LIST, e.g. Helm marked it deployed) or 404 re-decides on a fresh LIST while we still
        hold the release: the same revision still blocking is deleted with its new
        resourceVersion (once); anything else leaves storage as it is and says why.  Once
        deleted, a ``Recovered`` Event says so."""
        rev = choice.revision
        assert rev is not None
        release = storage.release_name(current)
        where = self.prims.storage_where(current)
        for again in (False, True):
            try:
                backup = self.prims.delete_revision(current, rev)
            except BackupError as exc:
                return report.end(failed(f"{exc}; nothing deleted"))
            except KubeError as exc:
                if not (exc.conflict or exc.not_found):
                    raise
                redo = plan.choose(current, self.prims.list_storage(current))
                same = (
                    redo.ok
                    and redo.revision is not None
                    and redo.revision.number == rev.number
                    and redo.revision.uid == rev.uid
                )
                if not again and same and redo.revision is not None:
                    rev, choice = redo.revision, redo
                    continue
                return report.end(
                    Ending(
                        Result.DEFERRED if exc.not_found or redo.ok else Result.SKIPPED,
                        f"Secret {rev.namespace}/{rev.name} changed after it was judged "
                        f"and was not deleted: {redo.reason}",
                    )
                )
            break
        report = replace(report, backup=backup)
        if backup:
            report = report.did(f"saved to {backup}")
        report = report.did(DELETE.done.format(**step_args(choice, where))).end(
            Ending(
                Result.RECOVERED,
                f"deleted revision {rev.number} ({choice.helm_status}) of release "
                f"{release}{where}"
                + (f" (backup: {backup})" if backup else "")
                + "; helm-controller will reconcile it again",
            )
        )
        self._recorded_event(current, rev, backup)
        return report

    def _recorded_event(self, hr: Obj, rev: storage.Revision, backup: str = "") -> None:
        """A Normal ``Recovered`` Event naming the revision and Secret deleted (its cluster
        when remote) and where it was saved."""
        if self.kube.dry_run:
            return
        self.recorder.record(
            hr,
            plan.RECOVERED.reason,
            plan.RECOVERED.type,
            f"{plan.RECOVERED.message}: revision {rev.number}, Secret "
            f"{rev.namespace}/{rev.name}{self.prims.storage_where(hr)}"
            + (f"; backup: {backup}" if backup else ""),
            # for the Flux notification (notify): which revision, and a token that keeps
            # notification-controller from merging two recoveries
            metadata={
                "deletedRevision": str(rev.number),
                "storageSecret": f"{rev.namespace}/{rev.name}",
                "token": rev.uid or f"{rev.namespace}/{rev.name}/{rev.resource_version}",
            },
        )

    def _final_relinquish(self, current: Obj | None, report: Report) -> Report:
        """The one relinquish of every exit after the acquire.  When someone else took
        spec.suspend meanwhile there is nothing of ours to lift, but our fence must not
        outlive us (SPEC §6: live → drop it; terminating and suspended by another manager
        → drop it; terminating and unsuspended → keep it for the uninstall).  Returns the
        report with what was lifted, or — when that fails — failed and saying what is left
        and which command lifts it."""
        if current is None:
            return report
        try:
            lifted = self.prims.relinquish(current) if ownership.owns_suspend(current) else None
            if lifted is not None:
                return report.did(RELINQUISH.done).after(lifted)
            if drop_fence_not_ours(self.prims, current):
                return report.did("removed the fence")
            return report
        except KubeError as exc:
            if not exc.conflict:
                self.prims.event(current, plan.UNSUSPEND_FAILED)
            return report.but(f"could not lift our suspension ({exc}); {leftover_hint(current)}")


def _spent(report: Report, standing: budget.Standing | None) -> Report:
    """A recovery by hand (``recover NAME``) that the budget would have kept back says
    so: it spent the budget and starts a new run."""
    ending = report.ending
    if standing is None or not standing.spent or ending is None:
        return report
    what = "was spent" if standing.state is budget.State.GIVEN_UP else "was backing off"
    spent = (
        f"the recovery budget {what} ({standing.run_words()}); recovered by hand regardless, "
        "which starts a new run"
    )
    return report.end(replace(ending, detail=f"{ending.detail}; {spent}"))
