"""Which flux-plunger controllers are running, and what each watches: read from their
leader-election Leases (SPEC §2, §3).

Every flux-plunger — each shard's ``serve``, the reference controller, a one-shot verb —
writes as the same field manager, so the object alone cannot tell a running controller's
in-flight suspension from a crash leftover.  The Leases tell: the verbs that write read every
flux-plunger Lease of the cluster with one LIST (:func:`survey`) and leave alone each
release a live one covers (:meth:`Controllers.covering`), unless forced; ``status`` shows who
holds each Lease and which controller covers each release.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from ..core import constants as C
from ..core.detect import parse_timestamp
from ..core.objects import Obj
from ..core.selector import SelectorError
from ..core.selector import parse as parse_selector
from . import Kube, KubeError, Unreachable, namespace_default

# The namespace the shipped manifests (chart and kustomize) install the controller into.
DEFAULT_CONTROLLER_NAMESPACE = "flux-plunger"


def default_lease_namespace() -> str:
    """As the controller resolves it when it runs in a pod; else the shipped namespace."""
    return namespace_default(None, pod_first=True, fallback=DEFAULT_CONTROLLER_NAMESPACE)


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
        return self._holds(now) + self.scope()

    def _holds(self, now: dt.datetime) -> str:
        age = self.age(now)
        renewed = f"last renewed {age:.0f}s ago" if age is not None else "never renewed"
        state = "running" if self.running else "expired"
        return (
            f"flux-plunger controller {self.holder} holds Lease {self.namespace}/{self.name} "
            f"({state}, {renewed})"
        )

    def coverage(self) -> str:
        """What this controller is taken to watch, as a deferral says it: the recorded
        scope, or why it is taken to watch every release."""
        if self.selector is None and self.watch_namespace is None:
            return (
                " (it records no scope, as the reference controller's: taken to watch every "
                "release)"
            )
        if self.selector:
            try:
                parse_selector(self.selector)
            except SelectorError:
                return (
                    f"{self.scope()[:-1]}, a selector that does not parse: taken to watch "
                    "every release)"
                )
        return self.scope() or " (watching every release)"

    def deferral(self, now: dt.datetime) -> str:
        """Why a writing verb leaves a release this controller covers alone (one line)."""
        return (
            f"left alone: {self._holds(now)}{self.coverage()} and covers this release, so it "
            "may be recovering it right now; stop it or pass --force to act anyway"
        )


def _ours(lease: Obj, names: Collection[str]) -> bool:
    """A flux-plunger controller's Lease: the contract's name, a shard's (the chart names
    them ``<install>.flux-plunger.cozystack.io``), one carrying the scope serve records, or
    one of ``names`` (``--lease-name``)."""
    md = lease.get("metadata") or {}
    name = md.get("name") or ""
    annotations = md.get("annotations") or {}
    return (
        name == C.LEASE_NAME
        or name.endswith("." + C.LEASE_NAME)
        or name in names
        or C.LEASE_SELECTOR_ANNOTATION in annotations
        or C.LEASE_NAMESPACE_ANNOTATION in annotations
    )


@dataclass(frozen=True)
class Controllers:
    """Every flux-plunger Lease one survey saw (:func:`survey`): the contract's Lease of the
    lease namespace first (also when absent), then the others by namespace and name.

    ``list_error``: the cluster-wide LIST failed (e.g. forbidden), so only the namespaces of
    ``fallback`` were read — each with a LIST, or where that is refused too with one GET of
    each named Lease (``listed``: the namespaces whose LIST answered)."""

    namespace: str
    leases: tuple[ControllerLease, ...]
    list_error: str = ""
    fallback: tuple[str, ...] = ()
    listed: tuple[str, ...] = ()

    def live(self) -> list[ControllerLease]:
        """The controllers running now: held and renewed within their lease duration (an
        expired or released Lease does not count)."""
        return [c for c in self.leases if c.running]

    def covering(self, hr: Obj) -> ControllerLease | None:
        """The first running controller whose recorded scope covers ``hr`` (a Lease whose
        scope cannot be read covers every release), or None."""
        return next((c for c in self.live() if c.covers(hr)), None)

    def unreadable(self) -> list[ControllerLease]:
        return [c for c in self.leases if not c.readable]

    def blind(self) -> bool:
        """Nothing could be read at all: the cluster-wide LIST, every fallback LIST and
        every GET failed, so whether a controller runs cannot be told."""
        return (
            bool(self.list_error) and not self.listed and not any(c.readable for c in self.leases)
        )

    def warning(self) -> str:
        """The one line saying the survey fell back (empty when the cluster-wide LIST
        answered, or when nothing could be read: :meth:`blind` says that)."""
        if not self.list_error or self.blind():
            return ""
        where = [f"namespace {ns}" for ns in self.listed]
        named = [
            f"{c.namespace}/{c.name}"
            for c in self.leases
            if c.readable and c.namespace not in self.listed
        ]
        if named:
            where.append("Lease " + ", ".join(named))
        bad = [f"{c.namespace}/{c.name}" for c in self.unreadable()]
        unread = f" (cannot read {', '.join(bad)})" if bad else ""
        return (
            f"cannot list the Leases of the cluster ({self.list_error}); looking for running "
            f"flux-plunger controllers only in {' and '.join(where)}{unread}"
        )

    def without(self, names: Iterable[tuple[str, str]]) -> Controllers:
        """The same, less the Leases ``(namespace, name)`` in ``names`` (release-fence
        --stop-deployment: the controller it just stopped)."""
        gone = set(names)
        return replace(
            self, leases=tuple(c for c in self.leases if (c.namespace, c.name) not in gone)
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


def survey(
    kube: Kube,
    namespace: str,
    now: dt.datetime | None = None,
    names: Collection[str] = (),
    also: Collection[str] = (),
) -> Controllers:
    """Every flux-plunger controller's Lease in the cluster, whatever namespace it is in,
    with one LIST (sharding: one Lease per install, each recording what it watches; the
    node heartbeats of ``kube-node-lease`` are left out server-side).  ``names``: Lease
    names to count as flux-plunger's even without the annotations serve writes
    (``--lease-name``): they only ever add to what is read, never narrow it.

    A cluster-wide LIST that fails (a namespace admin may not list Leases cluster-wide)
    falls back to ``namespace`` (``--lease-namespace``) and the namespaces ``also`` (the
    releases' own): one LIST of each, or where that is refused too one GET of each named
    Lease, the contract's first (``Controllers.list_error`` says so).  A server that does
    not answer raises :class:`~kubectl_flux_plunger.kube.Unreachable`."""
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        items = kube.list_cluster_leases()
    except Unreachable:
        raise  # no answer at all: the verb's own error line says so, as for any request
    except KubeError as exc:
        return _fallback(kube, namespace, now, names, also, str(exc))
    return from_items(items, namespace, now, names)


def _fallback(
    kube: Kube,
    namespace: str,
    now: dt.datetime,
    names: Collection[str],
    also: Collection[str],
    error: str,
) -> Controllers:
    """:func:`survey` after the cluster-wide LIST failed: each namespace on its own."""
    leases: list[ControllerLease] = []
    listed = []
    spaces = tuple(dict.fromkeys((namespace, *also)))
    for ns in spaces:
        try:
            items = kube.list_leases(ns)
        except KubeError:
            leases.extend(read(kube, ns, now, n) for n in dict.fromkeys((C.LEASE_NAME, *names)))
            continue
        listed.append(ns)
        leases.extend(from_items(items, ns, now, names).leases)
    # the contract's Lease of the lease namespace always (as status shows it); elsewhere only
    # Leases that are held, or that could not be read
    kept = [c for c in leases if c.namespace == namespace or c.holder or not c.readable]
    return Controllers(
        namespace,
        tuple(kept),
        list_error=error,
        fallback=spaces,
        listed=tuple(listed),
    )


def from_items(
    items: Iterable[Obj], namespace: str, now: dt.datetime, names: Collection[str] = ()
) -> Controllers:
    """:func:`survey` of Leases already listed (``items``: the LIST's, of one namespace or
    of the cluster; an item's own namespace counts, ``namespace`` where it names none)."""
    ours = {}
    for lease in items:
        if _ours(lease, names):
            md = lease.get("metadata") or {}
            key = (md.get("namespace") or namespace, md.get("name") or "")
            ours[key] = _of(lease, key[0], key[1], now)
    first = ours.pop((namespace, C.LEASE_NAME), None) or _of(None, namespace, C.LEASE_NAME, now)
    return Controllers(namespace, (first, *(ours[k] for k in sorted(ours))))


def read_all(
    kube: Kube,
    namespace: str,
    now: dt.datetime | None = None,
    names: Collection[str] = (),
    also: Collection[str] = (),
) -> list[ControllerLease]:
    """:func:`survey`'s Leases, as a list (``status``)."""
    return list(survey(kube, namespace, now, names, also).leases)


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
