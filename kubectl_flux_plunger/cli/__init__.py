"""The click layer: parses flags, builds the context, renders results.  No decisions here.

One module per verb (``status``, ``recover``, ``resume_owned``, ``release_fence``,
``restore``, ``version``, ``serve``), each holding its click command, which builds the verb's
options, calls the verb and renders what it returns; the flags they share are decorators in
``options`` and one value in ``target``, the connected client in ``session``, the exit codes,
``error:`` and ``warning:`` lines in ``errors``, the ``--events-addr`` notifier in
``notifier``, the rendering of the verbs that run the decision table in ``table``.  Here:
the group and ``main``.

Heavy modules (the Kubernetes client, the executor) are imported inside the commands so
``--help`` and ``version --client`` start instantly.
"""

from __future__ import annotations

import contextlib
import os
import sys

import click

from .. import __version__
from . import recover, release_fence, restore, resume_owned, status, version
from .argv import prog_name
from .errors import Exit, fail
from .examples import Group
from .options import DURATION, Duration, parse_duration

__all__ = ["DURATION", "Duration", "Exit", "cli", "fail", "main", "parse_duration"]

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=Group, context_settings=CONTEXT_SETTINGS, invoke_without_command=True)
@click.version_option(__version__, "--version", message="%(version)s")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Unstick Flux HelmReleases whose newest Helm revision blocks helm-controller, safely.

    flux-plunger deletes the newest Helm storage revision of a stuck release while
    helm-controller is kept off it (an owned suspension plus an uninstall fence), then
    lets helm-controller reconcile again. It never touches a suspension another manager set.
    """
    if ctx.invoked_subcommand is None:
        # like kubectl and flux: no verb prints the help and succeeds (click < 8.2 did this
        # for groups, click >= 8.2 raises a usage error; decided here, not by click)
        click.echo(ctx.get_help())
        ctx.exit(0)


for _verb in (
    status.status,
    recover.recover,
    resume_owned.resume_owned,
    release_fence.release_fence,
    restore.restore,
    version.version,
):
    cli.add_command(_verb)


def _register_serve() -> None:
    with contextlib.suppress(ImportError):  # the optional "serve" extra
        from .serve import serve

        cli.add_command(serve)


_register_serve()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kubectl-flux_plunger`` and ``flux-plunger``."""
    from .argv import hoist_global_flags

    prog = prog_name()
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["__complete"], ["__completeNoDesc"]):
        from .complete import cobra_complete

        return cobra_complete(cli, prog, args[1:])
    # click derives the completion variable from the program name, which has a space here
    complete_var = (
        "_FLUX_PLUNGER_COMPLETE" if prog.startswith("flux ") else "_KUBECTL_FLUX_PLUNGER_COMPLETE"
    )
    if os.environ.get(complete_var):
        prog = os.path.basename(sys.argv[0] or "") or "kubectl-flux_plunger"
    try:
        args = hoist_global_flags(cli, args)
        cli.main(args=args, prog_name=prog, complete_var=complete_var, standalone_mode=False)
    except click.UsageError as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        cmd = exc.ctx.command_path if exc.ctx else prog
        click.echo(f"See '{cmd} --help' for usage.", err=True)
        return int(Exit.USAGE)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            # Ctrl-C inside a command (e.g. ending `status --watch`): click turns it into
            # Abort (chained with `from` since click 8.2, implicitly before); exit as an
            # interrupt, like kubectl, not as an error
            return int(Exit.INTERRUPTED)
        click.echo("error: aborted", err=True)
        return int(Exit.FAILURE)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return int(Exit.FAILURE)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        return int(Exit.INTERRUPTED)
    except BrokenPipeError:
        return int(Exit.FAILURE)
    return int(Exit.OK)
