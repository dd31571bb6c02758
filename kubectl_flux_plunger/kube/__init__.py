"""The Kubernetes API client: every call flux-plunger makes to the API goes through here.

One module per concern, layered one way (an import-linter contract holds it)::

    client        Kube: the one class callers hold: the transport, with the parts below
                  made over it and a flat method API delegating to them
    helmreleases  HelmReleases (get, paged list, watch, apply and patches)
    resources     Secrets, Events, Leases, the controller's Deployment and Pods, discovery
    read          Reads: GET-or-none, the paged LIST, the WATCH stream, the watch-list flag
    transport     TLS, auth, headers, retries of reads, dry-run, the request counters: the
                  one module every request goes through
    config        kubeconfig / in-cluster configuration, kubectl's override flags
    official      the official client, loaded lazily and only in part; the kubeconfig's
                  contexts (the completion of ``--context``)
    errors        KubeError and a subclass per status; ConfigError
    paths         where resources live; media types

Callers import from ``kubectl_flux_plunger.kube``: the public names of the modules below;
a unit test that needs a module's private helper imports that module.  Only this package
imports the ``kubernetes`` client (an import-linter contract holds it): what others need of
it has a public function here (:func:`kubeconfig_contexts`).  The ``kubernetes`` package is
imported lazily: ``--help`` must not pay for it.
"""

from __future__ import annotations

from .client import Kube
from .config import (
    IN_CLUSTER_NAMESPACE,
    Overrides,
    context_namespace,
    default_namespace,
    in_cluster_namespace,
    kubeconfig_paths,
    namespace_default,
)
from .errors import (
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
    kept,
    kube_error,
)
from .official import ClientConfiguration, kubeconfig_contexts
from .paths import APPLY_PATCH, JSON, JSON_PATCH, MERGE_PATCH, core_path, hr_path, lease_path
from .read import INITIAL_EVENTS_END, WatchLists
from .transport import (
    MAX_RETRY_AFTER,
    READ_RETRIES,
    READ_VERBS,
    KubeOptions,
    Request,
    Stats,
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
    "WatchLists",
    "context_namespace",
    "core_path",
    "default_namespace",
    "hr_path",
    "in_cluster_namespace",
    "kept",
    "kube_error",
    "kubeconfig_contexts",
    "kubeconfig_paths",
    "lease_path",
    "namespace_default",
]
