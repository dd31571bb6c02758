"""Start-up: what ``--help`` / ``version --client`` load and print (issue #13, item 4).

* the entry point answers ``--help``, ``-h``, ``--version`` and ``version --client`` from text
  pre-rendered by click, byte for byte what click prints (both program names, the widths
  click distinguishes), and the capture is current;
* an import budget measured with ``python -X importtime``: the fast path imports no
  third-party module at all; a verb's ``--help`` (click) imports neither the Kubernetes
  client, urllib3, yaml, prometheus_client nor the executor/API modules.
No timing is asserted (the CPU ratio is measured by bench/startup_bench.py).

The whole matrix of program names x arguments x widths runs in-process (the entry point's
``main`` against click's own rendering).  Fresh interpreters, which an import budget needs,
run once for each argument form (as the installed program is started) and once for all the
verbs' help through click (one interpreter; the imports between one invocation and the next
are charged to it).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubectl_flux_plunger import entry
from kubectl_flux_plunger.cli import prerender

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]

HEAVY = ("kubernetes", "urllib3", "yaml", "prometheus_client", "requests", "jsonpatch",
         "kubectl_flux_plunger.kube", "kubectl_flux_plunger.executor",
         "kubectl_flux_plunger.serve")
FAST_ALLOWED = {"kubectl_flux_plunger", "kubectl_flux_plunger.__main__",
                "kubectl_flux_plunger.entry", "kubectl_flux_plunger._prerendered"}
ARGS = [["--help"], ["-h"], ["--version"], ["version", "--client"]]
PROG = {"kubectl-flux_plunger": "kubectl flux-plunger", "flux-plunger": "flux plunger"}


def run(argv0: str, args: list[str], *, via: str = "entry", columns: str = "80",
        importtime: bool = False) -> subprocess.CompletedProcess[str]:
    code = (f"import sys; sys.argv = [{argv0!r}, *{args!r}]\n"
            f"from kubectl_flux_plunger.{via} import main\n"
            "sys.exit(main())\n")
    return python(code, columns=columns, importtime=importtime)


def python(code: str, *, columns: str = "80",
           importtime: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_COMPLETE")}
    env.update(COLUMNS=columns, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, *(["-X", "importtime"] if importtime else []),
                           "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def imported(stderr: str) -> set[str]:
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":           # the header line
                names.add(name)
    return names


def click_prints(argv0: str, args: list[str], columns: str) -> tuple[int, str]:
    """(exit status, stdout) of the click CLI itself, in this process."""
    return prerender.run_cli(args, PROG[argv0], int(columns))


def entry_prints(argv0: str, args: list[str], columns: str,
                 monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, bool]:
    """(exit status, stdout, answered without click) of the entry point, in this process."""
    for var in ("_FLUX_PLUNGER_COMPLETE", "_KUBECTL_FLUX_PLUNGER_COMPLETE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(sys, "argv", [argv0, *args])
    fast = entry.fast_answer(args) is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = entry.main()
    return code, out.getvalue(), fast


def test_the_prerendered_text_is_current():
    assert prerender.TARGET.read_text() == prerender.source(), (
        "run: python -m kubectl_flux_plunger.cli.prerender")


@pytest.mark.parametrize("argv0", list(PROG))
@pytest.mark.parametrize("args", ARGS)
@pytest.mark.parametrize("columns", ["80", "100", "160", "64"])
def test_the_fast_path_prints_exactly_what_click_prints(argv0, args, columns, monkeypatch):
    code, out, fast = entry_prints(argv0, args, columns, monkeypatch)
    assert (code, out) == click_prints(argv0, args, columns)
    assert code == 0 and out.endswith("\n") and len(out) > 5
    # 64 columns is not pre-rendered: click renders it, as it did before
    assert fast == (columns != "64" or args[0] != "--help" and args[0] != "-h")


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


def test_stale_text_is_never_printed(tmp_path, monkeypatch):
    """Sources changed without re-running the generator: the fingerprint differs and the
    fast path declines (click renders the new help)."""
    from kubectl_flux_plunger import _prerendered

    monkeypatch.setattr(_prerendered, "FINGERPRINT", "00000000")
    monkeypatch.setenv("COLUMNS", "80")
    assert entry.fast_answer(["--help"]) is None
    assert entry.fast_answer(["version", "--client"]) is None
    monkeypatch.undo()
    monkeypatch.setenv("COLUMNS", "80")
    assert entry.fast_answer(["--help"]) is not None
    assert entry.fast_answer(["status"]) is None
    monkeypatch.setenv("_KUBECTL_FLUX_PLUNGER_COMPLETE", "bash_source")
    assert entry.fast_answer(["--help"]) is None


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
