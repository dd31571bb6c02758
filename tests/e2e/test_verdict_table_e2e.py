"""The verdict table (issue 56), generated from the real helm-controller: every cell of the
state space — the newest revision's Helm status × ``status.history`` × an older
``deployed`` revision × ``spec.install.replace`` — built from real actions
(testplane/verdicts.py), one HelmRelease per cell, all reconciled at once by a
helm-controller of the test's own (``--concurrent`` high); plus the upgrade path, run for
real: helm-controller v1.4.3 installs, a ``helm uninstall`` is interrupted on its pre-delete
hook, then the helm-controller under test takes over.

Each cell is classified by what helm-controller did once the chart was fixed (*recovers* or
*fails for good*) and by ``kubectl flux-plunger status``; they must agree (stuck ⇔ fails for
good on a status flux-plunger repairs, failing otherwise, healthy when helm-controller
recovers), and ``recover`` must bring every fails-for-good cell to ``Ready=True``.

The table is written to docs/verdicts/helm-controller-<version>.md with
``FLUX_PLUNGER_WRITE_VERDICTS=1`` (and spliced into docs/DESIGN.md between its markers; the
run then ends with the suite's clean-tree error, listing the two files to commit); otherwise
the test fails when the committed file is not what it generated (a stale table fails CI
without the e2e tier rewriting docs), and tests/unit/test_verdict_table.py checks that
docs/DESIGN.md includes each file verbatim.  Regenerate both versions:

    FLUX_PLUNGER_WRITE_VERDICTS=1 pytest -m e2e tests/e2e/test_verdict_table_e2e.py
    FLUX_PLUNGER_WRITE_VERDICTS=1 FLUX_PLUNGER_HELM_CONTROLLER_VERSION=v1.4.3 pytest ...

About a minute each on helm-controller v1.6.4 and v1.4.3 (39 cells), ~3 when cells fail."""
from __future__ import annotations

import concurrent.futures
import json
import os
import time
from pathlib import Path

import pytest

from testplane import binaries
from testplane.helmctl import HelmController, publish_version, release_statuses
from testplane.plane import PlaneError, wait_for
from testplane.verdicts import (CELL_LABEL, FIXED, GOOD, HOOK_TIMEOUT, UPGRADE_PATH,
                                UPGRADE_PATH_NAME, Cell, Helm, Verdict, build, cell_release,
                                cells, classify, design_with, expected_plunger, render, settled_ready,
                                table_path, wait_hr, watch)

ROOT = Path(__file__).resolve().parents[2]
OLD = "v1.4.3"      # the helm-controller of the upgrade path (Flux 2.7)


def _binary(name: str, version: str | None, monkeypatch) -> Path:
    with monkeypatch.context() as m:
        if version:
            m.setenv("FLUX_PLUNGER_HELM_CONTROLLER_VERSION", version)
        return binaries.ensure(name)


@pytest.fixture
def controllers(plane, tmp_path, monkeypatch):
    """The helm-controller under test, watching the cells (``CELL_LABEL=on``), and a v1.4.3
    one for the upgrade path (``CELL_LABEL=old``)."""
    started = []
    try:
        for label, version, concurrent in (("on", None, 64), ("old", OLD, 2)):
            hc = HelmController(plane.kubeconfig, tmp_path / f"hc-{label}",
                                label_selector=f"{CELL_LABEL}={label}",
                                extra_args=(f"--concurrent={concurrent}",),
                                binary=_binary("helm-controller", version, monkeypatch))
            (tmp_path / f"hc-{label}").mkdir()
            started.append(hc)
            hc.start()
    except (binaries.BuildError, PlaneError, TimeoutError) as exc:
        for hc in started:
            hc.stop()
        pytest.fail(f"cannot start helm-controller: {exc}", pytrace=False)
    yield started
    for hc in started:
        hc.stop()


def _upgrade_path(plane, server, helm, ns: str, old: HelmController) -> None:
    """helm-controller v1.4.3 installs (a chart with a pre-delete hook), stops; ``helm
    uninstall`` fails on the hook (revision 1 ``uninstalling``, v1.4.3's snapshot of it
    ``deployed``, without ``apiVersion``); the helm-controller under test takes over."""
    from testplane.cluster import Cluster
    kube = plane.kube()
    try:
        cluster, name = Cluster(kube), UPGRADE_PATH_NAME
        publish_version(kube, ns, name, server, GOOD, ("pre-delete",))
        body = cell_release(ns, UPGRADE_PATH, name, True)
        body["metadata"]["labels"][CELL_LABEL] = "old"
        cluster.apply(body, manager="kustomize-controller")
        wait_hr(cluster, ns, name, settled_ready, f"Ready on helm-controller {OLD}")
        old.stop()
        helm.run(ns, "uninstall", name, "--timeout", HOOK_TIMEOUT, expect_ok=False)
        assert release_statuses(kube, ns, name) == {1: "uninstalling"}
        publish_version(kube, ns, name, server, FIXED)
        watch(cluster, ns, name, True)
    finally:
        kube.close()


def _one(plane, server, helm, ns: str, cell: Cell, old) -> tuple[Cell, str, Verdict, float]:
    from testplane.cluster import Cluster
    started = time.monotonic()
    if old is not None:
        _upgrade_path(plane, server, helm, ns, old)
        name = UPGRADE_PATH_NAME
    else:
        name = cell.name
    kube = plane.kube()
    try:
        cluster = Cluster(kube)
        if old is None:
            build(cluster, server, helm, ns, cell)
        built = time.monotonic() - started
        verdict = classify(cluster, ns, name)
        print(f"{name}: built in {built:.0f}s, {verdict.outcome} after "
              f"{time.monotonic() - started:.0f}s: {verdict}")
        return cell, name, verdict, built
    finally:
        kube.close()


def test_verdict_table(plane, controllers, chart_server, cluster, ns, cli, tmp_path):
    started = time.monotonic()
    under_test, old = controllers
    version = under_test.version
    helm = Helm(binaries.ensure("helm"), plane.kubeconfig, tmp_path / "helm")
    built, pruned = cells()
    jobs = [(cell, None) for cell in built] + [(UPGRADE_PATH, old)]
    results, errors = [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {pool.submit(_one, plane, chart_server, helm, ns, cell, o): cell
                   for cell, o in jobs}
        for future in concurrent.futures.as_completed(futures):
            try:
                results.append(future.result())
            except Exception as exc:  # noqa: BLE001 - every cell's failure is reported
                errors.append(f"{futures[future].name}: {type(exc).__name__}: {exc}")
    classified = time.monotonic() - started

    states = _plunger_states(cli, cluster, ns, under_test, results)
    # status lists what needs attention or was touched: a release it leaves out is healthy
    plunger = {name: states.get(name, "healthy") for _, name, _, _ in results}
    # every release helm-controller cannot get out of, its chart good, recover brings back
    for_good = sorted(name for _, name, verdict, _ in results
                      if verdict.outcome == "fails-for-good")
    after = _recover(cli, cluster, ns, for_good)
    rows = [(cell, name, verdict, plunger[name], after.get(name, "—"))
            for cell, name, verdict, _ in results]
    text = render(version, rows, pruned)
    (tmp_path / "verdicts.md").write_text(text)
    print(f"\nhelm-controller {version}: {len(results)} cells classified in {classified:.0f}s,"
          f" all done in {time.monotonic() - started:.0f}s ({tmp_path / 'verdicts.md'}):\n{text}")
    committed = table_path(ROOT, version)
    if os.environ.get("FLUX_PLUNGER_WRITE_VERDICTS") == "1":
        committed.parent.mkdir(parents=True, exist_ok=True)
        committed.write_text(text)
        design = ROOT / "docs" / "DESIGN.md"
        design.write_text(design_with(design.read_text(), version, text))
    assert not errors, "cells not built or classified:\n" + "\n".join(errors)

    disagree = [f"{name} ({cell}): helm-controller {verdict.outcome} ({verdict.reason}: "
                f"{verdict.message}), flux-plunger {state}, expected "
                f"{expected_plunger(cell.status, verdict)}"
                for cell, name, verdict, state, _ in rows
                if state != expected_plunger(cell.status, verdict)]
    not_back = [name for name in for_good if after[name] != "Ready"]
    assert not disagree and not not_back, (
        "flux-plunger disagrees with helm-controller:\n" + "\n".join(disagree)
        + f"\nnot Ready=True after recover: {not_back}")
    assert committed.is_file() and committed.read_text() == text, (
        f"{committed.relative_to(ROOT)} is not what helm-controller {version} does today "
        f"(the generated table is above); rerun this test with FLUX_PLUNGER_WRITE_VERDICTS=1 "
        f"and commit it")


def _plunger_states(cli, cluster, ns: str, hc: HelmController, results) -> dict[str, str]:
    """``status -A -o json``'s state of each cell, taken while helm-controller is paused with
    every cell showing the ``Ready`` its verdict names (not caught between two attempts)."""
    from testplane.helmctl import ready

    def steady() -> dict | None:
        with hc.paused():
            if any((ready(cluster.get(ns, name)) or ("",))[1:2] != (verdict.reason,)
                   for _, name, verdict, _ in results):
                return None
            res = cli("status", "-A", "-o", "json")
        assert res.code in (0, 1), res
        return {item["metadata"]["name"]: item["state"] for item in json.loads(res.out)["items"]
                if item["metadata"]["namespace"] == ns}
    return wait_for(steady, 90, "every cell at its verdict's Ready, helm-controller paused",
                    interval=0.5)


def _recover(cli, cluster, ns: str, names: list[str], deadline: float = 120) -> dict[str, str]:
    """``recover -o json`` the releases; ``{name: "Ready" | "not Ready" | recover's result}``:
    each one it recovered, once ``Ready=True`` or the deadline passed; the others with what
    recover made of them (``unchanged``, ``skipped``, ...)."""
    if not names:
        return {}
    res = cli("recover", "-n", ns, "-o", "json", *names, timeout=300)
    print(f"recover {len(names)} releases: exit {res.code}\n{res.out}{res.err}")
    results = {item["metadata"]["name"]: item["result"]
               for item in json.loads(res.out)["items"]}
    pending = {name for name in names if results.get(name) == "recovered"}
    awaited = set(pending)

    def all_back() -> bool:
        pending.difference_update({n for n in pending if settled_ready(cluster.get(ns, n))})
        return not pending
    try:
        wait_for(all_back, deadline, "every recovered release Ready=True", interval=0.5)
    except TimeoutError:
        pass            # reported per release below
    return {name: ("not Ready" if name in pending else "Ready") if name in awaited
            else f"{results.get(name, 'not listed')}: not Ready" for name in names}
