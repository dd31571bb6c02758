"""What one sync of serve's HelmRelease watch read (serve/watch.py): a LIST's items or a
watch-list's initial events, each judged as it comes and kept as keys only — the fenced,
the suspended by us, the held deletes, the stuck, the claims, and the keys the predicate
selects (with their resourceVersion: the catch-all's candidates, serve/resync.py)."""

from __future__ import annotations

import time

from ..core import plan
from ..core.claims import ClaimIndex
from ..core.detect import is_fenced, is_stuck, is_terminating, parse_timestamp
from ..core.objects import Obj
from .resync import Requeue


def key_of(hr: Obj) -> str:
    md = hr.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}"


def held_since(hr: Obj) -> float | None:
    """When a fenced release began terminating (epoch seconds): its delete is held."""
    if not is_terminating(hr):
        return None
    when = parse_timestamp((hr.get("metadata") or {}).get("deletionTimestamp"))
    return when.timestamp() if when is not None else time.time()


class Sync:
    """What one sync read so far — a LIST's items or a watch-list's initial events: keys
    only, every item judged with the whole predicate (the catch-all) as it comes."""

    def __init__(self, claims: bool = False) -> None:
        # every release's claims (issue 55), when serve's scope is the whole cluster
        self.claims = ClaimIndex() if claims else None
        self.fenced: set[str] = set()
        self.owned: set[str] = set()
        self.held: dict[str, float] = {}  # fenced and terminating: its deletionTimestamp
        self.stuck: set[str] = set()  # what can still be left stuck (serve/stuck.py)
        self.selected: dict[str, str] = {}  # the predicate's: key -> rv (serve/resync.py)
        self.count = self.queued = 0

    def take(self, hr: Obj, queue: Requeue) -> None:
        self.count += 1
        key = key_of(hr)
        if self.claims is not None:
            self.claims.put(hr)
        if is_fenced(hr):
            self.fenced.add(key)
            since = held_since(hr)
            if since is not None:
                self.held[key] = since
        if plan.suspended_by_us(hr):
            self.owned.add(key)
        if is_stuck(hr):
            self.stuck.add(key)
        if plan.predicate(hr):  # the catch-all: the whole predicate, whatever the filter
            self.queued += 1
            # with its rv: a pass that already settled the release at this state or a newer
            # one (a start-up hint's) has judged it
            rv = (hr.get("metadata") or {}).get("resourceVersion") or ""
            self.selected[key] = rv
            queue.add(key, rv or None, listed=True)
