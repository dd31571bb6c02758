"""What a verb runs in: the connected client and the resolved selection (``Session``), the
client for the command line's connection flags (``connect``), and the running-controller
check of the writing verbs (``controller_check``).

The Kubernetes client and the verbs are imported inside the functions: ``--help`` loads
none of them.
"""

from __future__ import annotations

import os
from typing import Any

import click

from .errors import Exit, fail
from .options import overrides
from .target import Target

# cli/serve.py takes these from here
__all__ = ["Exit", "Session", "Target", "connect", "controller_check", "fail"]


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
    """A :class:`~kubectl_flux_plunger.kube.Kube` for the command line's connection flags;
    configuration problems are one ``error:`` line."""
    from ..kube import ConfigError, Kube

    if kubeconfig and not os.path.exists(kubeconfig):
        fail(f"stat {kubeconfig}: no such file or directory")
    o = overrides()
    if o.certificate_authority and not os.path.isfile(o.certificate_authority):
        fail(
            f"unable to read certificate-authority {o.certificate_authority}: "
            "no such file or directory"
        )
    try:
        return Kube.from_kubeconfig(
            kubeconfig, kube_context, o, request_timeout=request_timeout or None, **kwargs
        )
    except ConfigError as exc:
        fail(str(exc))


def _default_namespace(kubeconfig: str | None, kube_context: str | None) -> str:
    from ..kube import ConfigError, default_namespace

    try:
        return default_namespace(kubeconfig, kube_context)
    except ConfigError as exc:
        fail(str(exc))


def controller_check(
    kube: Any,
    lease_namespace: str | None,
    force: bool,
    lease_name: str | None = None,
    *,
    stopped: tuple[tuple[str, str], ...] = (),
    namespaces: tuple[str | None, ...] = (),
) -> Any:
    """The running-controller check of the verbs that write (SPEC §2), read once, before
    the reads that decide: every flux-plunger Lease of the cluster with one LIST.  Returns
    the per-release check for ``Options.covered`` — the running controller that covers a
    release, as a ``Covered`` — or None with ``--force`` (nothing is read then).

    ``--lease-name`` only adds a Lease to count as flux-plunger's; it never narrows the
    check.  ``stopped``: Leases (namespace, name) of a controller this command has just
    stopped (``release-fence --stop-deployment``), not counted.  A refused cluster-wide
    LIST falls back to ``--lease-namespace`` and ``namespaces`` (the releases' own) with
    one warning line; when no Lease can be read at all the verb refuses (one ``error:``
    line, exit 1, nothing written): it cannot tell a controller's recovery in flight from
    a crash leftover."""
    import datetime as dt

    from ..executor import Covered
    from ..kube import controller_lease

    if lease_namespace is not None and not lease_namespace.strip():
        raise click.UsageError("--lease-namespace must not be empty")
    if force:
        return None
    ns = lease_namespace or controller_lease.default_lease_namespace()
    names = (lease_name,) if lease_name else ()
    also = tuple(n for n in namespaces if n)
    found = controller_lease.survey(kube, ns, names=names, also=also)
    if found.blind():
        fail(
            f"cannot read any flux-plunger controller's Lease ({found.list_error}), so a "
            "running controller's recovery in flight cannot be told from a crash leftover; "
            "no HelmRelease was written. Grant list on leases cluster-wide (docs/INSTALL.md, "
            '"What the one-shot verbs need"), or stop every flux-plunger controller and '
            "pass --force"
        )
    if found.warning():
        click.echo(f"warning: {found.warning()}", err=True)
    found = found.without(stopped)
    if not found.live():
        return None
    now = dt.datetime.now(dt.timezone.utc)

    def check(hr: Any) -> Any:
        by = found.covering(hr)
        return None if by is None else Covered(by.name, by.deferral(now))

    return check
