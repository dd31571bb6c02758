"""The connection and selection flags of a verb packed into one value (``Target``), and the
decorator that hands them to the command so (``pass_target``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


class Target(NamedTuple):
    """The connection and selection flags of a verb (``connection_options`` and
    ``selection_options``), as one value."""

    kubeconfig: str | None
    kube_context: str | None
    request_timeout: float | None
    namespace: str | None = None
    all_namespaces: bool = False
    selector: str | None = None
    names: tuple[str, ...] = ()


def pass_target(fn: F) -> F:
    """Hand the command its connection and selection flags as one ``Target`` (the first
    argument) instead of seven."""

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        target = Target(**{field: kwargs.pop(field) for field in Target._fields})
        return fn(target, **kwargs)

    return cast(F, wrapper)  # functools.wraps keeps the signature mypy cannot see kept
