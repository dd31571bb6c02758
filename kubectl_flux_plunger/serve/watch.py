"""List + watch HelmReleases and enqueue the keys the predicate selects (SPEC §8): every
listed release ``plan.predicate`` selects, and every watch event ``plan.wanted_on_change``
selects (the predicate less helm-controller's writes that another of its writes follows),
the watch's with its resourceVersion, so the queue skips changes a pass already judged.

No object cache: a LIST is consumed page by page and only keys are kept (the queue's, the
set of fenced keys behind the ``fences_held`` gauge, and the set of keys suspended with a
spec.suspend we own — with the fenced ones, where the shutdown drain starts).  The watch asks
for bookmarks; a 410 (ERROR event or HTTP status) starts a fresh LIST; any other failure
(apiserver restarting, network) re-watches from the last resourceVersion after a backoff —
and a resourceVersion the restarted apiserver no longer has answers 410, which relists.  A
fresh LIST every ``resync_period`` re-enqueues whatever the predicate selects, catching
changes no watch event reports (e.g. a Helm storage Secret appearing).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from .. import plan
from ..detect import is_fenced, is_terminating, parse_timestamp
from ..kube import KubeError
from ..objects import Obj
from .logs import fields

if TYPE_CHECKING:
    from .metrics import Metrics

log = logging.getLogger(__name__)

WATCH_SECONDS = 300  # server-side timeout of one watch request
# Items per LIST page.  What a page parses into stays with the process (allocator
# retention), so the page — not the number of releases — sets the memory a LIST costs:
# 500-item pages cost ~15 MiB more RSS than 100-item ones; 10,000 releases are 100 requests.
PAGE_SIZE = 100
BACKOFF_BASE, BACKOFF_CAP = 0.5, 30.0


def key_of(hr: Obj) -> str:
    md = hr.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}"


class Expired(Exception):
    """The watch's resourceVersion is gone (410): relist."""


class Source(Protocol):
    """What the watcher lists and watches through (``kube.Kube``)."""

    def iter_hr_pages(
        self, namespace: str | None, label_selector: str | None, limit: int
    ) -> Iterator[tuple[list[Obj], str]]: ...

    def watch_hrs(
        self,
        namespace: str | None,
        label_selector: str | None,
        resource_version: str,
        timeout_seconds: int = ...,
    ) -> Iterator[Obj]: ...


class Keys(Protocol):
    """Where selected keys go (``queue.WorkQueue``), with the resourceVersion of the change."""

    def add(self, key: str, resource_version: str | None = None) -> None: ...

    def caught_up(self, resource_version: str, *, relisted: bool = False) -> None: ...


def _held_since(hr: Obj) -> float | None:
    """When a fenced release began terminating (epoch seconds): its delete is held."""
    if not is_terminating(hr):
        return None
    when = parse_timestamp((hr.get("metadata") or {}).get("deletionTimestamp"))
    return when.timestamp() if when is not None else time.time()


class Watcher:
    def __init__(
        self,
        kube: Source,
        queue: Keys,
        *,
        namespace: str | None,
        selector: str | None,
        resync_period: float,
        metrics: Metrics | None = None,
        page_size: int = PAGE_SIZE,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        self.kube, self.queue = kube, queue
        self.namespace, self.selector = namespace, selector
        self.resync_period = resync_period
        self.metrics = metrics
        self.page_size = page_size
        self.watch_seconds = watch_seconds
        self.synced = threading.Event()
        self._fenced: set[str] = set()
        self._owned: set[str] = set()  # suspended, spec.suspend owned by flux-plunger
        # fenced and terminating: key -> its deletionTimestamp (epoch seconds)
        self._held: dict[str, float] = {}
        self._lock = threading.Lock()
        self.resource_version = ""

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
            since = _held_since(hr) if fenced else None
            if since is not None:
                self._held[key] = since
            else:
                self._held.pop(key, None)
        if not deleted and plan.wanted_on_change(hr):
            self.queue.add(key, (hr.get("metadata") or {}).get("resourceVersion") or None)

    # -- list ----------------------------------------------------------------------

    def relist(self, reason: str) -> str:
        """A fresh LIST, page by page; enqueue what the predicate selects.  Returns its rv."""
        fenced: set[str] = set()
        owned: set[str] = set()
        held: dict[str, float] = {}
        rv, count, queued = "", 0, 0
        for items, page_rv in self.kube.iter_hr_pages(
            self.namespace, self.selector, self.page_size
        ):
            rv = page_rv or rv
            for hr in items:
                count += 1
                if is_fenced(hr):
                    fenced.add(key_of(hr))
                    since = _held_since(hr)
                    if since is not None:
                        held[key_of(hr)] = since
                if plan.suspended_by_us(hr):
                    owned.add(key_of(hr))
                if plan.predicate(hr):  # the catch-all: the whole predicate, unconditionally
                    queued += 1
                    self.queue.add(key_of(hr))
            del items
        with self._lock:
            self._fenced, self._owned, self._held = fenced, owned, held
        if rv:
            self.queue.caught_up(rv, relisted=True)
        if self.metrics is not None:
            self.metrics.relisted(reason)
        log.info(
            "listed HelmReleases",
            extra=fields(
                reason=reason, count=count, queued=queued, fenced=len(fenced), resourceVersion=rv
            ),
        )
        return rv

    # -- watch ---------------------------------------------------------------------

    def _watch_once(self, rv: str, seconds: int) -> str:
        """One watch request from ``rv``; returns the newest rv seen. Raises Expired/KubeError."""
        expired = None
        for event in self.kube.watch_hrs(
            self.namespace, self.selector, rv, timeout_seconds=seconds
        ):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code")
                if code == 410:
                    expired = obj.get("message") or "resource version too old"
                    continue  # the server closes the stream after it; let it end cleanly
                raise KubeError(
                    int(code or 0),
                    obj.get("reason") or "Error",
                    obj.get("message") or "watch error event",
                    obj,
                )
            new_rv = (obj.get("metadata") or {}).get("resourceVersion")
            if new_rv:
                rv = new_rv
                self.resource_version = rv
            if kind in ("ADDED", "MODIFIED"):
                self._seen(obj)
            elif kind == "DELETED":
                self._seen(obj, deleted=True)
            # BOOKMARK: only the resourceVersion moves
            if new_rv:
                self.queue.caught_up(new_rv)
        if expired:
            raise Expired(expired)
        return rv

    def run(self, stop: threading.Event) -> None:
        failures = 0
        reason = "initial"
        rv = None
        while not stop.is_set():
            try:
                if rv is None:
                    rv = self.relist(reason)
                    self.resource_version = rv
                    resync_at = time.monotonic() + self.resync_period
                    if not self.synced.is_set():
                        self.synced.set()
                        log.info("HelmRelease list/watch synced")
                    failures = 0
                remaining = resync_at - time.monotonic()
                if remaining <= 0:
                    rv, reason = None, "resync"
                    continue
                seconds = max(1, min(self.watch_seconds, int(remaining + 0.999)))
                rv = self._watch_once(rv, seconds)
                failures = 0
            except Expired as exc:
                log.info(
                    "watch: resource version expired (410); relisting",
                    extra=fields(detail=str(exc)),
                )
                rv, reason = None, "expired"
            except KubeError as exc:
                if exc.gone:
                    log.info(
                        "watch: resource version expired (410); relisting",
                        extra=fields(detail=str(exc)),
                    )
                    rv, reason = None, "expired"
                    continue
                if rv is None:
                    reason = "error"
                else:  # resume after the last event seen, not the last completed request
                    rv = self.resource_version or rv
                delay = min(BACKOFF_CAP, BACKOFF_BASE * (2 ** min(failures, 10)))
                failures += 1
                log.warning(
                    "watch: %s; retrying in %.1fs",
                    exc,
                    delay,
                    extra=fields(status=exc.status, attempt=failures),
                )
                if self.metrics is not None:
                    self.metrics.error()
                stop.wait(delay)
            except Exception:  # never let the watch thread die (logged with the traceback)
                delay = min(BACKOFF_CAP, BACKOFF_BASE * (2 ** min(failures, 10)))
                failures += 1
                log.exception("watch: unexpected failure; relisting in %.1fs", delay)
                rv, reason = None, "error"
                stop.wait(delay)
