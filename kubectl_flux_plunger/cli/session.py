"""What a verb runs in: the connected client and the resolved selection (``Session``), the
flags that name them packed into one value (``Target``), the running-controller check and
the notifier of the writing verbs, and how a verb ends (``Exit``, ``fail``, API failures as
one ``error:`` line).

The Kubernetes client and the verbs are imported inside the functions: ``--help`` loads
none of them.
"""

from __future__ import annotations

import enum
import functools
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn, TypeVar, cast

import click

from .options import overrides

F = TypeVar("F", bound=Callable[..., Any])


class Exit(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    INTERRUPTED = 130


def prog_name() -> str:
    base = os.path.basename(sys.argv[0] or "")
    if base.startswith("flux-"):
        return "flux plunger"
    return "kubectl flux-plunger"


def fail(message: str, code: Exit = Exit.FAILURE) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(int(code))


class Target(NamedTuple):
    """The connection and selection flags of a verb (``connection_options`` and
    ``selection_options``), as one value."""

    kubeconfig: str | None
    kube_context: str | None
    request_timeout: float | None
    namespace: str | None = None
    all_namespaces: bool = False
    selector: str | None = None
    names: tuple[str, ...] = ()


def pass_target(fn: F) -> F:
    """Hand the command its connection and selection flags as one ``Target`` (the first
    argument) instead of seven."""

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        target = Target(**{field: kwargs.pop(field) for field in Target._fields})
        return fn(target, **kwargs)

    return cast(F, wrapper)  # functools.wraps keeps the signature mypy cannot see kept


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


def api_errors(fn: F) -> F:
    """Turn API failures into one ``error:`` line and exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..kube import KubeError
        from ..verbs.select import SelectionError

        try:
            return fn(*args, **kwargs)
        except KubeError as exc:
            fail(str(exc) if exc.status == 0 else f"{exc.reason}: {exc}")
        except SelectionError as exc:
            fail(str(exc))

    return cast(F, wrapper)  # functools.wraps keeps the signature mypy cannot see kept


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


def notifier(events_addr: str | None, dry_run: str) -> Any:
    """The Notifier of a one-shot verb (None: off, or a dry run), flushed with a short
    bounded wait when the command ends."""
    if not events_addr or dry_run != "none":
        return None
    from ..report.notify import Notifier

    made = Notifier(events_addr)
    click.get_current_context().call_on_close(made.close)
    return made
