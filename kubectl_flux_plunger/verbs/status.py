"""``status``: read-only report of every HelmRelease flux-plunger would act on or has touched."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field

from ..core import budget, claims, detect, ownership, plan, storage
from ..core import constants as C
from ..core.objects import Obj
from ..executor import Options
from ..executor.primitives import held_verdict, list_storage
from ..kube import Kube, KubeError, controller_lease
from ..kube.authority import TenantAuthority
from ..kube.claimants import ListedClaimants
from ..kube.controller_lease import ControllerLease, Controllers
from ..kube.remote import RemoteError, Remotes, storage_cluster
from .select import Selection, fetch


@dataclass
class Row:
    namespace: str
    name: str
    state: str
    suspend: bool
    suspend_owner: str  # "flux-plunger", other manager names, or "-"
    revision: int | None
    helm_status: str  # payload status of the newest revision, or why unknown
    processed: str  # the processed-version annotation, or "-"
    fenced: bool
    age: str
    release: str
    storage_namespace: str
    note: str
    stuck: bool = False  # helm-controller shows the release stuck for good (any face)
    face: str = ""  # which face (detect.Face's value), "" when not stuck
    # helm-controller's Ready reason while Ready is False ("" otherwise): a ``failing``
    # release's reason, or the stuck face's (UpgradeFailed, StateError)
    ready_reason: str = ""
    cluster: str = "local"  # where the Helm storage is: local, or the spec.kubeConfig server
    # the Leases of the running controllers whose recorded scope selects it (sharding),
    # comma-joined; "" when none does (or none was read)
    controller: str = ""
    # for -o json|yaml: the release's metadata as read (managedFields included) and the
    # (manager, operation) pairs that own spec.suspend
    metadata: Obj = field(default_factory=Obj)
    suspend_owners: list[tuple[str, str]] = field(default_factory=list)
    # the Flux UI's suspendedBy name by the manager of suspend_owners that wrote it
    # (``suspenders``); empty for most releases
    suspended_by: dict[str, str] = field(default_factory=dict)
    # while ``recovering``: since when flux-plunger holds the release and which process
    # (``hold_of``); None otherwise
    hold: Obj | None = None
    # the other HelmReleases naming the same Helm release (``claimed-twice``), as keys
    claimants: list[str] = field(default_factory=list)
    # the recovery budget (``budget.as_dict``) while a run of recoveries is recorded and
    # not ended by a change; None otherwise
    budget: Obj | None = None

    def as_dict(self) -> Obj:
        return asdict(self)


@dataclass
class Report:
    rows: list[Row]
    missing: list[str]
    total: int  # HelmReleases selected, shown or not


def _age(seconds: float | None) -> str:
    """kubectl-style short age."""
    if seconds is None:
        return "<unknown>"
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 120:
        return f"{m}m"
    h = m // 60
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def suspenders(hr: Obj) -> dict[str, str]:
    """The Flux UI's ``suspendedBy`` name, keyed by the manager that owns ``spec.suspend``
    and wrote that annotation (the Web UI's ``flux-operator-web`` writes both in one merge
    patch).  Empty when not suspended, when no owner of the suspension wrote the name (one
    left behind by an earlier suspension), and for our own (the name is ours)."""
    name = ownership.suspended_by(hr)
    if not detect.is_suspended(hr) or not name:
        return {}
    writers = set(ownership.suspended_by_managers(hr))
    return {
        m: name
        for m, _ in ownership.suspend_owners(hr)
        if m in writers and m != C.FIELD_MANAGER and name != m
    }


def _owners(hr: Obj) -> str:
    """Who owns spec.suspend; empty when the release is not suspended (an owner of
    ``suspend: false`` is no suspension).  The UI's suspender follows its manager:
    ``flux-operator-web (alice)``."""
    if not detect.is_suspended(hr):
        return "-"
    owners = ownership.suspend_owners(hr)
    if not owners:
        return "-"
    by = suspenders(hr)

    def cell(manager: str, operation: str) -> str:
        if manager in by:
            return f"{manager} ({by[manager]})"
        if operation != "Apply" or manager != C.FIELD_MANAGER:
            return f"{manager}({operation})"
        return manager

    return ",".join(dict.fromkeys(cell(m, op) for m, op in owners))


# What `status` shows for each row of the decision table (SPEC §2 vocabulary).  The state is
# derived from `plan.decide` — there is no second classifier.
R = plan.Row
STATE_OF_ROW: dict[plan.Row, str] = {
    R.TERMINATING_SUSPENDED_OWNED: "delete-held",
    R.TERMINATING_SUSPENDED_FOREIGN: "suspended-by-other",
    R.TERMINATING_FENCED_UNINSTALLED: "delete-held",
    R.TERMINATING_FENCED_WAITING: "delete-held",
    R.TERMINATING_UNFENCED: "terminating",
    R.LIVE_SUSPENDED_FOREIGN: "suspended-by-other",
    R.LIVE_SUSPENDED_OWNED: "recovering",
    R.LIVE_FENCED: "fenced",
    R.LIVE_STUCK: "stuck",
    R.HEALTHY: "healthy",
}

# A suspension of ours younger than this may be a one-shot `recover` in flight (handshake
# wait + record + delete + relinquish); older, with no controller running, it was left by a
# process that is gone.
IN_FLIGHT_SECONDS = 120.0


def _suspended_at(hr: Obj) -> dt.datetime | None:
    """When flux-plunger last applied spec.suspend (its managedFields entry's time)."""
    for entry in (hr.get("metadata") or {}).get("managedFields") or []:
        if (
            isinstance(entry, dict)
            and entry.get("manager") == C.FIELD_MANAGER
            and entry.get("operation") == "Apply"
        ):
            return detect.parse_timestamp(entry.get("time"))
    return None


def state_of(hr: Obj, now: dt.datetime, lease: ControllerLease | None = None) -> str:
    """The state ``status`` shows: the row ``plan.decide`` picks, in words.

    * our suspension on a live release is ``recovering`` only while something may still be
      recovering it (a controller holds its Lease, or the suspension is younger than a
      one-shot recovery takes); otherwise ``interrupted`` (``resume-owned``/``recover``
      lifts it);
    * a suspension we do not own is ``legacy-suspension`` when an older flux-plunger left
      it; on a stuck release the state says both (``suspended-by-other,stuck``)."""
    row = plan.decide(hr, now).row
    state = STATE_OF_ROW.get(row, row.value)
    if row is R.LIVE_SUSPENDED_OWNED:
        since = _suspended_at(hr)
        young = since is not None and (now - since).total_seconds() < IN_FLIGHT_SECONDS
        if not ((lease is not None and lease.running) or young):
            state = "interrupted"
    if state == "suspended-by-other" and detect.legacy_suspension(hr):
        state = "legacy-suspension"
    if row in (R.LIVE_SUSPENDED_FOREIGN, R.TERMINATING_SUSPENDED_FOREIGN) and detect.is_stuck(hr):
        state += ",stuck"
    if row is R.HEALTHY and detect.failing_reason(hr) is not None:
        state = "failing"  # Ready=False for a reason flux-plunger does not repair
    return state


def hold_of(hr: Obj, state: str, lease: ControllerLease | None) -> Obj | None:
    """Since when and by which process flux-plunger holds a ``recovering`` release.  Since:
    the time of our Apply's managedFields entry (the apiserver stamps it).  By: the holder
    of the controller's Lease while one runs (a one-shot verb refuses then, unless forced),
    else a one-shot run (``recover`` or ``resume-owned``; a suspension of ours younger than
    a one-shot recovery takes, with no controller running)."""
    if state != "recovering":
        return None
    since = _suspended_at(hr)
    running = lease is not None and lease.running
    return {
        "since": since.strftime("%Y-%m-%dT%H:%M:%SZ") if since else None,
        "by": f"controller {lease.holder}" if running and lease else "a one-shot run",
    }


def hold_note(hold: Obj) -> str:
    """The hold in words, for the NOTE column."""
    since = f" since {hold['since']}" if hold.get("since") else ""
    return f"held by flux-plunger{since} ({hold['by']})"


def interesting(hr: Obj, state: str) -> bool:
    """Would flux-plunger act on it, or has it touched it?"""
    return (
        state != "healthy"
        or detect.processed_annotation_present(hr)
        or detect.is_fenced(hr)
        or ownership.owns_suspend(hr)
    )


def controller(kube: Kube, lease_namespace: str | None) -> ControllerLease:
    """Whether a flux-plunger controller is running, from its Lease (one GET)."""
    return controller_lease.read(
        kube, lease_namespace or controller_lease.default_lease_namespace()
    )


@dataclass(frozen=True)
class Survey:
    """The controllers ``status`` reports (``leases``), and the warning lines to say after
    the report when the survey fell back or read nothing (``status`` only warns)."""

    leases: tuple[ControllerLease, ...]
    warnings: tuple[str, ...] = ()


def _warnings(found: Controllers) -> tuple[str, ...]:
    if found.blind():
        blind = (
            f"cannot read any flux-plunger controller's Lease ({found.list_error}): "
            "cannot tell whether a running controller covers these releases"
        )
        return (blind,)
    return (found.warning(),) if found.warning() else ()


def controllers(
    kube: Kube,
    lease_namespace: str | None,
    lease_name: str | None = None,
    also: tuple[str | None, ...] = (),
) -> Survey:
    """The controllers ``status`` reports: every flux-plunger Lease of the cluster (one
    LIST; sharding: one Lease per install), ``lease_name`` counted as one too; where that
    LIST is refused, those of the lease namespace and of ``also`` (the releases')."""
    ns = lease_namespace or controller_lease.default_lease_namespace()
    found = controller_lease.survey(
        kube, ns, names=(lease_name,) if lease_name else (), also=[n for n in also if n]
    )
    return Survey(found.leases, _warnings(found))


def covering(leases: list[ControllerLease] | None, hr: Obj) -> list[ControllerLease]:
    """The running controllers whose recorded scope selects ``hr``."""
    return [c for c in leases or [] if c.running and c.covers(hr)]


def judge(kube: Kube, default_service_account: str | None = None) -> Options:
    """What a stuck release is held against in ``status``, as ``recover`` holds it: the
    other claimants (a LIST of the cluster's HelmReleases, once) and the tenant identity's
    authority (a SubjectAccessReview per identity and namespace)."""
    return Options(
        claimants=ListedClaimants(kube),
        authority=TenantAuthority(kube, default_service_account),
    )


def run(
    kube: Kube,
    sel: Selection,
    now: dt.datetime | None = None,
    *,
    lease_namespace: str | None = None,
    lease: ControllerLease | None = None,
) -> tuple[list[Row], list[str]]:
    r = report(kube, sel, now, lease_namespace=lease_namespace, lease=lease)
    return r.rows, r.missing


def report(
    kube: Kube,
    sel: Selection,
    now: dt.datetime | None = None,
    *,
    lease_namespace: str | None = None,
    lease: ControllerLease | None = None,
    leases: list[ControllerLease] | None = None,
    held: Options | None = None,
) -> Report:
    """``leases``: the controllers read (:func:`controllers`); ``lease``: one of them;
    ``held``: what stuck releases are held against (:func:`judge`; None: nothing)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    releases, errors = fetch(kube, sel)
    whole = sel.all_namespaces and not sel.selector and not sel.names
    if held is not None and isinstance(held.claimants, ListedClaimants) and whole:
        held.claimants.seed(releases)  # the whole cluster: its claimants' LIST
    if leases is None and lease is not None:
        leases = [lease]
    if leases is None and any(
        detect.is_suspended(hr) and ownership.owns_suspend(hr) for hr in releases
    ):
        leases = [controller(kube, lease_namespace)]
    rows = []
    remotes = Remotes(kube)  # a dead remote costs one bounded wait per run, not per release
    try:
        for hr in releases:
            cover = covering(leases, hr)
            state = state_of(hr, now, cover[0] if cover else None)
            if not sel.names and not interesting(hr, state):
                continue
            rows.append(_row(remotes, hr, state, now, cover, held))
    finally:
        remotes.close()
    return Report(rows, errors, len(releases))


def row(
    kube: Kube,
    hr: Obj,
    now: dt.datetime | None = None,
    *,
    lease: ControllerLease | None = None,
    leases: list[ControllerLease] | None = None,
    held: Options | None = None,
) -> Row:
    """The row of one release (``status --watch`` renders each change)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    cover = covering(leases if leases is not None else [lease] if lease else None, hr)
    remotes = Remotes(kube)
    try:
        state = state_of(hr, now, cover[0] if cover else None)
        return _row(remotes, hr, state, now, cover, held)
    finally:
        remotes.close()


def _row(
    remotes: Remotes,
    hr: Obj,
    state: str,
    now: dt.datetime,
    cover: list[ControllerLease] | None = None,
    held: Options | None = None,
) -> Row:
    md = hr["metadata"]
    others: tuple[str, ...] = ()
    release, ns = storage.release_name(hr), storage.storage_namespace(hr)
    revision, helm_status, note, cluster = None, "-", "", "local"
    # as the controller that recorded the run judges it (its limit and first wait)
    standing = budget.standing(hr, now)
    try:
        store: Kube | None = remotes.storage_kube(hr)
    except RemoteError as exc:
        store, cluster = None, "<remote>"
        helm_status, note = "<unreadable>", str(exc)
    if store is not None:
        cluster = storage_cluster(store)
        state, revision, helm_status, note, others = _storage_part(store, hr, state, held, standing)
    if state == "failing":
        note = (
            f"helm-controller reports {detect.failing_reason(hr)}; flux-plunger does not repair it"
        )
    processed = (md.get("annotations") or {}).get(C.PROCESSED_ANNOTATION, "-")
    face = detect.stuck_face(hr)
    hold = hold_of(hr, state, cover[0] if cover else None)
    if hold:
        note = "; ".join(filter(None, (hold_note(hold), note)))
    return Row(
        namespace=md.get("namespace", ""),
        name=md["name"],
        state=state,
        suspend=detect.is_suspended(hr),
        suspend_owner=_owners(hr),
        revision=revision,
        helm_status=helm_status,
        processed=processed,
        fenced=detect.is_fenced(hr),
        age=_age(detect.age_seconds(hr, now)),
        release=release,
        storage_namespace=ns,
        note=note,
        stuck=face is not None,
        face=face.value if face is not None else "",
        ready_reason=detect.ready_false_reason(hr) or "",
        cluster=cluster,
        controller=",".join(c.name for c in cover or []),
        metadata=md,
        suspend_owners=list(ownership.suspend_owners(hr)),
        suspended_by=suspenders(hr),
        hold=hold,
        claimants=list(others),
        budget=_budget(hr, standing),
    )


def _budget(hr: Obj, standing: budget.Standing) -> Obj | None:
    """The recovery budget for ``-o json``: while a run is recorded and not ended."""
    if budget.parse(hr) is None or standing.state is budget.State.FRESH:
        return None
    return budget.as_dict(standing, hr)


def _storage_part(
    store: Kube, hr: Obj, state: str, held: Options | None, standing: budget.Standing
) -> tuple[str, int | None, str, str, tuple[str, ...]]:
    """What the storage says of ``hr``: (state, newest revision, its Helm status, the note,
    the other claimants).  A stuck release is held against ``held`` (``_judged``) and its
    recovery budget's ``standing``."""
    try:
        secrets = list_storage(store, hr)
    except KubeError as exc:
        return state, None, "<unreadable>", f"cannot list Helm storage: {exc}", ()
    unheld = ""
    try:
        verdict, holding = _judged(hr, secrets, state, held, standing)
    except KubeError as exc:  # the claimants' LIST or the tenant's review
        verdict, holding = plan.storage_verdict(hr, secrets), claims.Holding()
        unheld = f"cannot tell who else holds the release: {exc}"
    choice = verdict.choice
    revision = choice.revision.number if choice.revision is not None else None
    note = "; ".join(filter(None, (verdict.detail, unheld)))
    if state == "stuck" and verdict.verdict is plan.Verdict.AWAITING_RETRY:
        state = verdict.verdict.value
    elif state == "stuck" and holding.others:
        state = plan.Stuck.CLAIMED_TWICE.value
    elif state == "stuck" and holding.refused and verdict.verdict is plan.Verdict.SKIPPED:
        state = plan.Stuck.OUTSIDE_AUTHORITY.value
    elif state == "stuck" and verdict.stuck is plan.Stuck.GIVEN_UP:
        state = plan.Stuck.GIVEN_UP.value
    elif state == "stuck" and verdict.verdict is plan.Verdict.DEFERRED:
        state = budget.State.WAITING.value
    return state, revision, choice.helm_status or "-", note, holding.others


def _judged(
    hr: Obj,
    secrets: list[Obj],
    state: str,
    held: Options | None,
    standing: budget.Standing | None = None,
) -> tuple[plan.StorageVerdict, claims.Holding]:
    """The storage verdict; for a stuck release held against ``held`` (the claimants and
    the tenant's authority, as ``recover`` holds it) and its recovery budget."""
    if state != "stuck":
        return plan.storage_verdict(hr, secrets), claims.Holding()
    if held is None:
        return plan.storage_verdict(hr, secrets, None, standing), claims.Holding()
    return held_verdict(hr, secrets, held, None, standing)
