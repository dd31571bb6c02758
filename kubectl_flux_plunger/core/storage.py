"""Helm storage: where a HelmRelease's release Secrets live and which one to delete (SPEC §4).

Helm keeps one Secret per revision, ``sh.helm.release.v1.<release>.v<N>`` of type
``helm.sh/release.v1`` labelled ``owner=helm,name=<release>,status=…,version=<N>``; its
``data.release`` is base64(gzip(JSON)) inside the Secret's own base64.  ``choose_revision`` is the
whole safety check: it returns ok only for a newest revision whose payload status produces
the face helm-controller shows — "has no deployed releases" while no revision is deployed, or
its StateError on a revision its own history recorded (``state_error``).
"""

from __future__ import annotations

import base64
import binascii
import enum
import gzip
import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

from . import constants
from .objects import Obj

MAX_RELEASE_NAME = 53
_SHORT_PREFIX = 40
_SHORT_HASH = 12
_GZIP_MAGIC = b"\x1f\x8b\x08"
# a revision is a Go int: at most 18 digits (longer runs are not revisions, and would exceed
# Python's int-from-string digit limit)
_DECIMAL = re.compile(r"[0-9]{1,18}")
_SECRET_NAME = re.compile(r"sh\.helm\.release\.v1\..+\.v([0-9]{1,18})")

# Helm's own descriptions, so crafted storage looks like what Helm writes.
_DESCRIPTIONS = {
    "deployed": "Install complete",
    "superseded": "Superseded by new release",
    "failed": "Release failed",
    "uninstalling": "Deletion in progress (or silently failed)",
    "uninstalled": "Uninstallation complete",
    "pending-install": "Initial install underway",
    "pending-upgrade": "Preparing upgrade",
    "pending-rollback": "Preparing rollback",
}


def _dig(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…`` or None as soon as a step is missing or not a mapping.

    A private twin of ``detect.dig``: the layers contract keeps this module below ``detect``.
    """
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


class PayloadError(ValueError):
    """A storage Secret's ``data.release`` cannot be decoded into a Release."""


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


def _b64decode(value: Any, what: str) -> bytes:
    """Strict base64 decode, turning every failure into a one-line PayloadError."""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise PayloadError(f"{what} is not valid base64 ({exc})") from None


def decode_payload(secret: Obj) -> Obj:
    """The Release JSON stored in a Secret's ``data.release``.

    Undo the Secret's base64, then Helm's base64, then gzip when the bytes carry its magic
    (Helm only gunzips then), then parse JSON.  Raises PayloadError with a one-line message.
    """
    raw = _dig(secret, "data", "release")
    if not isinstance(raw, str) or not raw:
        raise PayloadError("data.release is missing")
    blob = _b64decode(_b64decode(raw, "data.release"), "the Helm release blob")
    if blob.startswith(_GZIP_MAGIC):
        try:
            blob = gzip.decompress(blob)
        except (OSError, EOFError, zlib.error) as exc:
            raise PayloadError(f"the gzip stream is corrupt ({exc})") from None
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError("the release is not UTF-8 text") from None
    try:
        release = json.loads(text)
    except ValueError as exc:
        raise PayloadError(f"the release is not JSON ({exc})") from None
    if not isinstance(release, dict):
        raise PayloadError("the release JSON is not an object")
    return release


def encode_payload(release: Obj) -> str:
    """The ``data.release`` value storing ``release``: base64(base64(gzip(JSON)))."""
    helm_blob = base64.b64encode(gzip.compress(json.dumps(release).encode()))
    return base64.b64encode(helm_blob).decode()


def make_storage_secret(
    release_name: str,
    namespace: str,
    revision: int,
    status: str,
    *,
    chart_name: str = "demo",
    chart_version: str = "0.1.0",
    extra: Obj | None = None,
) -> Obj:
    """A complete Helm storage Secret body for one revision, label and payload consistent.

    ``extra`` is merged into the Release payload's top level (e.g. to set a mismatching
    ``version`` or a custom ``info``), so fixtures can craft odd storage too.
    """
    release: dict[str, Any] = {
        "name": release_name,
        "namespace": namespace,
        "version": revision,
        "info": {"status": status, "description": _DESCRIPTIONS.get(status, "")},
        "chart": {
            "metadata": {"apiVersion": "v2", "name": chart_name, "version": chart_version},
        },
        "manifest": "",
        "config": {},
    }
    release.update(extra or {})
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": constants.HELM_SECRET_TYPE,
        "metadata": {
            "name": f"sh.helm.release.v1.{release_name}.v{revision}",
            "namespace": namespace,
            "labels": {
                "owner": "helm",
                "name": release_name,
                "status": status,
                "version": str(revision),
            },
        },
        "data": {"release": encode_payload(release)},
    }


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


def _history_latest(hr: Obj) -> tuple[Any, Any]:
    """(version, status) of ``status.history``'s latest snapshot; (None, None) when absent."""
    history = _dig(hr, "status", "history")
    if isinstance(history, list) and history and isinstance(history[0], dict):
        return history[0].get("version"), history[0].get("status")
    return None, None


def _check_state_error(hr: Obj, newest: Revision, secret: Obj, reported: str) -> Choice:
    """The StateError face (SPEC §4): helm-controller said it cannot place status
    ``reported``.  ok only when the newest revision's payload has that status, it is one
    deleting repairs (``STATE_ERROR_STATUSES``), and ``status.history``'s latest snapshot is
    that revision in that status — the state in which helm-controller's
    DetermineReleaseState fails for good.  An older deployed revision does not make it
    healthy: helm-controller looks only at the newest."""
    label = f"newest revision {newest.number}"
    payload, error = _try_decode(secret)
    invalid = _invalid(newest, payload, error)
    if invalid is not None:
        return invalid
    status = _payload_status(payload) if payload is not None else None
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
    recorded, recorded_status = _history_latest(hr)
    if recorded != newest.number or recorded_status != status:
        return _refuse(
            Refusal.STALE_FACE,
            f"status.history's latest snapshot is revision {recorded!r} ({recorded_status!r}), "
            f"not {label} ({status}): helm-controller's next attempt takes the release for "
            "unmanaged",
            newest,
            status,
        )
    return Choice(
        newest,
        status,
        True,
        f"{label} has status {status}, recorded in helm-controller's history, which it "
        "cannot place (StateError)",
    )


def choose_revision(hr: Obj, secrets: list[Obj], state_error: str | None = None) -> Choice:
    """Pick the revision to delete from the listed Secrets, or explain why none (SPEC §4).

    ``state_error``: the status helm-controller's StateError quotes (``detect.stuck_face``
    is ``STATE_ERROR``), else None for "has no deployed releases".

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
        return _check_state_error(hr, newest, newest_secret, state_error)
    return _check_newest(newest, newest_secret, _label_deployed(storage, newest))
