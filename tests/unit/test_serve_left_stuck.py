"""What serve exports about the releases it leaves stuck, and who it is: the
``flux_plunger_releases_left_stuck`` gauge (serve/stuck.py) fed by the passes' outcomes and
pruned by the watch (a repaired release gets no pass), and the ``lease`` label on every sample
of the collector (what tells two installs in one namespace apart).  No cluster: outcomes and
scripted watch streams (tests/unit/test_serve_watch.py's script)."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.executor import Outcome, Result
from kubectl_flux_plunger.core.plan import Row, Stuck
from kubectl_flux_plunger.serve.metrics import Metrics, collector
from kubectl_flux_plunger.serve.stuck import LeftStuck

from .test_serve_watch import event, release, run

pytestmark = pytest.mark.unit


def skipped(name: str, cause: Stuck | None, *, selected: bool = True) -> Outcome:
    return Outcome("apps", name, Result.SKIPPED, "why", row=Row.LIVE_STUCK, left_stuck=cause,
                   selected=selected)


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in collector(metrics).collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_pass_that_leaves_a_release_stuck_counts_it_until_a_pass_ends_otherwise():
    metrics = Metrics()
    metrics.observe(skipped("a", Stuck.CORRUPT_PAYLOAD))
    metrics.observe(skipped("b", Stuck.CORRUPT_PAYLOAD))
    metrics.observe(skipped("c", Stuck.NO_STORAGE))
    metrics.observe(skipped("d", None))               # a skip the next reconcile clears
    counts = metrics.left_stuck.counts()
    assert counts[Stuck.CORRUPT_PAYLOAD] == 2 and counts[Stuck.NO_STORAGE] == 1
    assert set(counts) == set(Stuck)                  # every cause, 0 when none
    metrics.observe(Outcome("apps", "a", Result.RECOVERED, "", row=Row.LIVE_STUCK))
    metrics.observe(skipped("b", Stuck.NO_STORAGE))   # the cause changed
    metrics.observe(skipped("c", Stuck.NO_STORAGE, selected=False))  # relabelled away
    assert {k: v for k, v in metrics.left_stuck.counts().items() if v} == {
        Stuck.NO_STORAGE: 1}
    # a skip is still a skip in the recoveries counter
    assert metrics.snapshot()["recoveries"] == {"skipped": 5, "recovered": 1}


def test_the_watch_forgets_a_release_repaired_or_deleted_and_a_sync_keeps_only_the_stuck():
    metrics = Metrics()
    for name in ("a", "b", "c", "d"):
        metrics.observe(skipped(name, Stuck.CORRUPT_PAYLOAD))
    # the initial LIST sees a and b still stuck, c healthy, d no more
    pages = [([release("a", "5", stuck=True), release("b", "6", stuck=True),
               release("c", "7")], "10")]
    stream = [event("MODIFIED", release("a", "11")),            # repaired: no pass follows
              event("MODIFIED", release("b", "12", stuck=True))]  # still stuck: kept
    run([pages], [stream], metrics=metrics)
    assert metrics.left_stuck.counts()[Stuck.CORRUPT_PAYLOAD] == 1  # b
    deleted = [event("DELETED", release("b", "13", stuck=True))]
    run([[(([release("b", "12", stuck=True)]), "12")]], [deleted], metrics=metrics)
    assert metrics.left_stuck.counts()[Stuck.CORRUPT_PAYLOAD] == 0


def test_left_stuck_alone():
    left = LeftStuck()
    left.passed("apps/a", Stuck.VERSION_MISMATCH)
    left.forget("apps/zzz")  # unknown: nothing happens
    left.keep_only(["apps/a", "apps/other"])
    assert left.counts()[Stuck.VERSION_MISMATCH] == 1
    left.passed("apps/a", None)
    assert sum(left.counts().values()) == 0


def test_every_sample_carries_the_install_s_lease():
    metrics = Metrics(lease="web-flux-plunger-shard1.flux-plunger.cozystack.io")
    metrics.observe(skipped("a", Stuck.REMOTE_UNSUPPORTED))
    got = samples(metrics)
    lease = ("lease", "web-flux-plunger-shard1.flux-plunger.cozystack.io")
    assert got[("flux_plunger_releases_left_stuck",
                (lease, ("reason", "remote-unsupported")))] == 1
    assert got[("flux_plunger_releases_left_stuck", (lease, ("reason", "no-storage")))] == 0
    assert got[("flux_plunger_leader", (lease,))] == 0
    assert got[("flux_plunger_ready", (lease,))] == 0
    assert got[("flux_plunger_recoveries_total", (lease, ("result", "skipped")))] == 1
    assert all(dict(labels).get("lease") == lease[1] for _, labels in got)
    # without a Lease name no label at all (an empty label is no label to Prometheus)
    bare = samples(Metrics())
    assert ("flux_plunger_leader", ()) in bare
    assert not any("lease" in dict(labels) for _, labels in bare)


def given_up_release(rv: str, **notes: str) -> dict:
    """``apps/g``, stuck and given up by the recovery budget (3 of 3), ``notes`` annotated."""
    import json as json_

    from kubectl_flux_plunger.core import budget
    from kubectl_flux_plunger.core import constants as C

    r = release("g", rv, stuck=True)
    r["status"]["lastAttemptedGeneration"] = 1  # helm-controller failed it again
    value = json_.loads(budget.record_value(r, 3, budget.datetime.now(budget.timezone.utc),
                                            3, 30.0))
    r["metadata"]["annotations"] = {C.BUDGET_ANNOTATION: json_.dumps(value),
                                    C.PROCESSED_ANNOTATION: "2", **notes}
    return r


def test_the_watch_passes_no_more_over_a_release_given_up_and_announced():
    """issue 57: the pass that gives a release up announces it (counted here); after it,
    helm-controller's writes of the still given-up release start no pass — but they do
    before the announcement, and a change that ends the run (requestedAt) does."""
    from kubectl_flux_plunger.core import constants as C

    from .test_serve_watch import queued

    given_up = given_up_release
    metrics = Metrics()
    pages = [([given_up("5")], "10")]
    _, _, _, queue = run([pages], [[event("MODIFIED", given_up("11"))]], metrics=metrics)
    assert queued(queue) == ["apps/g"]            # not yet announced: passed over
    metrics.observe(Outcome("apps", "g", Result.SKIPPED, "", row=Row.LIVE_STUCK,
                            left_stuck=Stuck.GIVEN_UP))
    assert metrics.left_stuck.cause("apps/g") is Stuck.GIVEN_UP
    w, _, _, queue = run([pages], [], metrics=metrics)
    assert queued(queue) == ["apps/g"]            # the sync keeps the whole predicate
    w._seen(given_up("12"))                        # helm-controller's retry: no pass
    assert queued(queue) == []
    w._seen(given_up("13", **{"reconcile.fluxcd.io/requestedAt": "now"}))
    assert queued(queue) == ["apps/g"]            # `flux reconcile` ends the run
    assert metrics.left_stuck.cause("apps/nothing") is None
    # a suspension or fence on a given-up release (a by-hand recovery that crashed after
    # its acquire) is always worth a pass: its leftover must be lifted
    fenced = given_up("14")
    fenced["metadata"]["finalizers"] = [C.FENCE]
    w._seen(fenced)
    assert queued(queue) == ["apps/g"]
    suspended = given_up("15")
    suspended["spec"]["suspend"] = True
    w._seen(suspended)
    assert queued(queue) == ["apps/g"]
