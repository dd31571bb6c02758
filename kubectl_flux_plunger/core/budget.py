"""The recovery budget of one release (SPEC §6 "Knowing when to stop", issue 57): how many
recoveries in a row failed, whether the next one waits, and when flux-plunger gives up.

A recovery after which helm-controller reports the release stuck again, without a success
in between, is a failed recovery.  The record lives on the HelmRelease, in one annotation
written by the same PATCH as the processed-version annotation (``writes.record_patch``), so
serve, a restarted or new leader and the one-shot verbs all read the same count:

    flux-plunger.cozystack.io/recovery-budget: {"recoveries": 2, "at": "…Z", "limit": 3,
      "wait": 30, "spec": "<digest>", "chart": "<revision>@<digest>", "values": "<digest>",
      "asked": "<requestedAt>|<forceAt>|<resetAt>"}

``recoveries``: the recoveries of the current run, this one included; ``at``: when the
last one was recorded; ``limit``, ``wait``: the budget the recording process used (what
``status`` shows); the rest: what the release was attempted with, so that a change the
operator makes ends the run (``reset_by``).

Pure: no I/O, the clock comes in as ``now``.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from . import constants, detect
from .detect import dig, get_condition, parse_timestamp, processed_version
from .objects import Obj

DEFAULT_LIMIT = 3
DEFAULT_FIRST_WAIT = 30.0
# helm-controller's annotations that ask for a new attempt: `flux reconcile`, `--force`,
# and the reset of its own failure counts
ASKED_ANNOTATIONS = (
    "reconcile.fluxcd.io/requestedAt",
    "reconcile.fluxcd.io/forceAt",
    "reconcile.fluxcd.io/resetAt",
)
# Helm statuses a revision has only after its install or upgrade succeeded
_SUCCEEDED = frozenset({"deployed", "superseded"})
# a bound on the doubling: 2**30 first waits is already decades
_MAX_DOUBLINGS = 30


@dataclass(frozen=True)
class Policy:
    """The budget a deciding process applies: ``limit`` failed recoveries in a row before
    it gives up (capped by helm-controller's remediation retries, ``limit_for``), the
    ``first_wait`` before the second recovery (doubling after each failed one), and
    ``by_hand``: a ``recover NAME`` by hand, which acts once whatever the budget says."""

    limit: int = DEFAULT_LIMIT
    first_wait: float = DEFAULT_FIRST_WAIT
    by_hand: bool = False


@dataclass(frozen=True)
class Record:
    """The budget record as read from the HelmRelease."""

    recoveries: int
    at: datetime
    limit: int
    wait: float
    spec: str = ""
    chart: str = ""
    values: str = ""
    asked: str = ""


class Reset(str, enum.Enum):
    """What ended the previous run of recoveries, closed."""

    READY = "ready"  # helm-controller deployed the release since the last recovery
    SPEC = "spec"  # a new generation not written by flux-plunger (spec less spec.suspend)
    CHART = "chart"  # a new chart artifact revision (version or OCI digest)
    VALUES = "values"  # new values (helm-controller's lastAttemptedConfigDigest)
    ASKED = "asked"  # `flux reconcile` (requestedAt), forceAt, resetAt

    def __str__(self) -> str:
        return self.value


class State(str, enum.Enum):
    """Where a stuck release stands with its budget, closed."""

    FRESH = "fresh"  # no run going on: the next recovery starts one
    DUE = "due"  # failed recoveries in a row, under the limit, the backoff waited out
    WAITING = "backing-off"  # failed recoveries in a row, the backoff not waited out yet
    GIVEN_UP = "given-up"  # the limit of failed recoveries in a row is reached

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Standing:
    """Where a release stands: its ``state``, the failed recoveries in a row, the limit
    that applies, when the next recovery may run (``WAITING``), what ended the last run
    (``FRESH`` after one), whether a by-hand recovery spends a budget the policy
    would have kept (``spent``), and whether the next recovery is one by hand."""

    state: State
    failed: int
    limit: int
    wait: float
    next_at: datetime | None = None
    reset: Reset | None = None
    spent: bool = False
    by_hand: bool = False

    @property
    def may_recover(self) -> bool:
        return self.state in (State.FRESH, State.DUE) or self.spent

    @property
    def recoveries(self) -> int:
        """The count the record of the next recovery writes: a by-hand recovery, or one
        after a reset, starts a new run."""
        return 1 if self.by_hand or self.spent or self.state is State.FRESH else self.failed + 1

    def seconds_left(self, now: datetime) -> float:
        """Seconds until ``next_at`` (0 when none or past)."""
        if self.next_at is None:
            return 0.0
        return max(0.0, (self.next_at - _aware(now)).total_seconds())

    def run_words(self) -> str:
        """The run in words: ``2 failed recoveries in a row (limit 3)``."""
        plural = "y" if self.failed == 1 else "ies"
        return f"{self.failed} failed recover{plural} in a row (limit {self.limit})"

    def words(self) -> str:
        """The standing in words (the detail of a deferred or given-up pass)."""
        run = self.run_words()
        if self.state is State.GIVEN_UP:
            return (
                f"given up: {run}; the release is left stuck until it "
                f"is changed (a new generation, chart revision or values, `flux reconcile`), "
                f"helm-controller deploys it, or `kubectl flux-plunger recover NAME` is run"
            )
        if self.state is State.WAITING and self.next_at is not None:
            return f"backing off: {run}; the next recovery not before {stamp(self.next_at)}"
        return run


def _aware(now: datetime) -> datetime:
    return now if now.tzinfo else now.replace(tzinfo=timezone.utc)


def stamp(when: datetime, *, millis: bool = False) -> str:
    """RFC 3339 in UTC, to the second (or the millisecond: the record's own time, so the
    backoff is measured from when the recovery was recorded, not the second before)."""
    utc = _aware(when).astimezone(timezone.utc)
    if millis:
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def parse(hr: Obj) -> Record | None:
    """The budget record on ``hr``; None when absent or unreadable (a record that cannot
    be read starts a new run: the worst case is one run too many, never a stuck loop)."""
    raw = detect.annotations(hr).get(constants.BUDGET_ANNOTATION)
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    recoveries, at = _int(data.get("recoveries")), parse_timestamp(data.get("at"))
    limit, wait = _int(data.get("limit")), _number(data.get("wait"))
    if recoveries is None or recoveries < 1 or at is None:
        return None
    return Record(
        recoveries,
        at,
        limit if limit is not None and limit >= 1 else DEFAULT_LIMIT,
        wait if wait is not None and wait >= 0 else DEFAULT_FIRST_WAIT,
        _text(data.get("spec")),
        _text(data.get("chart")),
        _text(data.get("values")),
        _text(data.get("asked")),
    )


def spec_digest(hr: Obj) -> str:
    """A digest of ``spec`` less ``spec.suspend``: flux-plunger's only spec write is the
    suspension, so any other change of the spec — whichever generation it bumped — is the
    operator's."""
    spec = dig(hr, "spec")
    spec = {k: v for k, v in spec.items() if k != "suspend"} if isinstance(spec, dict) else {}
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def chart_of(hr: Obj) -> str:
    """The chart helm-controller last attempted: ``status.lastAttemptedRevision`` (the
    chart version) and ``lastAttemptedRevisionDigest`` (an OCI chart's digest) — what its
    own failure counts reset on (helm-controller v1.6.4 ``action.MustResetFailures``)."""
    revision = _text(dig(hr, "status", "lastAttemptedRevision"))
    digest = _text(dig(hr, "status", "lastAttemptedRevisionDigest"))
    return f"{revision}@{digest}" if digest else revision


def values_of(hr: Obj) -> str:
    """The values helm-controller last attempted (``status.lastAttemptedConfigDigest``)."""
    return _text(dig(hr, "status", "lastAttemptedConfigDigest"))


def asked_of(hr: Obj) -> str:
    """The operator's requests for a new attempt, as one token."""
    notes = detect.annotations(hr)
    return "|".join(_text(notes.get(key)) for key in ASKED_ANNOTATIONS)


def _deployed_since(hr: Obj, revision: int | None) -> bool:
    """Did helm-controller deploy the release since the recovery that deleted
    ``revision``?  A revision numbered ``revision`` or more (Helm numbers the next one
    after the newest left) in ``status.history`` with a status only a successful install
    or upgrade gives.  Also Ready=True now."""
    ready = get_condition(hr, "Ready")
    if ready is not None and ready.get("status") == "True":
        return True
    history = dig(hr, "status", "history")
    if revision is None or not isinstance(history, list):
        return False
    return any(
        isinstance(s, dict)
        and (_int(s.get("version")) or 0) >= revision
        and s.get("status") in _SUCCEEDED
        for s in history
    )


def reset_by(hr: Obj, rec: Record) -> Reset | None:
    """What ended the run ``rec`` records, on the release as it now is; None when it goes
    on (the release is stuck again after the last recovery, nothing changed)."""
    if _deployed_since(hr, processed_version(hr)):
        return Reset.READY
    if rec.spec != spec_digest(hr):
        return Reset.SPEC
    if rec.chart != chart_of(hr):
        return Reset.CHART
    if rec.values != values_of(hr):
        return Reset.VALUES
    if rec.asked != asked_of(hr):
        return Reset.ASKED
    return None


def remediation_retries(hr: Obj) -> int | None:
    """helm-controller's remediation retries for the action it last attempted
    (``status.lastAttemptedReleaseAction``: install or upgrade; unknown: the smaller of
    the two set), where set and not negative (negative: unlimited) and not ignored (the
    ``RetryOnFailure`` strategy); None otherwise."""
    action = dig(hr, "status", "lastAttemptedReleaseAction")
    actions = (action,) if action in ("install", "upgrade") else ("install", "upgrade")
    set_ = [
        r
        for a in actions
        # under the RetryOnFailure strategy helm-controller ignores remediation.retries
        if dig(hr, "spec", a, "strategy", "name") != "RetryOnFailure"
        and (r := _int(dig(hr, "spec", a, "remediation", "retries"))) is not None
        and r >= 0
    ]
    return min(set_) if set_ else None


def limit_for(hr: Obj, limit: int) -> int:
    """The limit of failed recoveries in a row for ``hr``: ``limit``, never more than
    helm-controller's remediation retries where set (each failed recovery gives
    helm-controller one more attempt, as a retry does), and at least 1 (the first
    recovery repairs storage; it is not a retry of the chart)."""
    retries = remediation_retries(hr)
    capped = limit if retries is None else min(limit, retries)
    return max(1, capped)


def wait_after(first_wait: float, failed: int) -> float:
    """The wait before the next recovery after ``failed`` failed recoveries in a row:
    ``first_wait * 2**(failed - 1)`` (none before the first)."""
    if failed < 1:
        return 0.0
    return first_wait * float(2 ** min(failed - 1, _MAX_DOUBLINGS))


def _run(hr: Obj, policy: Policy | None) -> tuple[Record | None, int, float, Reset | None]:
    """The record, the limit and first wait that apply, and what ended the recorded run."""
    rec = parse(hr)
    limit = policy.limit if policy is not None else rec.limit if rec else DEFAULT_LIMIT
    if policy is not None and rec is not None:
        # the smaller of this process's limit and the one the run was recorded under: a
        # one-shot sweep never retries what a stricter serve gave up
        limit = min(limit, rec.limit)
    wait = policy.first_wait if policy is not None else rec.wait if rec else DEFAULT_FIRST_WAIT
    return rec, limit_for(hr, limit), wait, reset_by(hr, rec) if rec is not None else None


def standing(hr: Obj, now: datetime, policy: Policy | None = None) -> Standing:
    """Where a stuck ``hr`` stands at ``now`` under ``policy`` (None: the limit and first
    wait of the record itself, as ``status`` and serve's watch filter judge it)."""
    rec, limit, wait, reset = _run(hr, policy)
    by_hand = policy is not None and policy.by_hand
    if rec is None or reset is not None:
        return Standing(State.FRESH, 0, limit, wait, reset=reset, by_hand=by_hand)
    failed = rec.recoveries
    if failed >= limit:
        return Standing(State.GIVEN_UP, failed, limit, wait, spent=by_hand, by_hand=by_hand)
    # a record stamped ahead of this clock (another machine's skew) cannot say how long
    # was waited: the count still holds, the wait is not kept
    next_at = _aware(rec.at) + timedelta(seconds=wait_after(wait, failed))
    if _aware(rec.at) <= _aware(now) < next_at:
        return Standing(State.WAITING, failed, limit, wait, next_at, spent=by_hand, by_hand=by_hand)
    return Standing(State.DUE, failed, limit, wait, next_at, by_hand=by_hand)


def given_up(hr: Obj) -> bool:
    """Has flux-plunger given the release up, judged on its record alone (its own limit)?
    serve's watch filter: helm-controller's writes to a given-up release start no pass."""
    rec, limit, _, reset = _run(hr, None)
    return rec is not None and reset is None and rec.recoveries >= limit


def record_value(hr: Obj, recoveries: int, now: datetime, limit: int, wait: float) -> str:
    """The annotation value the record of a recovery writes, on ``hr`` as it is when
    recorded (held by flux-plunger: helm-controller attempts nothing meanwhile)."""
    return json.dumps(
        {
            "recoveries": recoveries,
            "at": stamp(now, millis=True),
            "limit": limit,
            "wait": wait,
            "spec": spec_digest(hr),
            "chart": chart_of(hr),
            "values": values_of(hr),
            "asked": asked_of(hr),
        },
        separators=(",", ":"),
    )


def as_dict(s: Standing, hr: Obj) -> Obj:
    """The standing for ``status -o json`` (``budget``)."""
    rec = parse(hr)
    return {
        "state": s.state.value,
        "failedRecoveries": s.failed,
        "limit": s.limit,
        "lastRecovery": stamp(rec.at) if rec else None,
        "nextRecovery": stamp(s.next_at) if s.state is State.WAITING and s.next_at else None,
        "resetsOn": list(RESETS_ON) if s.state is not State.FRESH else [],
    }


# what ends a run, in the words `status -o json` gives (budget.resetsOn)
RESETS_ON = (
    "ready",
    "new-generation",
    "new-chart-revision",
    "new-values",
    "reconcile-requested",
    "recover-by-hand",
)
