"""``recover`` and ``resume-owned``: the decision table applied once to each selected release,
with bounded concurrency across releases (each release is handled by one thread)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..executor import Executor, Outcome
from ..plan import Row

# Rows `resume-owned` may act on: our own suspensions (with their fences) and nothing else.
RESUME_ROWS = frozenset({Row.LIVE_SUSPENDED_OWNED, Row.TERMINATING_SUSPENDED_OWNED})


def _one(executor: Executor, hr: dict, only_rows: frozenset[str] | None,
         fresh: bool = False) -> Outcome:
    """One release: the executor's bounded determine → act → re-determine loop."""
    return executor.settle(hr, only_rows=only_rows, fresh=fresh)


def run(executor: Executor, releases: list[dict], *, concurrency: int = 4,
        only_rows: frozenset[str] | None = None, fresh: bool = False) -> list[Outcome]:
    """Apply one pass to every release; results in the order of ``releases``.  ``fresh``:
    the releases were just read by name (no second read before acting)."""
    if concurrency <= 1 or len(releases) <= 1:
        return [_one(executor, hr, only_rows, fresh) for hr in releases]
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="recover") as pool:
        return list(pool.map(lambda hr: _one(executor, hr, only_rows, fresh), releases))
