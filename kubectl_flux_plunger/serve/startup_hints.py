"""Start-up hints: the HelmReleases helm-controller has just reported stuck, queued ahead of
the sync (issue 32).

The sync reads every release in scope before it reaches the last one, and the apiserver
needs seconds for that at 10,000 releases.  helm-controller records a Warning Event on the
HelmRelease at every failed attempt (``UpgradeFailed``: ``… has no deployed releases``), and
those can be listed with a field selector whatever the number of releases.  When serve
starts leading it therefore lists them once, beside the sync:

* one LIST of Events ``involvedObject.kind=HelmRelease,type=Warning`` in the install's
  scope (the namespace of ``-n``, else every namespace; paged by 500, so one request unless
  more match);
* a *report* is such an Event about a ``helm.toolkit.fluxcd.io`` HelmRelease whose message
  contains "has no deployed releases", not recorded by flux-plunger itself, and **recent**:
  last seen (the newest of ``series.lastObservedTime``, ``lastTimestamp``, ``eventTime`` and
  the Event's creation) at most ``RECENT_SECONDS`` ago.  An Event outlives the attempt it
  reports (an hour by default); a release that is still stuck is reported again at each
  retry, and helm-controller retries with a backoff capped at 15 minutes by default
  (``--max-retry-delay``), so an older report is of a release that has healed or that
  helm-controller no longer retries — which the sync finds either way;
* each release reported, newest report first, is queued ahead of the sync's keys
  (``WorkQueue.add_first``).  With ``-l`` a report names a release whose labels the Event
  does not carry: each one is read first with a GET and queued only when that fresh read
  is inside the selector, so a release outside it never reaches a worker (no read of it
  decides anything, nothing is written to it).

A report is a hint, never evidence: the worker decides on its own fresh read as always (a
release that is not stuck any more is left as it is), and the sync, which still reads
everything, folds into the same key (the queue skips its copy of a state a pass already
judged) and finds every stuck release no recent Event names.  A LIST that fails — forbidden
by an install's RBAC, or anything else — is one warning, and serve goes on without hints.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from ..core import constants as C
from ..core.detect import parse_timestamp
from ..core.objects import Obj
from ..core.selector import Selector
from ..kube import KubeError
from .logs import fields

# the logger keeps the name it has always had (the JSON lines carry it): the module was hints.py
log = logging.getLogger("kubectl_flux_plunger.serve.hints")

FIELD_SELECTOR = f"involvedObject.kind={C.HR_KIND},type=Warning"
# how old a report may be and still be taken as one of a release helm-controller is retrying:
# its default retry backoff cap (15 min) and a margin
RECENT_SECONDS = 20 * 60.0


class Source(Protocol):
    """What the hints are read through (``kube.Kube``)."""

    def iter_events(self, namespace: str | None, field_selector: str) -> Iterator[Obj]: ...

    def get_hr(self, namespace: str, name: str) -> Obj | None: ...


class Front(Protocol):
    """Where hinted keys go (``queue.WorkQueue``)."""

    def add_first(self, key: str) -> bool: ...


_STUCK_WORDS = (C.STUCK_MESSAGE, *C.NAME_IN_USE_MESSAGES)


def last_seen(event: Obj) -> float | None:
    """When the Event last happened (epoch seconds), or None when it carries no time."""
    md = event.get("metadata") or {}
    stamps = (
        (event.get("series") or {}).get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        md.get("creationTimestamp"),
    )
    seen = [t.timestamp() for t in map(parse_timestamp, stamps) if t is not None]
    return max(seen, default=None)


def _reported_key(event: Obj) -> str | None:
    """``namespace/name`` of the HelmRelease a stuck report is about, else None: a Warning
    carrying Helm's "has no deployed releases" (UpgradeFailed) or "cannot reuse a name that
    is still in use" (InstallFailed).  (helm-controller records no Event for StateError.)"""
    message = str(event.get("message") or "")
    if event.get("type") != "Warning" or not any(m in message for m in _STUCK_WORDS):
        return None
    if C.EVENT_COMPONENT in (
        (event.get("source") or {}).get("component"),
        event.get("reportingComponent"),
    ):
        return None  # flux-plunger's own
    obj = event.get("involvedObject") or {}
    if obj.get("kind") != C.HR_KIND or not str(obj.get("apiVersion") or "").startswith(
        f"{C.HR_GROUP}/"
    ):
        return None
    namespace = obj.get("namespace") or (event.get("metadata") or {}).get("namespace")
    name = obj.get("name")
    return f"{namespace}/{name}" if namespace and name else None


def reported(events: Iterable[Obj], now: float, recent: float = RECENT_SECONDS) -> list[str]:
    """The keys of the releases recent stuck reports name, the newest report first."""
    newest: dict[str, float] = {}
    for event in events:
        key = _reported_key(event)
        seen = last_seen(event) if key else None
        if key is None or seen is None or now - seen > recent:
            continue
        if seen > newest.get(key, float("-inf")):
            newest[key] = seen
    return sorted(newest, key=lambda k: -newest[k])


class StartupHints:
    """One pass of the start-up hints (module doc): list, pick the recent reports, check
    the selector with a GET each under ``-l``, queue ahead."""

    def __init__(
        self,
        kube: Source,
        queue: Front,
        *,
        namespace: str | None,
        selector: Selector | None,
        recent: float = RECENT_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.queue = kube, queue
        self.namespace, self.selector = namespace, selector
        self.recent, self.clock = recent, clock

    def run(self) -> list[str]:
        """Queue what the reports name; returns the keys queued ahead.  Never raises."""
        try:
            return self._run()
        except Exception:  # a bug here must not take the start-up with it (logged)
            log.exception("start-up hints failed; going on without them")
            return []

    def _run(self) -> list[str]:
        listed = 0

        def counted() -> Iterator[Obj]:
            nonlocal listed
            for event in self.kube.iter_events(self.namespace, FIELD_SELECTOR):
                listed += 1
                yield event

        try:
            keys = reported(counted(), self.clock(), self.recent)
        except KubeError as exc:
            log.warning(
                "start-up hints: cannot list the Warning Events on HelmReleases (%s); going "
                "on without them, the sync still reads every release",
                exc,
                extra=fields(status=exc.status),
            )
            return []
        queued = [key for key in keys if self._selected(key) and self.queue.add_first(key)]
        log.info(
            "start-up hints: queued the HelmReleases reported stuck ahead of the sync",
            extra=fields(events=listed, reported=len(keys), queued=len(queued)),
        )
        return queued

    def _selected(self, key: str) -> bool:
        """Without ``-l`` every report in scope is; with it, a fresh GET must be inside."""
        if self.selector is None:
            return True
        namespace, name = key.split("/", 1)
        try:
            hr = self.kube.get_hr(namespace, name)
        except KubeError as exc:
            log.debug("start-up hint not checked: %s", exc, extra=fields(release=key))
            return False
        if hr is None or not self.selector.matches_object(hr):
            log.debug("start-up hint outside -l %s", self.selector.text, extra=fields(release=key))
            return False
        return True
