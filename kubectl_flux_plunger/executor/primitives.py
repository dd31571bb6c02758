"""The write primitives of SPEC §5, each carrying the evidence of the read that decided on
it, with one conflict loop (``retry_on_conflict``) bounded by time — and the requests that
touch Helm storage (``list_storage``, ``delete_revision``, ``create_storage_secret``), named
so a release whose storage lives elsewhere can be routed in one place.  ``list_storage`` is
also the one LIST of a release's storage ``status`` reads."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import TypeVar

from ..core import budget, claims, detect, ownership, plan, storage, writes
from ..core.objects import Obj
from ..kube import JSON, Conflict, Kube, KubeError, core_path
from ..kube.remote import Remotes, storage_cluster
from ..report.events import Recorder
from .outcome import Options

R = TypeVar("R")


def _no_guard(_: Obj) -> None:
    return None


def list_storage(store: Kube, hr: Obj) -> list[Obj]:
    """The Helm storage Secrets of ``hr`` in ``store``, the client of the cluster that keeps
    them (one LIST): the executor's and ``status``'s one read of a release's storage."""
    ns, release = storage.storage_namespace(hr), storage.release_name(hr)
    return store.list_secrets(ns, storage.label_selector(release))


def held_verdict(
    hr: Obj,
    secrets: list[Obj],
    options: Options,
    after: str | None = None,
    standing: budget.Standing | None = None,
) -> tuple[plan.StorageVerdict, claims.Holding]:
    """``plan.storage_verdict`` held against every other claimant of the release and, where
    the verdict is to recover, the tenant identity's authority (SPEC §6, "Holding a
    release") and the recovery budget's ``standing``: the executor's and ``status``'s one
    judgement.  ``after``: see ``Claimants.others``.  Raises KubeError when either cannot
    be told."""
    others = options.claimants.others(hr, after=after) if options.claimants else ()
    holding = claims.Holding(others)
    verdict = plan.storage_verdict(hr, secrets, holding, standing)
    if verdict.verdict is not plan.Verdict.RECOVER or options.authority is None:
        return verdict, holding
    holding = claims.Holding(others, options.authority.refusal(hr))
    return plan.storage_verdict(hr, secrets, holding, standing), holding


class Primitives:
    """The requests of one executor: each write carries the evidence of the read that
    decided on it.  Holds what they use — the client, where remote storage lives, the
    Event recorder, the options and the clock (an acquire re-decides on a 409)."""

    def __init__(
        self,
        kube: Kube,
        remotes: Remotes,
        recorder: Recorder,
        options: Options,
        clock: Callable[[], dt.datetime],
    ):
        self.kube = kube
        self.remotes = remotes
        self.recorder = recorder
        self.opt = options
        self.clock = clock

    def event(self, hr: Obj, spec: plan.EventSpec) -> None:
        self.recorder.record(hr, spec.reason, spec.type, spec.message)

    def fresh(self, hr: Obj) -> Obj | None:
        md = hr["metadata"]
        fresh = self.kube.get_hr(md["namespace"], md["name"])
        if fresh is not None and fresh["metadata"].get("uid") != md.get("uid"):
            return None  # a different object under the same name: ours is gone
        return fresh

    def retry_on_conflict(
        self,
        hr: Obj | None,
        attempt: Callable[[Obj], R],
        *,
        what: str,
        timeout: float,
        transient: bool = False,
        reread: Callable[[Obj], Obj | None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> R | None:
        """The one conflict loop of every write primitive.

        ``attempt(current)`` decides on ``current`` and writes (or returns without writing
        when there is nothing left to do).  A 409 or a failed JSON-patch ``test`` means the
        release changed since that read: re-read and call ``attempt`` again with the fresh
        state, until ``timeout`` seconds have passed — bounded by time, never by a count,
        so a burst of foreign writes cannot make us give up on something still ours.  With
        ``transient`` a 429/5xx/unanswered request is retried the same way (the write is
        idempotent: it is re-decided on a fresh read).  ``reread`` replaces the GET (e.g.
        the newer state a watch already carries).  ``stop()`` true before an attempt
        raises KubeError instead of writing (a caller's deadline passed).  Returns
        ``attempt``'s value, or None when the release is gone."""
        deadline = time.monotonic() + timeout
        current: Obj | None = hr
        delay, fresh = 0.0, True  # fresh: ``current`` is the newest read (attempt it)
        while True:
            if current is None:
                return None
            if fresh and stop is not None and stop():
                raise KubeError(0, "Stopped", f"{what}: stopped before writing")
            try:
                if not fresh:
                    # a transient failure of the re-read keeps the last state and retries
                    current, fresh = (reread or self.fresh)(current), True
                    continue
                return attempt(current)
            except KubeError as exc:
                if exc.not_found and exc.object_missing:
                    return None
                if not (exc.changed if not transient else exc.retryable):
                    raise
                if time.monotonic() >= deadline:
                    raise Conflict(
                        409,
                        "Conflict",
                        f"{what}: the release kept changing (or the "
                        f"API kept failing) for {timeout:.0f}s ({exc})",
                    ) from None
            if delay or not fresh:
                time.sleep(min(max(delay, 0.05), max(0.0, deadline - time.monotonic())))
            delay = min(max(delay * 2, 0.05), 1.0)
            fresh = False

    def relinquish(self, hr: Obj) -> Obj | None:
        """Lift our suspension (fence kept only on a terminating, fenced release).

        Unforced, with rv+uid of ``hr``.  On 409 (or a transient failure) re-read: while we
        still own the suspension, apply again with the fresh evidence, for up to
        ``Options.relinquish_timeout`` seconds; once we no longer own it there is nothing
        to lift.  Returns the object after the write, or None when there was nothing to do."""

        def attempt(current: Obj) -> Obj | None:
            if not ownership.owns_suspend(current):
                return None
            return self.kube.apply_hr(writes.relinquish_body(current))

        return self.retry_on_conflict(
            hr,
            attempt,
            what="lifting our suspension",
            timeout=self.opt.relinquish_timeout,
            transient=True,
        )

    def remove_fence(
        self,
        hr: Obj,
        *,
        timeout: float | None = None,
        stop: Callable[[], bool] | None = None,
        check: Callable[[Obj], None] | None = None,
    ) -> Obj | None:
        """The one fence-removal primitive (the executor and release-fence): drop every
        copy of our fence, never spec.suspend, with a guarded JSON patch testing rv, uid and
        each fence index.  Re-reads and re-decides on conflict (the one retry rule of
        ``retry_on_conflict``).  ``check(state)`` may raise to stop before a write on that
        state (release-fence: a running controller covers it now).  Returns the release
        after the patch, or None when there was no fence to remove (or the release is gone)."""

        def attempt(current: Obj) -> Obj | None:
            ops = writes.remove_fence_json_patch(current)
            if ops is None:
                return None
            if check is not None:
                check(current)
            md = current["metadata"]
            return self.kube.json_patch_hr(md["namespace"], md["name"], ops)

        return self.retry_on_conflict(
            hr,
            attempt,
            what="removing the fence",
            timeout=self.opt.relinquish_timeout if timeout is None else timeout,
            transient=True,
            stop=stop,
        )

    def lift_sole_suspension(
        self,
        hr: Obj,
        timeout: float,
        stop: Callable[[], bool] | None = None,
        guard: Callable[[Obj], None] = _no_guard,
    ) -> Obj | None:
        """Lift a suspension flux-plunger alone owns with the guarded JSON patch (never an
        apply; ``release-fence``).  Returns the release as last read or written (None when
        gone).  Raises KubeError at once for what retrying cannot change, or when
        ``timeout`` passes; ``guard(state)`` raises for a state it may not write on (every
        re-read is held to it)."""

        def attempt(current: Obj) -> Obj:
            if not (detect.is_suspended(current) and ownership.sole_owner_is_us(current)):
                return current
            guard(current)
            md = current["metadata"]
            return self.kube.json_patch_hr(
                md["namespace"], md["name"], writes.unsuspend_json_patch(current)
            )

        return self.retry_on_conflict(
            hr,
            attempt,
            what="lifting flux-plunger's suspension",
            timeout=timeout,
            transient=True,
            stop=stop,
        )

    def acquire(
        self,
        hr: Obj,
        revision: int,
        *,
        first: Obj | None = None,
        reread: Callable[[Obj, bool], Obj | None] | None = None,
    ) -> Obj | None:
        """Suspend + fence in one apply.  Unforced first.  A 409 re-reads and re-decides:
        nothing is acquired once the release is terminating, suspended, no longer needs
        recovery or ``revision`` was processed meanwhile.  A stale resourceVersion (e.g.
        helm-controller wrote status in between) is retried unforced with the fresh one;
        only a field-manager conflict on ``spec.suspend`` at false (a stale owner, e.g. a
        backup controller's Update) is forced.  ``first``: a newer state than the read
        ``hr`` that decided (re-decided the same way before it is written on);
        ``reread(state, changed)``: where a 409 takes the newer state from (``changed``:
        the 409 was a stale resourceVersion, so a newer state exists).  Returns the object
        after the write, or None when not acquired."""
        force = False

        def attempt(current: Obj) -> Obj | None:
            nonlocal force
            if current is not hr and (
                detect.is_terminating(current)
                or detect.is_suspended(current)
                or plan.decide(current, self.clock()).action is not plan.Action.RECOVER
                or detect.already_processed(current, revision)[0]
            ):
                return None
            try:
                return self.kube.apply_hr(writes.acquire_body(current), force=force)
            except Conflict as exc:
                force = exc.field_manager_conflict
                raise

        def again(current: Obj) -> Obj | None:
            return self.fresh(current) if reread is None else reread(current, not force)

        return self.retry_on_conflict(
            first or hr,
            attempt,
            what="suspending the release",
            timeout=self.opt.acquire_timeout,
            reread=again,
        )

    def record(
        self, hr: Obj, revision: int, standing: budget.Standing | None = None
    ) -> tuple[Obj | None, bool]:
        """Write the processed-version annotation (rv-locked), with the recovery budget's
        record when ``standing`` (the recovery's place in its run) is given.  On 409
        re-read: while the release is still ours, live and unchanged in spec, retry with
        the fresh evidence; otherwise return (last read, False) so the caller stops before
        the delete."""
        generation = hr["metadata"].get("generation")

        def attempt(current: Obj) -> tuple[Obj | None, bool]:
            if current is not hr and (
                detect.is_terminating(current)
                or not ownership.owns_suspend(current)
                or current["metadata"].get("generation") != generation
            ):
                return current, False
            md = current["metadata"]
            tally = None
            if standing is not None:
                tally = budget.record_value(
                    current, standing.recoveries, self.clock(), standing.limit, standing.wait
                )
            return self.kube.merge_patch_hr(
                md["namespace"], md["name"], writes.record_patch(current, revision, tally)
            ), True

        return self.retry_on_conflict(
            hr, attempt, what="recording the revision", timeout=self.opt.acquire_timeout
        ) or (None, False)

    def list_storage(self, hr: Obj) -> list[Obj]:
        """The release's Helm storage Secrets (one LIST).  Every read of storage goes
        through here, so a release whose storage lives elsewhere can be routed in one place.
        Storage of a ``spec.kubeConfig`` release is listed in its remote cluster (a
        :class:`~kubectl_flux_plunger.kube.remote.RemoteError` says why it cannot be)."""
        return list_storage(self.remotes.storage_kube(hr), hr)

    def storage_where(self, hr: Obj) -> str:
        """`` in cluster <server>`` when ``hr``'s storage is remote, else nothing."""
        cluster = storage_cluster(self.remotes.storage_kube(hr, reuse=True))
        return "" if cluster == "local" else f" in cluster {cluster}"

    def delete_revision(self, hr: Obj, rev: storage.Revision) -> str:
        """DELETE the one judged storage Secret, preconditioned on its uid and
        resourceVersion (SPEC §5): a Secret rewritten or re-created since the LIST answers
        409 instead of going.  This is the single place right before a revision goes: with
        a backup configured, the Secret is read and saved first — exactly the state the
        preconditions name (another state answers 409 like the DELETE would) — and when
        the save fails nothing is deleted (BackupError).  Returns where the backup went."""
        store = self.remotes.storage_kube(hr, reuse=True)
        saved = ""
        if self.opt.backup is not None and not self.kube.dry_run:
            secret = store.request("GET", "GET", core_path("secrets", rev.namespace, rev.name))
            md = secret.get("metadata") or {}
            if (md.get("uid"), md.get("resourceVersion")) != (rev.uid, rev.resource_version):
                raise Conflict(
                    409,
                    "Conflict",
                    f"Secret {rev.namespace}/{rev.name} changed since it was judged",
                )
            saved = self.opt.backup.save(secret, hr, storage_cluster(store))
        store.delete_secret(rev.namespace, rev.name, rev.uid, rev.resource_version)
        return saved


def create_storage_secret(store: Kube, secret: Obj, dry_run: str) -> bool:
    """Create the storage Secret ``secret`` in ``store`` unless it exists (False then;
    ``restore`` never overwrites); a client dry run only looks.  Raises KubeError for any
    other failure."""
    md = secret["metadata"]
    ns, name = md["namespace"], md["name"]
    try:
        store.request("GET", "GET", core_path("secrets", ns, name))
        return False
    except KubeError as exc:
        if not exc.object_missing:
            raise
    if dry_run == "client":
        return True
    query = {"dryRun": "All"} if dry_run == "server" else None
    try:
        store.request(
            "CREATE",
            "POST",
            core_path("secrets", ns),
            body=secret,
            content_type=JSON,
            query=query,
        )
    except KubeError as exc:
        if exc.conflict:
            return False
        raise
    return True
