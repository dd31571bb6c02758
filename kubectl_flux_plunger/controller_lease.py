"""Is a flux-plunger controller running?  Read from its leader-election Lease (SPEC §3, §4).

One-shot verbs that write (``recover``, ``resume-owned``) write as the same field manager as
the controller, so they cannot tell a running controller's in-flight suspension from a crash
leftover by the object alone.  The controller's Lease tells: while another identity holds it
unexpired, those verbs refuse (unless forced), and ``status`` shows who holds it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from . import constants as C
from .detect import parse_timestamp
from .kube import Kube, KubeError, in_cluster_namespace

# The namespace the shipped manifests (chart and kustomize) install the controller into.
DEFAULT_CONTROLLER_NAMESPACE = "flux-plunger"


def default_lease_namespace() -> str:
    """As the controller resolves it when it runs in a pod; else the shipped namespace."""
    return in_cluster_namespace() or DEFAULT_CONTROLLER_NAMESPACE


@dataclass(frozen=True)
class ControllerLease:
    """What the Lease says.  ``running``: a holder whose last renewal is younger than the
    lease duration (a crashed controller's Lease simply expires)."""

    namespace: str
    holder: str
    renew_time: dt.datetime | None
    lease_duration: float | None
    running: bool
    readable: bool = True
    error: str = ""

    def age(self, now: dt.datetime) -> float | None:
        """Seconds since the last renewal."""
        return None if self.renew_time is None else (now - self.renew_time).total_seconds()

    def describe(self, now: dt.datetime) -> str:
        """One phrase for ``status`` and error lines."""
        where = f"Lease {self.namespace}/{C.LEASE_NAME}"
        if not self.readable:
            return f"cannot read {where}: {self.error}"
        if not self.holder:
            return f"no flux-plunger controller holds {where}"
        age = self.age(now)
        renewed = f"last renewed {age:.0f}s ago" if age is not None else "never renewed"
        state = "running" if self.running else "expired"
        return f"flux-plunger controller {self.holder} holds {where} ({state}, {renewed})"


def read(kube: Kube, namespace: str, now: dt.datetime | None = None) -> ControllerLease:
    """One GET of the Lease.  Unreadable (e.g. forbidden) is reported, not raised."""
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        lease = kube.get_lease(namespace, C.LEASE_NAME)
    except KubeError as exc:
        return ControllerLease(namespace, "", None, None, False, readable=False, error=str(exc))
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    renew = parse_timestamp(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    seconds = (
        float(duration)
        if isinstance(duration, (int, float)) and not isinstance(duration, bool)
        else None
    )
    running = (
        bool(holder)
        and renew is not None
        and seconds is not None
        and (now - renew).total_seconds() < seconds
    )
    return ControllerLease(namespace, holder, renew, seconds, running)


def refusal(lease: ControllerLease, now: dt.datetime) -> str | None:
    """Why a writing one-shot verb must not act, or None.  An unreadable Lease is not a
    refusal: a user without access to the controller's namespace can still recover."""
    if lease.running:
        return (
            f"{lease.describe(now)}: it may be recovering these releases right now; "
            f"stop it or pass --force to act anyway"
        )
    return None
