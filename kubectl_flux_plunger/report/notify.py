"""Flux notifications: every Event flux-plunger records is also POSTed to Flux's
notification-controller (``--events-addr``), as a Flux event
(github.com/fluxcd/pkg/apis/event v1beta1 ``Event``), so an operator's ``Alert`` on
HelmReleases hears about recoveries, failures and held fences through their own
``Provider``.

Posting never delays or fails what it reports: :meth:`Notifier.notify` only puts the
event on a bounded queue; one background thread sends it with a short timeout and a
bounded retry.  An address that does not answer is one warning log line per outage, not
one per event; the one-shot verbs :meth:`Notifier.close` with a short bounded wait.

Folding, like the Kubernetes Events' (:mod:`.events`): a repeat of the same reason,
type and message on the same object is posted once — until that object's next
``Recovered``, which is always posted (each one is a delete that happened) and starts
a new round.  notification-controller itself drops an identical event (same object,
message, ``revision`` and ``token`` metadata) within its ``--rate-limit-interval``, so a
``Recovered`` event carries the deleted Secret's uid as ``token``: two recoveries are
never merged.

Metadata: notification-controller keeps only keys prefixed with the involved object's
API group (``helm.toolkit.fluxcd.io/``) and strips that prefix before a Provider sees
them; ``token`` is only used for its rate limit and never reaches a Provider.  Not
``revision``: helm-controller uses it for the chart version.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import logging
import queue
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..core import constants as C
from ..core import plan, storage
from ..core.objects import Obj

log = logging.getLogger(__name__)

# Flux's default address of notification-controller's event receiver
DEFAULT_ADDRESS = "http://notification-controller.flux-system.svc.cluster.local./"

# the JSON names of github.com/fluxcd/pkg/apis/event v1beta1 Event
EVENT_FIELDS = frozenset(
    {
        "involvedObject",
        "severity",
        "timestamp",
        "message",
        "reason",
        "metadata",
        "reportingController",
        "reportingInstance",
    }
)
SEVERITY_INFO, SEVERITY_ERROR = "info", "error"
META_PREFIX = f"{C.HR_GROUP}/"
# metadata keys (unprefixed)
RELEASE_NAME = "releaseName"
DELETED_REVISION = "deletedRevision"
STORAGE_SECRET = "storageSecret"
ERROR = "error"
TOKEN = "token"

RECOVERED_REASON = plan.RECOVERED.reason

# what became of a notification (Notifier.stats, serve's flux_plunger_notifications_total)
SENT = "sent"
RATE_LIMITED = "rate-limited"  # notification-controller dropped it as a duplicate (429)
REFUSED = "refused"  # another 4xx
UNREACHABLE = "unreachable"  # no answer, or 5xx, after the bounded retry
DROPPED = "dropped"  # the queue was full
FOLDED = "folded"  # a repeat: not posted

TIMEOUT = 3.0  # seconds per POST
ATTEMPTS = 3  # per event while the address answers; 1 once it is known not to
BACKOFF = 0.5  # seconds before the 2nd attempt, doubled for the next
MAX_QUEUED = 256
MAX_FOLDED_OBJECTS = 4096
CLOSE_WAIT = 2.0  # how long a one-shot verb waits at exit for the queue to empty


def validate_address(value: str) -> str:
    """``value`` when it is an http(s) URL with a host, else ValueError saying why."""
    try:
        parts = urlsplit(value)
        port = parts.port  # raises on a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError(f"{value!r} names no host")
    if parts.fragment or (port is not None and port == 0):
        raise ValueError(f"{value!r} is not an address to POST events to")
    return value


def severity(type_: str) -> str:
    """The Flux severity of a Kubernetes Event type: a Warning is an ``error``."""
    return SEVERITY_ERROR if type_ == "Warning" else SEVERITY_INFO


def _timestamp(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(
    hr: Obj,
    reason: str,
    type_: str,
    message: str,
    metadata: Mapping[str, str] | None = None,
    *,
    instance: str,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The Flux event (v1beta1 ``Event``) for an Event recorded on ``hr``."""
    md = hr["metadata"]
    meta = {RELEASE_NAME: storage.release_name(hr), **(metadata or {})}
    return {
        "involvedObject": {
            "apiVersion": C.HR_API_VERSION,
            "kind": C.HR_KIND,
            "namespace": md.get("namespace", ""),
            "name": md.get("name", ""),
            "uid": md.get("uid", ""),
        },
        "severity": severity(type_),
        "timestamp": _timestamp(now),
        "message": message,
        "reason": reason,
        "metadata": {META_PREFIX + k: str(v) for k, v in meta.items()},
        "reportingController": C.EVENT_COMPONENT,
        "reportingInstance": instance,
    }


class Folder:
    """Which events to post: the first of each (reason, type, message) per object, every
    ``Recovered`` (which forgets the object's others), bounded in objects remembered."""

    def __init__(self, max_objects: int = MAX_FOLDED_OBJECTS) -> None:
        self.max_objects = max_objects
        self._seen: collections.OrderedDict[str, set[tuple[str, str, str]]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def first(self, uid: str, reason: str, type_: str, message: str) -> bool:
        with self._lock:
            if reason == RECOVERED_REASON:
                self._seen.pop(uid, None)
                return True
            seen = self._seen.get(uid)
            if seen is None:
                seen = self._seen[uid] = set()
                while len(self._seen) > self.max_objects:
                    self._seen.popitem(last=False)
            else:
                self._seen.move_to_end(uid)
            key = (reason, type_, message)
            if key in seen:
                return False
            seen.add(key)
            return True


Post = Callable[[str, bytes, float], int]


def http_post(address: str, body: bytes, timeout: float) -> int:
    """POST ``body`` (JSON) to ``address``; the HTTP status.  Raises OSError when there is
    no answer.  urllib is imported here: never on the CLI's start-up path."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        address,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": C.EVENT_COMPONENT},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


class Notifier:
    """Posts Flux events to ``address`` from one background thread."""

    def __init__(
        self,
        address: str,
        *,
        instance: str | None = None,
        timeout: float = TIMEOUT,
        attempts: int = ATTEMPTS,
        backoff: float = BACKOFF,
        max_queued: int = MAX_QUEUED,
        post: Post = http_post,
        on_result: Callable[[str], None] | None = None,
    ) -> None:
        self.address = validate_address(address)
        self.instance = instance or socket.gethostname()
        self.timeout, self.attempts, self.backoff = timeout, max(1, attempts), backoff
        self.post = post
        self.on_result = on_result
        self.folder = Folder()
        self.stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(max_queued)
        self._pending = 0
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closing = threading.Event()
        self._unreachable = False  # warned: one line per outage
        self._warned_full = False

    # -- the recorder's side: never blocks ---------------------------------------

    def notify(
        self,
        hr: Obj,
        reason: str,
        type_: str,
        message: str,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        md = hr.get("metadata") or {}
        uid = md.get("uid") or f"{md.get('namespace')}/{md.get('name')}"
        if not self.folder.first(uid, reason, type_, message):
            self._count(FOLDED)
            return
        body = event_body(hr, reason, type_, message, metadata, instance=self.instance)
        with self._idle:
            self._pending += 1
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()
            self._count(DROPPED)
            if not self._warned_full:
                self._warned_full = True
                log.warning(
                    "Flux notifications are dropped: %d are already waiting for %s",
                    self._queue.maxsize,
                    self.address,
                )
            return
        self._ensure_thread()

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
                self._thread.start()

    # -- the sender ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            body = self._queue.get()
            if body is None:
                return
            try:
                self._count(self._send(body))
            except Exception:
                log.exception("could not send a Flux notification")
                self._count(UNREACHABLE)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _send(self, body: dict[str, Any]) -> str:
        data = json.dumps(body).encode()
        attempts = 1 if self._unreachable else self.attempts
        why = ""
        for attempt in range(attempts):
            if attempt and self._closing.wait(self.backoff * 2 ** (attempt - 1)):
                break
            try:
                status = self.post(self.address, data, self.timeout)
            except OSError as exc:  # refused, unresolvable, timed out
                why = str(getattr(exc, "reason", None) or exc)
                continue
            if status < 500:
                if self._unreachable:
                    self._unreachable = False
                    log.info("notification-controller at %s answers again", self.address)
                if status == 429:
                    return RATE_LIMITED
                if status >= 300:
                    log.warning(
                        "notification-controller at %s refused a Flux event (HTTP %d): %s %s",
                        self.address,
                        status,
                        body["reason"],
                        body["involvedObject"]["name"],
                    )
                    return REFUSED
                return SENT
            why = f"HTTP {status}"
        if not self._unreachable:
            self._unreachable = True
            log.warning(
                "cannot post Flux events to %s (%s); notifications are lost until it "
                "answers (recoveries go on)",
                self.address,
                why,
            )
        return UNREACHABLE

    def _count(self, result: str) -> None:
        with self._stats_lock:  # counted from the callers' threads and the sender's
            self.stats[result] += 1
        if self.on_result is not None:
            self.on_result(result)

    # -- shutdown ----------------------------------------------------------------------

    def flush(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for every queued event to be sent (or given
        up); True when none is left."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Flush with a bounded wait, then stop the sender (what is left is lost)."""
        done = self.flush(timeout)
        self._closing.set()
        if not done:
            log.info(
                "exiting with %d Flux notification(s) not sent to %s",
                self._pending,
                self.address,
            )
        with self._start_lock:
            thread = self._thread
        if thread is not None and done:
            self._queue.put(None)
            thread.join(timeout)
