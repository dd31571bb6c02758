"""Start-up: what ``--help`` / ``version --client`` load and print (issue #13, item 4).

* the entry point answers ``--help``, ``-h``, ``--version`` and ``version --client`` from text
  pre-rendered by click, byte for byte what click prints (both program names, the widths
  click distinguishes), and the capture is current;
* an import budget measured with ``python -X importtime``: the fast path imports no
  third-party module at all; a verb's ``--help`` (click) imports neither the Kubernetes
  client, urllib3, yaml, prometheus_client nor the executor/API modules.
No timing is asserted (the CPU ratio is measured by bench/startup_bench.py).

The whole matrix of program names x arguments x widths runs here, in-process (the entry
point's ``main`` against click's own rendering).  The fresh interpreters an import budget
needs are in the cli tier: tests/cli/test_fresh_interpreters.py.
"""
from __future__ import annotations

import contextlib
import io
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


def test_called_as_kubectls_completion_helper_it_completes(monkeypatch, capsys):
    """A link named kubectl_complete-flux_plunger (what kubectl runs to complete `kubectl
    flux-plunger …`; the krew binary is linked under that name) answers cobra's protocol."""
    assert entry.completion_link("/k/bin/kubectl_complete-flux_plunger")
    assert not entry.completion_link("/k/bin/kubectl-flux_plunger")
    assert not entry.completion_link("flux-plunger")
    monkeypatch.setattr(sys, "argv", ["/k/bin/kubectl_complete-flux_plunger", "st"])
    assert entry.main() == 0
    assert capsys.readouterr().out.splitlines() == ["status", ":4"]
    monkeypatch.setattr(sys, "argv", ["/k/bin/kubectl-flux_plunger", "version", "--client"])
    assert entry.main() == 0
    assert capsys.readouterr().out.startswith("Client Version: ")
