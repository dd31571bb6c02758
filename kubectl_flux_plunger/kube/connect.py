"""Connecting to the cluster the command line names, as the one-shot verbs and ``serve`` both
do: the file ``--kubeconfig`` names must exist, the kubeconfig files are read once
(:class:`Connection`), kubectl's override flags are applied over them, and every problem is
a :class:`ConnectError` — the text of one ``error:`` line, exit 1 (the click layer prints
it; serve's start-up refuses with it).

The override flags are read through a callable, when the connection reaches them: the click
layer raises their usage errors, which have always come after the kubeconfig file check."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .client import Kube
from .config import Kubeconfig, Overrides, context_namespace, parse_kubeconfig
from .errors import ConfigError

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's is 3.11+; annotations only

    from .transport import KubeOptions


class ConnectError(Exception):
    """The connection flags name no usable cluster: the one line that says why."""


class Connection:
    """The cluster ``--kubeconfig`` and ``--context`` name.  The kubeconfig files are read
    the first time something needs them, once: each client made here (each with its own
    credentials and connections) and the context's namespace come from that one reading."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        self.kubeconfig, self.context = kubeconfig, context

    @functools.cached_property
    def files(self) -> Kubeconfig:
        return parse_kubeconfig(self.kubeconfig)

    def context_namespace(self) -> str | None:
        """The namespace of the context in use, None when it sets none (or there is no
        kubeconfig).  An unknown ``--context`` is a :class:`ConfigError`."""
        return context_namespace(self.files, self.context)

    def client(self, overrides: Overrides, **kwargs: Unpack[KubeOptions]) -> Kube:
        """A new client, kubectl's override flags applied."""
        try:
            return Kube.from_kubeconfig(self.files, self.context, overrides, **kwargs)
        except ConfigError as exc:
            raise ConnectError(str(exc)) from None


def open_connection(kubeconfig: str | None, context: str | None) -> Connection:
    """The cluster the flags name, once the file ``--kubeconfig`` names is known to exist
    (nothing is read yet)."""
    if kubeconfig and not os.path.exists(kubeconfig):
        raise ConnectError(f"stat {kubeconfig}: no such file or directory")
    return Connection(kubeconfig, context)


def connect(
    kubeconfig: str | None,
    context: str | None,
    overrides: Callable[[], Overrides],
    **kwargs: Unpack[KubeOptions],
) -> Kube:
    """The client of a one-shot verb: the kubeconfig file check, the override flags, the
    certificate authority they name checked to be a file, the client."""
    connection = open_connection(kubeconfig, context)
    o = overrides()
    if o.certificate_authority and not os.path.isfile(o.certificate_authority):
        raise ConnectError(
            f"unable to read certificate-authority {o.certificate_authority}: "
            "no such file or directory"
        )
    return connection.client(o, **kwargs)
