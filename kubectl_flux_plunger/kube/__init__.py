"""The Kubernetes API client: every call flux-plunger makes to the API goes through here.

One module per concern, layered one way (an import-linter contract holds it)::

    client        Kube: the one class callers hold, made of the helpers below
    helmreleases  HelmReleases (get, paged list, watch, apply and patches)
    resources     Secrets, Events, Leases, the controller's Deployment and Pods, discovery
    read          GET-or-none, the paged LIST, the WATCH stream and the watch-list flag
    transport     TLS, auth, headers, retries of reads, dry-run, the request counters: the
                  one module every request goes through
    config        kubeconfig / in-cluster configuration, kubectl's override flags
    official      the official client, loaded lazily and only in part
    errors        KubeError and a subclass per status; ConfigError
    paths         where resources live; media types

Callers import from ``kubectl_flux_plunger.kube``; the names below are the ones the single
module ``kube.py`` had.  The ``kubernetes`` package is imported lazily: ``--help`` must not
pay for it.
"""

from __future__ import annotations

from .client import Kube
from .config import (
    IN_CLUSTER_NAMESPACE,
    Overrides,
    _load_client_configuration,
    _no_configuration,
    context_namespace,
    default_namespace,
    in_cluster_namespace,
    kubeconfig_paths,
)
from .errors import (
    _BY_STATUS,
    GENERIC_422,
    BadRequest,
    ConfigError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    Unreachable,
    _error_from,
    kube_error,
)
from .official import ClientConfiguration, _client_modules
from .paths import APPLY_PATCH, JSON, JSON_PATCH, MERGE_PATCH, core_path, hr_path, lease_path
from .read import INITIAL_EVENTS_END
from .transport import (
    MAX_RETRY_AFTER,
    READ_RETRIES,
    READ_VERBS,
    KubeOptions,
    Request,
    Stats,
    _one_line,
    _retry_after,
)

__all__ = [
    "APPLY_PATCH",
    "GENERIC_422",
    "INITIAL_EVENTS_END",
    "IN_CLUSTER_NAMESPACE",
    "JSON",
    "JSON_PATCH",
    "MAX_RETRY_AFTER",
    "MERGE_PATCH",
    "READ_RETRIES",
    "READ_VERBS",
    "_BY_STATUS",
    "BadRequest",
    "ClientConfiguration",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "Kube",
    "KubeError",
    "KubeOptions",
    "NotFound",
    "Overrides",
    "Request",
    "ServerError",
    "Stats",
    "TooManyRequests",
    "Unauthorized",
    "Unreachable",
    "_client_modules",
    "_error_from",
    "_load_client_configuration",
    "_no_configuration",
    "_one_line",
    "_retry_after",
    "context_namespace",
    "core_path",
    "default_namespace",
    "hr_path",
    "in_cluster_namespace",
    "kube_error",
    "kubeconfig_paths",
    "lease_path",
]
