"""Shell completion, run by the real programs that ask for it (no cluster needed).

* kubectl's plugin completion (kubectl >= 1.26, pkg/cmd/plugin/plugin_completion.go):
  `kubectl __complete flux-plunger WORD...` runs `kubectl_complete-flux_plunger` from PATH
  with the words and reads one candidate per line plus an optional ":<directive>" line.
  krew/kubectl_complete-flux_plunger answers from click's own completion.
* Direct completion of the executables in bash (docs/INSTALL.md):
  `eval "$(_KUBECTL_FLUX_PLUNGER_COMPLETE=bash_source kubectl-flux_plunger)"` and
  `eval "$(_FLUX_PLUNGER_COMPLETE=bash_source flux-plunger)"`, exercised by sourcing the
  script into a real bash and calling the completion function; zsh and fish scripts are
  checked for the command they register.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "krew" / "kubectl_complete-flux_plunger"
VENV_BIN = Path(sys.executable).parent
KUBECTL = shutil.which("kubectl")
BASH = shutil.which("bash")


@pytest.fixture
def kubectl_present() -> None:
    assert KUBECTL, "kubectl is not on PATH: these run kubectl's own plugin completion"


@pytest.fixture
def bash_present() -> None:
    assert BASH, "bash is not on PATH: these source the completion script into bash"


# a missing kubectl or bash fails these loudly, never skips them
needs_kubectl = pytest.mark.usefixtures("kubectl_present")
needs_bash = pytest.mark.usefixtures("bash_present")


@pytest.fixture(scope="module")
def path_dir(tmp_path_factory) -> Path:
    """PATH entry with the installed executables and the completion helper."""
    d = tmp_path_factory.mktemp("completion-bin")
    for name in ("kubectl-flux_plunger", "flux-plunger"):
        (d / name).symlink_to(VENV_BIN / name)
    (d / "kubectl_complete-flux_plunger").symlink_to(HELPER)
    return d


def env_with(path_dir: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_COMPLETE")}
    env.pop("KUBECONFIG", None)
    env["PATH"] = f"{path_dir}{os.pathsep}{os.environ['PATH']}"
    env.update(extra)
    return env


def kubectl_complete(path_dir: Path, *words: str) -> tuple[list[str], str]:
    """(candidates, directive line) of `kubectl __complete flux-plunger WORDS...`."""
    proc = subprocess.run([KUBECTL, "__complete", "flux-plunger", *words], capture_output=True,
                          text=True, env=env_with(path_dir), timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    return lines[:-1], lines[-1]


def test_helper_is_executable():
    assert os.access(HELPER, os.X_OK)
    assert HELPER.read_text().startswith("#!/bin/sh\n")


@needs_kubectl
def test_kubectl_completes_the_verbs(path_dir):
    cands, directive = kubectl_complete(path_dir, "")
    assert cands == ["recover", "release-fence", "restore", "resume-owned", "serve", "status",
                     "version"]
    assert directive == ":4"
    assert kubectl_complete(path_dir, "st") == (["status"], ":4")
    assert kubectl_complete(path_dir, "rel") == (["release-fence"], ":4")


@needs_kubectl
def test_kubectl_completes_flags_and_choices(path_dir):
    cands, directive = kubectl_complete(path_dir, "status", "--all")
    assert (cands, directive) == (["--all-namespaces"], ":4")
    assert kubectl_complete(path_dir, "status", "-o", "") == (
        ["table", "wide", "json", "yaml", "name"], ":4")
    assert kubectl_complete(path_dir, "recover", "--dry-run", "s") == (["server"], ":4")
    # words with spaces and quotes reach click intact
    assert kubectl_complete(path_dir, "status", "-l", "a in (x, 'y')", "--out") == (
        ["--output"], ":4")


@needs_kubectl
def test_kubectl_falls_back_to_file_completion_for_paths(path_dir):
    # --kubeconfig takes a file: no candidates, cobra's default directive (shell files)
    assert kubectl_complete(path_dir, "status", "--kubeconfig", "") == ([], ":0")


def test_helper_reports_an_error_directive_when_the_plugin_is_missing(tmp_path):
    proc = subprocess.run([str(HELPER), "st"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "FLUX_PLUNGER_BIN": str(tmp_path / "none")})
    assert proc.stdout == ":1\n"


def bash_complete(path_dir: Path, program: str, var: str, *words: str) -> list[str]:
    """Source `VAR=bash_source PROGRAM` into bash and complete WORDS (the last is partial)."""
    func = "_" + program.replace("-", "_") + "_completion"
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in (program, *words))
    script = (f'eval "$({var}=bash_source {program})" || exit 9\n'
              f'complete -p {program} || exit 8\n'
              f'COMP_WORDS=({quoted}); COMP_CWORD={len(words)}\n'
              f'{func} {program} || exit 7\n'
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    proc = subprocess.run([BASH, "--norc", "--noprofile", "-c", script], capture_output=True,
                          text=True, env=env_with(path_dir), timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines[0] == f"complete -o nosort -F {func} {program}"
    return [line for line in lines[1:] if line]


@needs_bash
def test_bash_completion_of_kubectl_flux_plunger(path_dir):
    assert bash_complete(path_dir, "kubectl-flux_plunger", "_KUBECTL_FLUX_PLUNGER_COMPLETE",
                         "st") == ["status"]
    assert bash_complete(path_dir, "kubectl-flux_plunger", "_KUBECTL_FLUX_PLUNGER_COMPLETE",
                         "status", "-o", "") == ["table", "wide", "json", "yaml", "name"]


@needs_bash
def test_bash_completion_of_flux_plunger(path_dir):
    assert bash_complete(path_dir, "flux-plunger", "_FLUX_PLUNGER_COMPLETE",
                         "release-fence", "--wait") == ["--wait-uninstall"]


@pytest.mark.parametrize("shell, registers", [
    ("zsh", "compdef _kubectl_flux_plunger_completion kubectl-flux_plunger"),
    ("fish", "complete --no-files --command kubectl-flux_plunger"),
])
def test_zsh_and_fish_scripts_register_the_executable(path_dir, shell, registers):
    proc = subprocess.run(["kubectl-flux_plunger"], capture_output=True, text=True, timeout=60,
                          env=env_with(path_dir, _KUBECTL_FLUX_PLUNGER_COMPLETE=f"{shell}_source"))
    assert proc.returncode == 0, proc.stderr
    assert registers in proc.stdout
