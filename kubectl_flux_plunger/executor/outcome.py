"""What a pass over one release produced (closed ``Result``, the ``Outcome``), how its steps
report it (``Ending``, ``Report``), the executor's options, and the words that tell a user
what is left after a failed clean-up."""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from ..core import budget, plan
from ..core import constants as C
from ..core.objects import Obj
from ..core.selector import Selector
from .backup import Backup

TERMINATING_DETAIL = (
    "the release began terminating during recovery; storage left intact "
    "and the suspension lifted so helm-controller uninstalls it"
)


# another writer took spec.suspend from us mid-recovery (`flux resume`, `flux suspend`
# of an unsuspended release, an operator's edit): the recovery stops before any delete
TAKEN_DETAIL = "another manager took spec.suspend during recovery; storage left intact"


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
    AWAITING_RETRY = "awaiting-retry"  # recovered earlier; helm-controller has not retried
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
    backup: str = ""  # where the deleted Secret was saved (recover --backup-dir, serve)
    # the resourceVersion of the newest state of the release this pass read or wrote, when
    # that state wants no further pass (``plan.wanted_on_change``): serve's queue skips the
    # watch events up to it (changes this pass already judged).  Not part of the output.
    settled: str | None = None
    # False when the fresh read found the release outside this command's or controller's
    # label selector (``Options.selector``): nothing was decided or written, and serve does
    # not count it in its metrics.  Not part of the output.
    selected: bool = True
    # the Lease name of the running controller that covers the release and was left to
    # it (``Options.covered``; the one-shot verbs), else empty
    controller: str = ""
    # a skip that leaves the release stuck for a human (``plan.Stuck``): announced with a
    # RecoverySkipped Event, counted by serve's flux_plunger_releases_left_stuck.  Not part
    # of the output (its detail is).
    left_stuck: plan.Stuck | None = None

    def as_dict(self) -> Obj:
        out = {
            "namespace": self.namespace,
            "name": self.name,
            "result": str(self.result),
            "detail": self.detail,
            "row": str(self.row),
            "revision": self.revision,
            "failed": self.failed,
            "steps": list(self.steps),
        }
        if self.backup:
            out["backup"] = self.backup
        return out


@dataclass(frozen=True)
class Ending:
    """How a pass over one release ended: its result, the words that say why (None: the
    decision's own reason stands), whether it failed, and — for a skip that leaves the
    release stuck for a human — why (``plan.Stuck``)."""

    result: Result
    detail: str | None = None
    failed: bool = False
    stuck: plan.Stuck | None = None  # a skip that leaves the release stuck (announced)
    # when the next pass is due (the recovery budget's backoff), overriding the decision's
    requeue_after: float | None = None


def failed(detail: str) -> Ending:
    return Ending(Result.FAILED, detail, failed=True)


def deferred(detail: str) -> Ending:
    return Ending(Result.DEFERRED, detail)


@dataclass(frozen=True)
class Report:
    """What a pass has done so far, as its steps return it: how it ended (None while it
    goes on; unchanged if nothing ends it), the steps done, the revision judged, where
    the deleted Secret was saved and the release as the last write left it.  Every step
    returns a new one (``did``, ``end``, ``after``); the entry (``Executor.apply_decision``)
    makes the ``Outcome`` of the last."""

    ending: Ending | None = None
    steps: tuple[str, ...] = ()
    revision: int | None = None
    backup: str = ""
    wrote: Obj | None = None  # the answer of the pass's last write to the release

    def did(self, *steps: str) -> Report:
        return replace(self, steps=self.steps + steps)

    def after(self, written: Obj) -> Report:
        """The report once ``written`` (a write's answer: the release as it now is) landed."""
        return replace(self, wrote=written)

    def end(self, ending: Ending) -> Report:
        return replace(self, ending=ending)

    def but(self, cleanup: str) -> Report:
        """A failed clean-up after the acquire: ``cleanup`` (what is left and how to lift
        it) is appended to the words that ended the pass, and the pass failed."""
        before = self.ending or Ending(Result.UNCHANGED)
        joint = "; " if before.result is Result.FAILED else "; but "
        return self.end(failed(f"{before.detail or ''}{joint}{cleanup}"))


class Claimants(Protocol):
    """Who else claims the Helm release a HelmRelease claims (SPEC §6, "Holding a
    release"): the one-shot verbs list the HelmReleases of the cluster
    (``kube.claimants.ListedClaimants``), serve reads its watch's index."""

    def others(self, hr: Obj, *, after: str | None = None) -> tuple[str, ...]:
        """The keys (``namespace/name``) of the other HelmReleases claiming a release
        ``hr`` claims.  ``after``: a resourceVersion of a HelmRelease the answer must
        reflect (the last write before the delete); None: a recent answer will do.
        Raises ``KubeError`` when it cannot tell."""
        ...


class Authority(Protocol):
    """Whether the identity helm-controller acts as for a HelmRelease may delete its Helm
    storage (``kube.authority.TenantAuthority``: a SubjectAccessReview)."""

    def refusal(self, hr: Obj) -> str:
        """Why that identity may not delete ``hr``'s storage Secrets; "" when it may, or
        when helm-controller acts as itself.  Raises ``KubeError`` when it cannot tell."""
        ...


@dataclass
class Options:
    dry_run_client: bool = False
    fence_warn_after: float = C.FENCE_HELD_WARN_SECONDS
    fence_recheck: float = C.FENCE_RECHECK_SECONDS
    handshake_timeout: float = 30.0  # wait for helm-controller to observe our suspension
    handshake_window: float = 5.0  # one watch window while waiting (stop is checked between)
    allow_recover: bool = True  # resume-owned / drain never start a recovery
    relinquish_timeout: float = 30.0  # keep lifting our suspension while it is ours
    acquire_timeout: float = 10.0  # re-decide an acquire/record racing other writers
    backup: Backup | None = None  # where a Secret is saved right before its DELETE
    # the label selector (-l) of the command or controller: a fresh read that decides and
    # finds the release outside it (relabelled into another shard) decides nothing
    selector: Selector | None = None
    # the one-shot verbs: which running flux-plunger controller covers a fresh read (None:
    # none does).  A release a decision would write to is then left to that controller:
    # every flux-plunger writes as the same field manager (SPEC §2)
    covered: Callable[[Obj], Covered | None] | None = None
    # who else claims a release (None: nobody is asked — tests of one release alone) and
    # what the tenant identity may do (None: no tenant identity is checked)
    claimants: Claimants | None = None
    authority: Authority | None = None
    # the recovery budget (SPEC §6 "Knowing when to stop"): failed recoveries in a row
    # back off and end given-up; None: every stuck release is recovered (tests of one
    # release alone).  serve and `recover` set it; `recover NAME` by hand with by_hand
    budget: budget.Policy | None = None


@dataclass(frozen=True)
class Covered:
    """A running controller that covers a release: its Lease's name and the one line that
    says who holds it, where, what it watches and how to act anyway."""

    lease: str
    detail: str


def covered(by: Covered, namespace: str, name: str) -> Outcome:
    """The outcome of a fresh read that a running controller covers: nothing is written,
    and it counts as deferred (the verb exits non-zero)."""
    return Outcome(namespace, name, Result.DEFERRED, by.detail, controller=by.lease)


def outside(selector: Selector, namespace: str, name: str) -> Outcome:
    """The outcome of a fresh read that found the release outside ``selector``."""
    return Outcome(
        namespace,
        name,
        Result.UNCHANGED,
        f"not selected by -l {selector.text!r} (any more): left to the flux-plunger that "
        "selects it",
        selected=False,
    )


def leftover_hint(hr: Obj) -> str:
    """What is left after a failed clean-up, and the command that lifts it."""
    md = hr["metadata"]
    return (
        f"it may be left suspended and fenced by flux-plunger: `kubectl flux-plunger "
        f"resume-owned -n {md['namespace']} {md['name']}` lifts it"
    )


def fence_hint(hr: Obj) -> str:
    md = hr["metadata"]
    return (
        f"flux-plunger's uninstall fence is left on it: `kubectl flux-plunger "
        f"release-fence -n {md['namespace']} {md['name']}` removes it"
    )
