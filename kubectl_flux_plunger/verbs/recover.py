"""``recover`` and ``resume-owned``: the decision table applied once to each selected release,
with bounded concurrency across releases (each release is handled by one thread)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from .. import plan
from ..executor import Executor, Outcome
from ..kube import KubeError

# Rows `resume-owned` may act on: our own suspensions (with their fences) and nothing else.
RESUME_ROWS = frozenset({"live-suspended-owned", "terminating-suspended-owned"})


# After cleaning up what an interrupted run left (our suspension or fence on a live
# release) the one-shot verb decides again on a fresh read, as the controller would on the
# update event its own write causes: a crash mid-recovery is finished by one `recover`.
CLEANUP_RESULTS = frozenset({"relinquished", "fence-removed"})
MAX_PASSES = 3


def _one(executor: Executor, hr: dict, only_rows: frozenset[str] | None) -> Outcome:
    md = hr["metadata"]
    ns, name = md["namespace"], md["name"]
    prev: Outcome | None = None
    try:
        for _ in range(MAX_PASSES):
            d = plan.decide(hr, executor.clock())
            if (d.action is plan.Action.NOTHING and d.event is None) or (
                    only_rows is not None and d.row not in only_rows):
                if prev is not None:
                    return prev
                return Outcome(ns, name, "skipped" if d.row == "remote-kubeconfig"
                               else "unchanged", d.reason, row=d.row)
            if prev is None:
                # the LIST only chose candidates: every decision that acts is re-made on
                # a fresh read (the listed copy may be minutes old by now)
                hr = executor.kube.get_hr(ns, name)
            out = executor.apply_decision(ns, name, hr)
            if prev is not None:
                if out.result == "unchanged":
                    return prev              # the clean-up was all there was to do
                out.steps[:0] = prev.steps
            again = (only_rows is None and out.result in CLEANUP_RESULTS
                     and not executor.opt.dry_run_client and not executor.kube.dry_run)
            if not again:
                return out
            prev = out
            hr = executor.kube.get_hr(ns, name)
            if hr is None or hr["metadata"].get("deletionTimestamp"):
                return out
        return out
    except KubeError as exc:
        return Outcome(ns, name, "failed", str(exc), failed=True)


def run(executor: Executor, releases: list[dict], *, concurrency: int = 4,
        only_rows: frozenset[str] | None = None) -> list[Outcome]:
    """Apply one pass to every release; results in the order of ``releases``."""
    if concurrency <= 1 or len(releases) <= 1:
        return [_one(executor, hr, only_rows) for hr in releases]
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="recover") as pool:
        return list(pool.map(lambda hr: _one(executor, hr, only_rows), releases))
