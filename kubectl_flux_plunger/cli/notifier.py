"""The Notifier of the one-shot writing verbs (``--events-addr``), closed when the command
ends."""

from __future__ import annotations

from typing import Any

import click


def notifier(events_addr: str | None, dry_run: str) -> Any:
    """The Notifier of a one-shot verb (None: off, or a dry run), flushed with a short
    bounded wait when the command ends."""
    if not events_addr or dry_run != "none":
        return None
    from ..report.notify import Notifier

    made = Notifier(events_addr)
    click.get_current_context().call_on_close(made.close)
    return made
