"""``serve``'s configuration as one typed object that checks itself (as controller-runtime's
``Options``, or client-go's ``LeaderElectionConfig``).

:class:`ServeConfig` holds every setting of the controller; its constructor refuses the ones
that cannot work — empty names, timings that contradict each other (the Lease's, the
shutdown's against the pod's grace period), a bad ``--events-addr`` or bind address — by
raising :class:`Invalid`, whose one-line message names the flag (the click layer prints it as
the usage error).  The parts the pieces of the controller need are small frozen values cut
from it: :class:`LeaseConfig` (``leader.LeaderElector``), :class:`DrainOptions`
(``drain.Drainer``) and :class:`~kubectl_flux_plunger.core.scope.Scope` (``watch.Watcher``).

What needs the environment is checked by serve's start-up (:mod:`.startup`): that the
kubeconfig exists, the Lease's name and namespace (resolved in-cluster or from the
kubeconfig), prometheus-client being installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING

from ..core import constants as C
from ..core.scope import Scope

if TYPE_CHECKING:
    from ..executor.backup import Backup

DRAIN_MARGIN = 5.0  # seconds kept between the end of the drain and the kubelet's SIGKILL
JITTER = 1.2  # a retry waits retry_period times up to this (leader.py)
Address = tuple[str, int]


class Invalid(ValueError):
    """A setting ``serve`` refuses to start with: a usage error, one line."""


@dataclass(frozen=True)
class LeaseTimings:
    """The leader election's three durations (seconds), as client-go names them.  The
    defaults are Flux's controllers' (helm-controller's among them: fluxcd/pkg
    ``runtime/leaderelection``), not controller-runtime's 15/10/2: a renewal every 5 s,
    not every 2 s, which is most of what serve costs the apiserver after start-up."""

    lease_duration: float = 35.0
    renew_deadline: float = 30.0
    retry_period: float = 5.0

    def problem(self) -> str | None:
        """Why a leader could not work with these, or None."""
        lease, renew, retry = self.lease_duration, self.renew_deadline, self.retry_period
        if renew >= lease:
            return (
                f"--renew-deadline ({renew:g}s) must be shorter than --lease-duration "
                f"({lease:g}s): a leader must give up acting before its Lease can expire"
            )
        if retry * JITTER > renew:
            return (
                f"--retry-period ({retry:g}s) times 1.2 (jitter) must not exceed "
                f"--renew-deadline ({renew:g}s): there would be no second renewal attempt"
            )
        return None


@dataclass(frozen=True)
class LeaseConfig:
    """What ``LeaderElector`` needs: the Lease, who we are, the timings, and the
    annotations written with every acquire (what this instance watches: sharding)."""

    namespace: str
    name: str
    identity: str
    timings: LeaseTimings = LeaseTimings()
    annotations: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class DrainOptions:
    """What ``Drainer`` needs: the scope it lists (as the watch's) and its poll interval."""

    scope: Scope = field(default_factory=Scope)
    poll: float = 1.0


@dataclass
class ServeConfig:
    """Every setting of ``serve``, checked on construction (:class:`Invalid`).

    ``metrics_bind_address`` / ``health_probe_bind_address``: the flags as typed
    (``:8080``, ``HOST:PORT``, ``0`` = off), parsed into ``metrics_addr`` / ``probe_addr``
    when given; without them those are taken as they are."""

    namespace: str | None = None
    selector: str | None = None
    workers: int = 2
    leader_elect: bool = True
    lease_namespace: str | None = None  # as given; the start-up resolves it (startup.py)
    lease_name: str = C.LEASE_NAME
    lease_duration: float = LeaseTimings.lease_duration
    renew_deadline: float = LeaseTimings.renew_deadline
    retry_period: float = LeaseTimings.retry_period
    drain_timeout: float = 60.0
    stop_timeout: float = 10.0
    resync_period: float = 600.0
    fence_recheck: float = C.FENCE_RECHECK_SECONDS
    fence_warn_after: float = C.FENCE_HELD_WARN_SECONDS
    handshake_timeout: float = 30.0
    # the recovery budget (SPEC §6 "Knowing when to stop"; core/budget.py)
    max_failed_recoveries: int = 3
    recovery_backoff: float = 30.0
    overlap_check: float = 60.0  # while leading: compare our scope with the other Leases'
    metrics_addr: Address | None = ("", 8080)
    probe_addr: Address | None = ("", 8081)
    backoff_base: float = 1.0
    backoff_cap: float = 300.0
    backup: Backup | None = None  # given: used as it is, whatever backup_namespace says
    events_addr: str | None = None  # --events-addr: Flux notifications
    termination_grace_period: float | None = None  # the pod's: the shutdown must fit in it
    request_timeout: float | None = None  # None: startup.DEFAULT_REQUEST_TIMEOUT
    backup_namespace: str | None = None  # --backup-secret-namespace
    default_service_account: str | None = None  # helm-controller's, mirrored (issue 55)
    backup_retention: float = 168 * 3600.0
    log_format: str = "text"
    log_level: str = "info"
    metrics_bind_address: InitVar[str | None] = None
    health_probe_bind_address: InitVar[str | None] = None

    def __post_init__(
        self, metrics_bind_address: str | None, health_probe_bind_address: str | None
    ) -> None:
        # in the order the command line has always reported them: the first one wins
        problem = self._scope_problem() or self.timings_problem() or self._output_problem()
        if problem:
            raise Invalid(problem)
        from .health import parse_bind_address

        try:
            if metrics_bind_address is not None:
                self.metrics_addr = parse_bind_address(
                    metrics_bind_address, "--metrics-bind-address"
                )
            if health_probe_bind_address is not None:
                self.probe_addr = parse_bind_address(
                    health_probe_bind_address, "--health-probe-bind-address"
                )
        except ValueError as exc:
            raise Invalid(str(exc)) from None

    # -- the checks ----------------------------------------------------------------

    def _scope_problem(self) -> str | None:
        if self.namespace is not None and not self.namespace.strip():
            return "--namespace must not be empty"
        if self.selector is not None and not self.selector.strip():
            return "--selector must not be empty"
        if self.request_timeout is not None and self.request_timeout < 0:
            return "--request-timeout must not be negative"
        if self.max_failed_recoveries < 1:
            return "--max-failed-recoveries must be at least 1"
        return None

    def timings_problem(self) -> str | None:
        """The first reason these timings cannot work, or None."""
        positive = [
            ("--shutdown-drain-timeout", self.drain_timeout),
            ("--shutdown-stop-timeout", self.stop_timeout),
            ("--lease-duration", self.lease_duration),
            ("--renew-deadline", self.renew_deadline),
            ("--retry-period", self.retry_period),
            ("--resync-period", self.resync_period),
            ("--fence-recheck-interval", self.fence_recheck),
            ("--fence-held-warn-after", self.fence_warn_after),
            ("--handshake-timeout", self.handshake_timeout),
            ("--recovery-backoff", self.recovery_backoff),
            ("--scope-overlap-check-interval", self.overlap_check),
        ]
        grace = self.termination_grace_period
        if grace is not None:
            positive.append(("--termination-grace-period", grace))
        for flag, value in positive:
            if value <= 0:
                return f"{flag} must be positive (got {value:g}s)"
        if self.leader_elect:
            problem = self.lease_timings.problem()
            if problem:
                return problem
        stop, drain = self.stop_timeout, self.drain_timeout
        if grace is not None and stop + drain + DRAIN_MARGIN > grace:
            return (
                f"--shutdown-stop-timeout ({stop:g}s) + --shutdown-drain-timeout ({drain:g}s) "
                f"+ {DRAIN_MARGIN:g}s margin exceeds --termination-grace-period ({grace:g}s): "
                f"the kubelet would kill the drain; lower the drain timeout to at most "
                f"{max(0.0, grace - stop - DRAIN_MARGIN):g}s or raise the grace period"
            )
        return None

    def _output_problem(self) -> str | None:
        """Where copies and notifications go."""
        if self.backup_namespace is not None and not self.backup_namespace.strip():
            return "--backup-secret-namespace must not be empty"
        if self.backup_retention <= 0:
            return "--backup-retention must be positive"
        if self.events_addr:
            from ..report.notify import validate_address

            try:
                validate_address(self.events_addr)
            except ValueError as exc:
                return f"--events-addr: {exc}"
        return None

    # -- the parts -----------------------------------------------------------------

    @property
    def scope(self) -> Scope:
        return Scope(self.namespace, self.selector)

    @property
    def lease_timings(self) -> LeaseTimings:
        return LeaseTimings(self.lease_duration, self.renew_deadline, self.retry_period)

    def lease(self, identity: str) -> LeaseConfig:
        """The leader election's part; needs ``lease_namespace``."""
        if not self.lease_namespace:
            raise ValueError("leader election needs the Lease's namespace")
        return LeaseConfig(
            self.lease_namespace,
            self.lease_name,
            identity,
            self.lease_timings,
            {
                C.LEASE_SELECTOR_ANNOTATION: self.selector or "",
                C.LEASE_NAMESPACE_ANNOTATION: self.namespace or "",
            },
        )

    @property
    def drain(self) -> DrainOptions:
        return DrainOptions(self.scope, poll=min(1.0, self.fence_recheck))
