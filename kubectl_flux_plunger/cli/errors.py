"""How a command ends and what it says on stderr besides its results: the exit codes
(``Exit``), one ``error:`` line and exit (``fail``), one ``warning:`` line (``warn``), and
API failures or a verb's unusable flag as such lines (``api_errors``)."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar, cast

import click

F = TypeVar("F", bound=Callable[..., Any])


class Exit(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    INTERRUPTED = 130


def fail(message: str, code: Exit = Exit.FAILURE) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(int(code))


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def api_errors(fn: F) -> F:
    """Turn API failures into one ``error:`` line and exit 1, and a lease flag the
    running-controller check cannot use into a usage error."""

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
        except ValueError as exc:
            # imported only then: the check's module loads the executor
            from ..verbs.controller_check import BadFlag

            if not isinstance(exc, BadFlag):
                raise
            raise click.UsageError(str(exc)) from None

    return cast(F, wrapper)  # functools.wraps keeps the signature mypy cannot see kept
