"""The state space of a release's Helm storage against helm-controller's ``status.history``
(issue 56), built from real actions, and helm-controller's verdict on each cell.

A *cell* is: the newest storage revision's Helm status × ``status.history`` (empty;
``matching``: helm-controller's own snapshot of that revision; ``stale``: its snapshot of an
earlier state; ``legacy``: the stale snapshot without ``apiVersion``, as helm-controller
<= v1.4 wrote them) × a ``deployed`` older revision (yes/no) × ``spec.install.replace`` (for
an ``uninstalled`` newest, where helm-controller may install).  Each cell is one HelmRelease
in one namespace; :func:`build` makes it with:

* the Helm CLI (``empty``: before the HelmRelease exists; ``stale``/``legacy``: after
  helm-controller installed it, while it does not watch it) — install, upgrade, rollback,
  ``uninstall [--keep-history]``, an action whose hook never finishes (it fails after
  ``--timeout``; an ``uninstall`` stays ``uninstalling``), or is killed while it waits
  (``pending-*``);
* helm-controller itself (``matching``): its install, upgrade and remediation failing on a
  hook that never finishes.

Then the fixed chart (no hooks) is published, helm-controller takes the release over, and
:func:`classify` watches it: *recovers* (``Ready=True``) or *fails for good* (the same
``Ready`` failure and the same storage on three handled reconcile requests in a row).
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from .helmctl import (ChartServer, build_chart, hooked_release, latest_snapshot,
                      publish_version, ready, request_reconcile)
from .plane import wait_for

CELL_LABEL = "flux-plunger.test/verdict"     # helm-controller under test watches these
HOOK_TIMEOUT = "2s"
GOOD, FIXED = "0.1.0", "1.0.0"

STATUSES = ("deployed", "failed", "superseded", "uninstalled", "uninstalling",
            "pending-install", "pending-upgrade", "pending-rollback", "unknown")
HISTORIES = ("empty", "matching", "stale", "legacy")
SHORT = {"deployed": "dep", "failed": "fail", "superseded": "sup", "uninstalled": "unid",
         "uninstalling": "unig", "pending-install": "pins", "pending-upgrade": "pupg",
         "pending-rollback": "prb", "unknown": "unk"}
# statuses flux-plunger repairs (deletes the newest revision of) when helm-controller is
# stuck on them; a release failing for good on another one is the chart's or the
# operator's to fix (`failing`)
REPAIRED = ("uninstalled", "uninstalling", "unknown", "pending-install", "pending-upgrade",
            "pending-rollback")

# Helm CLI recipes (from nothing) per (status, older deployed): steps
# ("install"|"upgrade", version, hooks, outcome) with outcome ok | fail (a hook that never
# finishes: failed after --timeout) | kill (killed while its hook runs: pending-*);
# ("uninstall", keep_history, outcome); ("rollback", revision, outcome).
_PD, _PI, _PU, _PR = ("pre-delete",), ("post-install",), ("post-upgrade",), ("post-rollback",)
RECIPES: dict[tuple[str, bool], tuple] = {
    ("deployed", False): (("install", GOOD, (), "ok"),),
    ("failed", False): (("install", "0.2.0", _PI, "fail"),),
    ("failed", True): (("install", GOOD, (), "ok"), ("upgrade", "0.2.0", _PU, "fail")),
    ("uninstalled", False): (("install", GOOD, (), "ok"), ("uninstall", True, "ok")),
    ("uninstalling", False): (("install", GOOD, _PD, "ok"), ("uninstall", False, "fail")),
    ("uninstalling", True): (("install", GOOD, _PD, "ok"),
                             ("upgrade", "0.2.0", _PU + _PD, "fail"),
                             ("uninstall", False, "fail")),
    ("pending-install", False): (("install", "0.2.0", _PI, "kill"),),
    ("pending-upgrade", False): (("install", "0.2.0", _PI, "fail"),
                                 ("upgrade", "0.3.0", _PU, "kill")),
    ("pending-upgrade", True): (("install", GOOD, (), "ok"), ("upgrade", "0.2.0", _PU, "kill")),
    ("pending-rollback", False): (("install", GOOD, _PR, "ok"), ("uninstall", True, "ok"),
                                  ("rollback", 1, "kill")),
    ("pending-rollback", True): (("install", GOOD, _PR, "ok"), ("upgrade", "0.2.0", (), "ok"),
                                 ("rollback", 1, "kill")),
}

# helm-controller's own failures (history `matching`) per (status, older deployed): the
# charts it is given in turn (version, hooks; the last one fails) and the remediation.
HC_RECIPES: dict[tuple[str, bool], tuple[tuple, dict]] = {
    ("deployed", False): (((GOOD, ()),), {}),
    ("failed", False): ((("0.2.0", _PI),), {}),
    ("failed", True): (((GOOD, ()), ("0.2.0", _PU)), {}),
    ("uninstalled", False): ((("0.2.0", _PI),), {"install": {"retries": 1}}),
    ("uninstalling", False): ((("0.2.0", _PI + _PD),), {"install": {"retries": 1}}),
    ("uninstalling", True): (((GOOD, _PD), ("0.2.0", _PU + _PD)),
                             {"upgrade": {"retries": 1, "strategy": "uninstall"}}),
}

PRUNED_STATUS = {
    "superseded": "no Helm action leaves a `superseded` revision newest: an upgrade or "
                  "rollback writes its new revision before it supersedes the old one",
    "unknown": "no Helm action writes `unknown` (the zero status; Helm never stores it)",
}


@dataclasses.dataclass(frozen=True)
class Cell:
    status: str
    history: str
    deployed: bool
    replace: bool | None = None     # spec.install.replace, for an `uninstalled` newest

    @property
    def name(self) -> str:
        r = "" if self.replace is None else ("-r1" if self.replace else "-r0")
        return f"{SHORT[self.status]}-{self.history}-d{int(self.deployed)}{r}"


UPGRADE_PATH = Cell("uninstalling", "legacy", False)   # built by helm-controller v1.4.3
UPGRADE_PATH_NAME = "upgrade-path"


def pruned_reason(status: str, history: str, deployed: bool) -> str | None:
    """Why the cell is not built (it cannot exist, or cannot change the verdict), or None."""
    if status in PRUNED_STATUS:
        return PRUNED_STATUS[status]
    if status == "deployed" and deployed:
        return "Helm supersedes the deployed revision when it deploys a newer one"
    if status == "uninstalled" and deployed:
        return ("Helm v4 (the Helm CLI here; helm-controller v1.5+) supersedes every "
                "`deployed` revision when an uninstall keeps the history; helm-controller "
                "v1.4.3's Helm v3.19 leaves one under its upgrade remediation's uninstall: "
                "tests/e2e/test_name_in_use_e2e.py runs that case")
    if status == "pending-install" and deployed:
        return ("an install runs only on an empty or (replace) uninstalled/failed history; "
                "no deployed revision is left under it by Helm's own actions")
    if status.startswith("pending-") and history in ("matching", "legacy"):
        return ("helm-controller decides `Locked` before it reads its history (state.go), "
                "so the snapshot cannot change the verdict; `empty` and `stale` are built")
    return None


def cells() -> tuple[list[Cell], list[tuple[str, str, str, str]]]:
    """The cells built, and the pruned ones (status, histories, deployed, reason), the
    histories of one status and reason in one row."""
    built, pruned = [], []
    for status in STATUSES:
        if status in PRUNED_STATUS:
            pruned.append((status, "any", "any", PRUNED_STATUS[status]))
            continue
        for deployed in (False, True):
            why: dict[str, list[str]] = {}
            for history in HISTORIES:
                reason = pruned_reason(status, history, deployed)
                if reason:
                    why.setdefault(reason, []).append(history)
                elif status == "uninstalled":
                    built += [Cell(status, history, deployed, r) for r in (False, True)]
                else:
                    built.append(Cell(status, history, deployed))
            for reason, histories in why.items():
                shown = "any" if len(histories) == len(HISTORIES) else ", ".join(histories)
                pruned.append((status, shown, "yes" if deployed else "no", reason))
    return built, pruned


# -- the Helm CLI --------------------------------------------------------------------------

class Helm:
    """The Helm CLI (testbin) on the test control plane, its own config and cache dirs."""

    def __init__(self, binary: Path, kubeconfig: Path, home: Path, parallel: int = 6):
        self.binary, self.kubeconfig = binary, kubeconfig
        home.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, KUBECONFIG=str(kubeconfig),
                        HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
                        HELM_DATA_HOME=str(home / "data"))
        self.slots = threading.BoundedSemaphore(parallel)   # 2 cores: a few at a time

    def argv(self, ns: str, *args: str) -> list[str]:
        return [str(self.binary), "--namespace", ns, *args]

    def run(self, ns: str, *args: str, expect_ok: bool) -> subprocess.CompletedProcess:
        with self.slots:
            proc = subprocess.run(self.argv(ns, *args), env=self.env, capture_output=True,
                                  text=True, timeout=120, stdin=subprocess.DEVNULL)
        if (proc.returncode == 0) != expect_ok:
            raise AssertionError(f"helm {' '.join(args)}: exit {proc.returncode}, expected "
                                 f"{'success' if expect_ok else 'failure'}:\n{proc.stderr}")
        return proc

    def killed(self, kube, ns: str, release: str, pending: str, *args: str) -> None:
        """Start ``helm args``; SIGKILL it once the newest revision is ``pending``."""
        from .helmctl import release_statuses
        with self.slots:
            proc = subprocess.Popen(self.argv(ns, *args), env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                def reached():
                    assert proc.poll() is None, f"helm {' '.join(args)} ended: {proc.stderr.read()}"
                    st = release_statuses(kube, ns, release)
                    return bool(st) and st[max(st)] == pending
                wait_for(reached, 90, f"{ns}/{release} {pending}", interval=0.1)
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc.stderr.close()


def run_recipe(helm: Helm, kube, ns: str, name: str, chart_dir: Path, steps) -> None:
    """Run Helm CLI ``steps`` (:data:`RECIPES`) on release ``ns/name``."""
    for step in steps:
        verb, outcome = step[0], step[-1]
        t = ("--timeout", HOOK_TIMEOUT)
        if verb in ("install", "upgrade"):
            chart = build_chart(chart_dir, name, step[1], step[2])
            args = (verb, name, str(chart), *t)
        elif verb == "uninstall":
            args = ("uninstall", name, *t, *(("--keep-history",) if step[1] else ()))
        else:
            args = ("rollback", name, str(step[1]), *t)
        if outcome == "kill":
            helm.killed(kube, ns, name, {"install": "pending-install", "upgrade":
                                         "pending-upgrade", "rollback": "pending-rollback"}[verb],
                        *args)
        else:
            helm.run(ns, *args, expect_ok=outcome == "ok")


# -- building a cell -----------------------------------------------------------------------

def cell_release(ns: str, cell: Cell, name: str, watched: bool, **remediation) -> dict:
    body = hooked_release(ns, name, timeout=HOOK_TIMEOUT, **remediation)
    if cell.replace is not None:
        body["spec"]["install"]["replace"] = cell.replace
    if remediation and cell.status == "uninstalled":
        body["spec"]["uninstall"]["keepHistory"] = True
    body["metadata"]["labels"] = {CELL_LABEL: "on" if watched else "off"}
    return body


def watch(cluster, ns: str, name: str, on: bool) -> None:
    """Let the helm-controller under test see the release (or no longer)."""
    cluster.merge(ns, name, {"metadata": {"labels": {CELL_LABEL: "on" if on else "off"}}})


def wait_hr(cluster, ns: str, name: str, check, what: str, deadline: float = 150) -> dict:
    from .helmctl import release_statuses
    seen: list = [None]

    def reached():
        seen[0] = cluster.get(ns, name)
        return seen[0] if seen[0] and check(seen[0]) else None
    try:
        return wait_for(reached, deadline, f"{ns}/{name} {what}", interval=0.25)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; last seen Ready {ready(seen[0])}, history[0] "
                           f"{latest_snapshot(seen[0])}, storage "
                           f"{release_statuses(cluster.kube, ns, name)}") from None


def settled_ready(hr: dict) -> bool:
    st = hr.get("status") or {}
    return ((ready(hr) or ("",))[0] == "True"
            and st.get("observedGeneration") == hr["metadata"]["generation"])


def newest_is(cluster, ns: str, name: str, status: str, deployed: bool) -> bool:
    from .helmctl import release_statuses
    st = release_statuses(cluster.kube, ns, name)
    return (bool(st) and st[max(st)] == status
            and ("deployed" in [st[r] for r in st if r != max(st)]) == deployed)


def build(cluster, server: ChartServer, helm: Helm, ns: str, cell: Cell) -> None:
    """Make ``cell`` (see the module docstring) and hand it to the helm-controller under
    test with the fixed chart published."""
    name, chart_dir = cell.name, server.directory / ns
    key = (cell.status, cell.deployed)
    if cell.history == "empty":
        run_recipe(helm, cluster.kube, ns, name, chart_dir, RECIPES[key])
        publish_version(cluster.kube, ns, name, server, FIXED)
        cluster.apply(cell_release(ns, cell, name, True), manager="kustomize-controller")
    elif cell.history == "matching":
        charts, remediation = HC_RECIPES[key]
        for i, (version, hooks) in enumerate(charts):
            publish_version(cluster.kube, ns, name, server, version, hooks)
            if i == 0:
                cluster.apply(cell_release(ns, cell, name, True, **remediation),
                              manager="kustomize-controller")
            if i < len(charts) - 1 or not hooks:
                wait_hr(cluster, ns, name, lambda hr, v=version: settled_ready(hr) and
                        latest_snapshot(hr).get("chartVersion") == v, f"Ready with {version}")

        def there(hr):
            snap = latest_snapshot(hr)
            return (snap.get("status") == cell.status and snap.get("version") is not None
                    and newest_is(cluster, ns, name, cell.status, cell.deployed))
        wait_hr(cluster, ns, name, there, f"newest {cell.status} in storage and history")
        publish_version(cluster.kube, ns, name, server, FIXED)
    else:
        stale(cluster, server, helm, ns, cell, name)
    if not newest_is(cluster, ns, name, cell.status, cell.deployed):
        from .helmctl import release_statuses
        raise AssertionError(f"{name}: built {release_statuses(cluster.kube, ns, name)}")


def stale(cluster, server: ChartServer, helm: Helm, ns: str, cell: Cell, name: str) -> None:
    """``stale``/``legacy``: helm-controller installs the recipe's first (good) chart — or
    the good chart, then purged — and no longer watches the release; the Helm CLI does the
    rest; ``legacy`` drops ``apiVersion`` from the history; helm-controller watches again."""
    steps = RECIPES[(cell.status, cell.deployed)]
    first = steps[0]
    hc_installs = first[0] == "install" and first[-1] == "ok"
    version, hooks = (first[1], first[2]) if hc_installs else (GOOD, ())
    publish_version(cluster.kube, ns, name, server, version, hooks)
    cluster.apply(cell_release(ns, cell, name, True), manager="kustomize-controller")
    wait_hr(cluster, ns, name, settled_ready, f"Ready with {version}")
    watch(cluster, ns, name, False)
    chart_dir = server.directory / ns
    if hc_installs:
        steps = steps[1:]
    else:
        helm.run(ns, "uninstall", name, "--timeout", HOOK_TIMEOUT, expect_ok=True)
    run_recipe(helm, cluster.kube, ns, name, chart_dir, steps)
    if cell.history == "legacy":
        strip_api_version(cluster, ns, name)
    publish_version(cluster.kube, ns, name, server, FIXED)
    watch(cluster, ns, name, True)


def strip_api_version(cluster, ns: str, name: str) -> None:
    """Rewrite ``status.history`` without ``apiVersion``, as helm-controller <= v1.4 wrote
    it (a no-op on v1.4.3, which writes none)."""
    hr = cluster.get(ns, name)
    history = [{k: v for k, v in snap.items() if k != "apiVersion"}
               for snap in hr["status"].get("history") or []]
    cluster.set_status(ns, name, {"history": history})


# -- helm-controller's verdict -------------------------------------------------------------

@dataclasses.dataclass
class Verdict:
    outcome: str              # recovers | fails-for-good | undecided
    reason: str               # Ready's reason
    message: str              # Ready's message, the namespace and release as placeholders
    storage: dict


def normalise(text: str, ns: str, name: str) -> str:
    text = text.replace(f"{ns}/{name}", "<ns>/<name>").replace(ns, "<ns>")
    text = re.sub(rf"\b{re.escape(name)}\b", "<name>", text)
    return re.sub(r"\s+", " ", text).strip()


def storage_state(cluster, ns: str, name: str) -> tuple:
    from kubectl_flux_plunger.core import storage
    return tuple(sorted((s["metadata"]["name"], s["metadata"]["uid"],
                         s["metadata"]["resourceVersion"])
                        for s in cluster.kube.list_secrets(ns, storage.label_selector(name))))


def classify(cluster, ns: str, name: str, deadline: float = 200) -> Verdict:
    """Request reconciles until one handled request leaves ``Ready=True`` (recovers) or
    three handled in a row leave the same ``Ready`` failure and the same storage (fails for
    good).  Only a request helm-controller handled counts: a ``Ready=True`` from before it
    took the release over says nothing."""
    from .helmctl import release_statuses
    end = time.monotonic() + deadline
    last, same, hr = None, 0, None
    while time.monotonic() < end:
        stamp = request_reconcile(cluster.kube, ns, name)
        try:
            hr = wait_hr(cluster, ns, name, lambda h: (h.get("status") or {}).get(
                "lastHandledReconcileAt") == stamp, "handles a reconcile request",
                deadline=max(1.0, end - time.monotonic()))
        except TimeoutError:
            break
        r = ready(hr) or ("", "", "")
        if settled_ready(hr):
            return Verdict("recovers", r[1], normalise(r[2], ns, name),
                           release_statuses(cluster.kube, ns, name))
        seen = (r, storage_state(cluster, ns, name))
        same = same + 1 if seen == last else 1
        last = seen
        if same >= 3:
            return Verdict("fails-for-good", r[1], normalise(r[2], ns, name),
                           release_statuses(cluster.kube, ns, name))
    r = ready(hr or cluster.get(ns, name)) or ("", "", "")
    return Verdict("undecided", r[1], normalise(r[2], ns, name),
                   release_statuses(cluster.kube, ns, name))


def expected_plunger(cell_status: str, verdict: Verdict) -> str:
    """flux-plunger's state that agrees with helm-controller's verdict."""
    if verdict.outcome == "recovers":
        return "healthy"
    return "stuck" if cell_status in REPAIRED else "failing"


# -- the table -----------------------------------------------------------------------------

TABLE_HEAD = ("| cell | newest | `status.history` | older `deployed` | `install.replace` | "
              "helm-controller | its `Ready` (the last attempt) | flux-plunger | agree | "
              "after `recover` |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")


LEGEND = """\
* cell: `<newest status>-<history>-d<older deployed: 0|1>[-r<install.replace: 0|1>]`, one
  HelmRelease each, built from real actions (testplane/verdicts.py).  `status.history`:
  *empty* — the Helm CLI made the storage before the HelmRelease existed; *matching* —
  helm-controller's own failing install, upgrade or remediation left it (its snapshot is of
  the newest revision); *stale* — helm-controller installed, then the Helm CLI acted while it
  did not watch the release (its snapshot is of an earlier state); *legacy* — stale, the
  snapshot without `apiVersion` as helm-controller <= v1.4 writes it (v1.4.3 writes none: on
  it every snapshot is legacy).  *upgrade-path*: helm-controller v1.4.3 installed, `helm
  uninstall` failed on its pre-delete hook, then this version took over.
* helm-controller, with the chart fixed (1.0.0, no hooks): *recovers* — `Ready=True` after a
  reconcile request it handled; *fails-for-good* — the same `Ready` failure and the same
  storage after three handled requests in a row.
* flux-plunger: `status -A -o json`'s state, helm-controller paused at that verdict (a
  release it does not list is healthy).  agree: *stuck* ⇔ fails for good on a status
  flux-plunger repairs (`uninstall*`, `pending-*`, `unknown`), *failing* on another,
  *healthy* when helm-controller recovers.  after `recover` (one `recover -o json` naming
  every fails-for-good cell): *Ready* (`Ready=True` within 120 s), or its result for a
  release it did not recover.

"""


def table_path(root: Path, version: str) -> Path:
    """The committed table for helm-controller ``version``."""
    return root / "docs" / "verdicts" / f"helm-controller-{version}.md"


def _cell_text(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(version: str, rows: list[tuple[Cell, str, Verdict, str, str]],
           pruned: list[tuple[str, str, str, str]]) -> str:
    """The markdown file: one row per built cell (cell, its release name, helm-controller's
    verdict, flux-plunger's state, Ready after ``recover``), then the pruned cells."""
    out = [f"<!-- generated by tests/e2e/test_verdict_table_e2e.py on helm-controller "
           f"{version}; do not edit: FLUX_PLUNGER_WRITE_VERDICTS=1 rewrites it -->\n",
           f"Helm storage × `status.history` on helm-controller **{version}**: what "
           f"helm-controller does once the chart is fixed, and what `kubectl flux-plunger "
           f"status` says.\n\n", LEGEND, TABLE_HEAD]
    for cell, name, verdict, plunger, recovered in sorted(rows, key=lambda r: (
            STATUSES.index(r[0].status), HISTORIES.index(r[0].history), r[0].deployed,
            r[0].replace is True, r[1])):
        agree = "yes" if plunger == expected_plunger(cell.status, verdict) else "**NO**"
        replace = "—" if cell.replace is None else str(cell.replace).lower()
        word = f"{verdict.reason}: {verdict.message}" if verdict.message else verdict.reason
        out.append(f"| {name} | `{cell.status}` | {cell.history} | "
                   f"{'yes' if cell.deployed else 'no'} | {replace} | {verdict.outcome} | "
                   f"{_cell_text(word)} | {plunger} | {agree} | {recovered} |\n")
    out.append("\nNot built:\n\n| newest | `status.history` | older `deployed` | why |\n"
               "| --- | --- | --- | --- |\n")
    for status, history, deployed, reason in pruned:
        out.append(f"| `{status}` | {history} | {deployed} | {_cell_text(reason)} |\n")
    return "".join(out)


def design_markers(version: str) -> tuple[str, str]:
    """The lines around the table of ``version`` in docs/DESIGN.md."""
    return (f"<!-- verdict table: helm-controller {version} (generated; see "
            f"tests/unit/test_verdict_table.py) -->\n",
            f"<!-- end of the verdict table: helm-controller {version} -->\n")


def design_block(design: str, version: str) -> str | None:
    """What docs/DESIGN.md holds between ``version``'s markers, or None without them."""
    begin, end = design_markers(version)
    m = re.search(re.escape(begin) + r"(.*?)" + re.escape(end), design, re.S)
    return m.group(1) if m else None


def design_with(design: str, version: str, table: str) -> str:
    """docs/DESIGN.md with ``table`` between ``version``'s markers (they must be there)."""
    begin, end = design_markers(version)
    m = re.search(re.escape(begin) + r"(.*?)" + re.escape(end), design, re.S)
    if m is None:
        raise ValueError(f"docs/DESIGN.md has no markers for helm-controller {version}")
    return design[:m.start(1)] + table + design[m.end(1):]
