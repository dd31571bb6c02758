"""``release-fence``: what an uninstall of the controller runs (SPEC §7).

For every release carrying our fence: lift a suspension flux-plunger alone owns (guarded
JSON patch, never server-side apply), then remove every copy of the fence with guarded
test+remove patches.  Retries are per release within a bounded window, so one unreadable
release cannot starve the rest.  Optionally first lets helm-controller finish uninstalls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass

from ..core import detect, ownership
from ..core.objects import Obj
from ..core.plan import Row
from ..core.selector import Selector
from ..executor import Covered, Executor, Outcome, Result
from ..executor.drain import Drain
from ..kube import Kube, KubeError

MAX_FENCE_REMOVALS = 8
DEFAULT_CONCURRENCY = 8
# which running flux-plunger controller covers a release (``Options.covered``)
Check = Callable[[Obj], Covered | None]


class LeftToController(Exception):
    """A read found the release covered by a running controller: nothing more is written."""

    def __init__(self, by: Covered) -> None:
        super().__init__(by.detail)
        self.by = by


def _guard(covered: Check | None) -> Callable[[Obj], None]:
    """Raise :class:`LeftToController` for a state a running controller covers."""

    def check(current: Obj) -> None:
        by = covered(current) if covered is not None else None
        if by is not None:
            raise LeftToController(by)

    return check


@dataclass
class FenceResult:
    namespace: str
    name: str
    released: bool
    without_uninstall: bool
    detail: str
    controller: str = ""  # the Lease of the running controller it was left to

    def as_dict(self) -> Obj:
        return asdict(self)

    def line(self) -> str:
        ref = f"{self.namespace}/{self.name}"
        if not self.released:
            return f"NOT released {ref}: {self.detail}"
        if self.without_uninstall:
            return (
                f"released the uninstall fence from {ref} without an uninstall: "
                "helm-controller had not handled it"
            )
        return f"released the uninstall fence from {ref}" + (
            f" ({self.detail})" if self.detail else ""
        )


def _remove_fences(
    prims: Executor,
    hr: Obj,
    deadline: float,
    stop: Callable[[], bool] | None = None,
    guard: Callable[[Obj], None] = lambda _: None,
) -> Obj:
    """Remove every copy of the fence with the executor's one fence-removal primitive;
    a fence that keeps coming back (a controller still running) is an error.  Returns the
    release as last read or written."""
    current: Obj | None = hr
    last = hr
    for _ in range(MAX_FENCE_REMOVALS):
        if current is None or not detect.is_fenced(current):
            return last
        current = prims.remove_fence(
            current, timeout=max(0.0, deadline - time.monotonic()), stop=stop, check=guard
        )
        last = current if current is not None else last
    if current is not None and detect.is_fenced(current):
        raise KubeError(
            409,
            "Conflict",
            "the fence keeps coming back; is a flux-plunger controller still running?",
        )
    return last


def without_uninstall(hr: Obj) -> bool:
    """Released without an uninstall (SPEC §7): deleted, and helm-controller had not
    handled it — still suspended by another manager (it drops its finalizer without
    uninstalling a suspended release) or its uninstall not reached."""
    return detect.is_terminating(hr) and (
        (detect.is_suspended(hr) and not ownership.sole_owner_is_us(hr))
        or not detect.uninstall_reached(hr)
    )


def release_one(
    kube: Kube,
    hr: Obj,
    window: float,
    deadline: float | None = None,
    stop: Callable[[], bool] | None = None,
    covered: Check | None = None,
) -> FenceResult:
    """Release one fenced release, retrying within ``window`` seconds and never past the
    global ``deadline`` (a ``time.monotonic()`` value); no write starts once ``stop()``.
    ``covered``: a release a running controller covers — as listed, or on any re-read
    before a write — is left to it, NOT released (its in-flight suspension is not ours)."""
    try:
        return _release_one(kube, hr, window, deadline, stop, _guard(covered))
    except LeftToController as exc:
        md = hr["metadata"]
        return FenceResult(
            md["namespace"], md["name"], False, False, exc.by.detail, controller=exc.by.lease
        )


def _release_one(
    kube: Kube,
    hr: Obj,
    window: float,
    deadline: float | None,
    stop: Callable[[], bool] | None,
    guard: Callable[[Obj], None],
) -> FenceResult:
    md = hr["metadata"]
    ns, name = md["namespace"], md["name"]
    own = time.monotonic() + window
    deadline = own if deadline is None else min(own, deadline)
    prims = Executor(kube)
    guard(hr)  # the listed copy is the read the first write is guarded by
    try:
        current = prims.lift_sole_suspension(hr, max(0.0, deadline - time.monotonic()), stop, guard)
    except KubeError as exc:
        return FenceResult(
            ns, name, False, False, f"flux-plunger's suspension could not be lifted: {exc}"
        )
    if current is not None and detect.is_suspended(current) and ownership.owns_suspend(current):
        note = "the suspension is co-owned by another manager and was left in place"
    else:
        note = ""
    try:
        if current is not None:
            current = _remove_fences(prims, current, deadline, stop, guard)
    except KubeError as exc:
        return FenceResult(ns, name, False, False, f"the fence could not be removed: {exc}")
    # judged on the last state read: a lifted deleted release is unhandled until
    # helm-controller reconciles the bumped generation
    return FenceResult(ns, name, True, current is not None and without_uninstall(current), note)


TERMINATING_ROWS = frozenset(
    {
        Row.TERMINATING_SUSPENDED_OWNED,
        Row.TERMINATING_SUSPENDED_FOREIGN,
        Row.TERMINATING_FENCED_UNINSTALLED,
        Row.TERMINATING_FENCED_WAITING,
    }
)


def wait_uninstalls(
    executor: Executor, releases: list[Obj], timeout: float, poll: float = 1.0
) -> tuple[list[Obj], list[FenceResult]]:
    """The drain (the executor's one drain loop, as serve's shutdown runs it) over the
    deleted, fenced releases: our suspensions lifted so helm-controller can uninstall, the
    fence released once it has, until none waits or ``timeout`` passes.  Live releases are
    not touched here (release-fence lifts their suspension with a guarded JSON patch, never
    an apply).  Returns (releases still fenced, results of those released meanwhile).  A
    release that cannot be read is kept and retried."""
    by_key = {f"{hr['metadata']['namespace']}/{hr['metadata']['name']}": hr for hr in releases}
    pending = dict.fromkeys(by_key)  # keys still draining, in order
    done: dict[str, FenceResult] = {}

    def outcome(key: str, out: Outcome) -> None:
        ns, name = key.split("/", 1)
        if out.result == Result.FENCE_REMOVED:
            foreign = out.row == Row.TERMINATING_SUSPENDED_FOREIGN
            done[key] = FenceResult(
                ns,
                name,
                True,
                foreign,
                "suspended by another manager" if foreign else "after helm-controller's uninstall",
            )
        elif out.result == Result.GONE:
            done[key] = FenceResult(ns, name, True, False, "the release is gone")
        elif out.row in TERMINATING_ROWS and out.result in (
            Result.WAITING,
            Result.RELINQUISHED,
            Result.FAILED,
        ):
            return  # still waiting for helm-controller
        pending.pop(key, None)  # live, or nothing of ours: not waiting

    Drain(executor, poll=poll).run(
        lambda: list(pending), timeout, only_rows=TERMINATING_ROWS, on_outcome=outcome
    )
    still = []
    for key, listed in by_key.items():
        if key in done:
            continue
        ns, name = key.split("/", 1)
        try:  # hand on the last state, not the listed copy the wait started from
            hr = executor.kube.get_hr(ns, name)
        except KubeError:
            hr = listed  # release_one re-reads on its own
        if hr is None:
            done[key] = FenceResult(ns, name, True, False, "the release is gone")
        elif executor.selected(hr):  # relabelled out of the selection: not ours to release
            still.append(hr)
    return still, list(done.values())


def run(
    kube: Kube,
    releases: list[Obj],
    *,
    window: float = 60.0,
    deadline: float | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    selector: Selector | None = None,
    covered: Check | None = None,
) -> list[FenceResult]:
    """Release every fenced release, ``concurrency`` at a time, each retried within
    ``window`` seconds, all within the global ``deadline`` (``time.monotonic()``): a release
    still unfinished then is reported NOT released, so the summary always comes in time,
    and starts no further write (only a request already sent may still land).  Results in
    the order of ``releases``.  ``selector``: the command's ``-l``; a release outside it
    (the LIST selected it server-side; a later read may not) is left alone.  ``covered``:
    which running controller covers a release (:func:`release_one`)."""
    fenced = [
        hr
        for hr in releases
        if detect.is_fenced(hr) and (selector is None or selector.matches_object(hr))
    ]
    if not fenced:
        return []
    results: dict[int, FenceResult] = {}
    stopped = threading.Event()
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="fence")
    futures: dict[Future[FenceResult], int] = {}
    try:
        for i, hr in enumerate(fenced):
            futures[
                pool.submit(release_one, kube, hr, window, deadline, stopped.is_set, covered)
            ] = i
        pending = set(futures)
        while pending:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            done, pending = wait(pending, timeout=remaining, return_when=FIRST_COMPLETED)
            for f in done:
                results[futures[f]] = _result(f, fenced[futures[f]])
    finally:
        stopped.set()  # a release still going starts no further write
        pool.shutdown(wait=False, cancel_futures=True)
    for f, i in futures.items():
        md = fenced[i]["metadata"]
        if i in results:
            continue
        if f.cancelled():  # never started
            results[i] = FenceResult(
                md["namespace"],
                md["name"],
                False,
                False,
                "the deadline passed before it could be released",
            )
        elif f.done():  # finished right at the deadline
            results[i] = _result(f, fenced[i])
        else:
            results[i] = FenceResult(
                md["namespace"],
                md["name"],
                False,
                False,
                "the deadline passed while it was being released (stopped before its next "
                "write; one already sent may still release it)",
            )
    return [results[i] for i in range(len(fenced))]


def _result(f: Future[FenceResult], hr: Obj) -> FenceResult:
    try:
        return f.result()
    except Exception as exc:  # noqa: BLE001 - one release never sinks the rest
        md = hr["metadata"]
        return FenceResult(md["namespace"], md["name"], False, False, f"unexpected error: {exc}")


def summary(results: list[FenceResult]) -> str:
    released = sum(r.released for r in results)
    unhandled = sum(r.released and r.without_uninstall for r in results)
    return (
        f"released {released} of {len(results)} fenced HelmReleases, "
        f"{unhandled} without an uninstall"
    )
