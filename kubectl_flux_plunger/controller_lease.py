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
from .objects import Obj
from .selector import SelectorError
from .selector import parse as parse_selector

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
    name: str = C.LEASE_NAME
    # what the controller watches, as serve records it on its Lease (None: not recorded —
    # the reference controller, an older flux-plunger: taken as every release)
    selector: str | None = None
    watch_namespace: str | None = None

    def covers(self, hr: Obj) -> bool:
        """Whether ``hr`` is inside what this controller watches (its namespace scope and
        label selector).  An unrecorded or unparsable selector covers everything."""
        md = hr.get("metadata") or {}
        if self.watch_namespace and md.get("namespace") != self.watch_namespace:
            return False
        if not self.selector:
            return True
        try:
            return parse_selector(self.selector).matches_object(hr)
        except SelectorError:
            return True

    def scope(self) -> str:
        """`` (watching -n NS -l SEL)`` when the Lease records a scope, else empty."""
        parts = []
        if self.watch_namespace:
            parts.append(f"-n {self.watch_namespace}")
        if self.selector:
            parts.append(f"-l {self.selector!r}")
        return f" (watching {' '.join(parts)})" if parts else ""

    def age(self, now: dt.datetime) -> float | None:
        """Seconds since the last renewal."""
        return None if self.renew_time is None else (now - self.renew_time).total_seconds()

    def describe(self, now: dt.datetime) -> str:
        """One phrase for ``status`` and error lines."""
        where = f"Lease {self.namespace}/{self.name}"
        if not self.readable:
            return f"cannot read {where}: {self.error}"
        if not self.holder:
            return f"no flux-plunger controller holds {where}"
        age = self.age(now)
        renewed = f"last renewed {age:.0f}s ago" if age is not None else "never renewed"
        state = "running" if self.running else "expired"
        return (
            f"flux-plunger controller {self.holder} holds {where} ({state}, {renewed})"
            + self.scope()
        )


def read(
    kube: Kube, namespace: str, now: dt.datetime | None = None, name: str = C.LEASE_NAME
) -> ControllerLease:
    """One GET of the Lease ``name``.  Unreadable (e.g. forbidden) is reported, not raised."""
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        lease = kube.get_lease(namespace, name)
    except KubeError as exc:
        return ControllerLease(
            namespace, "", None, None, False, readable=False, error=str(exc), name=name
        )
    return _of(lease, namespace, name, now)


def read_all(kube: Kube, namespace: str, now: dt.datetime | None = None) -> list[ControllerLease]:
    """Every flux-plunger controller's Lease in ``namespace`` with one LIST (sharding: one
    Lease per install, each recording what it watches): the contract's Lease first (also
    when absent: "no controller holds it"), then the others by name.  A LIST that is refused
    falls back to the GET of the contract's Lease."""
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        items = kube.list_leases(namespace)
    except KubeError:
        return [read(kube, namespace, now)]
    ours = {}
    for lease in items:
        md = lease.get("metadata") or {}
        name = md.get("name") or ""
        if name == C.LEASE_NAME or C.LEASE_SELECTOR_ANNOTATION in (md.get("annotations") or {}):
            ours[name] = _of(lease, namespace, name, now)
    first = ours.pop(C.LEASE_NAME, None) or _of(None, namespace, C.LEASE_NAME, now)
    return [first] + [ours[n] for n in sorted(ours)]


def _of(lease: Obj | None, namespace: str, name: str, now: dt.datetime) -> ControllerLease:
    annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
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
    return ControllerLease(
        namespace,
        holder,
        renew,
        seconds,
        running,
        name=name,
        selector=annotations.get(C.LEASE_SELECTOR_ANNOTATION),
        watch_namespace=annotations.get(C.LEASE_NAMESPACE_ANNOTATION),
    )


def refusal(lease: ControllerLease, now: dt.datetime) -> str | None:
    """Why a writing one-shot verb must not act, or None.  An unreadable Lease is not a
    refusal: a user without access to the controller's namespace can still recover."""
    if lease.running:
        return (
            f"{lease.describe(now)}: it may be recovering these releases right now; "
            f"stop it or pass --force to act anyway"
        )
    return None
