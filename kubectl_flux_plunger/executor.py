"""The thin executor: turns a decision of :mod:`plan` into requests, each carrying the
preconditions of the read that decided it, and re-reads.

Every decision is made on a fresh GET (never a cache).  A 409 means "someone wrote
between our read and our write": the executor re-reads and re-decides, a bounded number
of times, instead of pushing its stale view through.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from . import constants as C
from . import detect, ownership, plan, storage, writes
from .events import Recorder
from .kube import Kube, KubeError

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 3
TERMINATING_DETAIL = ("the release began terminating during recovery; storage left intact "
                      "and the suspension lifted so helm-controller uninstalls it")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Stopped(Exception):
    """The caller asked us to stop (shutdown); nothing more is started."""


@dataclass
class Outcome:
    """What one pass did to one release."""

    namespace: str
    name: str
    result: str          # see RESULTS
    detail: str
    row: str = ""
    revision: int | None = None
    failed: bool = False
    requeue_after: float | None = None
    steps: list[str] = field(default_factory=list)  # dry-run plan / what was done

    def as_dict(self) -> dict:
        return {"namespace": self.namespace, "name": self.name, "result": self.result,
                "detail": self.detail, "row": self.row, "revision": self.revision,
                "failed": self.failed, "steps": list(self.steps)}


# Outcome.result is one of: recovered, deferred, skipped, awaiting-retry (recovered earlier;
# helm-controller has not retried since — not a failure), relinquished, fence-removed,
# waiting, unchanged, gone, failed, planned.


@dataclass
class Options:
    dry_run_client: bool = False
    fence_warn_after: float = C.FENCE_HELD_WARN_SECONDS
    fence_recheck: float = C.FENCE_RECHECK_SECONDS
    handshake_timeout: float = 30.0   # wait for helm-controller to observe our suspension
    handshake_window: float = 5.0       # one watch window while waiting (stop is checked between)
    allow_recover: bool = True        # resume-owned / drain never start a recovery


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
        out = Outcome(namespace, name, "unchanged", d.reason, row=d.row,
                      requeue_after=d.requeue_after)
        if hr is None:
            out.result = "gone"
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
            out.result = "waiting"
        elif act is plan.Action.RECOVER:
            if not self.opt.allow_recover:
                out.result, out.detail = "skipped", "stuck; recovery not requested by this command"
            else:
                self.recover(hr, out)
        elif d.row == "remote-kubeconfig":
            out.result = "skipped"
        return out

    # -- dry run -----------------------------------------------------------------

    def _plan_only(self, hr: dict, d: plan.Decision, out: Outcome) -> Outcome:
        out.result = "planned"
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
            out.result = "planned"
            out.steps += [
                f"apply (flux-plunger) spec.suspend=true and finalizer {C.FENCE}",
                f"annotate {C.PROCESSED_ANNOTATION}={rev.number}",
                f"delete Secret {rev.namespace}/{rev.name} (uid {rev.uid}, "
                f"Helm status {choice.helm_status})",
                "apply (flux-plunger) without spec.suspend and without the fence",
            ]
        else:
            out.result = "unchanged"
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

    def relinquish(self, hr: dict) -> dict | None:
        """Lift our suspension (fence kept only on a terminating, fenced release).

        Unforced, with rv+uid of ``hr``.  On 409 re-read: if we still own the suspension,
        apply again with the fresh evidence; if we no longer do, there is nothing to lift.
        Returns the object after the write, or None when there was nothing to do."""
        current = hr
        for _ in range(CONFLICT_RETRIES):
            if current is None or not ownership.owns_suspend(current):
                return None
            try:
                return self.kube.apply_hr(writes.relinquish_body(current))
            except KubeError as exc:
                if not exc.conflict and not (exc.not_found and exc.object_missing):
                    raise
                if exc.not_found:
                    return None
            current = self._fresh(current)
        raise KubeError(409, "Conflict", "the release kept changing under us while lifting "
                        "our suspension; will retry")

    def _relinquish_or_warn(self, hr: dict, out: Outcome) -> None:
        try:
            self.relinquish(hr)
        except KubeError as exc:
            if not exc.conflict:
                self._event(hr, plan.UNSUSPEND_FAILED)
            out.result, out.failed = "failed", True
            out.detail = f"could not lift our suspension: {exc}"
            return
        out.result = "relinquished"
        out.steps.append("lifted our suspension")

    def remove_fence(self, hr: dict) -> bool:
        """Drop our fence only (never spec.suspend): a guarded JSON patch testing rv, uid
        and the fence's index.  Re-reads and re-decides on conflict.  True if removed."""
        current = hr
        for _ in range(CONFLICT_RETRIES):
            if current is None:
                return False
            ops = writes.remove_fence_json_patch(current)
            if ops is None:
                return False
            md = current["metadata"]
            try:
                self.kube.json_patch_hr(md["namespace"], md["name"], ops)
                return True
            except KubeError as exc:
                # a failed JSON-patch test answers 422 (Invalid); a stale rv 409
                if exc.status not in (409, 422) and not exc.not_found:
                    raise
                if exc.not_found:
                    return False
            current = self._fresh(current)
        raise KubeError(409, "Conflict", "the release kept changing while removing the fence")

    def _remove_fence(self, hr: dict, out: Outcome) -> None:
        try:
            removed = self.remove_fence(hr)
        except KubeError as exc:
            out.result, out.failed = "failed", True
            out.detail = f"could not remove the fence: {exc}"
            return
        out.result = "fence-removed" if removed else "unchanged"

    def acquire(self, hr: dict, revision: int) -> dict | None:
        """Suspend + fence in one apply.  Unforced first; on 409 re-read and re-decide, and
        force only if the release is live, ``spec.suspend`` is still false (a stale owner at
        false), it still needs recovery and ``revision`` was not processed meanwhile.  A
        409 again (helm-controller writes status several times per retry) is re-decided
        the same way, a bounded number of times.  Returns the object after the write, or
        None when not acquired."""
        current, force = hr, False
        for _ in range(CONFLICT_RETRIES + 1):
            try:
                return self.kube.apply_hr(writes.acquire_body(current), force=force)
            except KubeError as exc:
                if not exc.conflict:
                    raise
            current = self._fresh(current)
            if current is None or detect.is_terminating(current) or detect.is_suspended(current):
                return None
            if plan.decide(current, self.clock()).action is not plan.Action.RECOVER or \
                    detect.already_processed(current, revision)[0]:
                return None
            force = True
        return None

    # -- the recovery sequence (SPEC §6) -------------------------------------------

    def _choose(self, hr: dict, out: Outcome) -> storage.Choice | None:
        """List the release's Helm storage and pick the revision to delete (SPEC §4) past
        the already-processed guard; None (with ``out`` saying why) when there is none."""
        ns, release = storage.storage_namespace(hr), storage.release_name(hr)
        try:
            secrets = self.kube.list_secrets(ns, storage.label_selector(release))
        except KubeError as exc:
            out.result, out.failed = "failed", True
            out.detail = f"cannot list Helm storage in namespace {ns}: {exc}"
            return None
        choice = storage.choose_revision(hr, secrets)
        newest = choice.revision.number if choice.revision is not None else None
        out.revision = newest
        # first: did we just recover it? (its newest revision is then one helm-controller
        # handles itself, and the old condition only waits for helm-controller's retry)
        done, why = detect.already_processed(hr, newest) if newest is not None else (False, "")
        if done:
            out.result, out.detail = "awaiting-retry", why
            return None
        if not choice.ok:
            out.result, out.detail = "skipped", choice.reason
            return None
        return choice

    def recover(self, hr: dict, out: Outcome) -> None:
        choice = self._choose(hr, out)
        if choice is None:
            return
        rev = choice.revision
        release = storage.release_name(hr)
        if self.should_stop():
            out.result, out.detail = "deferred", "shutting down; recovery not started"
            return
        try:
            held = self.acquire(hr, rev.number)
        except KubeError as exc:
            out.result, out.failed = "failed", True
            out.detail = f"could not suspend the release: {exc}"
            # the apply may have landed although its answer was lost (timeout, 5xx)
            try:
                self._final_relinquish(self._fresh(hr), out)
            except KubeError:
                pass
            return
        if held is None:
            self._event(hr, plan.RECOVERY_DEFERRED)
            out.result = "deferred"
            out.detail = ("spec.suspend was taken by another manager or the release began "
                          "terminating between read and write")
            return
        out.steps.append("suspended and fenced")
        # From here on every exit relinquishes exactly once.
        current = held
        try:
            # 1. helm-controller must have observed the suspended generation: it is then
            #    not mid-action on this release (a watch from our apply's rv)
            current = self._await_handshake(current)
            if current is None or detect.is_terminating(current):
                out.result, out.detail = "deferred", TERMINATING_DETAIL
                return
            if detect.observed_lags(current) and not self.kube.dry_run:
                out.result = "deferred"
                out.detail = (f"helm-controller did not acknowledge the suspension within "
                              f"{self.opt.handshake_timeout:.0f}s; storage left intact")
                return
            # 2. record the revision, locked to the resourceVersion of the state just
            #    judged: its answer is the re-read (any write since → 409 → re-decided)
            current, recorded = self._record(current, rev.number)
            if current is None or detect.is_terminating(current):
                out.result, out.detail = "deferred", TERMINATING_DETAIL
                return
            if not recorded:
                out.result = "deferred"
                out.detail = ("the release changed under us during recovery (another writer "
                              "took spec.suspend or changed its spec); storage left intact")
                return
            out.steps.append(f"recorded revision {rev.number}")
            if self.should_stop():
                out.result, out.detail = "deferred", "shutting down; recovery aborted before the delete"
                return
            if not self.kube.dry_run and not (detect.is_suspended(current)
                                              and ownership.owns_suspend(current)):
                out.result = "deferred"
                out.detail = ("another manager took spec.suspend during recovery; storage "
                              "left intact")
                return
            try:
                self.kube.delete_secret(rev.namespace, rev.name, rev.uid)
            except KubeError as exc:
                if not exc.not_found and exc.status != 409:
                    raise
                out.result = "deferred"
                out.detail = f"Secret {rev.name} changed or vanished before the delete: {exc}"
                return
            out.steps.append(f"deleted {rev.namespace}/{rev.name}")
            out.result = "recovered"
            out.detail = (f"deleted revision {rev.number} ({choice.helm_status}) of release "
                          f"{release}; helm-controller will reconcile it again")
        except KubeError as exc:
            out.result, out.failed = "failed", True
            out.detail = f"recovery interrupted: {exc}"
        except Stopped:
            out.result, out.detail = "deferred", "shutting down; recovery aborted before the delete"
        finally:
            self._final_relinquish(current, out)

    def _final_relinquish(self, current: dict | None, out: Outcome) -> None:
        """The one relinquish of every exit after the acquire.  When someone else took
        spec.suspend meanwhile there is nothing of ours to lift, but our fence must not
        outlive us (SPEC §6: live → drop it; terminating and suspended by another manager
        → drop it; terminating and unsuspended → keep it for the uninstall)."""
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
            out.failed = True
            if out.result != "failed":
                out.result = "failed"
                out.detail = f"{out.detail}; but could not lift our suspension: {exc}"

    def _record(self, hr: dict, revision: int) -> tuple[dict | None, bool]:
        """Write the processed-version annotation (rv-locked).  On 409 re-read: while the
        release is still ours, live and unchanged in spec, retry with the fresh evidence;
        otherwise return (last read, False) so the caller stops before the delete."""
        current = hr
        for _ in range(CONFLICT_RETRIES):
            md = current["metadata"]
            try:
                return self.kube.merge_patch_hr(md["namespace"], md["name"],
                                                writes.record_patch(current, revision)), True
            except KubeError as exc:
                if not exc.conflict:
                    raise
            fresh = self._fresh(current)
            if (fresh is None or detect.is_terminating(fresh) or not ownership.owns_suspend(fresh)
                    or fresh["metadata"].get("generation") != md.get("generation")):
                return fresh, False
            current = fresh
        raise KubeError(409, "Conflict", "the release kept changing during recovery")

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
