"""Results of the one-shot verbs as they happen, and Ctrl-C.

* Result lines (``-o table|wide|name``) are printed as soon as a release is finished, in the
  order of the listing (a line waits only for the releases listed before it), so a long run
  is never silent; JSON/YAML stay one document printed at the end.
* On a terminal, stderr carries a live progress line (``recover: 37/100 done, 16 in
  progress``), rewritten in place and cleared before every result line and at the end.
* The first Ctrl-C stops taking up releases at once; recoveries in flight abort before their
  delete through the executor's ``should_stop`` (the same relinquish path as every other
  exit), the run finishes, and :meth:`Stream.report_left` says what was not done and how to
  lift whatever a fresh read still shows held.  A second Ctrl-C exits at once (status 130)
  after naming the releases that were in flight — the ones that may be left suspended or
  fenced by flux-plunger — and the command that lifts them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import click

INTERRUPTED_EXIT = 130
REDRAW_EVERY = 0.1  # seconds between progress-line redraws


def _by_namespace(keys: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ns, name in keys:
        out.setdefault(ns, []).append(name)
    return out


class Stream:
    """Progress and ordered result lines of one run of a one-shot verb.

    ``line(outcome)`` renders one finished release (None: not shown).  ``started`` may be
    called from any thread; ``finished`` from the thread that prints."""

    def __init__(
        self,
        *,
        verb: str,
        total: int,
        line: Callable[[Any], str | None],
        prog: str,
        tty: bool | None = None,
    ) -> None:
        self.verb, self.total, self.line, self.prog = verb, total, line, prog
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.stop = threading.Event()
        self.interrupts = 0
        self._lock = threading.Lock()
        self._in_flight: dict[int, tuple[str, str]] = {}
        self._at_interrupt: dict[int, tuple[str, str]] = {}
        self._waiting: dict[int, Any] = {}
        self._next = 0
        self._done = 0
        self._drawn = False
        self._drawn_at = 0.0

    # -- called by verbs.recover.run ------------------------------------------------

    def started(self, i: int, hr: dict[str, Any]) -> None:
        md = hr["metadata"]
        with self._lock:
            self._in_flight[i] = (md["namespace"], md["name"])

    def finished(self, i: int, outcome: Any) -> None:
        with self._lock:
            self._in_flight.pop(i, None)
            self._done += 1
        self._waiting[i] = outcome
        while self._next in self._waiting:
            text = self.line(self._waiting.pop(self._next))
            self._next += 1
            if text is not None:
                self._clear()
                click.echo(text)
        self._draw()

    # -- the progress line ------------------------------------------------------------

    def _draw(self, force: bool = False) -> None:
        if not self.tty or self.total < 2:
            return
        now = time.monotonic()
        if not force and self._drawn and now - self._drawn_at < REDRAW_EVERY:
            return
        with self._lock:
            done, busy = self._done, len(self._in_flight)
        state = "stopping" if self.stop.is_set() else f"{busy} in progress"
        click.echo(
            f"\r{self.verb}: {done}/{self.total} done, {state}\x1b[K",
            err=True,
            nl=False,
            color=True,
        )
        self._drawn, self._drawn_at = True, now

    def _clear(self) -> None:
        if self._drawn:
            click.echo("\r\x1b[K", err=True, nl=False, color=True)
            self._drawn = False

    def close(self) -> None:
        self._clear()

    # -- Ctrl-C -----------------------------------------------------------------------

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """SIGINT handled by :meth:`_on_sigint` for the duration (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:  # noqa: ARG002
        self.interrupts += 1
        with self._lock:
            in_flight = dict(self._in_flight)
        self._clear()
        if self.interrupts == 1:
            self._at_interrupt = in_flight
            self.stop.set()
            click.echo(
                f"\ninterrupted: starting no more HelmReleases; the {len(in_flight)} in "
                "progress stop before deleting anything and lift flux-plunger's "
                "suspension (Ctrl-C again to exit at once)",
                err=True,
            )
            return
        click.echo("\ninterrupted again: exiting now", err=True)
        keys = sorted(in_flight.values())
        if keys:
            click.echo(
                "these HelmReleases were in progress and may be left suspended or "
                "fenced by flux-plunger:",
                err=True,
            )
            for ns, name in keys:
                click.echo(f"  -n {ns} helmrelease.helm.toolkit.fluxcd.io/{name}", err=True)
            click.echo("lift what is left with:", err=True)
            for ns, names in _by_namespace(keys).items():
                click.echo(f"  {self.prog} resume-owned -n {ns} {' '.join(names)}", err=True)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(INTERRUPTED_EXIT)

    def interrupted_in_flight(self) -> list[tuple[str, str]]:
        """The releases that were in progress when the first Ctrl-C came."""
        return sorted(self._at_interrupt.values())

    def report_left(self, not_done: list[tuple[str, str]], held: list[tuple[str, str]]) -> None:
        """After an interrupted run: what was not done, and what is still held by us."""
        if not_done:
            click.echo(
                f"interrupted: {len(not_done)} HelmRelease(s) not done; run the same "
                "command again to continue",
                err=True,
            )
        if held:
            click.echo("still suspended or fenced by flux-plunger (a fresh read):", err=True)
            for ns, name in held:
                click.echo(f"  -n {ns} helmrelease.helm.toolkit.fluxcd.io/{name}", err=True)
            click.echo("lift it with:", err=True)
            for ns, names in _by_namespace(held).items():
                click.echo(f"  {self.prog} resume-owned -n {ns} {' '.join(names)}", err=True)
        elif self._at_interrupt:
            click.echo("nothing is left suspended or fenced by flux-plunger", err=True)
