"""What each row of the decision table says (issue 40: found by mutation testing).

A release a pass leaves alone is reported with its row's reason: it is the detail of the
UNCHANGED outcome that `recover`, `resume-owned` and serve's log print for it.  The wording
is part of what the operator reads, so changing it is a decision, made here."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core.plan import Row, decide

from .builders import NOW
from .test_plan import ROWS

pytestmark = pytest.mark.unit

SAYS = {
    Row.GONE: "the HelmRelease no longer exists",
    Row.TERMINATING_SUSPENDED_OWNED:
        "being deleted while suspended by flux-plunger: lift the suspension, keep the fence",
    Row.TERMINATING_SUSPENDED_FOREIGN:
        "being deleted while suspended by another manager: only our fence can go",
    Row.TERMINATING_FENCED_UNINSTALLED:
        "helm-controller has handled the unsuspended release: the fence can go",
    Row.TERMINATING_FENCED_WAITING:
        "fence holds the delete until helm-controller reconciles the unsuspended release",
    Row.TERMINATING_UNFENCED: "being deleted; nothing of ours",
    Row.LIVE_SUSPENDED_FOREIGN:
        "suspended by another manager: left untouched, only our fence can go",
    Row.LIVE_SUSPENDED_OWNED:
        "suspended by flux-plunger (interrupted recovery): lift it with the fence",
    Row.LIVE_FENCED: "not suspended but still fenced: remove the fence",
    Row.LIVE_STUCK: 'stuck with "has no deployed releases": recover',
    Row.HEALTHY: "nothing to do",
}


def test_every_row_has_its_words() -> None:
    assert set(SAYS) == set(Row)


@pytest.mark.parametrize(("release", "row"), [
    pytest.param(p.values[0], p.values[2], id=p.id) for p in ROWS])
def test_each_row_says_what_it_does(release, row) -> None:
    decision = decide(release, NOW)
    assert decision.row == row
    assert decision.reason == SAYS[Row(row)]
