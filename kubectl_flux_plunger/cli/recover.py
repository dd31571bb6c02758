"""``recover``: recover stuck HelmReleases once, with the decision table the controller runs."""

from __future__ import annotations

import click

from .errors import api_errors
from .examples import Command
from .options import (
    concurrency_option,
    connection_options,
    default_service_account_option,
    dry_run_option,
    duration_option,
    events_addr_option,
    lease_options,
    result_output_option,
    selection_options,
)
from .table import run_table
from .target import Target, pass_target


@click.command("recover", cls=Command)
@connection_options
@selection_options
@result_output_option
@dry_run_option
@concurrency_option(
    "--concurrency",
    default=8,
    show_default=True,
    help="Releases handled at once (each release is handled serially); also the "
    "most API requests in flight at any moment.",
)
@duration_option(
    "--handshake-timeout",
    default="30s",
    show_default=True,
    help="How long to wait for helm-controller to observe the suspension before deleting.",
)
@click.option(
    "--backup-dir",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Write each Secret to DIR (mode 0600) before deleting it; if the write fails "
    "nothing is deleted. Undo with `restore FILE`.",
)
@default_service_account_option
@lease_options
@events_addr_option
@api_errors
@pass_target
def recover(
    target: Target,
    output: str,
    dry_run: str,
    concurrency: int,
    handshake_timeout: float,
    backup_dir: str | None,
    default_service_account: str | None,
    lease_namespace: str | None,
    force: bool,
    lease_name: str | None,
    events_addr: str | None,
) -> None:
    """Recover stuck HelmReleases once (the same decision table the controller runs)."""
    from ..verbs.controller_check import LeaseFlags
    from ..verbs.recover import Once

    once = Once(
        None,
        dry_run,
        concurrency,
        handshake_timeout,
        backup_dir,
        LeaseFlags(lease_namespace, lease_name, force),
        default_service_account=default_service_account,
    )
    run_table("recover", target, once, output, events_addr)
