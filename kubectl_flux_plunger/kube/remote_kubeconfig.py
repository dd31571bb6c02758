"""The kubeconfig of a HelmRelease's ``spec.kubeConfig``: which Secret and key hold it, what
of it is kept (as helm-controller reads it: see :mod:`kubectl_flux_plunger.kube.remote`), and the
TLS context it gives — the client certificate loaded from memory only, never from a file.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.detect import dig
from . import KubeError

DEFAULT_KEYS = ("value", "value.yaml")


class RemoteError(KubeError):
    """The remote cluster of ``spec.kubeConfig`` cannot be used; the message is one line and
    never contains kubeconfig content."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "RemoteCluster"):
        super().__init__(status, reason, message)


class Unsupported(RemoteError):
    """A ``spec.kubeConfig`` flux-plunger does not follow (the release is skipped)."""

    def __init__(self, message: str):
        super().__init__(message, reason="Unsupported")


@dataclass(frozen=True)
class KubeConfigRef:
    """What ``spec.kubeConfig`` (and ``spec.serviceAccountName``) of one HelmRelease ask for."""

    namespace: str
    secret_name: str | None
    key: str | None
    config_map_name: str | None
    service_account: str | None

    @property
    def where(self) -> str:
        return f"kubeconfig Secret {self.namespace}/{self.secret_name}"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def kubeconfig_ref(hr: dict[str, Any]) -> KubeConfigRef | None:
    """``spec.kubeConfig`` of ``hr`` as a reference; None when the release is local."""
    kc = dig(hr, "spec", "kubeConfig")
    if not kc or not isinstance(kc, dict):
        return None
    return KubeConfigRef(
        namespace=str(dig(hr, "metadata", "namespace") or ""),
        secret_name=_str(dig(kc, "secretRef", "name")),
        key=_str(dig(kc, "secretRef", "key")),
        config_map_name=_str(dig(kc, "configMapRef", "name")),
        service_account=_str(dig(hr, "spec", "serviceAccountName")),
    )


@dataclass(frozen=True)
class RemoteConfig:
    """A kubeconfig reduced to what helm-controller keeps.  Secrets never appear in repr."""

    server: str
    cluster: str  # the context's cluster name
    ca_data: str | None = field(default=None, repr=False)  # PEM
    cert_data: bytes | None = field(default=None, repr=False)  # PEM
    key_data: bytes | None = field(default=None, repr=False)  # PEM
    token: str | None = field(default=None, repr=False)
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    tls_server_name: str | None = None
    impersonate: str | None = None


def _list(items: Any) -> list[Any]:
    """A kubeconfig list (clusters, users, contexts); anything else counts as empty."""
    return items if isinstance(items, list) else []


def _named(items: Any, name: str, kind: str, source: str) -> dict[str, Any]:
    """The ``kind`` entry called ``name`` of a kubeconfig list (clusters, users, contexts)."""
    for item in _list(items):
        if isinstance(item, dict) and item.get("name") == name:
            value = item.get(kind)
            return value if isinstance(value, dict) else {}
    raise RemoteError(f"{source}: invalid kubeconfig: {kind} {name!r} is not defined")


def _b64(value: Any, what: str, source: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise RemoteError(f"{source}: invalid kubeconfig: {what} is not valid base64") from None


def _refuse_file_references(cfg: dict[str, Any], source: str) -> None:
    """A kubeconfig from a Secret must be self-contained: a cluster or user that names a file
    (certificate-authority, tokenFile, client-certificate, client-key) is refused."""
    for entry in _list(cfg.get("clusters")):
        cluster = (entry or {}).get("cluster") if isinstance(entry, dict) else None
        if isinstance(cluster, dict) and cluster.get("certificate-authority"):
            raise RemoteError(
                f"{source}: invalid kubeconfig: cluster {entry.get('name')!r} "
                "references a certificate-authority file, only "
                "certificate-authority-data is supported"
            )
    for entry in _list(cfg.get("users")):
        user = (entry or {}).get("user") if isinstance(entry, dict) else None
        for key, inline in (
            ("tokenFile", "an inline token"),
            ("client-certificate", "client-certificate-data"),
            ("client-key", "client-key-data"),
        ):
            if isinstance(user, dict) and user.get(key):
                raise RemoteError(
                    f"{source}: invalid kubeconfig: user {entry.get('name')!r} "
                    f"references a {key} file, only {inline} is supported"
                )


def _check_credentials(user: dict[str, Any], source: str) -> None:
    """Refuse the credentials helm-controller drops or cannot use: with no token, basic
    auth or client certificate, an exec plugin or an auth-provider; a certificate without
    its key (or the key without its certificate)."""
    cert, pkey = user.get("client-certificate-data"), user.get("client-key-data")
    token, username = _str(user.get("token")), _str(user.get("username"))
    if not (token or username or (cert and pkey)):
        if user.get("exec"):
            raise Unsupported(
                f"{source}: the kubeconfig authenticates with an exec plugin, "
                "which flux-plunger does not run (helm-controller only with "
                "--insecure-kubeconfig-exec)"
            )
        if user.get("auth-provider"):
            raise Unsupported(
                f"{source}: the kubeconfig authenticates with an auth-provider "
                "plugin, which helm-controller and flux-plunger do not support"
            )
    if bool(cert) != bool(pkey):
        raise RemoteError(
            f"{source}: invalid kubeconfig: client-certificate-data and "
            "client-key-data must be given together"
        )


def parse_kubeconfig(data: bytes, source: str, *, impersonate: str | None = None) -> RemoteConfig:
    """Parse a kubeconfig from a Secret as helm-controller's ``KubeConfigFromBytes`` +
    ``KubeConfig`` do (see the module docstring).  Raises :class:`RemoteError` (bad input) or
    :class:`Unsupported` with a one-line reason naming ``source``, never the content."""
    import yaml

    try:
        cfg = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        raise RemoteError(f"{source}: invalid kubeconfig: not YAML") from None
    if not isinstance(cfg, dict):
        raise RemoteError(f"{source}: invalid kubeconfig: not a mapping")
    _refuse_file_references(cfg, source)
    current = _str(cfg.get("current-context"))
    if current is None:
        raise RemoteError(f"{source}: invalid kubeconfig: no current-context")
    context = _named(cfg.get("contexts"), current, "context", source)
    cluster_name = _str(context.get("cluster")) or ""
    cluster = _named(cfg.get("clusters"), cluster_name, "cluster", source)
    user_name = _str(context.get("user"))
    user = _named(cfg.get("users"), user_name, "user", source) if user_name else {}
    server = _str(cluster.get("server"))
    if server is None:
        raise RemoteError(f"{source}: invalid kubeconfig: cluster {cluster_name!r} has no server")
    server = server.rstrip("/")
    if not server.startswith(("https://", "http://")):
        server = "https://" + server
    if cluster.get("proxy-url"):
        raise Unsupported(
            f"{source}: the kubeconfig needs a proxy (proxy-url), which "
            "flux-plunger does not support"
        )
    ca = cluster.get("certificate-authority-data")
    cert, pkey = user.get("client-certificate-data"), user.get("client-key-data")
    token, username = _str(user.get("token")), _str(user.get("username"))
    _check_credentials(user, source)
    return RemoteConfig(
        server=server,
        cluster=cluster_name,
        ca_data=_b64(ca, "certificate-authority-data", source).decode("ascii", "replace")
        if ca
        else None,
        cert_data=_b64(cert, "client-certificate-data", source) if cert else None,
        key_data=_b64(pkey, "client-key-data", source) if pkey else None,
        token=token,
        username=username,
        password=_str(user.get("password")),
        tls_server_name=_str(cluster.get("tls-server-name")),
        impersonate=impersonate,
    )


def kubeconfig_bytes(secret: dict[str, Any], ref: KubeConfigRef) -> bytes:
    """The kubeconfig data of ``secret``: the key the ref names, else ``value``, else
    ``value.yaml`` (helm-controller's ``ConfigFromSecret``)."""
    data = secret.get("data")
    data = data if isinstance(data, dict) else {}
    keys = (ref.key,) if ref.key else DEFAULT_KEYS
    for key in keys:
        raw = data.get(key)
        if raw:
            return _b64(raw, f"data key {key!r}", ref.where)
    wanted = f"a {ref.key!r} key" if ref.key else "a 'value' or 'value.yaml' key"
    raise RemoteError(f"{ref.where} does not contain {wanted} with data")


def ssl_context(cfg: RemoteConfig) -> ssl.SSLContext:
    """An SSL context verifying the remote server, with the client certificate (if any)
    loaded from memory only."""
    ctx = ssl.create_default_context()
    if cfg.ca_data:
        try:
            ctx.load_verify_locations(cadata=cfg.ca_data)
        except (ssl.SSLError, ValueError):
            raise RemoteError(f"the CA data of cluster {cfg.cluster!r} is not valid PEM") from None
    if cfg.cert_data and cfg.key_data:
        _load_client_cert(ctx, cfg.cert_data, cfg.key_data, cfg.cluster)
    return ctx


class _EncryptedKey(Exception):
    """The client key asked for a passphrase."""


def _no_passphrase() -> bytes:
    raise _EncryptedKey


def _load_client_cert(ctx: ssl.SSLContext, cert: bytes, key: bytes, cluster: str) -> None:
    """OpenSSL loads certificates from paths only: hand it an anonymous memory file."""
    memfd_create: Callable[..., int] | None = getattr(os, "memfd_create", None)
    if memfd_create is None:
        raise Unsupported(
            "a client certificate from a kubeconfig Secret is only supported on "
            "Linux (it is loaded from memory, never written to disk)"
        )
    fd = memfd_create("flux-plunger-client-cert", getattr(os, "MFD_CLOEXEC", 0))
    try:
        os.write(fd, cert.rstrip(b"\n") + b"\n" + key)
        # never OpenSSL's interactive passphrase prompt: an encrypted key is refused
        ctx.load_cert_chain(f"/proc/self/fd/{fd}", password=_no_passphrase)
    except _EncryptedKey:
        raise RemoteError(
            f"the client key of the kubeconfig for cluster {cluster!r} is "
            "encrypted; only an unencrypted client-key-data is supported"
        ) from None
    except (ssl.SSLError, OSError):
        raise RemoteError(
            f"the client certificate or key of the kubeconfig for cluster "
            f"{cluster!r} is not valid PEM"
        ) from None
    finally:
        os.close(fd)
