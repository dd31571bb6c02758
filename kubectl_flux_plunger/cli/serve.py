"""``serve``: the flags, parsed into one ``ServeConfig`` (:mod:`kubectl_flux_plunger.serve.options`,
which refuses what cannot work), handed to serve's start-up
(:func:`kubectl_flux_plunger.serve.startup.start`), whose refusals are one ``error:`` line."""

from __future__ import annotations

import click

from .examples import Command
from .options import (
    check_selector,
    concurrency_option,
    connection_options,
    default_service_account_option,
    duration_option,
    overrides,
)
from .session import Exit, fail


@click.command("serve", cls=Command, context_settings={"show_default": True})
@connection_options
@click.option(
    "-n",
    "--namespace",
    metavar="NS",
    help="Watch HelmReleases in this namespace only.  [default: all namespaces]",
)
@click.option(
    "-l",
    "--selector",
    metavar="SELECTOR",
    callback=check_selector,
    help="Label selector of the HelmReleases to watch (e.g. for sharding: "
    "sharding.fluxcd.io/key=shard1, or '!sharding.fluxcd.io/key' for the main instance).",
)
@concurrency_option(
    "--workers",
    default=2,
    help="Releases processed at once (each release serially).",
)
@click.option(
    "--leader-elect/--no-leader-elect",
    default=True,
    help="Hold the Lease flux-plunger.cozystack.io; only the leader acts.",
)
@click.option(
    "--leader-election-id",
    metavar="NAME",
    default="flux-plunger.cozystack.io",
    help="Name of the Lease (as controller-runtime's flag): give each install its own, e.g. "
    "one per shard; the default is the on-cluster contract with the reference controller.",
)
@click.option(
    "--leader-election-namespace",
    metavar="NS",
    help="Namespace of the Lease.  [default: the in-cluster namespace, else the "
    "kubeconfig context's]",
)
@duration_option(
    "--lease-duration",
    default="35s",
    help="How long followers wait after the last renewal before taking over.",
)
@duration_option(
    "--renew-deadline",
    default="30s",
    help="How long the leader keeps acting without a successful renewal.",
)
@duration_option(
    "--retry-period",
    default="5s",
    help="Interval between acquire/renew attempts.  The three defaults are Flux's controllers'.",
)
@duration_option(
    "--shutdown-drain-timeout",
    default="60s",
    help="Bound of the drain on shutdown (releasing suspensions and fences).",
)
@duration_option(
    "--shutdown-stop-timeout",
    default="10s",
    help="Bound of stopping new work on shutdown (in-flight passes finishing).",
)
@duration_option(
    "--termination-grace-period",
    default=None,
    help="The pod's terminationGracePeriodSeconds; start-up is refused unless "
    "stop timeout + drain timeout + 5s fit in it.",
)
@duration_option(
    "--resync-period",
    default="10m",
    help="Interval of the catch-all that queues every candidate release (stuck, or held "
    "by flux-plunger, as last seen) again for a fresh read; the watch keeps running.",
)
@duration_option(
    "--fence-recheck-interval",
    default="60s",
    help="Re-check interval of a delete held by the uninstall fence.",
)
@duration_option(
    "--fence-held-warn-after",
    default="10m",
    help="Emit the UninstallFenceHeld Warning once a delete is held this long.",
)
@duration_option(
    "--handshake-timeout",
    default="30s",
    help="How long to wait for helm-controller to observe the suspension before "
    "deleting a revision.",
)
@click.option(
    "--max-failed-recoveries",
    type=click.IntRange(1, 100),
    default=3,
    help="Give a release up (state given-up, a RecoverySkipped Warning) after this many "
    "recoveries in a row after which it got stuck again; never more than its "
    "install/upgrade remediation retries where set.",
)
@duration_option(
    "--recovery-backoff",
    default="30s",
    help="Wait before the recovery after a failed one, doubling after each failed one.",
)
@duration_option(
    "--scope-overlap-check-interval",
    default="60s",
    help="While leading, how often to compare this instance's scope (--namespace, "
    "--selector) with every other running flux-plunger's Lease in the Lease namespace (one "
    "LIST of Leases); an overlap is a Warning Event ScopeOverlap on the Lease, a metric and "
    "a log line.",
)
@click.option(
    "--backup-secret-namespace",
    metavar="NS",
    help="Keep a copy of every deleted Secret as a Secret in NS (the controller's "
    "own namespace), for `restore`.  [default: off]",
)
@duration_option(
    "--backup-retention",
    default="168h",
    help="Prune backup Secrets older than this when a new one is written.",
)
@default_service_account_option
@click.option(
    "--events-addr",
    metavar="URL",
    default="",
    show_default=False,
    help="POST each Event flux-plunger records as a Flux event to notification-controller "
    "at URL (Flux's is http://notification-controller.flux-system.svc.cluster.local./), "
    "so Alerts on HelmReleases see recoveries and failures.  [default: off]",
)
@click.option(
    "--metrics-bind-address",
    default=":8080",
    metavar="ADDR",
    help="Address of /metrics (0 disables).",
)
@click.option(
    "--health-probe-bind-address",
    default=":8081",
    metavar="ADDR",
    help="Address of /healthz and /readyz (0 disables).",
)
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", help="Log line format."
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    help="Minimum level logged.",
)
def serve(
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    namespace: str | None,
    selector: str | None,
    workers: int,
    leader_elect: bool,
    leader_election_id: str,
    leader_election_namespace: str | None,
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    shutdown_drain_timeout: float,
    shutdown_stop_timeout: float,
    termination_grace_period: float | None,
    resync_period: float,
    fence_recheck_interval: float,
    fence_held_warn_after: float,
    handshake_timeout: float,
    max_failed_recoveries: int,
    recovery_backoff: float,
    scope_overlap_check_interval: float,
    backup_secret_namespace: str | None,
    backup_retention: float,
    default_service_account: str | None,
    events_addr: str,
    metrics_bind_address: str,
    health_probe_bind_address: str,
    log_format: str,
    log_level: str,
) -> None:
    """Run the controller: watch HelmReleases and recover stuck ones continuously.

    The same decision table as `recover`, driven by a list+watch, with leader election on
    the Lease flux-plunger.cozystack.io (--leader-election-id: one per shard). On SIGTERM it
    stops new work, drains (lifts every suspension and uninstall fence it holds, carrying
    deletes through the uninstall) and gives the Lease up; a second signal exits at once."""
    from ..serve.options import Invalid, ServeConfig

    try:
        cfg = ServeConfig(
            namespace=namespace,
            selector=selector,
            request_timeout=request_timeout,
            workers=workers,
            leader_elect=leader_elect,
            lease_namespace=leader_election_namespace,
            lease_name=leader_election_id,
            lease_duration=lease_duration,
            renew_deadline=renew_deadline,
            retry_period=retry_period,
            drain_timeout=shutdown_drain_timeout,
            stop_timeout=shutdown_stop_timeout,
            termination_grace_period=termination_grace_period,
            resync_period=resync_period,
            fence_recheck=fence_recheck_interval,
            fence_warn_after=fence_held_warn_after,
            handshake_timeout=handshake_timeout,
            max_failed_recoveries=max_failed_recoveries,
            recovery_backoff=recovery_backoff,
            overlap_check=scope_overlap_check_interval,
            backup_namespace=backup_secret_namespace,
            backup_retention=backup_retention,
            default_service_account=default_service_account,
            events_addr=events_addr or None,
            metrics_bind_address=metrics_bind_address,
            health_probe_bind_address=health_probe_bind_address,
            log_format=log_format,
            log_level=log_level,
        )
    except Invalid as exc:
        fail(str(exc), Exit.USAGE)
    from ..serve.startup import Refused, start

    try:
        code = start(cfg, kubeconfig=kubeconfig, context=kube_context, overrides=overrides)
    except Refused as exc:
        fail(str(exc), Exit(exc.code))
    raise SystemExit(code)
