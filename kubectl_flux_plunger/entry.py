"""The process entry point of ``kubectl-flux_plunger`` and ``flux-plunger``.

``kubectl flux-plunger --help`` and ``version --client`` are what people type most and
what completion/packaging checks run; through kubectl they used to cost twice the CPU of
``kubectl version --client``, most of it importing click (~30 ms) to print fixed text.
This module answers exactly these invocations with no import beyond the standard
library's ``os``/``sys``/``zlib``:

* ``--help`` / ``-h`` — click's own rendering of the top-level help, captured ahead of time by
  ``python -m kubectl_flux_plunger.cli.prerender`` into :mod:`._prerendered` for both program
  names and the two widths click produces for a pipe or 80-column terminal and for a
  terminal of 100 columns or more.  The capture carries a fingerprint of the sources the
  text comes from (``cli/*.py``, the version): when those change and nobody re-ran the
  generator, the fingerprint differs and click renders the help as before — stale text is
  never printed.  ``tests/unit/test_startup.py`` fails until it is regenerated;
* ``--version`` and ``version --client`` (text output), captured the same way; the frozen
  binary adds the line ``Runs On: ...`` (:func:`.frozen.runs_on`) to the latter.

Everything else — other widths, completion requests, any other argument — goes to the click
CLI (:func:`kubectl_flux_plunger.cli.main`) unchanged.  Called through a link named
``kubectl_complete-flux_plunger`` (kubectl's completion helper), the arguments are completed:
``__complete`` is put before them.
"""

from __future__ import annotations

import os
import sys

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_COMPLETE_VARS = ("_FLUX_PLUNGER_COMPLETE", "_KUBECTL_FLUX_PLUNGER_COMPLETE")
_HELP_ARGS = (["--help"], ["-h"])
_VERSION_ARGS = (["--version"], ["version", "--client"])
WIDE = 100  # click's max_content_width: every terminal at least this wide renders alike


def prog_name(argv0: str | None = None) -> str:
    """The name users typed: ``flux plunger`` for the Flux plugin, else ``kubectl flux-plunger``."""
    base = os.path.basename(sys.argv[0] if argv0 is None else argv0 or "")
    return "flux plunger" if base.startswith("flux-") else "kubectl flux-plunger"


def fingerprint() -> str:
    """A checksum of the files the top-level help and version text are made from."""
    import zlib

    crc = 0
    names = [
        os.path.join("cli", n)
        for n in sorted(os.listdir(os.path.join(_PACKAGE, "cli")))
        if n.endswith(".py")
    ]
    for rel in ["__init__.py", os.path.join("verbs", "version.py"), *names]:
        with open(os.path.join(_PACKAGE, rel), "rb") as fh:
            crc = zlib.crc32(rel.encode() + b"\0" + fh.read(), crc)
    return f"{crc:08x}"


def columns() -> int:
    """The terminal width exactly as ``shutil.get_terminal_size`` (what click uses) finds it,
    without importing shutil."""
    try:
        cols = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        cols = 0
    if cols <= 0:
        try:
            cols = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            cols = 0
    return cols if cols > 0 else 80


def key(args: list[str], prog: str, cols: int) -> str:
    """The key of a pre-rendered answer: the help depends on program name and width."""
    if args in _HELP_ARGS:
        return f"--help|{prog}|{min(cols, WIDE)}"
    return " ".join(args)


def fast_answer(args: list[str]) -> str | None:
    """The text to print for ``args`` without click, or None to run the CLI."""
    if args not in _HELP_ARGS and args not in _VERSION_ARGS:
        return None
    if any(os.environ.get(v) for v in _COMPLETE_VARS):
        return None
    try:
        from . import _prerendered
    except ImportError:
        return None
    text = _prerendered.TEXT.get(key(args, prog_name(), columns()))
    if text is None or fingerprint() != _prerendered.FINGERPRINT:
        return None
    floor = None
    if args == ["version", "--client"] and hasattr(sys, "_MEIPASS"):  # the frozen binary
        from .frozen import runs_on

        floor = runs_on()
    return f"{text}\nRuns On: {floor}" if floor else text


def completion_link(argv0: str | None = None) -> bool:
    """Called as ``kubectl_complete-flux_plunger`` (a link to the executable, what kubectl
    runs to complete ``kubectl flux-plunger …``): the arguments are words to complete."""
    base = os.path.basename(sys.argv[0] if argv0 is None else argv0 or "")
    return base.startswith("kubectl_complete-")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if argv is None and completion_link():
        args = ["__complete", *args]
        argv = args
    text = fast_answer(args)
    if text is None:
        from .cli import main as cli_main

        return cli_main(argv)
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`| head`): no traceback, and no second error at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0
