"""Waiting on one release — the one wait-until helper of the saga.

``ReleaseWatch`` is one WATCH of the release, opened from the resourceVersion of the fresh
read that decided on a recovery and read by a thread into a queue.  That one request serves
three purposes: the acquire is sent on the newest state (after helm-controller's burst of
status writes has settled, so the unforced apply seldom meets a 409), a 409 is re-decided on
the state the stream already carries (no GET), and the handshake — helm-controller has
observed our suspended generation — is awaited on the same stream.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from typing import Any

from .. import detect
from ..kube import Kube, KubeError
from ..objects import Obj
from .outcome import Stopped
from .primitives import Primitives

log = logging.getLogger(__name__)

# How long the stream must be quiet before the acquire when helm-controller is writing
# (its burst of status writes during an attempt), and the bound of that wait.
SETTLE_QUIET = 0.15
SETTLE_BOUND = 2.0
# The replay of what happened since the read arrives right after the watch opens.
REPLAY_WAIT = 0.02
_END = "_END"


class ReleaseWatch:
    """One WATCH of one release from the rv of ``hr``; ``latest`` is its newest state
    (None once it is deleted or replaced by another object under the same name)."""

    def __init__(self, kube: Kube, hr: Obj, timeout: float):
        md = hr["metadata"]
        self.namespace, self.name, self.uid = md["namespace"], md["name"], md.get("uid")
        self.latest: Obj | None = hr
        self.ended = False
        self._q: queue.Queue[Obj] = queue.Queue()
        self._resp: Any = None
        self._open = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            args=(kube, md["resourceVersion"], max(1, int(timeout + 0.999))),
            name=f"watch-{self.name}",
            daemon=True,
        )
        self._thread.start()

    # -- the reader thread --------------------------------------------------------

    def _run(self, kube: Kube, rv: str, timeout: int) -> None:
        try:
            for ev in kube.watch_hrs(
                self.namespace,
                None,
                rv,
                timeout_seconds=timeout,
                field_selector=f"metadata.name={self.name}",
                opened=self._opened,
            ):
                if self._closed.is_set():
                    break
                self._q.put(ev)
        except Exception as exc:  # noqa: BLE001 - any end of the stream is an end
            if not self._closed.is_set():
                log.debug("watch of %s/%s ended: %s", self.namespace, self.name, exc)
        finally:
            self._open.set()
            self._q.put({"type": _END})

    def _opened(self, resp: Any) -> None:
        self._resp = resp
        self._open.set()
        if self._closed.is_set():
            self._shutdown()

    def _shutdown(self) -> None:
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):  # closing a stream that already ended
                getattr(resp, "shutdown", resp.close)()

    def close(self) -> None:
        self._closed.set()
        self._shutdown()

    # -- the consumer ---------------------------------------------------------------

    def _take(self, ev: Obj) -> None:
        kind, obj = ev.get("type"), ev.get("object") or {}
        if kind in (_END, "ERROR"):
            self.ended = True
        elif kind == "DELETED":
            self.latest = None
        elif kind in ("ADDED", "MODIFIED") and self.latest is not None:
            self.latest = obj if (obj.get("metadata") or {}).get("uid") == self.uid else None

    def next(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for one event; True when one came."""
        if self.ended:
            return False
        try:
            ev = self._q.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return False
        self._take(ev)
        return not self.ended

    def settle(self) -> Obj | None:
        """The newest state once the replay since the read has arrived and, if the release
        is being written (helm-controller mid-attempt), once the writes have paused."""
        self._open.wait(SETTLE_BOUND)
        deadline = time.monotonic() + SETTLE_BOUND
        quiet = REPLAY_WAIT
        while self.next(min(quiet, max(0.0, deadline - time.monotonic()))):
            quiet = SETTLE_QUIET  # something is writing: wait for a pause
            if time.monotonic() >= deadline:
                break
        return self.latest

    def newer_than(self, hr: Obj, timeout: float) -> Obj | None:
        """After a 409 on ``hr``: the newer state the stream carries (waiting up to
        ``timeout`` for it), then any writes queued right behind it; None when the stream
        cannot tell (ended, or nothing came)."""
        rv = hr["metadata"].get("resourceVersion")
        deadline = time.monotonic() + timeout
        while self.latest is not None and self.latest["metadata"].get("resourceVersion") == rv:
            if not self.next(deadline - time.monotonic()):
                return None
        while self.next(REPLAY_WAIT):
            pass
        return (
            None
            if self.ended
            and self.latest is not None
            and self.latest["metadata"].get("resourceVersion") == rv
            else self.latest
        )


class Handshake(Primitives):
    def _await_handshake(self, hr: Obj, watch: ReleaseWatch | None = None) -> Obj | None:
        """Wait (bounded) until helm-controller has observed the suspended generation, on
        ``watch`` (opened before the acquire) or by watching this one release from the rv
        of our acquire, so no revision goes while it may be mid-action.  Returns the last
        state seen (None when gone); the record that follows is locked to that state's rv,
        so nothing that happened after it can slip by."""
        if self.kube.dry_run:
            return hr  # nothing was persisted: there is nothing to observe
        deadline = time.monotonic() + self.opt.handshake_timeout
        fresh: Obj | None = hr
        if watch is not None:
            # on the stream opened before the acquire; should it end early, the loop
            # below watches again from the last state it carried
            fresh = self._await_on(watch, hr, deadline)
        while (
            fresh is not None and not detect.is_terminating(fresh) and detect.observed_lags(fresh)
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self.should_stop():
                raise Stopped()
            fresh = self._watch_one(fresh, min(remaining, self.opt.handshake_window))
        return fresh

    def _await_on(self, watch: ReleaseWatch, held: Obj, deadline: float) -> Obj | None:
        """The handshake on the watch opened before the acquire.  Events older than our
        acquire (a lower generation) are skipped; the newest state at least as new is
        returned once helm-controller observed it, the release is going, or time is up."""
        generation = detect.generation(held) or 0
        current: Obj | None = held
        while True:
            latest = watch.latest
            if latest is None:
                return None
            if (detect.generation(latest) or 0) >= generation:
                current = latest
            if (
                current is None
                or detect.is_terminating(current)
                or not detect.observed_lags(current)
            ):
                return current
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return current
            if self.should_stop():
                raise Stopped()
            if not watch.next(min(remaining, self.opt.handshake_window)) and watch.ended:
                return current

    def _watch_one(self, hr: Obj, window: float) -> Obj | None:
        """Follow one release for up to ``window`` seconds from the rv we last saw; return
        its newest state once helm-controller has observed it (or it is going)."""
        md = hr["metadata"]
        current = hr
        try:
            for ev in self.kube.watch_hrs(
                md["namespace"],
                None,
                md["resourceVersion"],
                timeout_seconds=max(1, int(window + 0.999)),
                field_selector=f"metadata.name={md['name']}",
            ):
                kind, obj = ev.get("type"), ev.get("object") or {}
                if kind == "DELETED":
                    return None
                if kind == "ERROR":
                    return self._fresh(current)  # e.g. 410: re-read and go on
                if kind in ("ADDED", "MODIFIED"):
                    if obj["metadata"].get("uid") != md.get("uid"):
                        return None
                    current = obj
                    if detect.is_terminating(obj) or not detect.observed_lags(obj):
                        return obj
        except KubeError as exc:
            log.warning(
                "watching %s/%s for helm-controller's handshake failed (%s); re-reading instead",
                md["namespace"],
                md["name"],
                exc,
            )
            time.sleep(0.2)
            return self._fresh(current)
        return current
