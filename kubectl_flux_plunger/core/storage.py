"""Helm storage: where a HelmRelease's release Secrets live and which one to delete (SPEC §4).

Helm keeps one Secret per revision, ``sh.helm.release.v1.<release>.v<N>`` of type
``helm.sh/release.v1`` labelled ``owner=helm,name=<release>,status=…,version=<N>``; its
payload (``payload``) is the Release.  ``choose_revision`` is the whole safety check: it
returns ok only for a newest revision whose payload status produces the face helm-controller
shows — "has no deployed releases" while no revision is deployed, its StateError on a
revision its own history recorded (``state_error``), or Helm's install refusing a name whose
newest revision is ``uninstalled`` (``name_in_use``).
"""

from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from . import constants
from .objects import Obj
from .payload import PayloadError as PayloadError  # re-exported
from .payload import decode_payload as decode_payload  # re-exported
from .payload import encode_payload as encode_payload  # re-exported
from .payload import make_storage_secret as make_storage_secret  # re-exported

MAX_RELEASE_NAME = 53
_SHORT_PREFIX = 40
_SHORT_HASH = 12
# a revision is a Go int: at most 18 digits (longer runs are not revisions, and would exceed
# Python's int-from-string digit limit)
_DECIMAL = re.compile(r"[0-9]{1,18}")
_SECRET_NAME = re.compile(r"sh\.helm\.release\.v1\..+\.v([0-9]{1,18})")


def _dig(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…`` or None as soon as a step is missing or not a mapping.

    A private twin of ``detect.dig``: the layers contract keeps this module below ``detect``.
    """
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def shorten_name(name: str) -> str:
    """helm-controller's ``ShortenName``: >53 chars → 40 chars + ``-`` + sha256(name)[:12]."""
    if len(name) <= MAX_RELEASE_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()
    return f"{name[:_SHORT_PREFIX]}-{digest[:_SHORT_HASH]}"


def _configured_release_name(hr: Obj) -> str:
    """The release name the spec asks for, before shortening (HelmRelease.GetReleaseName)."""
    explicit = _dig(hr, "spec", "releaseName")
    if isinstance(explicit, str) and explicit:
        return explicit
    name = str(_dig(hr, "metadata", "name") or "")
    target = _dig(hr, "spec", "targetNamespace")
    return f"{target}-{name}" if isinstance(target, str) and target else name


def release_name(hr: Obj) -> str:
    """The Helm release name: what helm-controller recorded in ``status.history``, else derived.

    The recorded name wins because it is what helm-controller actually used for storage.
    """
    history = _dig(hr, "status", "history")
    if isinstance(history, list) and history and isinstance(history[0], dict):
        recorded = history[0].get("name")
        if isinstance(recorded, str) and recorded:
            return recorded
    return shorten_name(_configured_release_name(hr))


def storage_namespace(hr: Obj) -> str:
    """The storage namespace: status.storageNamespace, spec.storageNamespace, or the HR's own.

    Not the target namespace: Helm storage stays beside the HelmRelease unless told otherwise.
    """
    for path in (("status", "storageNamespace"), ("spec", "storageNamespace")):
        value = _dig(hr, *path)
        if isinstance(value, str) and value:
            return value
    return str(_dig(hr, "metadata", "namespace") or "")


def label_selector(release: str) -> str:
    """The label selector Helm itself uses to list a release's storage."""
    return f"owner=helm,name={release}"


def _revision_number(name: str, labels: Obj) -> int | None:
    """The revision from the ``version`` label, else the ``.v<N>`` name suffix, else None."""
    label = labels.get("version")
    if isinstance(label, str) and _DECIMAL.fullmatch(label):
        return int(label)
    match = _SECRET_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Revision:
    """One Helm storage Secret, as far as its metadata tells."""

    name: str
    namespace: str
    uid: str
    resource_version: str
    number: int | None
    label_status: str | None

    @classmethod
    def from_secret(cls, secret: Obj) -> Revision | None:
        """Parse a Secret; None unless its type is ``helm.sh/release.v1``.  Never raises."""
        if secret.get("type") != constants.HELM_SECRET_TYPE:
            return None
        metadata = secret.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        labels = metadata.get("labels")
        if not isinstance(labels, dict):
            labels = {}
        name = str(metadata.get("name") or "")
        status = labels.get("status")
        return cls(
            name=name,
            namespace=str(metadata.get("namespace") or ""),
            uid=str(metadata.get("uid") or ""),
            resource_version=str(metadata.get("resourceVersion") or ""),
            number=_revision_number(name, labels),
            label_status=status if isinstance(status, str) else None,
        )


class Refusal(str, enum.Enum):
    """Why the §4 check refuses, closed (``Choice.refusal``): what ``plan`` needs to tell a
    release left stuck from one helm-controller goes on from by itself."""

    NO_STORAGE = "no-storage"  # no storage Secret of the release where it should be
    UNNUMBERED = "unnumbered-revision"  # no Secret carries a revision number
    DUPLICATE = "duplicate-revision"  # the newest revision is stored twice
    DEPLOYED = "deployed"  # a revision is deployed: helm-controller upgrades from it
    CORRUPT = "corrupt-payload"  # the newest payload cannot be decoded (or has no status)
    VERSION_MISMATCH = "version-mismatch"  # the payload records another version
    HELM_HANDLES = "helm-handles"  # failed / superseded / pending-*: helm-controller goes on
    UNEXPECTED_STATUS = "unexpected-status"  # a status none of the above
    # StateError over a legacy snapshot with a superseded revision under the newest:
    # deleting the newest would leave helm-controller v1.5+ at StateError 'superseded'
    LEGACY_HISTORY = "legacy-history"
    # StateError face: the storage or the history no longer matches what helm-controller
    # reported (its next attempt reports anew)
    STALE_FACE = "stale-face"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Choice:
    """The outcome of the §4 check: the newest revision (when known) and whether to delete it
    (``refusal`` says why not; None when ok)."""

    revision: Revision | None
    helm_status: str | None
    ok: bool
    reason: str
    storage_found: bool = True  # False: the release has no storage Secret at all
    refusal: Refusal | None = None


def _refuse(
    refusal: Refusal, reason: str, revision: Revision | None = None, status: str | None = None
) -> Choice:
    """A not-ok Choice: nothing is deleted, the reason is reported."""
    return Choice(revision=revision, helm_status=status, ok=False, reason=reason, refusal=refusal)


def _storage_of(release: str, secrets: list[Any]) -> list[tuple[Revision, Obj]]:
    """The release's storage Secrets: right type and ``name`` label, with their parsed metadata.
    Entries that are not objects are ignored."""
    found = []
    for secret in secrets:
        revision = Revision.from_secret(secret) if isinstance(secret, dict) else None
        if revision is not None and _dig(secret, "metadata", "labels", "name") == release:
            found.append((revision, secret))
    return found


def _label_deployed(storage: list[tuple[Revision, Obj]], newest: Revision) -> Revision | None:
    """A revision labelled ``status=deployed`` (Helm's Deployed() query), the newest preferred."""
    if newest.label_status == "deployed":
        return newest
    return next((rev for rev, _ in storage if rev.label_status == "deployed"), None)


def _describe(revision: Revision) -> str:
    """How a revision is named in reasons: by number, or by Secret name when it has none."""
    if revision.number is not None:
        return f"revision {revision.number}"
    return f"storage Secret {revision.name}"


def _why_not_blocking(status: str | None) -> tuple[Refusal, str]:
    """Why a non-blocking newest status needs no help from us (SPEC §4, helm-controller §1.6)."""
    if status in ("failed", "superseded"):
        return Refusal.HELM_HANDLES, "helm-controller upgrades from it"
    if isinstance(status, str) and status.startswith("pending-"):
        return Refusal.HELM_HANDLES, "helm-controller unlocks it itself"
    return Refusal.UNEXPECTED_STATUS, "not a status that causes 'has no deployed releases'"


def _payload_status(payload: Obj) -> str | None:
    """The Release payload's ``info.status``, None when missing or not a string."""
    status = _dig(payload, "info", "status")
    return status if isinstance(status, str) else None


def _try_decode(secret: Obj) -> tuple[Obj | None, str]:
    """(payload, "") or (None, the one-line decode error)."""
    try:
        return decode_payload(secret), ""
    except PayloadError as exc:
        return None, str(exc)


def _invalid(newest: Revision, payload: Obj | None, error: str) -> Choice | None:
    """The refusal of a newest payload that cannot be judged — undecodable, without a
    status, or recording another version than its Secret — else None."""
    label = f"newest revision {newest.number}"
    if payload is None:
        return _refuse(Refusal.CORRUPT, f"{label} has a corrupt payload: {error}", newest)
    status = _payload_status(payload)
    if status is None:
        return _refuse(Refusal.CORRUPT, f"{label} has a corrupt payload: no info.status", newest)
    version = payload.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version != newest.number:
        return _refuse(
            Refusal.VERSION_MISMATCH, f"{label} payload records version {version!r}", newest, status
        )
    return None


def _judged(newest: Revision, secret: Obj) -> tuple[Choice | None, str | None]:
    """The newest revision's payload decoded for a face's check: (the refusal of one that
    cannot be judged, None) or (None, its Helm status)."""
    payload, error = _try_decode(secret)
    invalid = _invalid(newest, payload, error)
    if invalid is not None or payload is None:
        return invalid, None
    return None, _payload_status(payload)


def _check_newest(newest: Revision, secret: Obj, deployed: Revision | None) -> Choice:
    """Decode the newest revision's payload and decide whether it is the blocking one.

    The payload is decoded even when another revision is deployed, so the refusal still
    reports the newest revision's Helm status.
    """
    label = f"newest revision {newest.number}"
    payload, error = _try_decode(secret)
    status = _payload_status(payload) if payload is not None else None
    if deployed is not None:
        prefix = "newest " if deployed is newest else ""
        return _refuse(
            Refusal.DEPLOYED, f"{prefix}{_describe(deployed)} is deployed", newest, status
        )
    invalid = _invalid(newest, payload, error)
    if invalid is not None:
        return invalid
    if status == "deployed":
        return _refuse(Refusal.DEPLOYED, f"{label} is deployed", newest, status)
    if status not in constants.BLOCKING_STATUSES:
        refusal, why = _why_not_blocking(status)
        return _refuse(refusal, f"{label} has status {status} ({why})", newest, status)
    return Choice(newest, status, True, f"{label} has status {status} and no revision is deployed")


def _history_latest(hr: Obj) -> Obj | None:
    """``status.history``'s latest snapshot; None when the history is empty or absent."""
    history = _dig(hr, "status", "history")
    if isinstance(history, list) and history and isinstance(history[0], dict):
        return history[0]
    return None


def _unverified(snapshot: Obj | None, newest: Revision, status: str) -> str | None:
    """Why helm-controller would not take ``snapshot`` (the history's latest) for the
    ``newest`` revision in ``status`` — its next attempt then takes the release for unmanaged
    and upgrades — else None: the snapshot is that revision in that status, or a legacy one
    (no ``apiVersion: v2``, as helm-controller <= v1.4 wrote it), which helm-controller
    v1.5+ verifies against nothing (VerifyReleaseObject's graceful migration).  (helm-controller
    <= v1.4 verifies every snapshot's digest; a face it reported over a legacy snapshot that
    no longer matches is a stale one, and its next attempt upgrades — see docs/DESIGN.md.)"""
    if snapshot is None or snapshot.get("apiVersion") != constants.SNAPSHOT_API_VERSION:
        return None
    recorded, recorded_status = snapshot.get("version"), snapshot.get("status")
    if recorded == newest.number and recorded_status == status:
        return None
    return (
        f"status.history's latest snapshot is revision {recorded!r} ({recorded_status!r}), "
        f"not newest revision {newest.number} ({status}): helm-controller's next attempt "
        "takes the release for unmanaged"
    )


def _status_of(revision: Revision, secret: Obj) -> str | None:
    """A revision's Helm status: its payload's, else (undecodable) its label's."""
    payload, _ = _try_decode(secret)
    status = _payload_status(payload) if payload is not None else None
    return status if status is not None else revision.label_status


def _legacy_dead_end(snapshot: Obj, beneath: tuple[Revision, Obj] | None) -> str | None:
    """Why deleting the newest revision under a legacy ``snapshot`` leads nowhere, or None.

    helm-controller v1.5+ verifies a legacy snapshot against nothing, so after the delete it
    places the revision beneath by its status alone: a ``superseded`` one is StateError
    again, for ever (nothing in helm-controller clears a legacy history then), and
    flux-plunger never deletes a superseded revision.  Only the operator's clearing
    ``status.history`` gets it out: helm-controller then takes the release for unmanaged."""
    if snapshot.get("apiVersion") == constants.SNAPSHOT_API_VERSION or beneath is None:
        return None
    below, secret = beneath
    if _status_of(below, secret) != "superseded":
        return None
    return (
        f"status.history's latest snapshot is one helm-controller <= v1.4 wrote (no apiVersion "
        f"v2), which helm-controller v1.5+ verifies against nothing: deleting the newest "
        f"revision would leave {_describe(below)} (superseded), which it cannot place either; "
        "clear the HelmRelease's status.history (kubectl patch helmrelease NAME "
        '--subresource=status --type=json -p \'[{"op":"remove","path":'
        '"/status/history"}]\') and helm-controller takes the release for unmanaged'
    )


def _check_state_error(
    hr: Obj, newest: Revision, secret: Obj, reported: str, beneath: tuple[Revision, Obj] | None
) -> Choice:
    """The StateError face (SPEC §4): helm-controller said it cannot place status
    ``reported``.  ok only when the newest revision's payload has that status, it is one
    deleting repairs (``STATE_ERROR_STATUSES``), and ``status.history``'s latest snapshot is
    that revision in that status, or legacy — the state in which helm-controller's
    DetermineReleaseState fails for good — and, under a legacy snapshot, the revision
    ``beneath`` it is not one helm-controller v1.5+ cannot place either
    (``_legacy_dead_end``).  An older deployed revision does not make it healthy:
    helm-controller looks only at the newest."""
    label = f"newest revision {newest.number}"
    invalid, status = _judged(newest, secret)
    if invalid is not None:
        return invalid
    if status != reported:
        return _refuse(
            Refusal.STALE_FACE,
            f"{label} has status {status}, not the {reported!r} helm-controller reported "
            "(its next attempt reports anew)",
            newest,
            status,
        )
    if status not in constants.STATE_ERROR_STATUSES:
        return _refuse(
            Refusal.UNEXPECTED_STATUS,
            f"{label} has status {status}, which helm-controller cannot place but "
            "flux-plunger never deletes",
            newest,
            status,
        )
    snapshot = _history_latest(hr)
    if snapshot is None:
        return _refuse(
            Refusal.STALE_FACE,
            "status.history is empty: helm-controller's next attempt takes the release for "
            "unmanaged",
            newest,
            status,
        )
    unverified = _unverified(snapshot, newest, status)
    if unverified is not None:
        return _refuse(Refusal.STALE_FACE, unverified, newest, status)
    dead_end = _legacy_dead_end(snapshot, beneath)
    if dead_end is not None:
        return _refuse(Refusal.LEGACY_HISTORY, dead_end, newest, status)
    return Choice(
        newest,
        status,
        True,
        f"{label} has status {status}, recorded in helm-controller's history, which it "
        "cannot place (StateError)",
    )


def _install_replaces(hr: Obj) -> bool:
    """``spec.install.replace`` is literally true: Helm's install then reuses the name of
    a release whose newest revision is uninstalled (or failed)."""
    return _dig(hr, "spec", "install", "replace") is True


def _check_name_in_use(hr: Obj, newest: Revision, secret: Obj) -> Choice:
    """The face of Helm's install refusing the name (SPEC §4): helm-controller installs
    when the newest revision is ``uninstalled`` (Absent: its history is empty, verifies it,
    or is legacy), and Helm's install refuses any name with history unless Replace.  ok when
    the newest payload is ``uninstalled``, helm-controller's history does not make it
    upgrade instead, and ``spec.install.replace`` is not set.  The uninstall deleted the
    release's resources (all but what Helm keeps: a `keep` resource policy, CRDs): deleting
    its newest revision leaves helm-controller an older one to upgrade from, or none to
    install afresh.  An older ``deployed`` revision does not
    refuse: helm-controller and Helm's name check look only at the newest."""
    label = f"newest revision {newest.number}"
    invalid, status = _judged(newest, secret)
    if invalid is not None:
        return invalid
    if status != "uninstalled":
        return _refuse(
            Refusal.STALE_FACE,
            f"{label} has status {status}, not uninstalled (helm-controller's next attempt "
            "reports anew)",
            newest,
            status,
        )
    unverified = _unverified(_history_latest(hr), newest, "uninstalled")
    if unverified is not None:
        return _refuse(Refusal.STALE_FACE, unverified, newest, status)
    if _install_replaces(hr):
        return _refuse(
            Refusal.HELM_HANDLES,
            f"{label} has status uninstalled and spec.install.replace is set: helm-controller's "
            "next install reuses the name",
            newest,
            status,
        )
    return Choice(
        newest,
        status,
        True,
        f"{label} has status uninstalled (an uninstall kept its history): helm-controller "
        "installs and Helm cannot reuse the name (spec.install.replace: true is the "
        "operator's own way out)",
    )


def choose_revision(
    hr: Obj, secrets: list[Obj], state_error: str | None = None, name_in_use: bool = False
) -> Choice:
    """Pick the revision to delete from the listed Secrets, or explain why none (SPEC §4).

    ``state_error``: the status helm-controller's StateError quotes (``detect.stuck_face``
    is ``STATE_ERROR``); ``name_in_use``: the face is Helm's "cannot reuse a name that is
    still in use" (``NAME_IN_USE``); neither: "has no deployed releases".

    ok only when the newest numbered revision is the only Secret with that number, its
    payload version matches its number, and its payload status is the face's: blocking with
    no revision deployed, or (StateError) the quoted, unplaceable status its history
    recorded.  Secrets without a revision number are ignored for ordering but still count
    as deployed.
    """
    release, namespace = release_name(hr), storage_namespace(hr)
    storage = _storage_of(release, secrets)
    if not storage:
        return Choice(
            revision=None,
            helm_status=None,
            ok=False,
            storage_found=False,
            reason=f"no Helm storage Secrets for release {release} in namespace {namespace}",
            refusal=Refusal.NO_STORAGE,
        )
    numbered = [(rev, secret) for rev, secret in storage if rev.number is not None]
    if not numbered:
        first = min(rev.name for rev, _ in storage)
        return _refuse(Refusal.UNNUMBERED, f"storage Secret {first} has no revision number")
    newest, newest_secret = max(numbered, key=lambda pair: pair[0].number or 0)  # all numbered
    twins = sorted(rev.name for rev, _ in numbered if rev.number == newest.number)
    if len(twins) > 1:
        names = ", ".join(twins)
        return _refuse(
            Refusal.DUPLICATE,
            f"revision {newest.number} is stored in more than one Secret ({names})",
            newest,
        )
    if state_error is not None:
        lower = [pair for pair in numbered if (pair[0].number or 0) < (newest.number or 0)]
        beneath = max(lower, key=lambda pair: pair[0].number or 0) if lower else None
        return _check_state_error(hr, newest, newest_secret, state_error, beneath)
    if name_in_use:
        return _check_name_in_use(hr, newest, newest_secret)
    return _check_newest(newest, newest_secret, _label_deployed(storage, newest))
