"""The decision table of SPEC §6 as data: one fresh read in, one Decision out.

``decide`` is the only place that maps a HelmRelease's state to an action; every face (CLI verbs,
the controller, its drain) runs the same function.  Event messages are static strings — no names,
no numbers — so repeats on one object fold into one counted Event.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime

from . import budget, claims, constants, storage
from .detect import (
    Face,
    already_processed,
    attempted_since_generation,
    awaiting_retry_without_storage,
    held_seconds,
    is_fenced,
    is_stuck,
    is_suspended,
    is_terminating,
    processed_annotation_present,
    ready_unknown,
    recovery_awaits_retry,
    state_error_status,
    stuck_face,
    uninstall_reached,
)
from .messages import (
    NORMAL,
    RECOVERED,
    RECOVERY_DEFERRED,
    RECOVERY_FAILED,
    RECOVERY_SKIPPED,
    SUSPENSION_NOT_OWNED,
    SUSPENSION_NOT_OWNED_AFTER_RECOVERY,
    TERMINATING_WHILE_SUSPENDED,
    TERMINATING_WHILE_SUSPENDED_AFTER_RECOVERY,
    UNINSTALL_FENCE_HELD,
    UNSUSPEND_FAILED,
    WARNING,
    EventSpec,
    Stuck,
)
from .objects import Obj
from .ownership import owns_suspend

# re-exported from messages: callers name the static Event words as plan.X
__all__ = [
    "NORMAL",
    "RECOVERED",
    "RECOVERY_DEFERRED",
    "RECOVERY_FAILED",
    "RECOVERY_SKIPPED",
    "SUSPENSION_NOT_OWNED",
    "SUSPENSION_NOT_OWNED_AFTER_RECOVERY",
    "TERMINATING_WHILE_SUSPENDED",
    "TERMINATING_WHILE_SUSPENDED_AFTER_RECOVERY",
    "UNINSTALL_FENCE_HELD",
    "UNSUSPEND_FAILED",
    "WARNING",
    "EventSpec",
    "Stuck",
]


class Action(enum.Enum):
    """What the executor does for a decision."""

    NOTHING = "nothing"
    RELINQUISH = "relinquish"  # lift our suspension (fence kept iff terminating and fenced)
    REMOVE_FENCE = "remove-fence"  # drop only our fence; never touches spec.suspend
    WAIT_FENCE = "wait-fence"  # terminating, fenced, helm-controller has not uninstalled yet
    RECOVER = "recover"  # run the recovery sequence


class Row(str, enum.Enum):
    """The rows of the decision table (SPEC §6), closed.  A ``str`` so it prints and
    serialises as its value."""

    GONE = "gone"
    TERMINATING_SUSPENDED_OWNED = "terminating-suspended-owned"
    TERMINATING_SUSPENDED_FOREIGN = "terminating-suspended-foreign"
    TERMINATING_FENCED_UNINSTALLED = "terminating-fenced-uninstalled"
    TERMINATING_FENCED_WAITING = "terminating-fenced-waiting"
    TERMINATING_UNFENCED = "terminating-unfenced"
    LIVE_SUSPENDED_FOREIGN = "live-suspended-foreign"
    LIVE_SUSPENDED_OWNED = "live-suspended-owned"
    LIVE_FENCED = "live-fenced"
    LIVE_STUCK = "live-stuck"
    HEALTHY = "healthy"

    def __str__(self) -> str:
        return self.value


ROWS = frozenset(Row)


@dataclass(frozen=True)
class Decision:
    """The action for one pass over one release, the table row that chose it, and why."""

    action: Action
    row: Row
    reason: str
    event: EventSpec | None
    requeue_after: float | None


# each face of a stuck release (detect.Face), as `status` and the decisions say it
FACE_WORDS = {
    Face.NO_DEPLOYED: 'stuck with "has no deployed releases"',
    Face.STATE_ERROR: "stuck with StateError (a revision helm-controller cannot place)",
    Face.NAME_IN_USE: 'stuck with "cannot reuse a name that is still in use" (an uninstall '
    "kept its history)",
}


def _decision(
    action: Action,
    row: Row,
    reason: str,
    event: EventSpec | None = None,
    requeue_after: float | None = None,
) -> Decision:
    """A Decision with the usual defaults: no event, no requeue."""
    return Decision(action, row, reason, event, requeue_after)


def _fence_or_nothing(hr: Obj) -> Action:
    """Remove our fence when present; otherwise there is nothing of ours to undo."""
    return Action.REMOVE_FENCE if is_fenced(hr) else Action.NOTHING


def _decide_terminating(
    hr: Obj, now: datetime, fence_warn_after: float, fence_recheck: float
) -> Decision:
    """Rows for a HelmRelease with a deletionTimestamp."""
    if is_suspended(hr) and owns_suspend(hr):
        return _decision(
            Action.RELINQUISH,
            Row.TERMINATING_SUSPENDED_OWNED,
            "being deleted while suspended by flux-plunger: lift the suspension, keep the fence",
        )
    if is_suspended(hr):
        event = (
            TERMINATING_WHILE_SUSPENDED_AFTER_RECOVERY
            if processed_annotation_present(hr)
            else TERMINATING_WHILE_SUSPENDED
        )
        return _decision(
            _fence_or_nothing(hr),
            Row.TERMINATING_SUSPENDED_FOREIGN,
            "being deleted while suspended by another manager: only our fence can go",
            event,
        )
    if not is_fenced(hr):
        return _decision(Action.NOTHING, Row.TERMINATING_UNFENCED, "being deleted; nothing of ours")
    if uninstall_reached(hr):
        return _decision(
            Action.REMOVE_FENCE,
            Row.TERMINATING_FENCED_UNINSTALLED,
            "helm-controller has handled the unsuspended release: the fence can go",
        )
    held = held_seconds(hr, now)
    warn = held is not None and held >= fence_warn_after
    return _decision(
        Action.WAIT_FENCE,
        Row.TERMINATING_FENCED_WAITING,
        "fence holds the delete until helm-controller reconciles the unsuspended release",
        UNINSTALL_FENCE_HELD if warn else None,
        fence_recheck,
    )


def _decide_live(hr: Obj) -> Decision:
    """Rows for a HelmRelease without a deletionTimestamp."""
    if is_suspended(hr) and not owns_suspend(hr):
        recovered = processed_annotation_present(hr)
        return _decision(
            _fence_or_nothing(hr),
            Row.LIVE_SUSPENDED_FOREIGN,
            "suspended by another manager: left untouched, only our fence can go",
            SUSPENSION_NOT_OWNED_AFTER_RECOVERY if recovered else SUSPENSION_NOT_OWNED,
        )
    if is_suspended(hr):
        return _decision(
            Action.RELINQUISH,
            Row.LIVE_SUSPENDED_OWNED,
            "suspended by flux-plunger (interrupted recovery): lift it with the fence",
        )
    if is_fenced(hr):
        return _decision(
            Action.REMOVE_FENCE, Row.LIVE_FENCED, "not suspended but still fenced: remove the fence"
        )
    face = stuck_face(hr)
    if face is not None:
        return _decision(Action.RECOVER, Row.LIVE_STUCK, f"{FACE_WORDS[face]}: recover")
    return _decision(Action.NOTHING, Row.HEALTHY, "nothing to do")


def decide(
    hr: Obj | None,
    now: datetime,
    *,
    fence_warn_after: float = constants.FENCE_HELD_WARN_SECONDS,
    fence_recheck: float = constants.FENCE_RECHECK_SECONDS,
) -> Decision:
    """The SPEC §6 row for a fresh read of one HelmRelease (None when it is gone).

    The already-processed guard needs the storage list, so the executor applies it within
    RECOVER (``detect.already_processed``) rather than here.
    """
    if hr is None:
        return _decision(Action.NOTHING, Row.GONE, "the HelmRelease no longer exists")
    if is_terminating(hr):
        return _decide_terminating(hr, now, fence_warn_after, fence_recheck)
    return _decide_live(hr)


def suspended_by_us(hr: Obj) -> bool:
    """Suspended, with a spec.suspend flux-plunger owns."""
    return is_suspended(hr) and owns_suspend(hr)


def holds_ours(hr: Obj) -> bool:
    """Our fence or a suspension we own is on it: what an interrupted run may leave, and
    what a drain releases."""
    return is_fenced(hr) or suspended_by_us(hr)


def predicate(hr: Obj) -> bool:
    """The watch filter (SPEC §8): could a pass over this release do anything?"""
    return is_stuck(hr) or holds_ours(hr) or (is_suspended(hr) and is_terminating(hr))


def wanted_on_change(hr: Obj) -> bool:
    """The filter for one watch event (SPEC §8's predicate, narrowed): ``predicate`` less the
    stuck states after which helm-controller writes the release again, so that its next
    write — not this one — is the one worth a pass:

    * Ready is Unknown: helm-controller is running an action; it ends with Ready True (not
      stuck) or False (stuck, wanted);
    * a recovery awaits helm-controller's retry (``recovery_awaits_retry``): a pass would
      find it awaiting; helm-controller's attempt writes lastAttemptedGeneration, and a
      release still stuck after it is wanted again.  (The one case where storage would
      still say recover — the revision was recorded but not deleted — is also retried by
      helm-controller first: the relinquish bumped the generation.)

    A suspended or fenced release is always wanted: a pass may have ours to lift, or an
    Event to record.  The sync (at start, after a 410) and serve's periodic catch-all
    keep the whole ``predicate``: should helm-controller never write again (stopped
    mid-action)."""
    if not predicate(hr):
        return False
    if is_suspended(hr) or is_fenced(hr):
        return True
    return not (ready_unknown(hr) or recovery_awaits_retry(hr))


class Verdict(str, enum.Enum):
    """The storage half of the live-stuck row."""

    RECOVER = "recover"
    AWAITING_RETRY = "awaiting-retry"  # the value of executor.Result.AWAITING_RETRY
    SKIPPED = "skipped"  # the value of executor.Result.SKIPPED
    DEFERRED = "deferred"  # the value of executor.Result.DEFERRED: the budget's backoff


# how each refusal of the §4 check leaves a stuck release: None where helm-controller goes
# on from the storage by itself (a deployed revision; a failed, superseded or pending one):
# the failure it reports is then older than the storage (or, for StateError, than its own
# history), and its next attempt clears it
_LEFT_STUCK_BY = {
    storage.Refusal.CORRUPT: Stuck.CORRUPT_PAYLOAD,
    storage.Refusal.NO_STORAGE: Stuck.NO_STORAGE,
    storage.Refusal.UNNUMBERED: Stuck.UNNUMBERED_REVISION,
    storage.Refusal.DUPLICATE: Stuck.DUPLICATE_REVISION,
    storage.Refusal.VERSION_MISMATCH: Stuck.VERSION_MISMATCH,
    storage.Refusal.UNEXPECTED_STATUS: Stuck.UNEXPECTED_STATUS,
    storage.Refusal.LEGACY_HISTORY: Stuck.LEGACY_HISTORY,
    storage.Refusal.DEPLOYED: None,
    storage.Refusal.HELM_HANDLES: None,
    storage.Refusal.STALE_FACE: None,
}


def failure_is_current(hr: Obj) -> bool:
    """Does the release's failure (either face) come from helm-controller's own latest
    attempt?  It attempted the current generation (``attempted_since_generation``: not the
    moment after our relinquish, or anyone's spec change, bumped it) and is not in the
    middle of an action (Ready Unknown: its result comes next)."""
    return attempted_since_generation(hr) and not ready_unknown(hr)


def left_stuck(hr: Obj, cause: Stuck) -> Stuck | None:
    """``cause`` when a skip for it leaves ``hr`` stuck for a human to repair and is worth
    announcing (``RecoverySkipped``, the gauge): once helm-controller's failure is current
    (``failure_is_current``).  None for a stale message the next reconcile clears."""
    return cause if failure_is_current(hr) else None


def skip_of(hr: Obj, choice: storage.Choice) -> Stuck | None:
    """The announced ``Stuck`` of a refused §4 check on ``hr`` (``left_stuck``), else None."""
    if choice.refusal is None:
        return None
    cause = _LEFT_STUCK_BY[choice.refusal]
    return left_stuck(hr, cause) if cause is not None else None


@dataclass(frozen=True)
class StorageVerdict:
    """The storage half of the live-stuck row (it needs the storage LIST, so it is not in
    ``decide``): recover the chosen revision, await helm-controller's retry after an earlier
    recovery, or skip with the reason.  ``executor`` and ``status`` both use this.

    ``stuck``: a skip that leaves the release stuck for a human and is announced
    (``skip_of``); None for every other verdict and for a skip the next reconcile clears.
    ``standing``: where the release stands with its recovery budget, when one was applied
    (``budget.standing``): the record of the recovery writes its count."""

    verdict: Verdict
    detail: str
    choice: storage.Choice
    stuck: Stuck | None = None
    standing: budget.Standing | None = None


def choose(hr: Obj, secrets: list[Obj]) -> storage.Choice:
    """The §4 storage check for the face ``hr`` shows (``detect.stuck_face``): a StateError
    judges the newest revision against the status it quotes and helm-controller's history;
    Helm's name check against an ``uninstalled`` newest revision; any other state (a "has no
    deployed releases", or none) as "has no deployed releases"."""
    face = stuck_face(hr)
    reported = state_error_status(hr) if face is Face.STATE_ERROR else None
    return storage.choose_revision(hr, secrets, reported, name_in_use=face is Face.NAME_IN_USE)


def storage_verdict(
    hr: Obj,
    secrets: list[Obj],
    holding: claims.Holding | None = None,
    standing: budget.Standing | None = None,
) -> StorageVerdict:
    """The storage half of the live-stuck row on ``hr`` and its listed ``secrets``, held
    against ``holding`` (other claimants first: with two, nothing is judged further) and,
    where it would recover, against the recovery budget's ``standing`` (None: none)."""
    verdict = _held(hr, _storage_verdict(hr, secrets), holding)
    if verdict.verdict is not Verdict.RECOVER or standing is None:
        return verdict
    if standing.may_recover:
        return replace(verdict, standing=standing)
    if standing.state is budget.State.GIVEN_UP:
        stuck = left_stuck(hr, Stuck.GIVEN_UP)
        return StorageVerdict(Verdict.SKIPPED, standing.words(), verdict.choice, stuck, standing)
    return StorageVerdict(Verdict.DEFERRED, standing.words(), verdict.choice, None, standing)


def _held(hr: Obj, verdict: StorageVerdict, holding: claims.Holding | None) -> StorageVerdict:
    """``verdict`` held against the other claimants and the tenant identity's authority."""
    holding = holding or claims.Holding()
    if verdict.verdict is Verdict.AWAITING_RETRY:
        return verdict
    if holding.others:
        detail = claims.claimed_twice_detail(hr, holding.others)
        return StorageVerdict(
            Verdict.SKIPPED, detail, verdict.choice, left_stuck(hr, Stuck.CLAIMED_TWICE)
        )
    if verdict.verdict is Verdict.RECOVER and claims.retargeting(hr):
        # helm-controller's next step is the uninstall of the old release, not a retry
        # (ReleaseTargetChanged): nothing to hold it off from, nothing written
        return StorageVerdict(Verdict.SKIPPED, claims.RETARGETING_DETAIL, verdict.choice)
    if verdict.verdict is Verdict.RECOVER and holding.refused:
        return StorageVerdict(
            Verdict.SKIPPED,
            f"outside authority: {holding.refused}",
            verdict.choice,
            left_stuck(hr, Stuck.OUTSIDE_AUTHORITY),
        )
    return verdict


def _storage_verdict(hr: Obj, secrets: list[Obj]) -> StorageVerdict:
    choice = choose(hr, secrets)
    newest = choice.revision.number if choice.revision is not None else None
    # first: did we just recover it? (its newest revision is then one helm-controller
    # handles itself — or none at all when the deleted one was the only one — and the old
    # condition only waits for helm-controller's retry)
    if newest is not None:
        done, why = already_processed(hr, newest)
    elif not choice.storage_found:
        done, why = awaiting_retry_without_storage(hr)
    else:
        done, why = False, ""
    if done:
        return StorageVerdict(Verdict.AWAITING_RETRY, why, choice)
    if not choice.ok:
        return StorageVerdict(Verdict.SKIPPED, choice.reason, choice, skip_of(hr, choice))
    return StorageVerdict(Verdict.RECOVER, choice.reason, choice)
