"""``release-fence``: what an uninstall of the controller runs (SPEC §7).

For every release carrying our fence: lift a suspension flux-plunger alone owns (guarded
JSON patch, never server-side apply), then remove every copy of the fence with guarded
test+remove patches.  Retries are per release within a bounded window, so one unreadable
release cannot starve the rest.  Optionally first lets helm-controller finish uninstalls.
"""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass

from .. import constants as C
from .. import detect, ownership, writes
from ..executor import Executor, Result
from ..plan import Row
from ..kube import Kube, KubeError

RETRY_SLEEP = 1.0
MAX_FENCE_REMOVALS = 8
DEFAULT_CONCURRENCY = 8


def _retryable(exc: KubeError) -> bool:
    """Worth another try inside the deadline: the release changed (409, a failed JSON-patch
    ``test``), or the API was unreachable, throttled or failing (0, 429, 5xx).  Everything
    else — 400, 401, 403, 422 (an admission denial), a 404 for the API itself — fails the
    release at once: retrying cannot change the answer."""
    return (exc.conflict or exc.failed_test_op or exc.status == 0 or exc.status == 429
            or exc.status >= 500)


def _sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, min(RETRY_SLEEP, deadline - time.monotonic())))


@dataclass
class FenceResult:
    namespace: str
    name: str
    released: bool
    without_uninstall: bool
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        ref = f"{self.namespace}/{self.name}"
        if not self.released:
            return f"NOT released {ref}: {self.detail}"
        if self.without_uninstall:
            return (f"released the uninstall fence from {ref} without an uninstall: "
                    "helm-controller had not handled it")
        return f"released the uninstall fence from {ref}" + (f" ({self.detail})" if self.detail else "")


def _lift_sole_suspension(kube: Kube, hr: dict, deadline: float) -> dict | None:
    """Lift a suspension flux-plunger alone owns.  Returns the release as last read
    (None when gone).  Raises KubeError when the window closes."""
    current = hr
    while True:
        if current is None:
            return None
        if not (detect.is_suspended(current) and ownership.sole_owner_is_us(current)):
            return current
        md = current["metadata"]
        try:
            return kube.json_patch_hr(md["namespace"], md["name"],
                                      writes.unsuspend_json_patch(current))
        except KubeError as exc:
            if exc.object_missing:
                return None
            if not _retryable(exc) or time.monotonic() >= deadline:
                raise
        _sleep_until(deadline)
        current = _reread(kube, current, deadline)


def _reread(kube: Kube, hr: dict, deadline: float) -> dict | None:
    md = hr["metadata"]
    while True:
        try:
            fresh = kube.get_hr(md["namespace"], md["name"])
            if fresh is not None and fresh["metadata"].get("uid") != md.get("uid"):
                return None
            return fresh
        except KubeError as exc:
            if not _retryable(exc) or time.monotonic() >= deadline:
                raise
            _sleep_until(deadline)


def _remove_fences(kube: Kube, hr: dict, deadline: float) -> dict | None:
    """Remove every copy of the fence; returns the release as last written/read."""
    current, removed = hr, 0
    while current is not None and detect.is_fenced(current):
        if removed >= MAX_FENCE_REMOVALS:
            raise KubeError(409, "Conflict", "the fence keeps coming back; is a flux-plunger "
                            "controller still running?")
        md = current["metadata"]
        try:
            current = kube.json_patch_hr(md["namespace"], md["name"],
                                         writes.remove_fence_json_patch(current))
            removed += 1
            continue
        except KubeError as exc:
            if exc.object_missing:
                return None
            if not _retryable(exc) or time.monotonic() >= deadline:
                raise
        _sleep_until(deadline)
        current = _reread(kube, current, deadline)
    return current


def release_one(kube: Kube, hr: dict, window: float,
                deadline: float | None = None) -> FenceResult:
    """Release one fenced release, retrying within ``window`` seconds and never past the
    global ``deadline`` (a ``time.monotonic()`` value)."""
    md = hr["metadata"]
    ns, name = md["namespace"], md["name"]
    own = time.monotonic() + window
    deadline = own if deadline is None else min(own, deadline)
    try:
        current = _lift_sole_suspension(kube, hr, deadline)
    except KubeError as exc:
        return FenceResult(ns, name, False, False,
                           f"flux-plunger's suspension could not be lifted: {exc}")
    if current is not None and detect.is_suspended(current) and ownership.owns_suspend(current):
        note = "the suspension is co-owned by another manager and was left in place"
    else:
        note = ""
    # Judged after the lift: a lifted deleted release is unhandled until helm-controller
    # reconciles the bumped generation.
    unhandled = (current is not None and detect.is_terminating(current)
                 and not detect.uninstall_reached(current)
                 and C.HELM_CONTROLLER_FINALIZER not in (current["metadata"].get("finalizers") or []))
    try:
        if current is not None:
            _remove_fences(kube, current, deadline)
    except KubeError as exc:
        return FenceResult(ns, name, False, False, f"the fence could not be removed: {exc}")
    return FenceResult(ns, name, True, unhandled, note)


def wait_uninstalls(executor: Executor, releases: list[dict], timeout: float,
                    poll: float = 1.0) -> tuple[list[dict], list[FenceResult]]:
    """The drain: let helm-controller finish uninstalls of deleted, fenced releases
    (lifting our suspensions so it can; releasing the fence once it has) until none waits
    or ``timeout`` passes.  Returns (releases still fenced, as last read; results of those
    released meanwhile).  A release that cannot be read is kept and retried."""
    deadline = time.monotonic() + timeout
    kube = executor.kube
    pending = releases
    done: list[FenceResult] = []
    while True:
        still, waiting = [], False
        for hr in pending:
            md = hr["metadata"]
            ns, name = md["namespace"], md["name"]
            try:
                current = kube.get_hr(ns, name)
                if current is not None and detect.is_terminating(current) \
                        and detect.is_fenced(current):
                    outcome = executor.apply_decision(ns, name, current)
                    if outcome.result == Result.FENCE_REMOVED:
                        foreign = outcome.row == Row.TERMINATING_SUSPENDED_FOREIGN
                        done.append(FenceResult(ns, name, True, foreign,
                                                "suspended by another manager" if foreign
                                                else "after helm-controller's uninstall"))
                        continue
                    waiting = waiting or outcome.result in (Result.WAITING, Result.RELINQUISHED,
                                                            Result.FAILED)
                    current = kube.get_hr(ns, name)
            except KubeError:
                still.append(hr)
                waiting = True
                continue
            if current is None:
                done.append(FenceResult(ns, name, True, False, "the release is gone"))
                continue
            still.append(current)
        pending = still
        if not waiting or time.monotonic() >= deadline:
            return [hr for hr in pending if detect.is_fenced(hr)], done
        time.sleep(poll)


def run(kube: Kube, releases: list[dict], *, window: float = 60.0,
        deadline: float | None = None,
        concurrency: int = DEFAULT_CONCURRENCY) -> list[FenceResult]:
    """Release every fenced release, ``concurrency`` at a time, each retried within
    ``window`` seconds, all within the global ``deadline`` (``time.monotonic()``): a release
    still unfinished then is reported NOT released, so the summary always comes in time.
    Results in the order of ``releases``."""
    fenced = [hr for hr in releases if detect.is_fenced(hr)]
    if not fenced:
        return []
    results: dict[int, FenceResult] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="fence")
    try:
        futures: dict[Future[FenceResult], int] = {
            pool.submit(release_one, kube, hr, window, deadline): i
            for i, hr in enumerate(fenced)}
        pending = set(futures)
        while pending:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            done, pending = wait(pending, timeout=remaining, return_when=FIRST_COMPLETED)
            for f in done:
                i = futures[f]
                try:
                    results[i] = f.result()
                except Exception as exc:  # noqa: BLE001 - one release never sinks the rest
                    md = fenced[i]["metadata"]
                    results[i] = FenceResult(md["namespace"], md["name"], False, False,
                                             f"unexpected error: {exc}")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    out = []
    for i, hr in enumerate(fenced):
        if i not in results:
            md = hr["metadata"]
            results[i] = FenceResult(md["namespace"], md["name"], False, False,
                                     "the deadline passed before it could be released")
        out.append(results[i])
    return out


def summary(results: list[FenceResult]) -> str:
    released = sum(r.released for r in results)
    unhandled = sum(r.released and r.without_uninstall for r in results)
    return (f"released {released} of {len(results)} fenced HelmReleases, "
            f"{unhandled} without an uninstall")
