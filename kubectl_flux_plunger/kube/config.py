"""Which cluster to talk to, as kubectl decides it: the kubeconfig files (or the pod's
in-cluster configuration), kubectl's override flags, and the default namespace."""

from __future__ import annotations

import re
from dataclasses import dataclass

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


def _load_client_configuration(
    kubeconfig: str | None, context: str | None, overrides: Overrides | None = None
) -> ClientConfiguration:
    """A ``kubernetes.client.Configuration`` from kubeconfig (or in-cluster), with
    kubectl's override flags applied."""
    import os

    configuration, config, _ = _client_modules()
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import _get_kube_config_loader

    o = overrides or Overrides()
    cfg: ClientConfiguration = configuration.Configuration()
    paths = kubeconfig_paths(kubeconfig)
    existing = [p for p in paths if os.path.exists(p)]
    try:
        if existing:
            loader = _get_kube_config_loader(
                filename=os.pathsep.join(existing), active_context=context, persist_config=False
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
            raise _no_configuration(paths)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            raise _no_configuration(paths)
    except ConfigError:
        raise
    except ConfigException as exc:
        text = " ".join(str(exc).split())
        # the client names the list after the file it read: "... in /path/config/contexts list"
        m = re.search(r"Expected object with name (\S+) in (?:.*/)?contexts list", text)
        if m:
            raise ConfigError(f'context "{m.group(1)}" does not exist') from None
        raise ConfigError(text) from None
    except FileNotFoundError as exc:
        if exc.filename is None:  # e.g. no writable temporary directory for certificate data
            raise ConfigError(" ".join(str(exc).split())) from None
        raise ConfigError(f"kubeconfig not found: {exc.filename}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # malformed YAML / missing keys surface as these from the loader
        raise ConfigError(
            f"invalid kubeconfig: {' '.join(str(exc).split()) or type(exc).__name__}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - yaml errors and others: one line, no traceback
        raise ConfigError(f"invalid kubeconfig: {' '.join(str(exc).split())[:300]}") from None
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
    return cfg


IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    """The namespace of the kubeconfig context in use; None when there is none (or no
    kubeconfig).  An unknown ``context`` is a :class:`ConfigError`."""
    _, config, _ = _client_modules()
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
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


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """kubectl's default: the context's namespace, else the pod's, else ``default``."""
    return context_namespace(kubeconfig, context) or in_cluster_namespace() or "default"
