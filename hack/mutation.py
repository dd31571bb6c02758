#!/usr/bin/env python3
"""Mutation testing of the modules that decide what is written (issue 40), with mutmut.

Each target below is one module run against the tests that cover it: the unit tier for the
pure core, a targeted real-apiserver subset for the executor, the survey and the drain.  The
targets that share their tests run as one batch: the tree is copied (the files git tracks,
plus new ones it does not ignore) into one work directory outside the checkout, mutmut is
configured there (setup.cfg: the modules to mutate, the tests, every other top-level path
the tests read), and one ``mutmut run`` mutates the batch's modules — its clean run and its
stats run of the tests, a minute or more each, paid once.  The script then prints the score
per module (killed / total) and every mutant that survived.

A survivor must be explained in hack/mutation-survivors.txt (equivalent, or only changes a
message) or killed by a new test.  An unexplained survivor makes the script exit 1, and so
does a tier whose score over a full run is below its goal.

    ./hack/mutation.sh                      every target: the core and the apiserver ones (a
                                            real control plane: the test binaries are built
                                            or taken from hack/setup.sh's cache)
    ./hack/mutation.sh --tier core          the pure core only (the unit tier; minutes)
    ./hack/mutation.sh --module plan        one module (repeatable)
    ./hack/mutation.sh --list               the table: module, source, tests, tier

Run through hack/mutation.sh, which installs hack/requirements-mutation.txt and runs this
under ``nice -n 19``.  Workers: --jobs (default 2, MUTATION_JOBS).

THE TABLE (TARGETS) IS DATA: when modules move, update the paths here, nothing else.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "kubectl_flux_plunger"
SURVIVORS = ROOT / "hack" / "mutation-survivors.txt"


@dataclass(frozen=True)
class Target:
    name: str  # what --module takes and what hack/mutation-survivors.txt calls it
    source: str  # the one file mutated, relative to the repository root
    tests: tuple[str, ...]  # pytest arguments selecting the tests that cover it
    tier: str  # "core" (unit tier, goal below) or "apiserver" (real apiserver, goal below)
    # only these functions' mutants are run and counted ("Class.method" for methods);
    # empty: every function in the file
    functions: tuple[str, ...] = field(default=())
    # tests of the selection left out for this target (pytest node ids): those that stop or
    # restart the apiserver, which the shared plane below does not allow
    deselect: tuple[str, ...] = field(default=())
    # mutmut's workers for this target at most (1: its tests see every namespace's Leases,
    # so two sessions on one plane would see each other's)
    max_jobs: int = 0


UNIT = ("tests/unit",)
# the real-apiserver tests that drive the executor in the pytest process (the ``executor``
# and ``make_executor`` fixtures): the only apiserver tests that can kill its mutants
EXECUTOR = tuple(f"tests/apiserver/{name}.py" for name in (
    "test_saga_safety", "test_recovery", "test_decision_rows", "test_flux_operator",
    "test_recovery_skipped",
))
# stops the apiserver: not on a shared plane
OUTAGE = ("tests/apiserver/test_recovery.py::"
          "test_a_relinquish_outlasts_an_apiserver_outage_after_its_write_failed",)
GOALS = {"core": 95.0, "apiserver": 90.0}  # % killed, over every target of the tier

# -- the table: module -> the tests that cover it -----------------------------------------
# The executor's entries follow issue 39's split into one module per action.
# Only tests that call the module in the pytest process count: mutmut switches mutants on
# inside that process, so a test that runs the CLI or serve as a subprocess (most of
# tests/apiserver/test_cli_verbs.py, test_leases_everywhere.py, serve's drain) runs the
# unmutated code and kills nothing; mutmut reports a mutant no in-process test reaches as
# "no tests" (a survivor here).  Prefer the tests built on the in-process executor fixture.
TARGETS: tuple[Target, ...] = (
    # the pure core: what is written, decided without the API
    Target("plan", "kubectl_flux_plunger/core/plan.py", UNIT, "core"),
    Target("ownership", "kubectl_flux_plunger/core/ownership.py", UNIT, "core"),
    # the storage verdict: choose_revision and every function it reaches
    Target("storage", "kubectl_flux_plunger/core/storage.py", UNIT, "core", functions=(
        "choose_revision", "_check_newest", "_judged", "_check_state_error", "_check_name_in_use",
        "_unverified", "_install_replaces", "_legacy_dead_end", "_status_of", "_invalid",
        "_history_latest", "_label_deployed", "_storage_of", "_refuse",
        "_describe", "_why_not_blocking", "_payload_status", "_try_decode",
        "Revision.from_secret", "_revision_number", "_dig", "release_name",
        "_configured_release_name", "shorten_name", "storage_namespace",
    )),
    # the payload's decoding, which the storage verdict reads
    Target("payload", "kubectl_flux_plunger/core/payload.py", UNIT, "core", functions=(
        "decode_payload", "_b64decode",
    )),
    Target("detect", "kubectl_flux_plunger/core/detect.py", UNIT, "core"),
    Target("selector", "kubectl_flux_plunger/core/selector.py", UNIT, "core"),
    Target("scope", "kubectl_flux_plunger/core/scope.py", UNIT, "core"),
    Target("writes", "kubectl_flux_plunger/core/writes.py", UNIT, "core"),
    # the recovery budget (issue 57): when a stuck release is recovered, waits, or is given up
    Target("budget", "kubectl_flux_plunger/core/budget.py", UNIT, "core"),
    # the Lease renewal's answer, read from protobuf (issue 58)
    Target("protobuf", "kubectl_flux_plunger/kube/protobuf.py", UNIT, "core"),
    # the Lease survey's pure parts (which Lease covers a release, which is live, what the
    # warning says): unit-tested (tests/unit/test_controllers.py, test_selector.py,
    # test_status_state.py); its reads of the API are the lease_survey target below
    Target("controller_lease", "kubectl_flux_plunger/kube/controller_lease.py", UNIT, "core",
           functions=(
        "ControllerLease.covers", "ControllerLease.scope", "ControllerLease.age",
        "ControllerLease.describe", "ControllerLease._holds", "ControllerLease.coverage",
        "ControllerLease.deferral", "_ours", "Controllers.live", "Controllers.covering",
        "Controllers.unreadable", "Controllers.blind", "Controllers.warning",
        "Controllers.without", "from_items", "_of",
    )),
    # -- the executor, the survey against the API, the drain and the fence sweep ----------
    Target("recover", "kubectl_flux_plunger/executor/recover.py", UNIT + EXECUTOR,
           "apiserver", deselect=OUTAGE),
    Target("classify", "kubectl_flux_plunger/executor/classify.py", UNIT + EXECUTOR,
           "apiserver", deselect=OUTAGE),
    Target("handshake", "kubectl_flux_plunger/executor/handshake.py", UNIT + EXECUTOR,
           "apiserver", deselect=OUTAGE),
    Target("primitives", "kubectl_flux_plunger/executor/primitives.py", UNIT + EXECUTOR,
           "apiserver", deselect=OUTAGE),
    Target("executor", "kubectl_flux_plunger/executor/executor.py", UNIT + EXECUTOR,
           "apiserver", deselect=OUTAGE),
    Target("relinquish", "kubectl_flux_plunger/executor/relinquish.py", UNIT + EXECUTOR,
           "apiserver", deselect=OUTAGE),
    Target("remove_fence", "kubectl_flux_plunger/executor/remove_fence.py", UNIT + EXECUTOR,
           "apiserver", deselect=OUTAGE),
    Target("switch", "kubectl_flux_plunger/executor/switch.py", UNIT + EXECUTOR,
           "apiserver", deselect=OUTAGE),
    # the drain and the sweep take their clock, executor and hooks as arguments: the unit
    # tier reaches every branch (tests/unit/test_executor_drain.py, test_fence_sweep_verb.py;
    # the apiserver tests of both run serve or the CLI as a process and can kill nothing)
    Target("drain", "kubectl_flux_plunger/executor/drain.py", UNIT, "apiserver"),
    Target("fence_sweep", "kubectl_flux_plunger/verbs/fence_sweep.py", UNIT, "apiserver"),
    Target("lease_survey", "kubectl_flux_plunger/kube/controller_lease.py", UNIT + (
        "tests/apiserver/test_leases_everywhere.py", "tests/apiserver/test_lease_survey.py",
    ), "apiserver", max_jobs=1, functions=("read", "survey", "_fallback", "read_all",
                               "default_lease_namespace")),
)

# Tests that read the package's source text rather than run it: mutmut's trampolines make every
# mutated module longer than the house limits, and these tests can kill no mutant.
NOT_ON_MUTANTS = (
    "tests/unit/test_house_limits.py::test_the_package_keeps_the_house_limits",
)

# mutmut's exit codes per mutant (mutmut.stats.status_by_exit_code), grouped: a timeout is a
# kill (the tests noticed: they did not finish), anything not killed must be explained
KILLED = {"killed", "timeout", "caught by type check"}


# -- the work copy -------------------------------------------------------------------------

def _tree_files() -> list[str]:
    """What a fresh clone (plus this checkout's uncommitted work) holds: tracked files and
    untracked ones git does not ignore, that still exist."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode()
    return sorted(p for p in out.split("\0") if p and (ROOT / p).is_file())


def _copy_tree(dest: Path) -> list[str]:
    """Copy the tree into dest (which is emptied); returns its top-level entries."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    files = _tree_files()
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    return sorted({rel.split("/", 1)[0] for rel in files})


def _mutant_globs(target: Target) -> list[str]:
    """mutmut's mutant-name patterns (fnmatch) for target: its functions, else its module."""
    module = target.source[:-3].replace("/", ".")
    if not target.functions:
        return [f"{module}.*"]
    return [f"{module}.{_mangle(fn)}__mutmut_*" for fn in target.functions]


def _mangle(function: str) -> str:
    """mutmut's name for a function: x_name, or xǁClassǁmethod."""
    if "." in function:
        cls, method = function.split(".", 1)
        return f"x\u01c1{cls}\u01c1{method}"
    return f"x_{function}"


def _function_of(mutant: str) -> str:
    """The function a mutant name is in ("Class.method" for methods)."""
    tail = mutant.rsplit(".", 1)[1]
    tail = re.sub(r"__mutmut_\d+$", "", tail)
    if tail.startswith("x\u01c1"):
        return ".".join(tail[2:].split("\u01c1"))
    return tail[2:] if tail.startswith("x_") else tail


def _setup_cfg(batch: list[Target], top: list[str]) -> str:
    target = batch[0]  # the batch shares its tests, deselections and workers
    also = [p for p in top if p not in (PACKAGE, "setup.cfg")]
    pytest_args = ["-p", "no:cacheprovider"]
    for test in NOT_ON_MUTANTS + target.deselect:
        pytest_args += ["--deselect", test]

    def lines(values: list[str] | tuple[str, ...]) -> str:
        return "".join(f"\n    {v}" for v in values)

    return (
        "[mutmut]\n"
        f"source_paths ={lines([PACKAGE])}\n"
        f"only_mutate ={lines(sorted({t.source for t in batch}))}\n"
        f"pytest_add_cli_args_test_selection ={lines(target.tests)}\n"
        f"pytest_add_cli_args ={lines(pytest_args)}\n"
        f"also_copy ={lines(also)}\n"
        # the work copy is not a git checkout: every run starts from a fresh copy
        "use_git_change_detection = false\n"
        # mutmut's default timeouts are kept: (the tests' time + 1 s) x 15 of wall time.  A
        # tighter one is faster on mutants that loop forever but, on a loaded machine, could
        # count a slow mutant as killed
    )


# -- running ---------------------------------------------------------------------------------

@dataclass
class Result:
    target: Target
    seconds: float
    statuses: dict[str, str]  # mutant name -> status
    diffs: dict[str, str]  # not-killed mutant name -> its diff
    error: str = ""
    batch: str = ""  # the work copy it ran in, with the other targets of its batch

    @property
    def counted(self) -> dict[str, str]:
        if not self.target.functions:
            return self.statuses
        wanted = set(self.target.functions)
        return {m: s for m, s in self.statuses.items() if _function_of(m) in wanted}

    @property
    def killed(self) -> int:
        return sum(1 for s in self.counted.values() if s in KILLED)

    @property
    def total(self) -> int:
        return len(self.counted)

    @property
    def survivors(self) -> list[str]:
        return sorted(m for m, s in self.counted.items()
                      if s not in KILLED and s != "not checked")

    @property
    def unchecked(self) -> int:
        """Mutants the run never got to (interrupted, or still running for --report-only)."""
        return sum(1 for s in self.counted.values() if s == "not checked")


_DIFFS = r"""
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
names, path = json.loads(sys.argv[1]), sys.argv[2]
print(json.dumps({n: get_diff_for_mutant(n, path=path) for n in names}))
"""


class SharedPlane:
    """One real control plane (testplane: etcd and kube-apiserver) for every pytest session of
    the apiserver-tier targets: mutmut runs a session per mutant, and starting a plane each
    time (about 11 s) would dominate.  The tests join it through FLUX_PLUNGER_TEST_PLANE_DIR;
    each test works in its own namespace, as it does in the apiserver tier."""

    def __init__(self, workdir: Path):
        self.workdir = workdir / "plane"
        self.plane = None

    def __enter__(self) -> "SharedPlane":
        if os.environ.get("FLUX_PLUNGER_TEST_PLANE_DIR"):
            return self   # the caller's plane
        sys.path.insert(0, str(ROOT))
        from testplane.plane import ControlPlane

        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        self.plane = ControlPlane(self.workdir)
        try:
            self.plane.start()
        except BaseException:
            self.plane.stop()
            raise
        print(f"== a shared control plane at {self.plane.server} "
              f"(started in {self.plane.start_seconds:.0f}s)", flush=True)
        os.environ["FLUX_PLUNGER_TEST_PLANE_DIR"] = str(self.workdir)
        return self

    def __exit__(self, *exc) -> None:
        if self.plane is not None:
            os.environ.pop("FLUX_PLUNGER_TEST_PLANE_DIR", None)
            self.plane.stop()


def _exit_on_signal(signum: int, frame: object) -> None:  # noqa: ARG001 - a handler's signature
    raise SystemExit(128 + signum)


def batches(chosen: list[Target]) -> list[list[Target]]:
    """The chosen targets in batches that share one work copy and one mutmut run: the same
    tests, deselections and workers (mutmut's clean run and its stats run of those tests,
    a minute or more each, are then paid once per batch, not once per module).  Two targets
    of one source file never share a batch (their mutants would be one set)."""
    out: list[list[Target]] = []
    for t in chosen:
        for batch in out:
            first = batch[0]
            if ((first.tests, first.deselect, first.max_jobs) == (t.tests, t.deselect, t.max_jobs)
                    and all(b.source != t.source for b in batch)):
                batch.append(t)
                break
        else:
            out.append([t])
    return out


def batch_name(batch: list[Target]) -> str:
    if len(batch) == 1:
        return batch[0].name
    names = "+".join(t.name for t in batch)
    return f"batch-{hashlib.sha256(names.encode()).hexdigest()[:10]}"


INDEX = "index.json"  # in the work directory: target name -> the work copy of its last run


def _index(workdir: Path) -> dict[str, str]:
    try:
        return json.loads((workdir / INDEX).read_text())
    except (OSError, ValueError):
        return {}


def run_batch(batch: list[Target], workdir: Path, jobs: int) -> list[Result]:
    name = batch_name(batch)
    work = workdir / name
    tests = batch[0].tests
    print(f"== {name}: {' '.join(t.source for t in batch)} against {' '.join(tests)}",
          flush=True)
    missing = [p for p in (*(t.source for t in batch), *tests)
               if not (ROOT / p.split("::")[0]).exists()]
    if missing:
        error = (f"the table (TARGETS in {Path(__file__).name}) names what does not exist: "
                 f"{', '.join(missing)}: update it")
        return [Result(t, 0.0, {}, {}, error=error, batch=name) for t in batch]
    start = time.monotonic()
    top = _copy_tree(work)
    (work / "setup.cfg").write_text(_setup_cfg(batch, top))
    log = work / "mutmut.log"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    globs = [g for t in batch for g in _mutant_globs(t)]
    workers = min(jobs, batch[0].max_jobs or jobs)
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(workers), *globs],
            cwd=work, stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL,
        )
    seconds = time.monotonic() - start
    (work / "seconds").write_text(f"{seconds:.1f}\n")
    index = _index(workdir)
    index.update({t.name: name for t in batch})
    (workdir / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    if proc.returncode != 0:
        error = f"mutmut run exited {proc.returncode} (log: {log}):\n{_tail(log)}"
        return [Result(t, seconds, {}, {}, error=error, batch=name) for t in batch]
    return [collect(t, workdir) for t in batch]


def _tail(log: Path) -> str:
    if not log.is_file():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").replace("\r", "\n").splitlines()[-40:])


def collect(target: Target, workdir: Path) -> Result:
    """The results of the last run in target's work copy (its batch's)."""
    name = _index(workdir).get(target.name, target.name)
    work = workdir / name
    meta = work / "mutants" / (target.source + ".meta")
    timing = work / "seconds"
    seconds = float(timing.read_text()) if timing.is_file() else 0.0
    if not meta.is_file():
        return Result(target, seconds, {}, {}, batch=name, error=f"no results in {work} (log: "
                      f"{work / 'mutmut.log'}):\n{_tail(work / 'mutmut.log')}")
    from mutmut.stats import status_by_exit_code

    codes = json.loads(meta.read_text())["exit_code_by_key"]
    statuses = {m: status_by_exit_code[c] for m, c in codes.items()}
    result = Result(target, seconds, statuses, {}, batch=name)
    if result.survivors:
        proc = subprocess.run(
            [sys.executable, "-c", _DIFFS, json.dumps(result.survivors), target.source],
            cwd=work, capture_output=True, text=True, check=True,
        )
        result.diffs = json.loads(proc.stdout)
    return result


# -- the explained survivors --------------------------------------------------------------------

def _changed(diff: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line[:1] == "-":
            removed.append(line[1:].strip())
        elif line[:1] == "+":
            added.append(line[1:].strip())
    return removed, added


def string_only(diff: str) -> bool:
    """The mutant only rewrites the text of a string literal the way mutmut's string
    mutators do ("XX" around it, lower or upper case)."""
    removed, added = _changed(diff)
    return (len(removed) == len(added) and removed != added
            and all(a.replace("XX", "").lower() == r.lower() for r, a in zip(removed, added)))


def fingerprint(diff: str) -> str:
    """What a mutant changes, independent of its number and of the lines around it: a hash
    of its removed and added lines, whitespace-trimmed.  The mutants that only rewrite one
    string literal's text share one fingerprint, "s" + a hash of the original line: one
    entry explains all of them (a message is a message, however it is garbled)."""
    removed, added = _changed(diff)
    if string_only(diff):
        return "s" + hashlib.sha256("\n".join(removed).encode()).hexdigest()[:9]
    text = "\n".join(["-" + r for r in removed] + ["+" + a for a in added])
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def load_explained(path: Path) -> dict[tuple[str, str, str], str]:
    """hack/mutation-survivors.txt: `module function fingerprint reason…` per line."""
    explained: dict[tuple[str, str, str], str] = {}
    if not path.is_file():
        return explained
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 3)
        if len(parts) < 4 or not parts[3].strip():
            sys.exit(f"error: {path}:{number}: expected `module function fingerprint reason`")
        explained[(parts[0], parts[1], parts[2])] = parts[3].strip()
    return explained


def report(results: list[Result], explained: dict[tuple[str, str, str], str],
           full: bool) -> int:
    rc = 0
    print()
    print(f"{'module':<18} {'killed':>6} {'total':>6} {'equiv':>6} {'msg':>4} {'score':>7} "
          f"{'raw':>7} {'time':>7}  work copy (a batch's time is on its first line; ^ same)")
    used: set[tuple[str, str, str]] = set()
    unexplained: list[tuple[Result, str]] = []
    tiers: dict[str, list[int]] = {}
    timed: set[str] = set()  # a batch's time is printed once, on its first target (^: same)
    for r in results:
        if r.error:
            print(f"{r.target.name:<18} error: {r.error}")
            rc = 1
            continue
        if r.unchecked:
            print(f"{r.target.name:<18} error: {r.unchecked} of {r.total} mutants were not "
                  "checked (the run was interrupted or is still going)")
            rc = 1
        equivalent = message = 0
        for m in r.survivors:
            key = (r.target.name, _function_of(m), fingerprint(r.diffs.get(m, "")))
            if key in explained:
                used.add(key)
                if explained[key].startswith("equivalent"):
                    equivalent += 1
                else:
                    message += 1
            else:
                unexplained.append((r, m))
        t = tiers.setdefault(r.target.tier, [0, 0, 0, 0])
        for i, n in enumerate((r.killed, r.total, equivalent, message)):
            t[i] += n
        shown = r.batch not in timed
        timed.add(r.batch)
        when = f"{r.seconds:>6.0f}s" if shown else f"{'':>6}^"
        print(f"{r.target.name:<18} {r.killed:>6} {r.total:>6} {equivalent:>6} {message:>4} "
              f"{_pct(r.killed, r.total - equivalent):>6.1f}% {_pct(r.killed, r.total):>6.1f}% "
              f"{when}  {r.batch}")
    for tier, (killed, total, equivalent, message) in sorted(tiers.items()):
        score = _pct(killed, total - equivalent)
        goal = GOALS[tier]
        verdict = "meets" if score >= goal else "BELOW"
        print(f"tier {tier}: {killed} killed of {total} mutants, {equivalent} equivalent: "
              f"score {score:.1f}% ({verdict} the goal of {goal:.0f}%; "
              f"{_pct(killed, total):.1f}% counting the equivalent ones); "
              f"{message} message-only survivors")
        if score < goal and full:
            rc = 1
    print("score: killed / (total - equivalent); raw: killed / total.  Explained survivors: "
          f"{SURVIVORS.relative_to(ROOT)}")
    for r in results:
        for m in r.survivors:
            key = (r.target.name, _function_of(m), fingerprint(r.diffs.get(m, "")))
            why = explained.get(key)
            label = f"explained: {why}" if why else "UNEXPLAINED"
            print(f"\n-- survivor ({r.statuses[m]}) {m}\n   {label}\n   line for "
                  f"{SURVIVORS.relative_to(ROOT)}: {key[0]} {key[1]} {key[2]} <why>")
            if not why:
                print("   " + r.diffs.get(m, "").replace("\n", "\n   "))
    ran = {r.target.name for r in results if not r.error}
    stale = sorted(k for k in explained if k[0] in ran and k not in used
                   and _ran_function(results, k))
    for k in stale:
        print(f"note: {SURVIVORS.relative_to(ROOT)}: {' '.join(k)} no longer survives "
              "(killed, or the code changed): remove the line")
    if unexplained:
        print(f"\nerror: {len(unexplained)} survivor(s) neither killed nor explained in "
              f"{SURVIVORS.relative_to(ROOT)}: kill each with a test that asserts the outcome "
              "it breaks, or add its line saying why it is equivalent or message-only")
        rc = 1
    return rc


def _pct(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole > 0 else 100.0


def _ran_function(results: list[Result], key: tuple[str, str, str]) -> bool:
    for r in results:
        if r.target.name == key[0] and (not r.target.functions or key[1] in r.target.functions):
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    names = [t.name for t in TARGETS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=names, metavar="NAME",
                        help=f"run only this target (repeatable): {', '.join(names)}")
    parser.add_argument("--tier", choices=("core", "apiserver", "all"), default="all",
                        help="which targets when no --module is given (default: all)")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("MUTATION_JOBS", "2")),
                        help="mutmut's parallel workers (default 2)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the work copies go (default: a directory per checkout "
                             "under $XDG_CACHE_HOME/kubectl-flux-plunger/mutation)")
    parser.add_argument("--list", action="store_true", help="print the table and exit")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: report the last run's results in the work copies "
                             "against hack/mutation-survivors.txt as it is now")
    args = parser.parse_args(argv)
    if args.list:
        for t in TARGETS:
            only = f"  (only {', '.join(t.functions)})" if t.functions else ""
            print(f"{t.name:<18} {t.tier:<10} {t.source}  <- {' '.join(t.tests)}{only}")
        return 0
    if args.module:
        chosen = [t for t in TARGETS if t.name in args.module]
    else:
        chosen = [t for t in TARGETS if args.tier in ("all", t.tier)]
    workdir = args.workdir or (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "kubectl-flux-plunger" / "mutation"
        / f"{ROOT.name}-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]}"
    )
    workdir = workdir.resolve()
    if workdir == ROOT or ROOT in workdir.parents:
        # the tests check that the run leaves the checkout clean: work outside it
        parser.error("--workdir must be outside the checkout")
    explained = load_explained(SURVIVORS)
    started = time.monotonic()
    if args.report_only:
        results = [collect(t, workdir) for t in chosen]
    elif any(t.tier == "apiserver" for t in chosen):
        # SIGTERM/SIGHUP (a cancelled workflow, a closed terminal) end the run through the
        # with-block, so the shared plane's etcd and kube-apiserver are stopped too
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _exit_on_signal)
        with SharedPlane(workdir):
            results = [r for b in batches(chosen) for r in run_batch(b, workdir, args.jobs)]
    else:
        results = [r for b in batches(chosen) for r in run_batch(b, workdir, args.jobs)]
    rc = report(results, explained, full=not args.module)
    print(f"\nwall time: {time.monotonic() - started:.0f}s for {len(results)} module(s), "
          f"{args.jobs} worker(s); work copies in {workdir}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
