"""``resume-owned``: lift the suspensions flux-plunger itself owns, with their fences."""

from __future__ import annotations

import click

from .errors import api_errors
from .examples import Command
from .options import (
    connection_options,
    dry_run_option,
    events_addr_option,
    lease_options,
    result_output_option,
    selection_options,
)
from .table import run_table
from .target import Target, pass_target


@click.command("resume-owned", cls=Command)
@connection_options
@selection_options
@result_output_option
@dry_run_option
@lease_options
@events_addr_option
@api_errors
@pass_target
def resume_owned(
    target: Target,
    output: str,
    dry_run: str,
    lease_namespace: str | None,
    force: bool,
    lease_name: str | None,
    events_addr: str | None,
) -> None:
    """Lift suspensions flux-plunger itself owns (e.g. left by a crash), with their fences.

    Never touches a suspension another manager set."""
    from ..verbs.controller_check import LeaseFlags
    from ..verbs.recover import RESUME_ROWS, Once

    once = Once(RESUME_ROWS, dry_run, lease=LeaseFlags(lease_namespace, lease_name, force))
    run_table("resume-owned", target, once, output, events_addr)
