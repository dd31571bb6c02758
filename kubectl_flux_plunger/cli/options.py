"""Flag types and the kubectl/flux connection flags every cluster verb shares.

The connection flags beyond ``--kubeconfig``/``--context``/``--request-timeout`` are not
passed to the commands as arguments: their callbacks collect them in ``ctx.meta`` and
:func:`overrides` turns them into :class:`~kubectl_flux_plunger.kube.Overrides`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

# Go's time.ParseDuration grammar (what kubectl's and flux's duration flags accept)
_GO_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+")


def parse_duration(value: str | float | int | None, *, flag: str) -> float | None:
    """kubectl/Go style durations ("30s", "1m30s", "500ms"), or bare seconds ("10")."""
    if value is None or isinstance(value, (int, float)):
        return value
    text = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    if not _GO_DURATION.fullmatch(text):
        raise click.BadParameter(
            f"invalid duration {value!r} (use e.g. 30s, 1m, 500ms)", param_hint=flag
        )
    import durationpy

    return float(durationpy.from_str(text).total_seconds())


class Duration(click.ParamType):  # type: ignore[type-arg,unused-ignore]  # generic from click 8.2
    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float | None:
        try:
            return parse_duration(value, flag=param.opts[-1] if param else "duration")
        except click.BadParameter as exc:
            self.fail(exc.message, param, ctx)


DURATION = Duration()

META = "flux_plunger.overrides"


def _store(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value not in (None, (), False):
            ctx.meta.setdefault(META, {})[key] = value
        return value

    return callback


# (flag, key, help, kwargs): kubectl's global connection flags (flux has the same ones)
_OVERRIDE_FLAGS: list[tuple[str, str, str, dict[str, Any]]] = [
    (
        "--server",
        "server",
        "The address and port of the Kubernetes API server.",
        {"metavar": "URL"},
    ),
    (
        "--token",
        "token",
        "Bearer token for authentication to the API server.",
        {"metavar": "TOKEN"},
    ),
    ("--user", "user", "The name of the kubeconfig user to use.", {"metavar": "NAME"}),
    ("--cluster", "cluster", "The name of the kubeconfig cluster to use.", {"metavar": "NAME"}),
    (
        "--certificate-authority",
        "certificate_authority",
        "Path to a cert file for the certificate authority.",
        {"metavar": "PATH", "type": click.Path(dir_okay=False)},
    ),
    (
        "--client-certificate",
        "client_certificate",
        "Path to a client certificate file for TLS.",
        {"metavar": "PATH", "type": click.Path(dir_okay=False)},
    ),
    (
        "--client-key",
        "client_key",
        "Path to a client key file for TLS.",
        {"metavar": "PATH", "type": click.Path(dir_okay=False)},
    ),
    (
        "--tls-server-name",
        "tls_server_name",
        "Server name to use for server certificate validation.",
        {"metavar": "NAME"},
    ),
    (
        "--insecure-skip-tls-verify",
        "insecure_skip_tls_verify",
        "Do not check the server's certificate (insecure).",
        {"is_flag": True},
    ),
    ("--as", "impersonate", "Username to impersonate for the operation.", {"metavar": "USER"}),
    (
        "--as-group",
        "impersonate_groups",
        "Group to impersonate for the operation (repeat for more groups).",
        {"metavar": "GROUP", "multiple": True},
    ),
    ("--as-uid", "impersonate_uid", "UID to impersonate for the operation.", {"metavar": "UID"}),
]

OVERRIDE_FLAG_NAMES = {flag for flag, *_ in _OVERRIDE_FLAGS}


def override_options(f: F) -> F:
    for flag, key, help_text, kwargs in reversed(_OVERRIDE_FLAGS):
        f = click.option(
            flag,
            key,
            help=help_text,
            expose_value=False,
            is_eager=True,
            callback=_store(key),
            **kwargs,
        )(f)
    return f


def overrides(ctx: click.Context | None = None) -> Any:
    """The :class:`~kubectl_flux_plunger.kube.Overrides` of the current command line."""
    from ..kube import Overrides

    ctx = ctx or click.get_current_context()
    values = dict(ctx.meta.get(META, {}))
    if values.get("certificate_authority") and values.get("insecure_skip_tls_verify"):
        raise click.UsageError(
            "specifying a root certificates file with the insecure flag is not allowed"
        )
    if (values.get("impersonate_groups") or values.get("impersonate_uid")) and not values.get(
        "impersonate"
    ):
        raise click.UsageError(
            "requesting uid or groups without impersonating a user is not "
            "allowed (--as-group and --as-uid need --as)"
        )
    if "impersonate_groups" in values:
        values["impersonate_groups"] = tuple(values["impersonate_groups"])
    return Overrides(**values)


def check_selector(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``-l``: parsed here, at flag parsing, so a bad selector is one usage error (exit 2)
    before any request.  The text is kept as written (the apiserver parses the same)."""
    if value is None or not value.strip() or ctx.resilient_parsing:
        return value  # empty: the command's own rule; completion: no errors while typing
    from ..selector import SelectorError, parse

    try:
        return parse(value).text
    except SelectorError as exc:
        raise click.UsageError(str(exc), ctx) from None


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


def lease_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a Lease (a DNS subdomain), or None."""
    if not name:
        return "must not be empty"
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        return (
            "a Lease name must be a DNS subdomain: lower-case alphanumerics, '-' and '.', "
            "starting and ending with an alphanumeric, at most 253 characters"
        )
    return None
