"""The flags the verbs share, as decorators (pip-tools' ``options.py``): the flag types, the
kubectl/flux connection flags, the selection, output, dry-run, Lease and notification flags,
and the completion of their values.

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
    from ..core.selector import SelectorError, parse

    try:
        return parse(value).text
    except SelectorError as exc:
        raise click.UsageError(str(exc), ctx) from None


# -- the shared flags, as decorators ------------------------------------------------------

OUTPUTS = click.Choice(["table", "wide", "json", "yaml", "name"])


def duration_option(*decls: str, **kwargs: Any) -> Callable[[F], F]:
    """A Go-style duration flag (``30s``, ``1m30s``, ``500ms``): its value in seconds."""
    return click.option(*decls, type=DURATION, **kwargs)


def concurrency_option(*decls: str, **kwargs: Any) -> Callable[[F], F]:
    """How many releases are handled at once (1 to 64)."""
    return click.option(*decls, type=click.IntRange(1, 64), **kwargs)


def connection_options(f: F) -> F:
    """--kubeconfig, --context, --request-timeout and kubectl's other connection flags."""
    f = override_options(f)
    f = duration_option(
        "--request-timeout",
        default="30s",
        show_default=True,
        help="Time to wait for one API request (0: no timeout).",
    )(f)
    f = click.option(
        "--context",
        "kube_context",
        metavar="NAME",
        shell_complete=complete_contexts,
        help="The kubeconfig context to use.",
    )(f)
    return click.option(
        "--kubeconfig",
        metavar="PATH",
        type=click.Path(dir_okay=False),
        help="Path to the kubeconfig file.",
    )(f)


def namespace_option(**kwargs: Any) -> Callable[[F], F]:
    """-n/--namespace, its value completed from the cluster."""
    return click.option(
        "-n", "--namespace", metavar="NS", shell_complete=complete_namespaces, **kwargs
    )


def selection_options(f: F) -> F:
    """-n, -A, -l, NAME..."""
    f = click.argument("names", nargs=-1, metavar="[NAME]...", shell_complete=complete_releases)(f)
    f = click.option(
        "-l",
        "--selector",
        metavar="SELECTOR",
        callback=check_selector,
        help="Label selector to filter HelmReleases (Kubernetes syntax, e.g. "
        "sharding.fluxcd.io/key=shard1, '!sharding.fluxcd.io/key', 'k in (a,b)').",
    )(f)
    f = click.option(
        "-A", "--all-namespaces", is_flag=True, help="Act on HelmReleases in every namespace."
    )(f)
    return namespace_option(help="Namespace of the HelmReleases (default: the context's).")(f)


def lease_name_option(f: F) -> F:
    """--lease-name (alias --leader-election-id, serve's flag): one more Lease to count."""
    return click.option(
        "--lease-name",
        "--leader-election-id",
        "lease_name",
        metavar="NAME",
        callback=_check_lease_name,
        help="Also count the Lease NAME as a flux-plunger controller's, even without the "
        "scope serve records on its own. Every flux-plunger Lease of the cluster is read "
        "anyway (one LIST); this never narrows that.",
    )(f)


def _check_lease_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or ctx.resilient_parsing:
        return value
    from ..core.objects import lease_name_problem

    problem = lease_name_problem(value)
    if problem:
        raise click.UsageError(f"--lease-name {value!r}: {problem}", ctx)
    return value


def lease_options(f: F) -> F:
    """--lease-namespace, --lease-name and --force: the running-controller check of the
    verbs that write."""
    return _lease_options(f, force=True)


def lease_scope_options(f: F) -> F:
    """--lease-namespace and --lease-name, for a verb with a --force of its own (restore)."""
    return _lease_options(f, force=False)


def _lease_options(f: F, *, force: bool) -> F:
    f = lease_name_option(f)
    if force:
        f = click.option(
            "--force",
            is_flag=True,
            help="Act also on releases a running flux-plunger controller covers (no Lease "
            "is read).",
        )(f)
    return click.option(
        "--lease-namespace",
        metavar="NS",
        help="Where to look for the flux-plunger controllers' Leases when the Leases of the "
        "cluster may not be listed (with the releases' namespace); it never narrows the "
        "check: a release a running controller covers, wherever its Lease is, is left to it "
        "[default: the pod's namespace in a cluster, else flux-plunger].",
    )(f)


def _output(f: F) -> F:
    return click.option(
        "-o",
        "--output",
        type=OUTPUTS,
        default="table",
        show_default=True,
        help="Output format (json/yaml: flux-plunger.cozystack.io/v1alpha1, "
        "see docs/output-schema.json).",
    )(f)


def output_option(f: F) -> F:
    """-o, and --no-headers for a verb whose table output has a header line (status)."""
    f = click.option(
        "--no-headers", is_flag=True, help="Table output (-o table|wide): print no header line."
    )(f)
    return _output(f)


def _no_header_line(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value and not ctx.resilient_parsing:
        raise click.UsageError(
            f"--no-headers: {ctx.info_name} prints one line per HelmRelease and no header "
            "line, so there is none to leave out (status and its table have one)",
            ctx,
        )
    return value


def result_output_option(f: F) -> F:
    """-o for the verbs that print one result line per release (no table header): kubectl's
    --no-headers is refused there with a usage error rather than silently ignored."""
    f = click.option(
        "--no-headers",
        is_flag=True,
        hidden=True,
        expose_value=False,
        callback=_no_header_line,
    )(f)
    return _output(f)


def dry_run_option(f: F) -> F:
    return click.option(
        "--dry-run",
        type=click.Choice(["none", "client", "server"]),
        default="none",
        show_default=True,
        is_flag=False,
        flag_value="client",
        help="client: print the plan only; server: send every write with dryRun=All.",
    )(f)


def _events_addr(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    del ctx, param
    if not value:
        return None
    from ..report.notify import validate_address

    try:
        return validate_address(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--events-addr") from None


EVENTS_ADDR_HELP = (
    "POST each Event flux-plunger records as a Flux event to notification-controller at "
    "URL (Flux's is http://notification-controller.flux-system.svc.cluster.local./), so "
    "Alerts on HelmReleases see it."
)


def events_addr_option(f: F) -> F:
    """--events-addr: Flux notifications from a one-shot writing verb (opt-in)."""
    return click.option(
        "--events-addr",
        metavar="URL",
        callback=_events_addr,
        help=EVENTS_ADDR_HELP + "  [default: off]",
    )(f)


DEFAULT_SERVICE_ACCOUNT_HELP = (
    "The --default-service-account helm-controller runs with (Flux's multi-tenancy "
    "lockdown): the identity it acts as for a HelmRelease without spec.serviceAccountName. "
    "flux-plunger deletes a Helm storage Secret only when that identity (or "
    "spec.serviceAccountName) may delete it, asked with a SubjectAccessReview."
)


def _no_blank(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty", ctx=ctx, param=param)
    return value


def default_service_account_option(f: F) -> F:
    """--default-service-account: helm-controller's own flag of that name, mirrored."""
    return click.option(
        "--default-service-account",
        metavar="NAME",
        callback=_no_blank,
        help=DEFAULT_SERVICE_ACCOUNT_HELP + "  [default: none]",
    )(f)


# -- completion of flag values and names (cobra __complete and kubectl's helper) --------

COMPLETION_TIMEOUT = 2.0  # seconds per API request while completing


def _completion_kube(ctx: click.Context) -> Any:
    from ..kube import Kube

    p = ctx.params
    try:
        return Kube.from_kubeconfig(
            p.get("kubeconfig"),
            p.get("kube_context"),
            overrides(ctx),
            request_timeout=COMPLETION_TIMEOUT,
        )
    except Exception:  # noqa: BLE001 - no completion rather than an error while typing
        return None


def complete_namespaces(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from ..kube import KubeError, core_path

    kube = _completion_kube(ctx)
    if kube is None:
        return []
    try:
        items = kube.request("LIST", "GET", core_path("namespaces")).get("items") or []
    except KubeError:
        return []
    finally:
        kube.close()
    return [
        CompletionItem(n)
        for n in sorted(i["metadata"]["name"] for i in items)
        if n.startswith(incomplete)
    ]


def complete_releases(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from ..kube import ConfigError, KubeError, default_namespace

    if ctx.params.get("all_namespaces"):
        return []
    kube = _completion_kube(ctx)
    if kube is None:
        return []
    try:
        ns = ctx.params.get("namespace") or default_namespace(
            ctx.params.get("kubeconfig"), ctx.params.get("kube_context")
        )
        items = kube.list_hrs(ns, ctx.params.get("selector"))
    except (KubeError, ConfigError):
        return []
    finally:
        kube.close()
    typed = set(ctx.params.get("names") or ())
    return [
        CompletionItem(n)
        for n in sorted(i["metadata"]["name"] for i in items)
        if n.startswith(incomplete) and n not in typed
    ]


def complete_contexts(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from ..kube import kubeconfig_contexts

    try:
        contexts = kubeconfig_contexts(ctx.params.get("kubeconfig"))
    except Exception:  # noqa: BLE001 - no kubeconfig: nothing to offer
        return []
    return [CompletionItem(c["name"]) for c in contexts if c["name"].startswith(incomplete)]
