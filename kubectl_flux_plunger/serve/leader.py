"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

* Acquire: the Lease is free when its holder is empty, or when its record has not changed for
  ``leaseDurationSeconds`` as observed on *our* clock (never trusting ``renewTime`` across
  machines).  Every write is a PUT carrying the resourceVersion of the read: a 409 means someone
  else wrote in between — re-read on the next try.
* Renew every ``retry_period``; leadership is lost when no renewal succeeded for
  ``renew_deadline`` (shorter than the Lease, so we stop acting before anyone else may start).
* Release (on a clean stop): holderIdentity "" and leaseDurationSeconds 1, so a successor
  acquires on its next try instead of waiting for expiry.  A crashed leader's Lease expires.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from ..core.objects import Obj
from ..kube import KubeError
from .logs import fields
from .options import JITTER, LeaseConfig

log = logging.getLogger(__name__)


class LeaseStore(Protocol):
    """Where the Lease lives (``kube.Kube``; a dict in the unit tests)."""

    def get_lease(self, namespace: str, name: str) -> Obj | None: ...
    def create_lease(self, namespace: str, body: Obj) -> Obj: ...
    def update_lease(self, namespace: str, name: str, body: Obj) -> Obj: ...


def identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _micro_time(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class LeaderElector:
    def __init__(
        self,
        kube: LeaseStore,
        lease: LeaseConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = _utcnow,
        on_started: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.kube = kube
        # written on the Lease with every acquire (what this instance watches: sharding)
        self.annotations = dict(lease.annotations)
        self.namespace, self.name, self.identity = lease.namespace, lease.name, lease.identity
        self.lease_duration = lease.timings.lease_duration
        self.renew_deadline = lease.timings.renew_deadline
        self.retry_period = lease.timings.retry_period
        self.clock, self.wall = clock, wall
        self.on_started, self.on_lost = on_started, on_lost
        self._lock = threading.Lock()
        self._observed: Obj | None = None  # the Lease object as last read/written
        self._observed_key: tuple[object, ...] | None = None  # what changes when the holder renews
        self._observed_at = 0.0  # our clock when that last changed
        self._last_renew: float | None = None  # our clock at our last successful write
        self.leading = threading.Event()
        self.ever_led = False
        self.lost = threading.Event()
        self._stop_renewing = threading.Event()
        self._renew_done = threading.Event()  # run() has returned

    # -- state -------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while we lead and our last renewal is younger than the renew deadline."""
        with self._lock:
            last = self._last_renew
        return (
            self.leading.is_set() and last is not None and self.clock() - last < self.renew_deadline
        )

    def holder(self) -> str:
        with self._lock:
            spec = (self._observed or {}).get("spec") or {}
        return spec.get("holderIdentity") or ""

    # -- one attempt -------------------------------------------------------------

    def _spec(self, old: Obj | None) -> Obj:
        old_spec = (old or {}).get("spec") or {}
        now = _micro_time(self.wall())
        was_ours = old_spec.get("holderIdentity") == self.identity
        transitions = int(old_spec.get("leaseTransitions") or 0)
        if old is not None and not was_ours:
            transitions += 1
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": old_spec.get("acquireTime")
            if was_ours and old_spec.get("acquireTime")
            else now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _with_annotations(self, lease: Obj) -> Obj:
        if not self.annotations:
            return lease
        md = dict(lease.get("metadata") or {})
        md["annotations"] = {**(md.get("annotations") or {}), **self.annotations}
        return {**lease, "metadata": md}

    def _observe(self, lease: Obj) -> None:
        spec = lease.get("spec") or {}
        key = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            lease.get("metadata", {}).get("resourceVersion"),
        )
        with self._lock:
            if key != self._observed_key:
                self._observed_key = key
                self._observed_at = self.clock()
            self._observed = lease

    def _wrote(self, lease: Obj, sent_at: float) -> None:
        """``lease`` is what a write of ours left; ``sent_at`` our clock when the write went
        out.  The renew deadline counts from then, not from the answer: a late answer must
        not stretch how long we act past what a follower that saw the write allows."""
        self._observe(lease)
        with self._lock:
            self._last_renew = sent_at

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the Lease afterwards.  Never raises KubeError."""
        try:
            return self._try()
        except KubeError as exc:
            log.warning(
                "leader election: %s",
                exc,
                extra=fields(lease=f"{self.namespace}/{self.name}", status=exc.status),
            )
            return False

    def _try(self) -> bool:
        if self._stop_renewing.is_set():
            return False  # releasing: never write again
        # Fast path, as client-go: while we lead, update the copy we wrote last.
        with self._lock:
            cached = self._observed
        if (
            self.leading.is_set()
            and cached is not None
            and (cached.get("spec") or {}).get("holderIdentity") == self.identity
        ):
            sent_at = self.clock()
            try:
                self._wrote(
                    self.kube.update_lease(
                        self.namespace, self.name, {**cached, "spec": self._spec(cached)}
                    ),
                    sent_at,
                )
                return True
            except KubeError as exc:
                # someone else wrote it, or deleted it: re-read (the Lease may be another's now)
                if not (exc.conflict or exc.not_found):
                    raise
        lease = self.kube.get_lease(self.namespace, self.name)
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None),
            }
            body = self._with_annotations(body)
            sent_at = self.clock()
            try:
                self._wrote(self.kube.create_lease(self.namespace, body), sent_at)
                return True
            except KubeError as exc:
                if exc.conflict:
                    return False  # someone created it first
                raise
        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity:
            duration = spec.get("leaseDurationSeconds") or math.ceil(self.lease_duration)
            with self._lock:
                observed_at = self._observed_at
            if self.clock() < observed_at + float(duration):
                return False  # held by someone else and not expired
        sent_at = self.clock()
        try:
            self._wrote(
                self.kube.update_lease(
                    self.namespace,
                    self.name,
                    self._with_annotations({**lease, "spec": self._spec(lease)}),
                ),
                sent_at,
            )
            return True
        except KubeError as exc:
            if exc.conflict:
                return False  # someone else wrote in between: re-read next time
            raise

    # -- the loop ----------------------------------------------------------------

    def _sleep(self, stop: threading.Event, seconds: float) -> bool:
        """Wait; True when asked to stop."""
        return stop.wait(seconds)

    def run(self, stop: threading.Event) -> None:
        """Acquire (until ``stop``), then renew until ``release()``/``stop_renewing()`` or loss."""
        try:
            self._run(stop)
        finally:
            self._renew_done.set()

    def _run(self, stop: threading.Event) -> None:
        log.info(
            "leader election: trying to acquire the Lease",
            extra=fields(lease=f"{self.namespace}/{self.name}", identity=self.identity),
        )
        logged_holder = None
        while not stop.is_set():
            if self.try_acquire_or_renew():
                break
            holder = self.holder()
            if holder != logged_holder:
                logged_holder = holder
                log.info(
                    "leader election: the Lease is held by another instance",
                    extra=fields(holder=holder or "(none)"),
                )
            if self._sleep(stop, self.retry_period * random.uniform(1.0, JITTER)):
                return
        else:
            return
        self.ever_led = True
        self.leading.set()
        log.info(
            "leader election: became leader",
            extra=fields(lease=f"{self.namespace}/{self.name}", identity=self.identity),
        )
        self.on_started()
        while not self._stop_renewing.wait(self.retry_period):
            if self.try_acquire_or_renew():
                continue
            with self._lock:
                last = self._last_renew or 0.0
            holder = self.holder()
            taken = bool(holder) and holder != self.identity  # deleted and re-created by another
            if taken or self.clock() - last >= self.renew_deadline:
                self.leading.clear()
                self.lost.set()
                why = (
                    "another instance holds it" if taken else "no renewal within the renew deadline"
                )
                log.error(
                    "leader election: lost the Lease (%s); stopping without a drain, another "
                    "instance leads now",
                    why,
                    extra=fields(renew_deadline=self.renew_deadline, holder=holder or "(none)"),
                )
                self.on_lost()
                return

    def stop_renewing(self) -> None:
        self._stop_renewing.set()

    def release(self) -> bool:
        """Give the Lease up so a successor acquires at once.  True when released."""
        self._stop_renewing.set()
        # an in-flight renewal must not land after the release (it would take the Lease back)
        self._renew_done.wait(self.renew_deadline)
        if not self.leading.is_set() or self.lost.is_set():
            return False
        self.leading.clear()
        # a few quick tries, within one retry period: a release that cannot be made in time
        # is a Lease left to expire, never a shutdown running into the kubelet's SIGKILL
        give_up = self.clock() + max(1.0, self.retry_period)
        for _ in range(3):
            if self.clock() >= give_up:
                break
            try:
                lease = self.kube.get_lease(self.namespace, self.name)
                if (
                    lease is None
                    or (lease.get("spec") or {}).get("holderIdentity") != self.identity
                ):
                    return False
                now = _micro_time(self.wall())
                spec = dict(lease.get("spec") or {})
                spec.update(
                    {
                        "holderIdentity": "",
                        "leaseDurationSeconds": 1,
                        "acquireTime": now,
                        "renewTime": now,
                    }
                )
                self.kube.update_lease(self.namespace, self.name, {**lease, "spec": spec})
                log.info(
                    "leader election: released the Lease",
                    extra=fields(lease=f"{self.namespace}/{self.name}"),
                )
                return True
            except KubeError as exc:
                log.warning("leader election: could not release the Lease: %s", exc)
                if not exc.conflict:
                    time.sleep(min(1.0, self.retry_period))
        return False
