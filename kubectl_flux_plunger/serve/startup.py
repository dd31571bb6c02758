"""``serve``'s start-up, top to bottom, from the checked settings to the exit status.

The click layer (``cli/serve.py``) parses the flags into a :class:`ServeConfig`, which
refuses what cannot work whatever the environment, and calls :func:`start`.  Then, in this
order:

1. the file ``--kubeconfig`` names exists (the verbs' check:
   :func:`~kubectl_flux_plunger.kube.connect.open_connection`);
2. the Lease: its name (``--leader-election-id``, a DNS subdomain) and namespace
   (``--leader-election-namespace`` as given, else the pod's own namespace, else the
   kubeconfig context's: :func:`~kubectl_flux_plunger.kube.namespace_default`; with neither,
   serve refuses rather than guess);
3. ``/metrics`` needs prometheus-client (the optional ``serve`` extra);
4. the log lines' format and level;
5. kubectl's override flags (their usage errors come from the click layer), then the API
   clients — the workers' and, with leader election, the Lease's own, so that a renewal never
   waits behind a slow request — both made from one reading of the kubeconfig files
   (:class:`~kubectl_flux_plunger.kube.connect.Connection`);
6. the :class:`~.controller.Controller` is built and runs (:func:`run`): SIGTERM/SIGINT
   handlers; ``Controller.start`` opens /metrics and the probes, logs "starting flux-plunger
   controller" and starts the watch and the leader election (or the workers); the main
   thread waits for a signal or the loss of the Lease; the shutdown sequence gives the exit
   status.

Every refusal is a :class:`Refused`: one line and an exit status, which the click layer
prints as its ``error:`` line: 2 for the Lease's name and namespace (usage), 1 for the rest
— a configuration problem, a bind address in use, an API failure at start-up.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from collections.abc import Callable

from ..core.objects import lease_name_problem
from ..kube import ConfigError, Kube, KubeError, Overrides, namespace_default
from ..kube.connect import ConnectError, Connection, open_connection
from . import logs
from .controller import Controller
from .health import BindError
from .options import ServeConfig

DEFAULT_REQUEST_TIMEOUT = 30.0
FAILURE, USAGE = 1, 2  # exit statuses of a refusal


class Refused(Exception):
    """serve does not start (or stops at start-up): one line, and the exit status."""

    def __init__(self, message: str, code: int = FAILURE) -> None:
        super().__init__(message)
        self.code = code


def start(
    cfg: ServeConfig,
    *,
    kubeconfig: str | None,
    context: str | None,
    overrides: Callable[[], Overrides],
) -> int:
    """Start serve (module doc), run it, and return its exit status; raises
    :class:`Refused`.  ``cfg.lease_namespace`` is ``--leader-election-namespace`` as given;
    ``overrides`` reads kubectl's override flags."""
    try:
        connection = open_connection(kubeconfig, context)  # 1.
    except ConnectError as exc:
        raise Refused(str(exc)) from None
    cfg = _lease(cfg, connection)  # 2.
    _check_metrics_extra(cfg)  # 3.
    logs.setup(cfg.log_format, cfg.log_level.lower())  # 4.
    try:
        kube, lease_kube = _clients(cfg, connection, overrides())  # 5.
    except ConnectError as exc:
        raise Refused(str(exc)) from None
    try:
        return run(kube, cfg, lease_kube=lease_kube)  # 6.
    except (BindError, KubeError) as exc:
        raise Refused(str(exc)) from None


def _lease(cfg: ServeConfig, connection: Connection) -> ServeConfig:
    """``cfg`` with the Lease's namespace resolved, once its name and namespace are known to
    be usable (nothing to resolve without leader election)."""
    if not cfg.leader_elect:
        return cfg
    problem = lease_name_problem(cfg.lease_name)
    if problem:
        raise Refused(f"--leader-election-id {cfg.lease_name!r}: {problem}", USAGE)
    given = cfg.lease_namespace
    if given is not None and not given.strip():
        raise Refused("--leader-election-namespace must not be empty", USAGE)
    namespace = given or _default_lease_namespace(connection)
    if not namespace:
        raise Refused(
            "cannot tell the namespace of the leader-election Lease: not running in a "
            "cluster and the kubeconfig context sets no namespace; pass "
            "--leader-election-namespace NS (or --no-leader-elect)",
            USAGE,
        )
    return dataclasses.replace(cfg, lease_namespace=namespace)


def _default_lease_namespace(connection: Connection) -> str | None:
    """The pod's namespace, else the kubeconfig context's, else None."""
    try:
        return namespace_default(connection.context_namespace, pod_first=True, fallback=None)
    except ConfigError:  # an unknown --context: no namespace from it
        return None


def _check_metrics_extra(cfg: ServeConfig) -> None:
    if cfg.metrics_addr is None:
        return
    try:
        import prometheus_client  # noqa: F401 - the optional "serve" extra
    except ImportError:
        raise Refused(
            "--metrics-bind-address needs prometheus-client: install "
            "kubectl-flux-plunger[serve], or pass --metrics-bind-address 0"
        ) from None


def _clients(
    cfg: ServeConfig, connection: Connection, overrides: Overrides
) -> tuple[Kube, Kube | None]:
    """The workers' client and, with leader election, the Lease's: one reading of the
    kubeconfig files, two clients (each its own timeout, credentials and connections)."""
    timeout = cfg.request_timeout or DEFAULT_REQUEST_TIMEOUT
    kube = connection.client(overrides, request_timeout=timeout)
    if not cfg.leader_elect:
        return kube, None
    # the Lease gets its own client: a renewal must never wait behind a slow request
    lease_timeout = max(1.0, min(cfg.retry_period, timeout))
    return kube, connection.client(overrides, request_timeout=lease_timeout)


def run(kube: Kube, cfg: ServeConfig, *, lease_kube: Kube | None = None) -> int:
    """Build the controller and run it until it stops; returns the exit status."""
    controller = Controller(kube, cfg, lease_kube=lease_kube)
    signal.signal(signal.SIGTERM, controller.handle_signal)
    signal.signal(signal.SIGINT, controller.handle_signal)
    controller.start()
    controller.wait()
    code = controller.shutdown()
    sys.stderr.flush()
    return code
