"""Kubernetes Events on HelmReleases (and serve's own Lease), folded so repeats never flood.

Every (object uid, reason, type) maps to one deterministic Event name, so a repeat —
from this process, a later run of the CLI, the drain, or another replica — bumps the
``count`` of the same Event instead of creating a new one.  Messages are static.

The count last written is remembered for the ``MAX_REMEMBERED`` Events used most recently,
so a repeat is one PATCH; a forgotten one (a release recovered long ago, or deleted) is
created again, and the 409 that answers is a GET and a PATCH of the count found there
(issue 49: nothing kept per Event grows with the cluster's history).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import socket
import threading
from collections.abc import Mapping
from typing import Protocol

from ..core import constants as C
from ..core.bounded import Recent
from ..core.objects import Obj
from ..kube import KubeError

log = logging.getLogger(__name__)

# Events whose count is remembered (the module doc): far more than a controller folds into
# at once — one per stuck release and reason while it is worked on
MAX_REMEMBERED = 4096


class Notify(Protocol):
    """Where Events also go as Flux notifications (``notify.Notifier``)."""

    def notify(
        self,
        hr: Obj,
        reason: str,
        type_: str,
        message: str,
        metadata: Mapping[str, str] | None = None,
    ) -> None: ...


class EventStore(Protocol):
    """Where Events are written (``kube.Kube``)."""

    def get_event(self, namespace: str, name: str) -> Obj | None: ...
    def create_event(self, namespace: str, body: Obj) -> Obj: ...
    def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj: ...


def event_name(hr: Obj, reason: str, type_: str) -> str:
    md = hr["metadata"]
    digest = hashlib.sha256(f"{md.get('uid', '')}/{reason}/{type_}".encode()).hexdigest()[:12]
    return f"{md['name'][:200]}.fp-{digest}"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Recorder:
    """Writes Events through ``kube``; failures are logged, never raised.  With a
    ``notifier`` each one is also handed to it (a Flux notification, ``notify``);
    ``metadata`` is for that notification only."""

    def __init__(
        self,
        kube: EventStore,
        *,
        instance: str | None = None,
        enabled: bool = True,
        notifier: Notify | None = None,
        remember: int = MAX_REMEMBERED,
    ) -> None:
        self.kube = kube
        self.enabled = enabled
        self.notifier = notifier
        self.instance = instance or socket.gethostname()
        self._counts: Recent[tuple[str, str], int] = Recent(remember)
        self._lock = threading.Lock()

    def record(
        self,
        hr: Obj,
        reason: str,
        type_: str,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        if not self.enabled or not hr:
            return
        if self.notifier is not None:
            try:
                self.notifier.notify(hr, reason, type_, message, metadata)
            except Exception:  # a notification never fails what it reports
                log.exception("could not queue a Flux notification for %s", reason)
        try:
            self._record(hr, reason, type_, message)
        except KubeError as exc:
            log.warning(
                "could not record event %s on %s/%s: %s",
                reason,
                hr["metadata"].get("namespace"),
                hr["metadata"].get("name"),
                exc,
            )

    def _record(self, hr: Obj, reason: str, type_: str, message: str) -> None:
        md = hr["metadata"]
        ns, name = md["namespace"], event_name(hr, reason, type_)
        key = (ns, name)
        now = _now()
        with self._lock:
            known = self._counts.get(key)
        if known is not None:
            try:
                out = self.kube.patch_event(
                    ns, name, {"count": known + 1, "lastTimestamp": now, "message": message}
                )
                self._remember(key, out)
                return
            except KubeError as exc:
                if not exc.not_found:
                    raise
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                # a HelmRelease's, or what the object says it is (serve's own Lease)
                "apiVersion": hr.get("apiVersion") or C.HR_API_VERSION,
                "kind": hr.get("kind") or C.HR_KIND,
                "name": md["name"],
                "namespace": ns,
                "uid": md.get("uid"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": C.EVENT_COMPONENT},
            "reportingComponent": C.EVENT_COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            out = self.kube.create_event(ns, body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            existing = self.kube.get_event(ns, name) or {}
            out = self.kube.patch_event(
                ns,
                name,
                {
                    "count": int(existing.get("count") or 1) + 1,
                    "lastTimestamp": now,
                    "message": message,
                },
            )
        self._remember(key, out)

    def _remember(self, key: tuple[str, str], event: Obj) -> None:
        with self._lock:
            self._counts.put(key, int(event.get("count") or 1))
