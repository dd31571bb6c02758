"""Start-up: what ``--help`` / ``version --client`` load and print (issue #13, item 4).

* the entry point answers ``--help``, ``-h``, ``--version`` and ``version --client`` from text
  pre-rendered by click, byte for byte what click prints (both program names, the widths
  click distinguishes), and the capture is current;
* an import budget measured with ``python -X importtime``: the fast path imports no
  third-party module at all; a verb's ``--help`` (click) imports neither the Kubernetes
  client, urllib3, yaml, prometheus_client nor the executor/API modules.
No timing is asserted (the CPU ratio is measured by bench/startup_bench.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubectl_flux_plunger.cli import prerender

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]

HEAVY = ("kubernetes", "urllib3", "yaml", "prometheus_client", "requests", "jsonpatch",
         "kubectl_flux_plunger.kube", "kubectl_flux_plunger.executor",
         "kubectl_flux_plunger.serve")
FAST_ALLOWED = {"kubectl_flux_plunger", "kubectl_flux_plunger.__main__",
                "kubectl_flux_plunger.entry", "kubectl_flux_plunger._prerendered"}


def run(argv0: str, args: list[str], *, via: str = "entry", columns: str = "80",
        importtime: bool = False) -> subprocess.CompletedProcess[str]:
    code = (f"import sys; sys.argv = [{argv0!r}, *{args!r}]\n"
            f"from kubectl_flux_plunger.{via} import main\n"
            "sys.exit(main())\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_COMPLETE")}
    env.update(COLUMNS=columns, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, *(["-X", "importtime"] if importtime else []),
                           "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def imported(proc: subprocess.CompletedProcess[str]) -> set[str]:
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":           # the header line
                names.add(name)
    return names


def test_the_prerendered_text_is_current():
    assert prerender.TARGET.read_text() == prerender.source(), (
        "run: python -m kubectl_flux_plunger.cli.prerender")


@pytest.mark.parametrize("argv0", ["kubectl-flux_plunger", "flux-plunger"])
@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--version"], ["version", "--client"]])
@pytest.mark.parametrize("columns", ["80", "100", "160", "64"])
def test_the_fast_path_prints_exactly_what_click_prints(argv0, args, columns):
    fast = run(argv0, args, columns=columns, importtime=True)
    slow = run(argv0, args, via="cli", columns=columns)
    assert (fast.returncode, fast.stdout) == (slow.returncode, slow.stdout)
    assert fast.returncode == 0 and fast.stdout.endswith("\n") and len(fast.stdout) > 5
    # 64 columns is not pre-rendered: click renders it, as it did before
    took_fast_path = "click" not in imported(fast)
    assert took_fast_path == (columns != "64" or args[0] != "--help" and args[0] != "-h")


@pytest.mark.parametrize("args", [["--help"], ["version", "--client"]])
def test_the_fast_path_imports_nothing_but_its_own_two_modules(args):
    proc = run("kubectl-flux_plunger", args, importtime=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = {m for m in imported(proc) if m.startswith("kubectl_flux_plunger")}
    assert ours <= FAST_ALLOWED, sorted(ours - FAST_ALLOWED)
    assert not imported(proc) & {"click", *HEAVY}


def test_stale_text_is_never_printed(tmp_path, monkeypatch):
    """Sources changed without re-running the generator: the fingerprint differs and the
    fast path declines (click renders the new help)."""
    from kubectl_flux_plunger import _prerendered, entry

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


@pytest.mark.parametrize("args", [
    ["--help"], ["status", "--help"], ["recover", "--help"], ["resume-owned", "--help"],
    ["release-fence", "--help"], ["serve", "--help"], ["version", "--help"],
])
def test_help_through_click_loads_no_client(args):
    proc = run("kubectl-flux_plunger", args, via="cli", importtime=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    heavy = sorted(m for m in imported(proc) if m.split(".")[0] in HEAVY or m in HEAVY
                   or m.startswith("kubectl_flux_plunger.serve."))
    assert heavy == [], f"`{' '.join(args)}` imports {heavy}"


def test_version_client_as_json_loads_no_client():
    proc = run("kubectl-flux_plunger", ["version", "--client", "-o", "json"], importtime=True)
    assert proc.returncode == 0 and '"clientVersion"' in proc.stdout, proc.stderr[-2000:]
    heavy = {"kubernetes", "urllib3", "prometheus_client", "kubectl_flux_plunger.executor"}
    assert not imported(proc) & heavy
