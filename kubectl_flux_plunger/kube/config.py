"""Which cluster to talk to, as kubectl decides it: the kubeconfig files (or the pod's
in-cluster configuration), kubectl's override flags, and the default namespace."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

from .errors import ConfigError
from .official import ClientConfiguration, _client_modules


@dataclass(frozen=True)
class Overrides:
    """kubectl's connection flags, applied over the kubeconfig (or standing alone)."""

    server: str | None = None
    token: str | None = None
    user: str | None = None
    cluster: str | None = None
    certificate_authority: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    tls_server_name: str | None = None
    insecure_skip_tls_verify: bool = False
    impersonate: str | None = None
    impersonate_groups: tuple[str, ...] = ()
    impersonate_uid: str | None = None


def kubeconfig_paths(kubeconfig: str | None) -> list[str]:
    """The files kubectl would read, in order: --kubeconfig, else $KUBECONFIG's entries,
    else ~/.kube/config."""
    import os

    if kubeconfig:
        return [kubeconfig]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p]
    return [os.path.expanduser("~/.kube/config")]


def _no_configuration(paths: list[str]) -> ConfigError:
    import os

    if os.environ.get("KUBECONFIG"):
        looked = (
            f"the file in KUBECONFIG does not exist ({paths[0]})"
            if len(paths) == 1
            else f"none of the files in KUBECONFIG exists ({', '.join(paths)})"
        )
    else:
        looked = f"KUBECONFIG is not set, {paths[0]} does not exist"
    return ConfigError(
        f"no configuration has been provided: {looked}, and this is not a pod "
        "(KUBERNETES_SERVICE_HOST is not set); point at a cluster with --kubeconfig FILE, "
        "KUBECONFIG=FILE or --server URL"
    )


@dataclass(frozen=True)
class Kubeconfig:
    """The kubeconfig files kubectl would read (:func:`kubeconfig_paths`), read and merged
    once: every client and the context's namespace are made from this, without reading the
    files again.  ``merged`` is the client's merged configuration, None when no file exists
    or the files cannot be read (``error`` then says why, as the client's ConfigError)."""

    flag: str | None  # --kubeconfig as given
    paths: tuple[str, ...]
    existing: tuple[str, ...]
    merged: Any = None
    error: ConfigError | None = None

    def read(self) -> Any:
        """The merged configuration; raises why the files could not be read."""
        if self.error is not None:
            raise self.error
        return self.merged


def parse_kubeconfig(kubeconfig: str | None) -> Kubeconfig:
    """Read and merge the kubeconfig files that exist (the only place they are read)."""
    import os

    _client_modules()
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigMerger

    paths = tuple(kubeconfig_paths(kubeconfig))
    existing = tuple(p for p in paths if os.path.exists(p))
    if not existing:
        return Kubeconfig(kubeconfig, paths, existing)
    try:
        merged = KubeConfigMerger(os.pathsep.join(existing)).config
        if merged is None:  # as the client's own loader says it
            raise ConfigException("Invalid kube-config file. No configuration found.")
    except Exception as exc:  # noqa: BLE001 - kept, and raised as one line by its reader
        return Kubeconfig(kubeconfig, paths, existing, error=_config_error(exc))
    return Kubeconfig(kubeconfig, paths, existing, merged)


def _load_client_configuration(
    kubeconfig: str | Kubeconfig | None, context: str | None, overrides: Overrides | None = None
) -> ClientConfiguration:
    """A ``kubernetes.client.Configuration`` from kubeconfig (or in-cluster), with
    kubectl's override flags applied.  ``kubeconfig``: the flag, or the files it names
    already read (:func:`parse_kubeconfig`)."""
    import os

    configuration, config, _ = _client_modules()
    from kubernetes.config.kube_config import _get_kube_config_loader

    files = kubeconfig if isinstance(kubeconfig, Kubeconfig) else parse_kubeconfig(kubeconfig)
    o = overrides or Overrides()
    cfg: ClientConfiguration = configuration.Configuration()
    try:
        if files.existing:
            loader = _get_kube_config_loader(
                config_dict=files.read(), active_context=context, persist_config=False
            )
            if o.user is not None:
                users = loader._config["users"] if loader._config.safe_get("users") else None
                user = users.get_with_name(o.user, safe=True) if users else None
                if user is None:
                    raise ConfigError(f'auth info "{o.user}" does not exist')
                loader._user = user["user"]
            if o.cluster is not None:
                clusters = (
                    loader._config["clusters"] if loader._config.safe_get("clusters") else None
                )
                cluster = clusters.get_with_name(o.cluster, safe=True) if clusters else None
                if cluster is None:
                    raise ConfigError(f'cluster "{o.cluster}" does not exist')
                loader._cluster = cluster["cluster"]
            loader.load_and_set(cfg)
        elif o.server:
            cfg.host = o.server  # like kubectl: --server alone, no kubeconfig at all
        elif context or o.user or o.cluster:
            raise _no_configuration(list(files.paths))
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            raise _no_configuration(list(files.paths))
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line, no traceback (_config_error)
        raise _config_error(exc) from None
    _apply_overrides(cfg, o)
    return cfg


def _config_error(exc: Exception) -> ConfigError:
    """What went wrong reading the configuration, as one line."""
    from kubernetes.config.config_exception import ConfigException

    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, ConfigException):
        text = " ".join(str(exc).split())
        # the client names the list after the file it read: "... in /path/config/contexts list"
        m = re.search(r"Expected object with name (\S+) in (?:.*/)?contexts list", text)
        if m:
            return ConfigError(f'context "{m.group(1)}" does not exist')
        return ConfigError(text)
    if isinstance(exc, FileNotFoundError):
        if exc.filename is None:  # e.g. no writable temporary directory for certificate data
            return ConfigError(" ".join(str(exc).split()))
        return ConfigError(f"kubeconfig not found: {exc.filename}")
    if isinstance(exc, (ValueError, TypeError, KeyError, AttributeError)):
        # malformed YAML / missing keys surface as these from the loader
        return ConfigError(
            f"invalid kubeconfig: {' '.join(str(exc).split()) or type(exc).__name__}"
        )
    # yaml errors and others
    return ConfigError(f"invalid kubeconfig: {' '.join(str(exc).split())[:300]}")


def _apply_overrides(cfg: ClientConfiguration, o: Overrides) -> None:
    """kubectl's connection flags over what the configuration says."""
    if o.server:
        cfg.host = o.server.rstrip("/")
    if o.token is not None:
        cfg.api_key = {"authorization": f"Bearer {o.token}"}
        cfg.api_key_prefix = {}
        cfg.refresh_api_key_hook = None
    if o.certificate_authority:
        cfg.ssl_ca_cert = o.certificate_authority
    if o.client_certificate:
        cfg.cert_file = o.client_certificate
    if o.client_key:
        cfg.key_file = o.client_key
    if o.tls_server_name:
        cfg.tls_server_name = o.tls_server_name
    if o.insecure_skip_tls_verify:
        cfg.verify_ssl = False


IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def context_namespace(kubeconfig: str | Kubeconfig | None, context: str | None) -> str | None:
    """The namespace of the kubeconfig context in use; None when there is none (or no
    kubeconfig).  An unknown ``context`` is a :class:`ConfigError`.  ``kubeconfig``: the
    flag, or the files it names already read (:func:`parse_kubeconfig`)."""
    import os

    files = kubeconfig if isinstance(kubeconfig, Kubeconfig) else parse_kubeconfig(kubeconfig)
    if files.merged is None or (not files.flag and os.environ.get("KUBECONFIG") == ""):
        # no usable kubeconfig: no namespace from it.  An empty KUBECONFIG names no file
        # here, as the client's list_kube_config_contexts has always read it (the clients
        # read ~/.kube/config then, as kubectl does): kept, the reshaping changes nothing
        return None
    from kubernetes.config.kube_config import _get_kube_config_loader

    try:
        # as list_kube_config_contexts reads them: the current context must resolve
        loader = _get_kube_config_loader(config_dict=files.merged)
        contexts, active = loader.list_contexts(), loader.current_context
    except Exception:  # noqa: BLE001 - no usable kubeconfig: no namespace from it
        return None
    chosen = active
    if context:
        chosen = next((c for c in contexts if c.get("name") == context), None)
        if chosen is None:
            raise ConfigError(f'context "{context}" does not exist')
    return ((chosen or {}).get("context") or {}).get("namespace") or None


def in_cluster_namespace() -> str | None:
    """The namespace of the pod we run in, when we run in one."""
    try:
        with open(IN_CLUSTER_NAMESPACE) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


@overload
def namespace_default(
    kubeconfig_namespace: Callable[[], str | None] | None, *, pod_first: bool, fallback: str
) -> str: ...


@overload
def namespace_default(
    kubeconfig_namespace: Callable[[], str | None] | None, *, pod_first: bool, fallback: None
) -> str | None: ...


def namespace_default(
    kubeconfig_namespace: Callable[[], str | None] | None,
    *,
    pod_first: bool,
    fallback: str | None,
) -> str | None:
    """The one rule for a namespace no flag names: the pod's own namespace
    (:func:`in_cluster_namespace`) and the kubeconfig context's (``kubeconfig_namespace``,
    called only when reached; None: not consulted), in the order asked, else ``fallback``.

    * kubectl's default namespace, the releases' (:func:`default_namespace`): the context's,
      then the pod's, then ``default``;
    * the Lease of flux-plunger's controller: the pod's first (the controller's own
      namespace); then ``serve`` outside a pod takes the context's and refuses to guess
      beyond it (fallback None), while the one-shot verbs consult no kubeconfig and fall
      back to the namespace the shipped manifests install into
      (``controller_lease.default_lease_namespace``)."""
    sources = [in_cluster_namespace]
    if kubeconfig_namespace is not None:
        sources.insert(1 if pod_first else 0, kubeconfig_namespace)
    for source in sources:
        found = source()
        if found:
            return found
    return fallback


def default_namespace(kubeconfig: str | Kubeconfig | None, context: str | None) -> str:
    """kubectl's default: the context's namespace, else the pod's, else ``default``."""
    return namespace_default(
        lambda: context_namespace(kubeconfig, context), pod_first=False, fallback="default"
    )
