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
* ``spec.serviceAccountName`` — else helm-controller's ``--default-service-account``, which
  ``serve``/``recover`` take as ``--default-service-account`` too — is impersonated in that
  cluster as ``system:serviceaccount:<HelmRelease namespace>:<name>``.

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
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from typing import Any

from ..core.detect import dig
from . import Kube, KubeError, core_path
from .official import _client_modules
from .paths import JSON
from .remote_kubeconfig import (
    KubeConfigRef,
    RemoteConfig,
    RemoteError,
    Unsupported,
    kubeconfig_bytes,
    kubeconfig_ref,
    parse_kubeconfig,
    ssl_context,
)
from .transport import Request

REMOTE_TIMEOUT = 10.0  # seconds per request to a remote cluster (status stays bounded)
UNREACHABLE_TTL = 30.0  # a remote that did not answer is not retried for this long
MAX_CLIENTS = 64
MAX_RELEASES = 4096
_SA_USER = "system:serviceaccount:{namespace}:{name}"


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

    def _headers(self, content_type: str | None, accept: str = JSON) -> MutableMapping[str, str]:
        headers = super()._headers(content_type, accept)
        cfg = self._remote
        if cfg.username and not cfg.token:
            pair = f"{cfg.username}:{cfg.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        if cfg.impersonate:
            headers["Impersonate-User"] = cfg.impersonate
        return headers

    def send(self, req: Request) -> Any:
        try:
            return super().send(req)
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


def _secret_name(ref: KubeConfigRef) -> str:
    """The kubeconfig Secret's name: exactly one of secretRef and configMapRef must be set,
    and configMapRef is not followed."""
    if ref.config_map_name and not ref.secret_name:
        raise Unsupported(
            f"spec.kubeConfig.configMapRef ({ref.config_map_name}) asks for a "
            "cloud or generic workload-identity provider, which flux-plunger "
            "does not support"
        )
    if not ref.secret_name or ref.config_map_name:
        raise RemoteError(
            "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be set"
        )
    return ref.secret_name


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
        default_service_account: str | None = None,
    ):
        self.local = local
        self.default_service_account = default_service_account or None
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
        secret = self._kubeconfig_secret(ref, _secret_name(ref))
        client = self._client(ref, secret)
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

    def _kubeconfig_secret(self, ref: KubeConfigRef, name: str) -> dict[str, Any]:
        """A fresh read of the kubeconfig Secret (a rotated kubeconfig takes effect at once)."""
        try:
            return self.local.request("GET", "GET", core_path("secrets", ref.namespace, name))
        except KubeError as exc:
            if exc.object_missing:
                raise RemoteError(f"{ref.where} not found") from None
            raise RemoteError(
                f"cannot read {ref.where}: {exc}", status=exc.status, reason=exc.reason
            ) from None

    def _client(self, ref: KubeConfigRef, secret: dict[str, Any]) -> RemoteKube:
        """The client made for this version of ``secret`` (and impersonation), else a new one."""
        md = secret.get("metadata") or {}
        # as helm-controller: spec.serviceAccountName, else its --default-service-account
        account = ref.service_account or self.default_service_account
        impersonate = _SA_USER.format(namespace=ref.namespace, name=account) if account else None
        key = (
            ref.namespace,
            str(ref.secret_name),  # a str: _secret_name
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
        return client

    def _mark_dead(self, server: str) -> None:
        """``server`` did not answer: not tried for ``unreachable_ttl``.  The windows that
        have passed go now, so only the servers dead within the last window are held."""
        now = self.clock()
        with self._lock:
            for gone in [s for s, until in self._dead.items() if until <= now]:
                del self._dead[gone]
            self._dead[server] = now + self.unreachable_ttl

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
