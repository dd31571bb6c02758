"""Backups of the Helm storage Secret a recovery is about to delete, so every deletion can be
undone (``restore``).

A backup is the Secret exactly as it was read — the object the DELETE's uid and resourceVersion
preconditions name — minus the fields the apiserver sets (uid, resourceVersion,
creationTimestamp, managedFields, …), plus two annotations naming the HelmRelease and the
cluster it came from (``restore`` removes them again).  Two stores:

* :class:`DirectoryBackup` (``recover --backup-dir DIR``): one JSON file per revision, mode
  0600, created exclusively and fsynced, named ``<namespace>_<helmrelease>_v<revision, 8
  digits>_<UTC time>.json`` so a listing sorts by release, then revision, then time;
* :class:`SecretBackup` (``serve --backup-secret-namespace NS``): a Secret in the controller's
  namespace labelled with the release and revision, holding the same JSON under ``secret.json``;
  backups older than the retention period are pruned whenever a backup is written.

The backup is written before the DELETE; when it cannot be written nothing is deleted.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Protocol

from ..core import constants as C
from ..kube import JSON, Kube, KubeError, core_path

log = logging.getLogger(__name__)

SERVER_SET = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
BACKUP_OF = "flux-plunger.cozystack.io/backup-of"  # <namespace>/<helmrelease>
BACKUP_CLUSTER = "flux-plunger.cozystack.io/backup-cluster"  # local, or the remote server URL
BACKUP_LABEL = "flux-plunger.cozystack.io/backup"
RELEASE_LABEL = "flux-plunger.cozystack.io/release"
REVISION_LABEL = "flux-plunger.cozystack.io/revision"
BACKUP_TYPE = "flux-plunger.cozystack.io/backup"
DATA_KEY = "secret.json"
DEFAULT_RETENTION = 7 * 24 * 3600.0


class BackupError(Exception):
    """A backup could not be written (nothing is deleted) or read; one line."""


class Backup(Protocol):
    def describe(self) -> str:
        """Where backups go, for plans: ``a file in DIR``."""

    def save(self, secret: dict[str, Any], hr: dict[str, Any], cluster: str) -> str:
        """Store ``secret`` (as read); return where it went, e.g. ``file /b/x.json``.
        Raises :class:`BackupError` when it could not be stored."""


def strip(secret: dict[str, Any]) -> dict[str, Any]:
    """The Secret without the fields the apiserver sets (what a create needs back)."""
    out = copy.deepcopy(secret)
    md = out.get("metadata") or {}
    for key in SERVER_SET:
        md.pop(key, None)
    out.setdefault("apiVersion", "v1")
    out.setdefault("kind", "Secret")
    return out


def document(secret: dict[str, Any], hr: dict[str, Any], cluster: str) -> dict[str, Any]:
    """The backup document: the stripped Secret plus where it came from."""
    doc = strip(secret)
    md = hr.get("metadata") or {}
    annotations = doc["metadata"].setdefault("annotations", {})
    annotations[BACKUP_OF] = f"{md.get('namespace', '')}/{md.get('name', '')}"
    annotations[BACKUP_CLUSTER] = cluster
    return doc


def encode(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def original(doc: dict[str, Any]) -> dict[str, Any]:
    """The Secret of a backup document as it was before the backup (provenance removed)."""
    out = copy.deepcopy(doc)
    annotations = out.get("metadata", {}).get("annotations") or {}
    for key in (BACKUP_OF, BACKUP_CLUSTER):
        annotations.pop(key, None)
    if not annotations:
        out.get("metadata", {}).pop("annotations", None)
    return out


def provenance(doc: dict[str, Any]) -> tuple[str, str, str]:
    """(HelmRelease namespace, HelmRelease name, cluster) of a backup document."""
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    ref = str(annotations.get(BACKUP_OF) or "")
    ns, _, name = ref.partition("/")
    if not ns or not name:
        raise BackupError(f"not a flux-plunger backup: annotation {BACKUP_OF} is missing")
    return ns, name, str(annotations.get(BACKUP_CLUSTER) or "local")


def revision_of(secret: dict[str, Any]) -> int:
    label = ((secret.get("metadata") or {}).get("labels") or {}).get("version", "")
    return int(label) if str(label).isdigit() else 0


def _stamp(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%S%fZ")


class DirectoryBackup:
    """One 0600 file per backed-up revision in ``directory`` (created 0700 if missing)."""

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)

    def describe(self) -> str:
        return f"a file in {self.directory}"

    def file_name(self, hr: dict[str, Any], secret: dict[str, Any]) -> str:
        md = hr.get("metadata") or {}
        return (
            f"{md.get('namespace', '')}_{md.get('name', '')}_v{revision_of(secret):08d}_"
            f"{_stamp()}.json"
        )

    def save(self, secret: dict[str, Any], hr: dict[str, Any], cluster: str) -> str:
        data = encode(document(secret, hr, cluster))
        path = self.directory / self.file_name(hr, secret)
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise BackupError(f"cannot write backup {path}: {exc.strerror or exc}") from None
        return f"file {path}"


class SecretBackup:
    """A copy Secret per backed-up revision in ``namespace`` of the local cluster."""

    def __init__(self, kube: Kube, namespace: str, *, retention: float = DEFAULT_RETENTION):
        self.kube, self.namespace, self.retention = kube, namespace, retention

    def describe(self) -> str:
        return f"a Secret in namespace {self.namespace}"

    @staticmethod
    def secret_name(secret: dict[str, Any], cluster: str) -> str:
        md = secret.get("metadata") or {}
        key = (
            f"{cluster}/{md.get('namespace')}/{md.get('name')}/{md.get('uid')}/"
            f"{md.get('resourceVersion')}"
        )
        return f"flux-plunger-backup-{hashlib.sha256(key.encode()).hexdigest()[:16]}"

    def body(self, secret: dict[str, Any], hr: dict[str, Any], cluster: str) -> dict[str, Any]:
        doc = document(secret, hr, cluster)
        labels = (secret.get("metadata") or {}).get("labels") or {}
        hr_md = hr.get("metadata") or {}
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": BACKUP_TYPE,
            "metadata": {
                "name": self.secret_name(secret, cluster),
                "namespace": self.namespace,
                "labels": {
                    BACKUP_LABEL: "true",
                    RELEASE_LABEL: str(labels.get("name", ""))[:63],
                    REVISION_LABEL: str(revision_of(secret)),
                },
                "annotations": {
                    BACKUP_OF: f"{hr_md.get('namespace')}/{hr_md.get('name')}",
                    BACKUP_CLUSTER: cluster,
                },
            },
            "data": {DATA_KEY: base64.b64encode(encode(doc)).decode()},
        }

    def save(self, secret: dict[str, Any], hr: dict[str, Any], cluster: str) -> str:
        body = self.body(secret, hr, cluster)
        name = body["metadata"]["name"]
        try:
            self.kube.request(
                "CREATE", "POST", core_path("secrets", self.namespace), body=body, content_type=JSON
            )
        except KubeError as exc:
            if not exc.conflict or not self._same(name, body):
                raise BackupError(
                    f"cannot write backup Secret {self.namespace}/{name}: {exc}"
                ) from None
        self.prune()
        return f"Secret {self.namespace}/{name}"

    def _same(self, name: str, body: dict[str, Any]) -> bool:
        """An earlier attempt already stored exactly this backup."""
        try:
            existing = self.kube.request("GET", "GET", core_path("secrets", self.namespace, name))
        except KubeError:
            return False
        return bool((existing.get("data") or {}).get(DATA_KEY) == body["data"][DATA_KEY])

    def prune(self, now: dt.datetime | None = None) -> list[str]:
        """Delete backups older than the retention period; never raises."""
        from ..core.detect import parse_timestamp

        now = now or dt.datetime.now(dt.timezone.utc)
        pruned = []
        try:
            items = self.kube.request(
                "LIST",
                "GET",
                core_path("secrets", self.namespace),
                query={"labelSelector": f"{BACKUP_LABEL}=true"},
            )
            for item in items.get("items") or []:
                md = item.get("metadata") or {}
                born = parse_timestamp(md.get("creationTimestamp"))
                if (
                    item.get("type") != BACKUP_TYPE
                    or born is None
                    or (now - born).total_seconds() < self.retention
                ):
                    continue
                try:
                    self.kube.request(
                        "DELETE",
                        "DELETE",
                        core_path("secrets", self.namespace, md["name"]),
                        body={
                            "apiVersion": "v1",
                            "kind": "DeleteOptions",
                            "preconditions": {"uid": md.get("uid")},
                        },
                        content_type=JSON,
                    )
                    pruned.append(md["name"])
                except KubeError as exc:
                    if not exc.not_found and not exc.conflict:
                        raise
        except KubeError as exc:
            log.warning("could not prune old backups in namespace %s: %s", self.namespace, exc)
        return pruned


def load_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A backup document from a file written by :class:`DirectoryBackup` (JSON or YAML)."""
    import yaml

    try:
        text = Path(path).read_text()
        doc = yaml.safe_load(text)
    except OSError as exc:
        raise BackupError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError):
        raise BackupError(f"{path} is not a JSON or YAML document") from None
    return _checked(doc, str(path))


def load_secret(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """A backup document from a Secret written by :class:`SecretBackup`."""
    try:
        secret = kube.request("GET", "GET", core_path("secrets", namespace, name))
    except KubeError as exc:
        if exc.object_missing:
            raise BackupError(f"backup Secret {namespace}/{name} not found") from None
        raise BackupError(f"cannot read backup Secret {namespace}/{name}: {exc}") from None
    raw = (secret.get("data") or {}).get(DATA_KEY)
    if secret.get("type") != BACKUP_TYPE or not raw:
        raise BackupError(f"Secret {namespace}/{name} is not a flux-plunger backup")
    try:
        doc = json.loads(base64.b64decode(raw))
    except ValueError:
        raise BackupError(f"backup Secret {namespace}/{name} holds no valid JSON") from None
    return _checked(doc, f"Secret {namespace}/{name}")


def _checked(doc: Any, source: str) -> dict[str, Any]:
    if (
        not isinstance(doc, dict)
        or doc.get("kind") != "Secret"
        or not isinstance(doc.get("metadata"), dict)
        or doc.get("type") != C.HELM_SECRET_TYPE
    ):
        raise BackupError(f"{source} does not hold a Helm storage Secret")
    md = doc["metadata"]
    if not md.get("name") or not md.get("namespace"):
        raise BackupError(f"{source}: the Secret has no name or namespace")
    provenance(doc)
    return doc
