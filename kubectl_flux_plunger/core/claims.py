"""Which Helm release a HelmRelease claims, and who else claims it (SPEC §6, "Holding a
release"; issue 55).

A Helm release is not a HelmRelease: it is its storage — the release name in a storage
namespace of one cluster — and every HelmRelease that names the same storage makes
helm-controller act on it.  flux-plunger holds a release only when every claimant is held,
so with two or more claimants it writes nothing (``claimed-twice``).

A HelmRelease names a release in up to two ways, and both count: what helm-controller
recorded (``status.history``'s release name, ``status.storageNamespace``) and what the spec
asks for now (``spec.releaseName``, else ``[<targetNamespace>-]<name>`` shortened as
helm-controller shortens it, in ``spec.storageNamespace`` or the HelmRelease's namespace).
They differ while a rename is pending, and helm-controller then acts on both (it uninstalls
the old release and installs the new one).

The cluster is the local one, or the ``spec.kubeConfig`` reference in the HelmRelease's
namespace (two references to one remote cluster through different Secrets are not told
apart: flux-plunger does not read other releases' kubeconfigs).

``ClaimIndex`` keeps, for every HelmRelease key (``namespace/name``), the claims it makes,
and answers the other claimants of a release.  It is fed by whatever reads the releases
(serve's watch; the one-shot verbs' claim stream) and is safe to read from other threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from . import storage
from .detect import dig as _dig
from .objects import Obj

# A claim: "<cluster>\x00<storage namespace>\x00<release name>" — one string, so an index of
# tens of thousands of releases costs two dict entries per release (serve keeps it)
Claim = str
_SEP = "\x00"


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def cluster_of(hr: Obj) -> str:
    """Where the release's storage lives: "" (this cluster) or the ``spec.kubeConfig``
    reference, in the HelmRelease's namespace."""
    ref = _dig(hr, "spec", "kubeConfig")
    if not isinstance(ref, dict) or not ref:
        return ""
    ns = _text(_dig(hr, "metadata", "namespace"))
    for kind in ("secretRef", "configMapRef"):
        target = ref.get(kind)
        if isinstance(target, dict):
            return f"{kind}:{ns}/{_text(target.get('name'))}/{_text(target.get('key'))}"
    return f"kubeConfig:{ns}"


def _claim(cluster: str, namespace: str, release: str) -> Claim:
    return _SEP.join((cluster, namespace, release))


def describe(claim: Claim) -> str:
    """A claim in words: ``release shared in namespace owner`` (and its cluster)."""
    cluster, namespace, release = claim.split(_SEP)
    where = f" of {cluster}" if cluster else ""
    return f"release {release} in namespace {namespace}{where}"


def claims_of(hr: Obj) -> frozenset[Claim]:
    """Every Helm release ``hr`` names: the recorded one and the configured one (one claim
    when they agree, as they do but for a pending rename)."""
    cluster = cluster_of(hr)
    namespace = _text(_dig(hr, "metadata", "namespace"))
    spec_ns = _text(_dig(hr, "spec", "storageNamespace")) or namespace
    status_ns = _text(_dig(hr, "status", "storageNamespace")) or spec_ns
    configured = _claim(cluster, spec_ns, storage.shorten_name(_configured_name(hr)))
    recorded = _claim(cluster, status_ns, storage.release_name(hr))
    return frozenset((configured, recorded))


def _configured_name(hr: Obj) -> str:
    explicit = _text(_dig(hr, "spec", "releaseName"))
    if explicit:
        return explicit
    name = _text(_dig(hr, "metadata", "name"))
    target = _text(_dig(hr, "spec", "targetNamespace"))
    return f"{target}-{name}" if target else name


RETARGETING_DETAIL = (
    "a new release name, target or storage namespace is pending (the configured release is "
    "not the one helm-controller recorded): helm-controller uninstalls the old release first, "
    "so nothing was written"
)


def retargeting(hr: Obj) -> bool:
    """Whether ``hr`` names another release than the one helm-controller recorded for it
    (``ReleaseTargetChanged``: its next step is the uninstall of the recorded one)."""
    return len(claims_of(hr)) > 1


def target_of(hr: Obj) -> tuple[object, ...]:
    """What decides where helm-controller acts: the spec's release name, target and storage
    namespaces, kubeconfig and chart (a new chart name is a target change to helm-controller
    too; any change of the chart reference counts here, to be safe), with the claims.  A
    release whose target changed while we held it is not recovered: helm-controller then
    uninstalls the old target first."""
    spec = _dig(hr, "spec")
    spec = spec if isinstance(spec, dict) else {}
    fields = ("releaseName", "targetNamespace", "storageNamespace", "kubeConfig", "chartRef")
    chart = _dig(spec, "chart", "spec", "chart")
    return (
        *(repr(spec.get(f)) for f in fields),
        repr(chart),
        tuple(sorted(claims_of(hr))),
    )


def key_of(hr: Obj) -> str:
    """``namespace/name``: how a HelmRelease is named in the index and in reports."""
    md = hr.get("metadata")
    md = md if isinstance(md, dict) else {}
    return f"{_text(md.get('namespace'))}/{_text(md.get('name'))}"


class ClaimIndex:
    """Every HelmRelease's claims, by key, and the keys of every claim.  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, frozenset[Claim]] = {}
        self._by_claim: dict[Claim, set[str]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_key)

    def put(self, hr: Obj) -> None:
        """``hr`` as it now is (an ADDED or MODIFIED event, a listed item)."""
        key, claims = key_of(hr), claims_of(hr)
        with self._lock:
            if self._by_key.get(key) == claims:
                # most events are status writes: nothing to move.  Dropping and adding the
                # key again would spend a slot of both dicts per event, and every ~0.75x
                # their size of such events would make Python double their tables (3.7 MiB
                # at 50,000 releases, docs/BENCHMARKS.md)
                return
            self._drop(key)
            self._by_key[key] = claims
            for claim in claims:
                self._by_claim.setdefault(claim, set()).add(key)

    def drop(self, hr: Obj) -> None:
        """``hr`` is gone (a DELETED event)."""
        with self._lock:
            self._drop(key_of(hr))

    def replace(self, releases: Iterable[Obj]) -> None:
        """Every release at once (a completed LIST or watch-list)."""
        fresh = ClaimIndex()
        for hr in releases:
            fresh.put(hr)
        with self._lock:
            self._by_key, self._by_claim = fresh._by_key, fresh._by_claim

    def absorb(self, other: ClaimIndex) -> None:
        """Take ``other``'s contents as the whole index (a sync that built its own)."""
        with self._lock:
            self._by_key, self._by_claim = other._by_key, other._by_claim

    def _drop(self, key: str) -> None:
        for claim in self._by_key.pop(key, ()):
            keys = self._by_claim[claim]  # every indexed claim is in both maps
            keys.discard(key)
            if not keys:
                del self._by_claim[claim]

    def others(self, hr: Obj) -> list[str]:
        """The keys of the other HelmReleases that claim a release ``hr`` claims (its
        claims as read now, not as indexed), sorted."""
        me = key_of(hr)
        found: set[str] = set()
        with self._lock:
            for claim in claims_of(hr):
                found.update(self._by_claim.get(claim, ()))
        found.discard(me)
        return sorted(found)


@dataclass(frozen=True)
class Holding:
    """What else the live-stuck row needs to know before anything is written (SPEC §6,
    "Holding a release"), read by the executor or ``status``: ``others``, the keys of the
    other HelmReleases that claim the same Helm release (``claims.ClaimIndex.others``);
    ``refused``, why the identity helm-controller acts as for this HelmRelease may not
    delete its storage ("" when it may, or when there is no tenant identity)."""

    others: tuple[str, ...] = ()
    refused: str = ""


def claimed_twice_detail(hr: Obj, others: tuple[str, ...]) -> str:
    """The words of a ``claimed-twice`` skip, naming the other claimants."""
    release, namespace = storage.release_name(hr), storage.storage_namespace(hr)
    names = ", ".join(others)
    return (
        f"claimed twice: HelmRelease {names} also names release {release} in namespace "
        f"{namespace}; flux-plunger holds a release only when it holds every HelmRelease "
        "that claims it, so nothing was written"
    )
