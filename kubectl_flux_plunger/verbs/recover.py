"""``recover`` and ``resume-owned``: the decision table applied once to each selected release,
with bounded concurrency across releases (each release is handled by one thread)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

from .. import plan
from ..executor import Executor, Outcome, Result
from ..executor.handshake import ReleaseWatch
from ..kube import Kube, KubeError
from ..objects import Obj
from ..plan import Row

# Rows `resume-owned` may act on: our own suspensions (with their fences) and nothing else.
RESUME_ROWS = frozenset({Row.LIVE_SUSPENDED_OWNED, Row.TERMINATING_SUSPENDED_OWNED})


def _one(
    executor: Executor,
    hr: Obj,
    only_rows: frozenset[Row] | None,
    fresh: bool = False,
    watch: ReleaseWatch | None = None,
) -> Outcome:
    """One release: the executor's bounded determine → act → re-determine loop."""
    return executor.settle(hr, only_rows=only_rows, fresh=fresh, watch=watch)


class WatchedReads:
    """Named reads as watch-lists (``Executor.read_watched``): the read that decides and
    the stream the recovery then waits on are one request.  ``take`` hands a release's
    watch to its run; ``close`` ends those never taken (an interrupted run)."""

    def __init__(self, executor: Executor):
        self.executor = executor
        self._watches: dict[tuple[str, str], ReleaseWatch] = {}
        self._lock = threading.Lock()

    def __call__(self, namespace: str, name: str) -> Obj | None:
        hr, watch = self.executor.read_watched(namespace, name)
        if watch is not None:
            with self._lock:
                self._watches[(namespace, name)] = watch
        return hr

    def take(self, hr: Obj) -> ReleaseWatch | None:
        md = hr["metadata"]
        with self._lock:
            return self._watches.pop((md["namespace"], md["name"]), None)

    def close(self) -> None:
        with self._lock:
            left, self._watches = list(self._watches.values()), {}
        for watch in left:
            watch.close()


# Releases handled at once by default (the CLI's --concurrency default).  Each worker has
# at most one request in flight, so this also bounds the requests the apiserver serves for us
# at any moment; docs/BENCHMARKS.md has the request rate that reaches and why 8.
DEFAULT_CONCURRENCY = 8
NOT_STARTED = "not started: the run was interrupted"


def _interrupted(
    executor: Executor, hr: dict[str, Any], only_rows: frozenset[Row] | None
) -> Outcome | None:
    """The outcome of a release never started because the run was interrupted, or None
    when it needs nothing anyway (``_one`` then decides it without a request)."""
    md = hr["metadata"]
    d = plan.decide(hr, executor.clock())
    if (d.action is plan.Action.NOTHING and d.event is None) or (
        only_rows is not None and d.row not in only_rows
    ):
        return None
    return Outcome(md["namespace"], md["name"], Result.DEFERRED, NOT_STARTED, row=d.row)


def run(
    executor: Executor,
    releases: list[dict[str, Any]],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    only_rows: frozenset[Row] | None = None,
    fresh: bool = False,
    on_start: Callable[[int, dict[str, Any]], None] | None = None,
    on_result: Callable[[int, Outcome], None] | None = None,
    stop: threading.Event | None = None,
    watched: WatchedReads | None = None,
) -> list[Outcome]:
    """Apply one pass to every release; results in the order of ``releases``.  ``fresh``:
    the releases were just read by name (no second read before acting).

    ``on_start(i, release)`` is called (from a worker thread) when release ``i`` is taken up,
    ``on_result(i, outcome)`` (from the calling thread) as soon as it is finished, so results
    can be shown while the others run.  Once ``stop`` is set no release is taken up any more
    (those left are ``deferred``, :data:`NOT_STARTED`); the executor's ``should_stop`` is what
    aborts the recoveries in flight (before the delete, relinquishing).  ``watched``: the
    watch-lists the named releases were read from, each handed to its release's run."""
    stop = stop if stop is not None else threading.Event()
    results: list[Outcome | None] = [None] * len(releases)

    def one(i: int) -> Outcome:
        hr = releases[i]
        if stop.is_set():
            out = _interrupted(executor, hr, only_rows)
            if out is not None:
                return out
        if on_start is not None:
            on_start(i, hr)
        return _one(executor, hr, only_rows, fresh, watched.take(hr) if watched else None)

    def finished(i: int, out: Outcome) -> None:
        results[i] = out
        if on_result is not None:
            on_result(i, out)

    workers = max(1, min(concurrency, len(releases)))
    if workers == 1:
        for i in range(len(releases)):
            finished(i, one(i))
        return [o for o in results if o is not None]
    # one connection per worker plus the caller's, kept open for reuse
    executor.kube.ensure_connections(workers + 2)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="recover") as pool:
        pending = {pool.submit(one, i): i for i in range(len(releases))}
        while pending:
            # a bounded wait: the calling thread stays responsive to signals (Ctrl-C)
            done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for fut in done:
                finished(pending.pop(fut), fut.result())
    return [o for o in results if o is not None]


def still_held(kube: Kube, keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Of ``keys`` (namespace, name), the releases that a fresh read shows suspended by
    flux-plunger or carrying its fence — what an interrupted run may have left.  A release
    that cannot be read is counted as held (we cannot tell)."""
    held = []
    for ns, name in keys:
        try:
            hr = kube.get_hr(ns, name)
        except KubeError:
            held.append((ns, name))
            continue
        if hr is not None and plan.holds_ours(hr):
            held.append((ns, name))
    return held
