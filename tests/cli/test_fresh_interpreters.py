"""Start-up in fresh interpreters, as the installed program starts (issue #13, item 4): the
import budget measured with ``python -X importtime`` — the fast path imports no third-party
module at all; a verb's ``--help`` (click) imports neither the Kubernetes client, urllib3,
yaml, prometheus_client nor the executor/API modules — and what a fresh interpreter prints.

One interpreter per argument form, and one for all the verbs' help through click (the imports
between one invocation and the next are charged to it).  The in-process matrix of the same
texts is tests/unit/test_startup.py, whose helpers these share.  No timing is asserted
(bench/startup_bench.py measures the CPU ratio).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.unit.test_startup import (
    FAST_ALLOWED,
    HEAVY,
    click_prints,
    imported,
    python,
    run,
)

pytestmark = pytest.mark.cli


# As the installed program starts, in a fresh interpreter each: one case per argument form
# (both program names, widths captured and not), run once for the two tests below.
FRESH = [
    ("kubectl-flux_plunger", ["--help"], "80"),
    ("flux-plunger", ["-h"], "160"),
    ("flux-plunger", ["--version"], "64"),
    ("kubectl-flux_plunger", ["version", "--client"], "100"),
    ("flux-plunger", ["--help"], "64"),           # not pre-rendered: click renders it
]


@pytest.fixture(scope="module")
def fresh() -> list[subprocess.CompletedProcess[str]]:
    return [run(argv0, args, columns=columns, importtime=True) for argv0, args, columns in FRESH]


@pytest.mark.parametrize("case", range(len(FRESH)),
                         ids=["-".join([a, *b, c]) for a, b, c in FRESH])
def test_a_fresh_interpreter_prints_what_click_prints(case, fresh):
    """The fast path prints click's text; a width not captured goes through click."""
    argv0, args, columns = FRESH[case]
    proc = fresh[case]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (proc.returncode, proc.stdout) == click_prints(argv0, args, columns)
    took_fast_path = "click" not in imported(proc.stderr)
    assert took_fast_path == (columns != "64" or args[0] != "--help" and args[0] != "-h")


@pytest.mark.parametrize("args", [["--help"], ["version", "--client"]])
def test_the_fast_path_imports_nothing_but_its_own_two_modules(args, fresh):
    procs = [p for (_, a, c), p in zip(FRESH, fresh)
             if a[0] == args[0] and not (c == "64" and a in (["--help"], ["-h"]))]
    assert procs
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-2000:]
        ours = {m for m in imported(proc.stderr) if m.startswith("kubectl_flux_plunger")}
        assert ours <= FAST_ALLOWED, sorted(ours - FAST_ALLOWED)
        assert not imported(proc.stderr) & {"click", *HEAVY}


# What goes through click, each in turn in one fresh interpreter: (module, arguments, the
# modules that must not be imported).  An invocation is charged with every import between the
# marker written before it and the next one.
CLICK_CASES = [
    ("cli", args, HEAVY) for args in (
        ["--help"], ["status", "--help"], ["recover", "--help"], ["resume-owned", "--help"],
        ["release-fence", "--help"], ["serve", "--help"], ["version", "--help"])
] + [("entry", ["version", "--client", "-o", "json"],
      ("kubernetes", "urllib3", "prometheus_client", "kubectl_flux_plunger.executor"))]
MARK = "@@ flux-plunger case "


@pytest.fixture(scope="module")
def through_click() -> list[tuple[int, str, set[str]]]:
    """(exit status, stdout, modules imported) of each of CLICK_CASES."""
    cases = [(via, args) for via, args, _ in CLICK_CASES]
    code = ("import contextlib, importlib, io, json, sys\n"
            f"results = []\n"
            f"for i, (via, args) in enumerate({cases!r}):\n"
            f"    print({MARK!r} + str(i), file=sys.stderr, flush=True)\n"
            "    sys.argv = ['kubectl-flux_plunger', *args]\n"
            "    out = io.StringIO()\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        try:\n"
            "            rc = importlib.import_module('kubectl_flux_plunger.' + via).main()\n"
            "        except SystemExit as exc:\n"
            "            rc = exc.code\n"
            "    results.append((rc, out.getvalue()))\n"
            "print(json.dumps(results))\n")
    proc = python(code, importtime=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout)
    segments = proc.stderr.split(MARK)[1:]
    assert len(results) == len(segments) == len(CLICK_CASES), proc.stderr[-2000:]
    return [(rc, out, imported(seg)) for (rc, out), seg in zip(results, segments)]


@pytest.mark.parametrize("case", range(len(CLICK_CASES) - 1),
                         ids=[" ".join(args) for _, args, _ in CLICK_CASES[:-1]])
def test_help_through_click_loads_no_client(case, through_click):
    rc, out, names = through_click[case]
    args = CLICK_CASES[case][1]
    assert rc == 0 and out.startswith("Usage: kubectl flux-plunger"), (rc, out)
    heavy = sorted(m for m in names if m.split(".")[0] in HEAVY or m in HEAVY
                   or m.startswith("kubectl_flux_plunger.serve."))
    assert heavy == [], f"`{' '.join(args)}` imports {heavy}"


def test_version_client_as_json_loads_no_client(through_click):
    rc, out, names = through_click[-1]
    assert rc == 0 and '"clientVersion"' in out, out
    assert not names & set(CLICK_CASES[-1][2])
