"""``version``: the client version and, with a cluster, the server's and helm-controller's."""

from __future__ import annotations

from typing import Any

import click

from .errors import api_errors
from .examples import Command
from .options import connection_options, overrides


@click.command("version", cls=Command)
@connection_options
@click.option("--client", "client_only", is_flag=True, help="Only the client version; no cluster.")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text")
@api_errors
def version(
    kubeconfig: str | None,
    kube_context: str | None,
    request_timeout: float | None,
    client_only: bool,
    output: str,
) -> None:
    """Print the client version and, with a cluster, the server and helm-controller versions."""
    from ..verbs import version as verb

    info: dict[str, Any] = verb.client()
    if not client_only:
        from ..kube import ConfigError, Kube

        try:
            kube = Kube.from_kubeconfig(
                kubeconfig, kube_context, overrides(), request_timeout=request_timeout or 10
            )
            info.update(verb.server(kube))
        except ConfigError as exc:
            info["serverVersion"] = f"unknown ({exc})"
    from ..frozen import runs_on

    floor = runs_on()  # the frozen binary only: what it needs of the system
    if floor:
        info["runsOn"] = floor
    if output == "json":
        import json

        click.echo(json.dumps(info, indent=2))
    elif output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(info, sort_keys=False).rstrip())
    else:
        labels = {
            "clientVersion": "Client Version",
            "serverVersion": "Server Version",
            "helmControllerVersion": "helm-controller Version",
            "runsOn": "Runs On",
        }
        for k, v in info.items():
            click.echo(f"{labels[k]}: {v}")
