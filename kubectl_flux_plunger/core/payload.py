"""A Helm storage Secret's payload (SPEC §4): ``data.release`` is base64(gzip(JSON)) inside
the Secret's own base64 — decoded to judge a revision, encoded to craft storage the way Helm
writes it (the tests, the benches, the demo).  Re-exported by ``storage``.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
from typing import Any

from . import constants
from .objects import Obj

_GZIP_MAGIC = b"\x1f\x8b\x08"

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


class PayloadError(ValueError):
    """A storage Secret's ``data.release`` cannot be decoded into a Release."""


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
    data = secret.get("data")
    raw = data.get("release") if isinstance(data, dict) else None
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
