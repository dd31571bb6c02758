"""What a verb runs in: the connected client and the resolved selection (``Session``), and
the client for the command line's connection flags (``connect``).

The Kubernetes client and the verbs are imported inside the functions: ``--help`` loads
none of them.
"""

from __future__ import annotations

from typing import Any

import click

from .errors import Exit, fail
from .options import overrides
from .target import Target

# cli/serve.py takes these from here
__all__ = ["Exit", "Session", "Target", "connect", "fail"]


class Session:
    """What a verb needs: a connected client and the resolved selection."""

    def __init__(self, target: Target, dry_run: str = "none") -> None:
        from ..kube import Kube
        from ..verbs.select import Selection

        kubeconfig, kube_context, request_timeout, namespace, all_namespaces, selector, names = (
            target
        )
        if names and all_namespaces:
            raise click.UsageError("a resource cannot be retrieved by name across all namespaces")
        if names and selector:
            raise click.UsageError("name cannot be provided when a selector is specified")
        if namespace is not None and not namespace.strip():
            raise click.UsageError("--namespace must not be empty")
        self.kube: Kube = connect(
            kubeconfig, kube_context, request_timeout, dry_run=(dry_run == "server")
        )
        ns = None if all_namespaces else (namespace or _default_namespace(kubeconfig, kube_context))
        self.selection = Selection(
            namespace=ns, all_namespaces=all_namespaces, selector=selector, names=tuple(names)
        )
        self.dry_run = dry_run

    def where(self) -> str:
        """`` in NS namespace`` as kubectl words it (empty under -A)."""
        return "" if self.selection.all_namespaces else f" in {self.selection.namespace} namespace"


def connect(
    kubeconfig: str | None, kube_context: str | None, request_timeout: float | None, **kwargs: Any
) -> Any:
    """A :class:`~kubectl_flux_plunger.kube.Kube` for the command line's connection flags
    (:func:`kubectl_flux_plunger.kube.connect.connect`); configuration problems are one
    ``error:`` line."""
    from ..kube.connect import ConnectError
    from ..kube.connect import connect as connect_cluster

    try:
        return connect_cluster(
            kubeconfig, kube_context, overrides, request_timeout=request_timeout or None, **kwargs
        )
    except ConnectError as exc:
        fail(str(exc))


def _default_namespace(kubeconfig: str | None, kube_context: str | None) -> str:
    from ..kube import ConfigError, default_namespace

    try:
        return default_namespace(kubeconfig, kube_context)
    except ConfigError as exc:
        fail(str(exc))
