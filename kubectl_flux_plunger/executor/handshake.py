"""Waiting on one release — the one wait-until helper of the recovery (``recover``).

``ReleaseWatch`` is one WATCH of the release — the watch-list whose initial event is the
fresh read that decided on a recovery, or a WATCH from that read's resourceVersion — read by
a thread into a queue.  That one request serves
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
from collections.abc import Callable
from typing import Any

from ..core import detect, ownership
from ..core.objects import Obj
from ..kube import INITIAL_EVENTS_END, Kube, KubeError, Unreachable, kept
from .outcome import Options, Stopped

log = logging.getLogger(__name__)

# How long the stream must be quiet before the acquire when helm-controller is writing
# (its burst of status writes during an attempt), and the bound of that wait.
SETTLE_QUIET = 0.15
SETTLE_BOUND = 2.0
# The replay of what happened since the read arrives right after the watch opens (a watch
# from a GET's resourceVersion; a watch-list's stream is the read, so it has no replay); and
# after a 409's newer state, the writes queued right behind it.
REPLAY_WAIT = 0.02
_END = "_END"


def _still_ours(hr: Obj) -> bool:
    """Our suspension is still on: another writer (``flux resume``, an operator) taking
    spec.suspend ends the wait at once — there is nothing left to wait for."""
    return detect.is_suspended(hr) and ownership.owns_suspend(hr)


class InitialStateUnknown(Exception):
    """A watch-list did not deliver the release's current state (the server does not
    support it, the stream failed or stayed silent): read it with a GET instead."""


class ReleaseWatch:
    """One WATCH of one release; ``latest`` is its newest state (None once it is deleted
    or replaced by another object under the same name).

    Opened from the rv of ``hr`` (the read that decided), or — :meth:`read` — as a
    watch-list whose initial event *is* the fresh read, so the read that decides and the
    stream the recovery then waits on are one request."""

    def __init__(
        self,
        kube: Kube,
        hr: Obj | None,
        timeout: float,
        *,
        key: tuple[str, str] | None = None,
    ):
        if hr is not None:
            md = hr["metadata"]
            self.namespace, self.name = md["namespace"], md["name"]
            self.uid: str | None = md.get("uid")
            rv, initial = md["resourceVersion"], False
        else:
            assert key is not None
            self.namespace, self.name = key
            self.uid, rv, initial = None, "", True
        self.latest: Obj | None = hr
        self.ended = False
        self.error: Exception | None = None
        # a watch-list: until its first ADDED (or the end-of-initial-events bookmark) the
        # state is not known yet
        self.initial_pending = initial
        # a watch-list carries the read and every change after it in order on one stream:
        # there is no replay to wait for (a write still in flight when the acquire goes
        # out meets its resourceVersion precondition, and the 409 is re-decided on the stream)
        self._replays = not initial
        self._q: queue.Queue[Obj] = queue.Queue()
        self._resp: Any = None
        self._open = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            args=(kube, rv, max(1, int(timeout + 0.999)), initial),
            name=f"watch-{self.name}",
            daemon=True,
        )
        self._thread.start()

    @classmethod
    def read(
        cls, kube: Kube, namespace: str, name: str, timeout: float, first_wait: float
    ) -> tuple[Obj | None, ReleaseWatch]:
        """The fresh read of one release as a watch-list: (its state, or None when it does
        not exist; the open watch).  Raises the stream's KubeError when the server refused
        it, :class:`InitialStateUnknown` when nothing conclusive came within
        ``first_wait`` seconds (the watch is closed then)."""
        watch = cls(kube, None, timeout, key=(namespace, name))
        try:
            return watch._initial(first_wait), watch
        except BaseException:
            watch.close()
            raise

    def _initial(self, first_wait: float) -> Obj | None:
        deadline = time.monotonic() + first_wait
        while self.initial_pending:
            if self.ended or not self._next_event(deadline - time.monotonic()):
                if isinstance(self.error, KubeError) and not isinstance(self.error, Unreachable):
                    raise self.error
                raise InitialStateUnknown(
                    f"the watch of {self.namespace}/{self.name} gave no initial state"
                    + (f" ({self.error})" if self.error else "")
                )
        return self.latest

    # -- the reader thread --------------------------------------------------------

    def _run(self, kube: Kube, rv: str, timeout: int, initial: bool) -> None:
        try:
            for ev in kube.watch_hrs(
                self.namespace,
                None,
                rv,
                timeout_seconds=timeout,
                field_selector=f"metadata.name={self.name}",
                opened=self._opened,
                send_initial_events=initial,
            ):
                if self._closed.is_set():
                    break
                self._q.put(ev)
        except Exception as exc:  # noqa: BLE001 - any end of the stream is an end
            self.error = kept(exc)  # no traceback: it would hold this frame, so self
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

    def _take(self, ev: Obj) -> bool:
        """Fold one event into ``latest``; False for a bookmark (no change of state)."""
        kind, obj = ev.get("type"), ev.get("object") or {}
        md = obj.get("metadata") or {}
        if kind in (_END, "ERROR"):
            self.ended = True
        elif kind == "BOOKMARK":
            if (md.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                self.initial_pending = False  # no ADDED before it: the release does not exist
            return False
        elif self.initial_pending:
            if kind == "ADDED":
                self.latest, self.uid, self.initial_pending = obj, md.get("uid"), False
        elif kind == "DELETED":
            self.latest = None
        elif kind in ("ADDED", "MODIFIED") and self.latest is not None:
            self.latest = obj if md.get("uid") == self.uid else None
        return True

    def _pull(self, timeout: float) -> Obj | None:
        """The next event, waiting up to ``timeout`` seconds; None when the stream ended
        or nothing came."""
        if self.ended:
            return None
        try:
            return self._q.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def _next_event(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for one event of any kind; True when one came."""
        ev = self._pull(timeout)
        if ev is not None:
            self._take(ev)
        return ev is not None

    def next(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for one change of the release (bookmarks are
        skipped); True when one came."""
        deadline = time.monotonic() + timeout
        while (ev := self._pull(deadline - time.monotonic())) is not None:
            if self._take(ev):
                return not self.ended
        return False

    def settle(self) -> Obj | None:
        """The newest state once the replay since the read has arrived (a watch-list has
        none: the changes since its read are queued already) and, if the release is being
        written (helm-controller mid-attempt), once the writes have paused."""
        self._open.wait(SETTLE_BOUND)
        deadline = time.monotonic() + SETTLE_BOUND
        quiet = REPLAY_WAIT if self._replays else 0.0
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


def watch_timeout(opt: Options) -> float:
    """How long a release's watch may stay open: the acquire, the handshake, margin."""
    return opt.handshake_timeout + SETTLE_BOUND + 5


class Handshake:
    """Waiting until helm-controller has observed our suspension.  Holds what the wait
    uses: the client, the options (its bounds), the stop flag, and ``fresh`` — the re-read
    of one release (``Primitives.fresh``) when a watch of it fails."""

    def __init__(
        self,
        kube: Kube,
        options: Options,
        should_stop: Callable[[], bool],
        fresh: Callable[[Obj], Obj | None],
    ):
        self.kube = kube
        self.opt = options
        self.should_stop = should_stop
        self.fresh = fresh

    def await_handshake(self, hr: Obj, watch: ReleaseWatch | None = None) -> Obj | None:
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
            fresh is not None
            and not detect.is_terminating(fresh)
            and detect.observed_lags(fresh)
            and _still_ours(fresh)
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
                or not _still_ours(current)
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
                    return self.fresh(current)  # e.g. 410: re-read and go on
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
            return self.fresh(current)
        return current
