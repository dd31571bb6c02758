"""The one command line of the verbs that run the decision table once over a selection and
print a table of outcomes — ``recover`` and ``resume-owned`` — with their summary line.
What they do, the running-controller check included, is verbs/recover.py's
:func:`~kubectl_flux_plunger.verbs.recover.recover`; this module connects, hands it the
verb's options, streams the result lines and renders the end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import click

from .argv import prog_name
from .errors import Exit, fail, warn
from .notifier import notifier
from .session import Session
from .target import Target

if TYPE_CHECKING:
    from ..verbs.recover import Once


def run_table(
    verb_name: str, target: Target, once: Once, output: str, events_addr: str | None
) -> NoReturn:
    """Run the verb (``once``: its options) over the selection and render the outcomes:
    the body of ``recover`` and ``resume-owned``, streamed as each release finishes."""
    from ..core.plan import Row
    from ..executor import Result
    from ..verbs import recover as verb
    from . import render
    from .progress import INTERRUPTED_EXIT, Stream

    dry_run = once.dry_run
    s = Session(target, dry_run)
    names = target.names

    def show(o: Any) -> bool:
        return bool(
            o.row not in (Row.HEALTHY, Row.TERMINATING_UNFENCED)
            or names
            or o.result != Result.UNCHANGED
        )

    def line(o: Any) -> str | None:
        if output in ("json", "yaml") or not show(o):
            return None
        if output == "name":
            return render.names([(o.namespace, o.name)])
        return render.outcome_line(o, all_namespaces=s.selection.all_namespaces, dry_run=dry_run)

    # results stream as each release finishes; Ctrl-C stops (cli/progress.py); the total
    # is known once the releases are read
    stream = Stream(verb=verb_name, total=0, line=line, prog=prog_name())
    ran = verb.recover(
        s.kube,
        s.selection,
        once,
        stream,
        notifier=notifier(events_addr, dry_run),
        on_missing=lambda m: click.echo(f"Error from server (NotFound): {m}", err=True),
        on_warning=warn,
    )
    if ran.refusal:
        fail(ran.refusal)
    stream.close()
    outcomes, missing = ran.outcomes, ran.missing
    shown = [o for o in outcomes if show(o)]
    if output in ("json", "yaml"):
        click.echo(
            render.dump(
                render.document(
                    "RecoveryResult",
                    [render.outcome_item(o, dry_run) for o in shown],
                    dryRun=dry_run,
                    summary=counts(outcomes),
                ),
                output,
            )
        )
    if not ran.releases and not missing and output not in ("json", "yaml"):
        click.echo(f"No resources found{s.where()}.", err=True)
    failed = [o for o in outcomes if o.failed or o.result in (Result.DEFERRED, Result.SKIPPED)]
    if output in ("table", "wide"):
        click.echo(summary(verb_name, outcomes, dry_run), err=not shown)
    if stream.stop.is_set():
        not_done = [
            (o.namespace, o.name) for o in outcomes if o.result == Result.DEFERRED or o.failed
        ]
        stream.report_left(not_done, verb.still_held(s.kube, stream.interrupted_in_flight()))
        raise SystemExit(INTERRUPTED_EXIT)
    raise SystemExit(int(Exit.FAILURE if failed or missing else Exit.OK))


def counts(outcomes: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in outcomes:
        out[str(o.result)] = out.get(str(o.result), 0) + 1
    return dict(sorted(out.items()))


def summary(verb_name: str, outcomes: list[Any], dry_run: str) -> str:
    from ..core.plan import Row
    from ..executor import Result
    from .render import DRY_SUFFIX

    def count(*results: Result) -> int:
        return sum(o.result in results for o in outcomes)

    def planned(*rows: Row) -> int:
        return sum(o.result == Result.PLANNED and bool(o.steps) and o.row in rows for o in outcomes)

    failed = sum(o.failed for o in outcomes)
    suffix = DRY_SUFFIX[dry_run]
    if verb_name == "recover":
        return _recover_summary(outcomes, dry_run) + suffix
    lifted = (
        planned(Row.LIVE_SUSPENDED_OWNED, Row.TERMINATING_SUSPENDED_OWNED)
        if dry_run == "client"
        else count(Result.RELINQUISHED)
    )
    verb = "would lift" if dry_run != "none" else "lifted"
    return f"{verb} {lifted} flux-plunger suspensions, {failed} failed{suffix}"


def _recover_summary(outcomes: list[Any], dry_run: str) -> str:
    """``recover``'s line: every number of its first clause counts stuck releases only
    (the row ``live-stuck``); a release that was not stuck and was deferred or failed — a
    leftover suspension a running controller covers, say — is counted after it, as what it
    is."""
    from ..core.plan import Row
    from ..executor import Result

    stuck = [o for o in outcomes if o.row == Row.LIVE_STUCK]
    others = [o for o in outcomes if o.row != Row.LIVE_STUCK]

    def count(among: list[Any], *results: Result) -> int:
        return sum(o.result in results for o in among)

    waiting = count(stuck, Result.AWAITING_RETRY)
    planned = sum(o.result == Result.PLANNED and bool(o.steps) for o in stuck)
    done = (
        f"would recover {planned}"
        if dry_run == "client"
        else f"would recover {count(stuck, Result.RECOVERED)}"
        if dry_run == "server"
        else f"recovered {count(stuck, Result.RECOVERED)}"
    )
    line = (
        f"{done} of {len(stuck) - waiting} stuck HelmReleases, "
        f"{count(stuck, Result.DEFERRED)} deferred, {count(stuck, Result.SKIPPED)} skipped, "
        f"{sum(o.failed for o in stuck)} failed"
    )
    if waiting:
        line += f"; {waiting} recovered earlier, awaiting helm-controller's retry"
    rest = [
        f"{n} {what}"
        for n, what in (
            (count(others, Result.DEFERRED), Result.DEFERRED),
            (sum(o.failed for o in others), Result.FAILED),
        )
        if n
    ]
    if rest:
        line += f"; of the HelmReleases not stuck, {', '.join(rest)}"
    return line
