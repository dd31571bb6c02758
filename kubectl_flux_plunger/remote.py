"""Helm storage in another cluster: HelmReleases with ``spec.kubeConfig``.

helm-controller v1.6 (``internal/controller/helmrelease_controller.go``
``buildRESTClientGetter``, ``internal/kube/config.go`` ``ConfigFromSecret`` and fluxcd/pkg
``runtime/client/kubeconfig.go``) reads the kubeconfig like this, and so do we:

* ``spec.kubeConfig.secretRef.name`` in the HelmRelease's own namespace; the data key the ref
  names, else ``value``, else ``value.yaml``;
* the kubeconfig must be self-contained: ``certificate-authority``, ``client-certificate``,
  ``client-key`` and ``tokenFile`` file references are refused;
* its current context is used, and only the server, TLS server name, CA / client certificate
  data, token and basic-auth credentials are kept (``insecure-skip-tls-verify`` and ``exec`` are
  dropped unless helm-controller runs with ``--insecure-kubeconfig-tls`` / ``-exec``, which
  flux-plunger does not follow; auth-provider plugins are always dropped);
* ``spec.serviceAccountName`` is impersonated in that cluster as
  ``system:serviceaccount:<HelmRelease namespace>:<name>``.

Not supported, reported as skipped with the reason: ``spec.kubeConfig.configMapRef`` (workload
identity of a cloud provider or the generic provider, which needs helm-controller's token
exchange), kubeconfigs that need an exec plugin, an auth-provider or a proxy.

The kubeconfig is only ever held in memory: a client certificate is handed to OpenSSL through an
anonymous memory file (Linux ``memfd``), never a file on disk, and no message quotes it.

Only the storage list and the Secret DELETE go to the remote cluster; the suspension, fence,
annotation, Events and Lease stay on the local HelmRelease.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from .detect import dig
from .kube import Kube, KubeError, _client_modules, core_path

REMOTE_TIMEOUT = 10.0  # seconds per request to a remote cluster (status stays bounded)
UNREACHABLE_TTL = 30.0  # a remote that did not answer is not retried for this long
MAX_CLIENTS = 64
MAX_RELEASES = 4096
DEFAULT_KEYS = ("value", "value.yaml")
_SA_USER = "system:serviceaccount:{namespace}:{name}"


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


class RemoteKube(Kube):
    """A :class:`Kube` talking to the remote cluster of one kubeconfig Secret."""

    def __init__(
        self,
        cfg: RemoteConfig,
        *,
        where: str,
        request_timeout: float,
        dry_run: bool = False,
        on_unreachable: Callable[[str], None] | None = None,
    ):
        import urllib3

        configuration_module = _client_modules()[0]
        conf = configuration_module.Configuration()
        conf.host = cfg.server
        if cfg.token:
            conf.api_key = {"authorization": f"Bearer {cfg.token}"}
        super().__init__(conf, request_timeout=request_timeout, dry_run=dry_run)
        pool_kw: dict[str, Any] = {"num_pools": 2, "maxsize": 4}
        if cfg.server.startswith("https://"):
            pool_kw["ssl_context"] = ssl_context(cfg)
            if cfg.tls_server_name:
                pool_kw["server_hostname"] = cfg.tls_server_name
        self._pool.clear()
        self._pool = urllib3.PoolManager(**pool_kw)
        self._remote = cfg
        self.where = where
        self._on_unreachable = on_unreachable

    @property
    def cluster(self) -> str:
        """How this cluster is named in output: its server URL."""
        return self._remote.server

    def _headers(self, content_type: str | None) -> MutableMapping[str, str]:
        headers = super()._headers(content_type)
        cfg = self._remote
        if cfg.username and not cfg.token:
            pair = f"{cfg.username}:{cfg.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        if cfg.impersonate:
            headers["Impersonate-User"] = cfg.impersonate
        return headers

    def request(self, verb: str, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return super().request(verb, method, path, **kwargs)
        except KubeError as exc:
            if exc.status == 0 and self._on_unreachable is not None:
                self._on_unreachable(self.cluster)
            # the same error class (callers catch meaning), naming where it happened
            exc.message = f"{exc.message} (remote cluster of {self.where})"
            exc.args = (exc.message,)
            raise


def storage_cluster(kube: Kube) -> str:
    """``local`` or the server URL of the remote cluster ``kube`` talks to."""
    return kube.cluster if isinstance(kube, RemoteKube) else "local"


class Remotes:
    """The Kube holding a HelmRelease's Helm storage: ``local`` for most releases, a
    :class:`RemoteKube` built from the kubeconfig Secret for ``spec.kubeConfig`` ones.

    The Secret is read fresh on every call (a rotated kubeconfig takes effect at once); clients
    are reused while the Secret's resourceVersion is unchanged.  A remote that did not answer is
    not tried again for ``unreachable_ttl`` seconds, so one dead cluster costs one timeout per
    window, not one per release.  Thread-safe."""

    def __init__(
        self,
        local: Kube,
        *,
        timeout: float | None = None,
        unreachable_ttl: float = UNREACHABLE_TTL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.local = local
        self.timeout = min(filter(None, (timeout, local.request_timeout, REMOTE_TIMEOUT)))
        self.unreachable_ttl = unreachable_ttl
        self.clock = clock
        self._clients: OrderedDict[tuple[str, ...], RemoteKube] = OrderedDict()
        self._dead: dict[str, float] = {}
        self._by_release: OrderedDict[str, RemoteKube] = OrderedDict()
        self._lock = threading.Lock()

    def storage_kube(self, hr: dict[str, Any], *, reuse: bool = False) -> Kube:
        """The client for ``hr``'s Helm storage.  Raises :class:`Unsupported` for a
        ``spec.kubeConfig`` we do not follow and :class:`RemoteError` when the kubeconfig
        cannot be read or the remote did not answer a moment ago.  ``reuse``: the client
        resolved for this release last time (the DELETE after the LIST: same cluster, no
        second read of the kubeconfig Secret)."""
        ref = kubeconfig_ref(hr)
        if ref is None:
            return self.local
        uid = str(dig(hr, "metadata", "uid") or "")
        if reuse:
            with self._lock:
                known = self._by_release.get(uid)
            if known is not None:
                return known
        if ref.config_map_name and not ref.secret_name:
            raise Unsupported(
                f"spec.kubeConfig.configMapRef ({ref.config_map_name}) asks for a "
                "cloud or generic workload-identity provider, which flux-plunger "
                "does not support"
            )
        if not ref.secret_name or ref.config_map_name:
            raise RemoteError(
                "exactly one of spec.kubeConfig.configMapRef or "
                "spec.kubeConfig.secretRef must be set"
            )
        try:
            secret = self.local.request(
                "GET", "GET", core_path("secrets", ref.namespace, ref.secret_name)
            )
        except KubeError as exc:
            if exc.object_missing:
                raise RemoteError(f"{ref.where} not found") from None
            raise RemoteError(
                f"cannot read {ref.where}: {exc}", status=exc.status, reason=exc.reason
            ) from None
        md = secret.get("metadata") or {}
        impersonate = (
            _SA_USER.format(namespace=ref.namespace, name=ref.service_account)
            if ref.service_account
            else None
        )
        key = (
            ref.namespace,
            ref.secret_name,
            ref.key or "",
            impersonate or "",
            str(md.get("uid")),
            str(md.get("resourceVersion")),
        )
        with self._lock:
            client = self._clients.get(key)
            if client is not None:
                self._clients.move_to_end(key)
        if client is None:
            cfg = parse_kubeconfig(
                kubeconfig_bytes(secret, ref), ref.where, impersonate=impersonate
            )
            client = RemoteKube(
                cfg,
                where=ref.where,
                request_timeout=self.timeout,
                dry_run=self.local.dry_run,
                on_unreachable=self._mark_dead,
            )
            client.stats = self.local.stats  # one request count per run
            with self._lock:
                self._clients[key] = client
                while len(self._clients) > MAX_CLIENTS:
                    self._clients.popitem(last=False)[1].close()
        until = self._dead.get(client.cluster)
        if until is not None and self.clock() < until:
            raise RemoteError(
                f"the remote cluster {client.cluster} of {ref.where} did not "
                f"answer a moment ago; not retried for {self.unreachable_ttl:.0f}s"
            )
        with self._lock:
            self._by_release[uid] = client
            while len(self._by_release) > MAX_RELEASES:
                self._by_release.popitem(last=False)
        return client

    def _mark_dead(self, server: str) -> None:
        with self._lock:
            self._dead[server] = self.clock() + self.unreachable_ttl

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), OrderedDict()
            self._by_release.clear()
        for client in clients:
            client.close()


__all__ = [
    "KubeConfigRef",
    "RemoteConfig",
    "RemoteError",
    "RemoteKube",
    "Remotes",
    "Unsupported",
    "kubeconfig_bytes",
    "kubeconfig_ref",
    "parse_kubeconfig",
    "storage_cluster",
]
