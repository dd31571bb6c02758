"""``recover`` and ``resume-owned``: the decision table applied once to each selected release,
with bounded concurrency across releases (each release is handled by one thread).

:func:`recover` is the whole verb as the command line runs it: the running-controller check
(verbs/controller_check.py, from the lease flags in :class:`Once`), then :func:`run_once`
(the executor it needs, the reads, the pass); :func:`run` is the pass itself.  What the user
sees — the result lines, the progress line, Ctrl-C, the warnings — is the caller's
(cli/table.py), told through :class:`Progress` and the callbacks; a refusal is returned."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..core import plan
from ..core.budget import Policy
from ..core.objects import Obj
from ..core.plan import Row
from ..executor import Executor, Options, Outcome, Result
from ..executor.backup import DirectoryBackup
from ..executor.handshake import ReleaseWatch
from ..kube import Kube, KubeError
from ..kube.authority import TenantAuthority
from ..kube.claimants import ListedClaimants
from ..kube.remote import Remotes
from ..report.events import Recorder
from .controller_check import LeaseFlags
from .controller_check import check as controller_check
from .select import Selection, fetch

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


@dataclass(frozen=True)
class Pass:
    """How one pass runs: ``only_rows``, the rows that may act (None: all, ``recover``);
    ``concurrency``, releases handled at once; ``fresh``, the releases were just read by
    name (no second read before acting)."""

    only_rows: frozenset[Row] | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    fresh: bool = False


def run(
    executor: Executor,
    releases: list[dict[str, Any]],
    how: Pass | None = None,
    *,
    on_start: Callable[[int, dict[str, Any]], None] | None = None,
    on_result: Callable[[int, Outcome], None] | None = None,
    stop: threading.Event | None = None,
    watched: WatchedReads | None = None,
) -> list[Outcome]:
    """Apply one pass (``how``) to every release; results in the order of ``releases``.

    ``on_start(i, release)`` is called (from a worker thread) when release ``i`` is taken up,
    ``on_result(i, outcome)`` (from the calling thread) as soon as it is finished, so results
    can be shown while the others run.  Once ``stop`` is set no release is taken up any more
    (those left are ``deferred``, :data:`NOT_STARTED`); the executor's ``should_stop`` is what
    aborts the recoveries in flight (before the delete, relinquishing).  ``watched``: the
    watch-lists the named releases were read from, each handed to its release's run."""
    stop = stop if stop is not None else threading.Event()
    how = how if how is not None else Pass()
    only_rows, fresh = how.only_rows, how.fresh
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

    workers = max(1, min(how.concurrency, len(releases)))
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


@dataclass(frozen=True)
class Once:
    """What ``recover`` / ``resume-owned`` were asked for (the command line's flags, parsed):
    ``only_rows`` as in :class:`Pass`; ``dry_run`` none|client|server; ``handshake_timeout``,
    how long to wait for helm-controller to observe the suspension; ``backup_dir``, where
    each Secret is written before its delete (None: no backup); ``lease``, the flags of the
    running-controller check (:func:`recover` makes it)."""

    only_rows: frozenset[Row] | None = None
    dry_run: str = "none"
    concurrency: int = 1
    handshake_timeout: float = 30.0
    backup_dir: str | None = None
    lease: LeaseFlags = field(default_factory=LeaseFlags)
    # helm-controller's --default-service-account: the tenant identity of a HelmRelease
    # without spec.serviceAccountName (kube.authority)
    default_service_account: str | None = None
    # the recovery budget (SPEC §6 "Knowing when to stop"); a release named on the command
    # line is recovered by hand: once, whatever the budget says (``Policy.by_hand``)
    budget: Policy = field(default_factory=Policy)


class Progress(Protocol):
    """Who watches a run (cli/progress.py's ``Stream``): told the total once the releases
    are read, each release as it starts and finishes; ``stop`` set stops taking releases
    up; ``interruptible()`` is held around the pass (Ctrl-C)."""

    stop: threading.Event
    total: int

    def started(self, i: int, hr: dict[str, Any]) -> None: ...

    def finished(self, i: int, outcome: Any) -> None: ...

    def interruptible(self) -> AbstractContextManager[None]: ...


@dataclass
class Ran:
    """What a run did: the outcomes in the order read, and the named releases not found;
    ``refusal``: why nothing was read nor written (the running-controller check refused)."""

    releases: int
    missing: list[str]
    outcomes: list[Outcome]
    refusal: str = ""


def recover(
    kube: Kube,
    selection: Selection,
    once: Once,
    progress: Progress,
    *,
    notifier: Any = None,
    on_missing: Callable[[str], None] = lambda _: None,
    on_warning: Callable[[str], None] = lambda _: None,
) -> Ran:
    """The verb: the running-controller check of ``once.lease`` (none for a client-side dry
    run: nothing is written), read before the reads that decide — its warnings told through
    ``on_warning``, a refusal returned before anything else is read — then :func:`run_once`
    with it (the named read stays right before its acquire; each release is held against
    the Leases on its fresh read)."""
    covered = None
    if once.dry_run != "client":
        found = controller_check(kube, once.lease, namespaces=(selection.namespace,))
        if found.refusal:
            return Ran(0, [], [], refusal=found.refusal)
        for line in found.warnings:
            on_warning(line)
        covered = found.covered
    return run_once(
        kube,
        selection,
        once,
        progress,
        covered=covered,
        notifier=notifier,
        on_missing=on_missing,
        on_warning=on_warning,
    )


def run_once(
    kube: Kube,
    selection: Selection,
    once: Once,
    progress: Progress,
    *,
    covered: Any = None,
    notifier: Any = None,
    on_missing: Callable[[str], None] = lambda _: None,
    on_warning: Callable[[str], None] = lambda _: None,
) -> Ran:
    """The verb: read the selection (``fetch``; a named release as a watch-list the recovery
    then goes on on — one request for the read and the WATCH; listed releases are re-read
    by name before acting) and run one pass over it.  ``covered``: the running-controller
    check (``Options.covered``), read by the caller before; ``notifier``: the Recorder's;
    ``on_missing(message)`` for each named release not found, before the pass starts;
    ``on_warning(line)`` when the claimants could not be listed cluster-wide, as soon as
    that is known (before the release it was listed for is written to)."""
    claimants = ListedClaimants(kube, on_warning=on_warning)
    # a stop is noticed between handshake watch windows: keep them short
    opts = Options(
        selector=selection.matcher(),
        dry_run_client=(once.dry_run == "client"),
        allow_recover=(once.only_rows is None),
        handshake_timeout=once.handshake_timeout,
        handshake_window=1.0,
        backup=DirectoryBackup(once.backup_dir) if once.backup_dir else None,
        covered=covered,
        claimants=claimants,
        authority=TenantAuthority(kube, once.default_service_account),
        budget=replace(once.budget, by_hand=bool(selection.names)),
    )
    executor = Executor(
        kube,
        Recorder(kube, enabled=(once.dry_run == "none"), notifier=notifier),
        options=opts,
        should_stop=progress.stop.is_set,
        remotes=Remotes(kube, default_service_account=once.default_service_account),
    )
    watched = WatchedReads(executor)
    try:
        releases, missing = fetch(kube, selection, read=watched)
    except BaseException:
        watched.close()
        raise
    for m in missing:
        on_missing(m)
    if selection.all_namespaces and not selection.selector and not selection.names:
        claimants.seed(releases)  # the whole cluster: the claimants' first LIST
    progress.total = len(releases)
    how = Pass(once.only_rows, once.concurrency, fresh=bool(selection.names))
    try:
        with progress.interruptible():
            outcomes = run(
                executor,
                releases,
                how,
                on_start=progress.started,
                on_result=progress.finished,
                stop=progress.stop,
                watched=watched,
            )
    finally:
        watched.close()
    return Ran(len(releases), missing, outcomes)


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
