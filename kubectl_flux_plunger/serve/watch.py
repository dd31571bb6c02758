"""Sync + watch HelmReleases and enqueue the keys the predicate selects (SPEC §8): every
release the sync reads that ``plan.predicate`` selects, and every watch event
``plan.wanted_on_change`` selects (the predicate less helm-controller's writes that another
of its writes follows), each with its resourceVersion, so the queue skips changes a pass
already judged (a sync's duplicate of a key a start-up hint queued first, among them).

The sync is one **watch-list** where the server serves them (``Kube.watch_list``): a WATCH
with ``sendInitialEvents=true`` whose stream starts with every release as an ADDED event
(served from the apiserver's watch cache, as fresh as a quorum read), ends that with a
BOOKMARK annotated ``k8s.io/initial-events-end``, and carries on as the watch — the LIST and
the WATCH are one request.  Each initial event is judged and its key queued the moment it is
decoded, so a stuck release is recovered while the rest of the stream is still arriving; the
bookmark marks the sync done (``synced``: ``/readyz``; the held keys replaced; the queue's
expectations up to it dropped, as after a LIST — those of the old stream went when the sync
began).  A server that refuses the watch-list (400/422: no
WatchList) gets the paged LIST instead, from then on (``Kube.watch_list`` is cleared).  One
whose watch-lists keep ending before their initial events do (as they did for some seconds
after an apiserver restart in the soak, issue 49) gets
the LIST for a while (``kube.WatchLists``: a pause of minutes), and a watch-list again at the
first sync after it — a LIST for good would cost every later sync the memory of its pages.

No object cache: events (or a LIST's pages) are consumed one at a time and only keys are
kept (the queue's, the set of fenced keys behind the ``fences_held`` gauge, and the set of
keys suspended with a spec.suspend we own — with the fenced ones, where the shutdown drain
starts).  The watch asks for bookmarks; a 410 (ERROR event or HTTP status) starts a fresh
sync; any other failure (apiserver restarting, network) re-watches from the last
resourceVersion after a backoff — and a resourceVersion the restarted apiserver no longer has
answers 410, which syncs afresh — the only sync after the first.  The watch never ends for a
re-sync: every ``resync_period`` the catch-all (serve/resync.py) queues again the keys whose
last seen state the predicate selected (``Candidates``, kept from the events and the syncs),
catching changes no watch event reports (e.g. a Helm storage Secret appearing) without a
stream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from ..core import budget, plan
from ..core.claims import ClaimIndex
from ..core.detect import is_fenced, is_stuck
from ..core.objects import Obj, compare_resource_versions
from ..core.scope import Scope
from ..kube import INITIAL_EVENTS_END, KubeError, WatchLists
from .logs import fields
from .resync import Candidates, CatchAll
from .sync import Sync, held_since, key_of

if TYPE_CHECKING:
    from .metrics import Metrics

log = logging.getLogger(__name__)

WATCH_SECONDS = 300  # server-side timeout of one watch request
# Items per LIST page (the fallback sync).  What a page parses into stays with the process
# (allocator retention), so the page — not the number of releases — sets the memory a LIST
# costs: 500-item pages cost ~15 MiB more RSS than 100-item ones; 10,000 releases are 100
# requests.
PAGE_SIZE = 100
BACKOFF_BASE, BACKOFF_CAP = 0.5, 30.0


class Expired(Exception):
    """The watch's resourceVersion is gone (410): sync afresh."""


class Source(Protocol):
    """What the watcher syncs and watches through (``kube.Kube``).  ``watch_list``: the
    server serves watch-lists (the watcher clears it when the server refuses one);
    ``watch_lists``: the misses in a row, and the pause a run of them starts."""

    watch_list: bool

    @property
    def watch_lists(self) -> WatchLists: ...

    def iter_hr_pages(
        self, namespace: str | None, label_selector: str | None, limit: int
    ) -> Iterator[tuple[list[Obj], str]]: ...

    def watch_hrs(
        self,
        namespace: str | None,
        label_selector: str | None,
        resource_version: str,
        timeout_seconds: int = ...,
        *,
        send_initial_events: bool = ...,
    ) -> Iterator[Obj]: ...


class Keys(Protocol):
    """Where selected keys go (``queue.WorkQueue``), with the resourceVersion of the change."""

    def add(
        self, key: str, resource_version: str | None = None, *, listed: bool = False
    ) -> None: ...

    def add_behind(self, key: str, resource_version: str | None = None) -> None: ...

    def relisting(self) -> None: ...

    def caught_up(self, resource_version: str) -> None: ...


def _initial_events_end(event: Obj) -> bool:
    md = (event.get("object") or {}).get("metadata") or {}
    return (md.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true"


class Watcher:
    def __init__(
        self,
        kube: Source,
        queue: Keys,
        scope: Scope,
        *,
        resync_period: float,
        metrics: Metrics | None = None,
        page_size: int = PAGE_SIZE,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        self.kube, self.queue = kube, queue
        # what it watches: scope.namespace (None: every one) and scope.selector (as written)
        self.namespace, self.selector = scope.namespace, scope.selector
        # the period of the catch-all (serve/resync.py): no stream, the watch runs on
        self.resync_period = resync_period
        self.metrics = metrics
        self.page_size = page_size
        self.watch_seconds = watch_seconds
        self.synced = threading.Event()
        # who claims which Helm release (SPEC §6, "Holding a release"): kept only when the
        # watch sees every HelmRelease of the cluster (no namespace, no selector) — a
        # narrower install lists them instead (kube.claimants)
        self.claims = ClaimIndex() if scope.namespace is None and not scope.selector else None
        self._progress = threading.Condition()
        self._fenced: set[str] = set()
        self._owned: set[str] = set()  # suspended, spec.suspend owned by flux-plunger
        # fenced and terminating: key -> its deletionTimestamp (epoch seconds)
        self._held: dict[str, float] = {}
        self._lock = threading.Lock()
        self.resource_version = ""
        # where the next watch resumes; None: sync first (set by a finished sync)
        self._resume: str | None = None
        self._failures = 0
        self.candidates = Candidates()
        self.catch_all = CatchAll(
            self.candidates, queue, period=resync_period, synced=self.synced, metrics=metrics
        )

    def fences_held(self) -> int:
        with self._lock:
            return len(self._fenced)

    def oldest_held_delete(self, now: float | None = None) -> float:
        """Seconds the oldest delete held by our fence has waited (as last seen), else 0."""
        with self._lock:
            since = min(self._held.values(), default=None)
        if since is None:
            return 0.0
        return max(0.0, (time.time() if now is None else now) - since)

    def held_keys(self) -> set[str]:
        """The keys last seen fenced or suspended by us (``plan.holds_ours``): where the drain
        starts.  Meaningful once ``synced`` is set."""
        with self._lock:
            return self._fenced | self._owned

    # -- one object ----------------------------------------------------------------

    def _seen(self, hr: Obj, deleted: bool = False) -> None:
        """One watch event: track the key's fence and suspension, and queue it when the
        change is worth a pass (``plan.wanted_on_change``: helm-controller's writes in the
        middle of an action, or before its retry after a recovery, are not)."""
        key = key_of(hr)
        if self.claims is not None:
            if deleted:
                self.claims.drop(hr)
            else:
                self.claims.put(hr)
        fenced = not deleted and is_fenced(hr)
        owned = not deleted and plan.suspended_by_us(hr)
        with self._lock:
            if fenced:
                self._fenced.add(key)
            else:
                self._fenced.discard(key)
            if owned:
                self._owned.add(key)
            else:
                self._owned.discard(key)
            since = held_since(hr) if fenced else None
            if since is not None:
                self._held[key] = since
            else:
                self._held.pop(key, None)
        rv = (hr.get("metadata") or {}).get("resourceVersion") or ""
        self.candidates.saw(key, not deleted and plan.predicate(hr), rv)
        if self.metrics is not None and (deleted or not is_stuck(hr)):
            self.metrics.left_stuck.forget(key)  # repaired (no pass follows) or gone
        if not deleted and plan.wanted_on_change(hr) and not self._given_up(key, hr):
            self.queue.add(key, rv or None)

    def _given_up(self, key: str, hr: Obj) -> bool:
        """Given up (issue 57) by a pass that announced it, and still so on its record:
        helm-controller's retries of it start no pass; a change that ends the run does."""
        if is_fenced(hr) or (hr.get("spec") or {}).get("suspend"):
            return False  # a suspension or fence (a crash's leftover) is always worth a pass
        counted = self.metrics is not None and self.metrics.left_stuck.cause(key)
        return counted is plan.Stuck.GIVEN_UP and budget.given_up(hr)

    # -- sync ----------------------------------------------------------------------

    def _synced(self, sync: Sync, rv: str, reason: str, via: str) -> None:
        """A sync is complete at ``rv``: its keys replace the held ones, the queue's
        expectations at or below ``rv`` go, the watch resumes from ``rv``."""
        with self._lock:
            self._fenced, self._owned, self._held = sync.fenced, sync.owned, sync.held
        self.candidates.replace(sync.selected)
        if self.claims is not None and sync.claims is not None:
            self.claims.absorb(sync.claims)
        if self.metrics is not None:
            self.metrics.left_stuck.keep_only(sync.stuck)
        if rv:
            self.queue.caught_up(rv)
        if self.metrics is not None:
            self.metrics.relisted(reason)
        log.info(
            "listed HelmReleases",
            extra=fields(
                reason=reason,
                via=via,
                count=sync.count,
                queued=sync.queued,
                fenced=len(sync.fenced),
                resourceVersion=rv,
            ),
        )
        self._resume = rv
        self._failures = 0
        if not self.synced.is_set():
            self.synced.set()
            log.info("HelmRelease list/watch synced")
        self._moved(rv)

    def relist(self, reason: str) -> str:
        """A fresh LIST, page by page; enqueue what the predicate selects.  Returns its rv."""
        sync = Sync(claims=self.claims is not None)
        rv = ""
        self.queue.relisting()
        for items, page_rv in self.kube.iter_hr_pages(
            self.namespace, self.selector, self.page_size
        ):
            rv = page_rv or rv
            for hr in items:
                sync.take(hr, self.queue)
            del items
        self._synced(sync, rv, reason, "list")
        return rv

    def _watch_list(self, reason: str) -> None:
        """One watch-list: the sync from its initial events (each queued as it is decoded),
        done at the initial-events-end bookmark, then the watch on the same stream until
        the server ends it.  ``_resume`` stays None when the stream ended before the
        bookmark, and a run of such ends pauses watch-lists (``kube.watch_list`` is False
        for a while: the LIST is used).  Raises Expired/KubeError; a refusal (400/422: no
        WatchList on this server) clears ``kube.watch_list`` for good instead."""
        sync: Sync | None = Sync(claims=self.claims is not None)
        expired = None
        self.queue.relisting()
        try:
            for event in self.kube.watch_hrs(
                self.namespace,
                self.selector,
                "",
                timeout_seconds=self.watch_seconds,
                send_initial_events=True,
            ):
                kind = event.get("type")
                if sync is None or kind == "ERROR":
                    expired = self._event(event) or expired
                elif kind in ("ADDED", "MODIFIED"):
                    sync.take(event.get("object") or {}, self.queue)
                elif kind == "BOOKMARK" and _initial_events_end(event):
                    md = (event.get("object") or {}).get("metadata") or {}
                    self.kube.watch_lists.served()
                    self._synced(sync, md.get("resourceVersion") or "", reason, "watch-list")
                    sync = None
                # any other bookmark before the end moves nothing: the sync is not done
        except KubeError as exc:
            if sync is not None and exc.status in (400, 422):
                self._no_watch_lists(str(exc))
                return
            raise
        if expired:
            raise Expired(expired)
        if sync is None:
            self._resume = self.resource_version  # the watch resumes after its last event
            return
        lists = self.kube.watch_lists  # ended cleanly without the bookmark
        if lists.missed():
            log.info(
                "%d watch-lists in a row ended before their initial events: listing "
                "HelmReleases instead for %.0fs",
                lists.misses,
                lists.pause,
            )

    def _no_watch_lists(self, why: str) -> None:
        self.kube.watch_list = False
        log.info("the server does not serve watch-lists (%s): listing HelmReleases instead", why)

    # -- watch ---------------------------------------------------------------------

    def _event(self, event: Obj) -> str | None:
        """One event of a running watch.  Returns the message of a 410 ERROR event (the
        server closes the stream after it: let it end cleanly, then sync afresh); raises
        KubeError for any other ERROR event."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                return str(obj.get("message") or "resource version too old")
            raise KubeError(
                int(code or 0),
                obj.get("reason") or "Error",
                obj.get("message") or "watch error event",
                obj,
            )
        new_rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self._seen(obj)
        elif kind == "DELETED":
            self._seen(obj, deleted=True)
        # BOOKMARK: only the resourceVersion moves
        if new_rv:
            self._moved(new_rv)
            self.queue.caught_up(new_rv)
        return None

    # -- the claims (issue 55) -----------------------------------------------------

    def _moved(self, rv: str) -> None:
        """The stream has delivered everything up to ``rv`` (the index reflects it)."""
        with self._progress:
            self.resource_version = rv
            self._progress.notify_all()

    def _past(self, rv: str) -> bool:
        order = compare_resource_versions(self.resource_version, rv)
        return self.synced.is_set() and (
            (order is not None and order >= 0) or self.resource_version == rv
        )

    def others(
        self, hr: Obj, *, after: str | None = None, timeout: float = 30.0
    ) -> tuple[str, ...]:
        """The keys of the other HelmReleases that claim a Helm release ``hr`` claims, from
        the index this watch keeps (``executor.Claimants``): once the first sync is done,
        and with ``after``, once the stream has delivered that resourceVersion — every
        HelmRelease created or changed before it is then in the index.  Raises KubeError
        when that does not happen within ``timeout`` (nothing is deleted then)."""
        if self.claims is None:
            raise KubeError(0, "NoIndex", "this watch does not see every HelmRelease")
        with self._progress:
            if not self._progress.wait_for(
                lambda: self._past(after) if after else self.synced.is_set(), timeout
            ):
                raise KubeError(
                    0,
                    "Timeout",
                    f"the HelmRelease watch did not reach resourceVersion {after or '(sync)'} "
                    f"within {timeout:.0f}s, so other claimants of the release cannot be ruled out",
                )
        return tuple(self.claims.others(hr))

    def _watch_once(self, rv: str) -> str:
        """One watch request from ``rv``; returns the newest rv seen. Raises Expired/KubeError."""
        self._moved(rv)
        expired = None
        for event in self.kube.watch_hrs(
            self.namespace, self.selector, rv, timeout_seconds=self.watch_seconds
        ):
            expired = self._event(event) or expired
        if expired:
            raise Expired(expired)
        return self.resource_version

    def _backoff(self) -> float:
        delay = min(BACKOFF_CAP, BACKOFF_BASE * float(2 ** min(self._failures, 10)))
        self._failures += 1
        return delay

    def run(self, stop: threading.Event) -> None:
        """Sync, then watch from where the last request ended for as long as ``stop`` is
        not set; a 410 syncs afresh.  (The catch-all runs beside it on its own thread:
        ``catch_all.run``, started by the controller.)"""
        self._failures = 0
        self._resume = None
        reason = "initial"
        while not stop.is_set():
            try:
                resume = self._resume
                if resume is None:
                    if self.kube.watch_list:
                        self._watch_list(reason)  # the sync, then the watch on its stream
                        if self._resume is None and self.kube.watch_list:
                            delay = self._backoff()
                            log.warning(
                                "watch-list ended before its initial events; retrying in %.1fs",
                                delay,
                                extra=fields(attempt=self._failures),
                            )
                            stop.wait(delay)
                        continue
                    resume = self.relist(reason)
                self._resume = self._watch_once(resume)
                self._failures = 0
            except Expired as exc:
                log.info(
                    "watch: resource version expired (410); relisting",
                    extra=fields(detail=str(exc)),
                )
                self._resume, reason = None, "expired"
            except KubeError as exc:
                if exc.gone:
                    log.info(
                        "watch: resource version expired (410); relisting",
                        extra=fields(detail=str(exc)),
                    )
                    self._resume, reason = None, "expired"
                    continue
                if self._resume is None:
                    reason = "error"
                else:  # resume after the last event seen, not the last completed request
                    self._resume = self.resource_version or self._resume
                delay = self._backoff()
                log.warning(
                    "watch: %s; retrying in %.1fs",
                    exc,
                    delay,
                    extra=fields(status=exc.status, attempt=self._failures),
                )
                if self.metrics is not None:
                    self.metrics.error()
                stop.wait(delay)
            except Exception:  # never let the watch thread die (logged with the traceback)
                delay = self._backoff()
                log.exception("watch: unexpected failure; relisting in %.1fs", delay)
                self._resume, reason = None, "error"
                stop.wait(delay)
