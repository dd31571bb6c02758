"""The command line as a user meets it before any cluster answers, run as the real installed
executables (`kubectl-flux_plunger`, and `flux-plunger` exec'ed the way flux execs a plugin).

hack/test.sh also runs this file with the lowest click the package allows (pyproject's
``click>=`` bound, installed with ``pip --target`` and put first on PYTHONPATH), so both ends
of the supported click range are tested.

* no verb: the help on stdout, exit 0 (kubectl and flux do the same; click >= 8.2 alone
  would make it a usage error);
* flags typed before the verb (`flux -n team-b plunger status` runs
  `flux-plunger -n team-b status`) reach the verb;
* no kubeconfig at all: one kubectl-like line naming the files looked at and how to point
  at a cluster;
* every verb's help ends with `Examples:` using the name it was called by;
* kubectl's connection flags exist on every cluster verb and refuse bad combinations.

Most cases call the entry point in this process (`run`: the same ``main`` the executables
call, with their program name in ``sys.argv[0]``, the environment cleaned the same way and
stdout/stderr captured); the installed executables themselves are started (`run_installed`)
with no verb and with flags typed before the verb the way flux execs the plugin, and by
tests/cli/test_completion.py through kubectl and bash.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

VENV_BIN = Path(sys.executable).parent
VERBS = ["status", "recover", "resume-owned", "release-fence", "restore", "version", "serve"]
CLUSTER_VERBS = ["status", "recover", "resume-owned", "release-fence", "restore", "version"]


def environment(home: Path | None, env: dict[str, str]) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
         and not k.endswith("_COMPLETE")}
    if home is not None:
        e["HOME"] = str(home)
    e.update(env)
    return e


def run_installed(*args: str, prog: str = "kubectl-flux_plunger", home: Path | None = None,
                  **env: str) -> subprocess.CompletedProcess:
    """The installed executable PROG, started with ARGS."""
    exe = VENV_BIN / prog
    return subprocess.run([str(exe), *args], executable=str(exe), capture_output=True,
                          text=True, env=environment(home, env), timeout=60,
                          stdin=subprocess.DEVNULL)


def run(*args: str, prog: str = "kubectl-flux_plunger", home: Path | None = None,
        **env: str) -> subprocess.CompletedProcess:
    """What the executable PROG prints and returns for ARGS, run in this process: the entry
    point's ``main`` with PROG as ``sys.argv[0]`` and the environment `run_installed` gives
    (a pipe's 80 columns unless COLUMNS says otherwise)."""
    from kubectl_flux_plunger.entry import main
    e = environment(home, env)
    e.setdefault("COLUMNS", "80")
    # text streams over bytes, like a pipe's: click writes some output to their .buffer
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    with mock.patch.dict(os.environ, e, clear=True), \
            mock.patch.object(sys, "argv", [str(VENV_BIN / prog), *args]), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main()
        except SystemExit as exc:       # what the console script would exit with
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    text = []
    for stream in (out, err):
        stream.flush()
        text.append(stream.buffer.getvalue().decode())
    return subprocess.CompletedProcess([prog, *args], code, *text)


def test_click_in_use_is_within_the_pinned_range():
    from importlib import metadata

    from packaging.requirements import Requirement
    req = next(Requirement(r) for r in metadata.requires("kubectl-flux-plunger") or []
               if Requirement(r).name == "click")
    assert req.specifier.contains(metadata.version("click")), (str(req), metadata.version("click"))
    assert str(req.specifier) and "<" in str(req.specifier)   # an upper bound is pinned


@pytest.mark.parametrize("prog, name", [("kubectl-flux_plunger", "kubectl flux-plunger"),
                                        ("flux-plunger", "flux plunger")])
def test_no_verb_prints_the_help_and_succeeds(prog, name):
    p = run_installed(prog=prog)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert p.stdout.startswith(f"Usage: {name} ")
    assert "Commands:" in p.stdout and "Examples:" in p.stdout


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("prog, name", [("kubectl-flux_plunger", "kubectl flux-plunger"),
                                        ("flux-plunger", "flux plunger")])
def test_every_verb_help_has_examples(verb, prog, name):
    p = run(verb, "--help", prog=prog)
    assert p.returncode == 0, p.stderr
    examples = p.stdout.split("\nExamples:\n", 1)
    assert len(examples) == 2, p.stdout
    commands = [line.strip() for line in examples[1].splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert commands and all(c.startswith(f"{name} {verb}") for c in commands), commands


@pytest.mark.parametrize("verb", CLUSTER_VERBS)
def test_kubectl_connection_flags_are_on_every_cluster_verb(verb):
    out = run(verb, "--help").stdout
    for flag in ("--kubeconfig", "--context", "--request-timeout", "--server", "--token",
                 "--user", "--cluster", "--certificate-authority", "--insecure-skip-tls-verify",
                 "--as", "--as-group", "--as-uid", "--client-certificate", "--client-key",
                 "--tls-server-name"):
        assert f"{flag} " in out, (verb, flag)
    if verb == "status":
        assert "-w, --watch" in out and "--no-headers" in out


def test_no_kubeconfig_at_all_says_what_kubectl_says(tmp_path):
    p = run("status", home=tmp_path)
    assert p.returncode == 1
    assert p.stdout == ""
    assert p.stderr == (
        "error: no configuration has been provided: KUBECONFIG is not set, "
        f"{tmp_path}/.kube/config does not exist, and this is not a pod "
        "(KUBERNETES_SERVICE_HOST is not set); point at a cluster with --kubeconfig FILE, "
        "KUBECONFIG=FILE or --server URL\n")
    p = run("recover", home=tmp_path, KUBECONFIG=f"{tmp_path}/a{os.pathsep}{tmp_path}/b")
    assert p.returncode == 1
    assert p.stderr.startswith("error: no configuration has been provided: none of the files "
                               f"in KUBECONFIG exists ({tmp_path}/a, {tmp_path}/b), ")


@pytest.mark.parametrize("args", [
    ["-n", "team-b", "status"], ["--namespace=team-b", "status"], ["-nteam-b", "status"],
    ["--request-timeout", "5s", "-n", "team-b", "recover", "--dry-run"],
    ["--as", "jane", "--as-group", "ops", "status", "-A"],
])
def test_flags_before_the_verb_reach_it_like_flux_passes_them(args, tmp_path):
    """flux execs `flux-plunger <words before and after 'plunger'>`: the verb must run (here
    it stops at the missing kubeconfig, i.e. after parsing every flag)."""
    p = run(*args, prog="flux-plunger", home=tmp_path)
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("error: no configuration has been provided"), p.stderr


def test_the_installed_flux_plunger_takes_flags_before_the_verb(tmp_path):
    """The same as flux execs it: the installed executable, a flag before the verb."""
    p = run_installed("-n", "team-b", "status", "-A", prog="flux-plunger", home=tmp_path)
    assert p.returncode == 1, p.stderr
    assert p.stdout == ""
    assert p.stderr.startswith("error: no configuration has been provided"), p.stderr


def test_namespace_before_a_verb_without_namespaces_is_ignored_like_kubectl(tmp_path):
    p = run("-n", "team-b", "version", "--client", prog="flux-plunger", home=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("Client Version: ")


def test_a_flux_only_flag_before_the_verb_is_refused_by_name(tmp_path):
    p = run("--timeout", "5m", "status", prog="flux-plunger", home=tmp_path)
    assert p.returncode == 2
    assert p.stderr.startswith("error: --timeout is a flag of flux itself, which flux-plunger "
                               "does not take")


def test_an_unknown_flag_before_the_verb_is_a_usage_error(tmp_path):
    p = run("--frobnicate", "status", prog="flux-plunger", home=tmp_path)
    assert p.returncode == 2
    assert p.stderr.startswith("error: No such option") and "--frobnicate" in p.stderr
    assert p.stderr.endswith("See 'flux plunger --help' for usage.\n")


@pytest.mark.parametrize("args, message", [
    (["status", "--certificate-authority", "/x", "--insecure-skip-tls-verify"],
     "specifying a root certificates file with the insecure flag is not allowed"),
    (["status", "--as-group", "ops"], "requesting uid or groups without impersonating a user"),
    (["status", "--as-uid", "42"], "requesting uid or groups without impersonating a user"),
])
def test_bad_flag_combinations_are_usage_errors(args, message, tmp_path):
    p = run(*args, home=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"error: {message}")


def test_server_alone_needs_no_kubeconfig(tmp_path):
    """kubectl --server URL works without any kubeconfig; here nothing listens there."""
    p = run("status", "--server", "https://127.0.0.1:9", "--request-timeout", "2s",
            home=tmp_path)
    assert p.returncode == 1
    assert p.stderr.startswith("error: cannot reach the Kubernetes API at https://127.0.0.1:9"), \
        p.stderr


@pytest.mark.parametrize("value", ["1d", "-5s", "soon"])
def test_durations_are_go_durations(value, tmp_path):
    p = run("status", "--request-timeout", value, home=tmp_path)
    assert p.returncode == 2
    assert "invalid duration" in p.stderr


@pytest.mark.parametrize("prog", ["kubectl-flux_plunger", "flux-plunger"])
def test_cobra_complete_protocol(prog, tmp_path):
    """What `flux plunger <TAB>` and kubectl's completion helper run."""
    p = run("__complete", "re", prog=prog, home=tmp_path)
    assert p.returncode == 0 and p.stdout == "recover\nrelease-fence\nrestore\nresume-owned\n:4\n"
    p = run("__complete", "-n", "x", "status", "-o", "j", prog=prog, home=tmp_path)
    assert p.stdout == "json\n:4\n"
    # no cluster to ask: no namespaces, still a well-formed answer
    p = run("__complete", "status", "-n", "", prog=prog, home=tmp_path)
    assert p.returncode == 0 and p.stdout == ":4\n"
    # a flag taking a file: no candidates, cobra's default directive (the shell completes paths)
    p = run("__complete", "status", "--kubeconfig", "", prog=prog, home=tmp_path)
    assert p.returncode == 0 and p.stdout == ":0\n"


@pytest.mark.parametrize("prog, var, registers", [
    ("kubectl-flux_plunger", "_KUBECTL_FLUX_PLUNGER_COMPLETE",
     "complete -o nosort -F _kubectl_flux_plunger_completion kubectl-flux_plunger"),
    ("flux-plunger", "_FLUX_PLUNGER_COMPLETE", "compdef _flux_plunger_completion flux-plunger"),
])
def test_completion_scripts_and_answers_name_the_executable(prog, var, registers, tmp_path):
    """`eval "$(VAR=bash_source PROG)"` (docs/INSTALL.md): the script registers the executable's
    own name, not the "kubectl flux-plunger" users read in the help; then the shell asks
    PROG with VAR=bash_complete.  tests/cli/test_completion.py runs both in a real bash."""
    shell = "zsh" if prog == "flux-plunger" else "bash"
    p = run(prog=prog, home=tmp_path, **{var: f"{shell}_source"})
    assert p.returncode == 0 and registers in p.stdout, p.stdout + p.stderr
    p = run(prog=prog, home=tmp_path, COMP_WORDS=f"{prog} st", COMP_CWORD="1",
            **{var: "bash_complete"})
    assert p.returncode == 0 and p.stdout.splitlines() == ["plain,status"], p.stdout + p.stderr


# -- the hoisting itself (pure) ----------------------------------------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["--kubeconfig=/k", "-n", "ns", "status", "-o", "json"],
     ["status", "--kubeconfig=/k", "-n", "ns", "-o", "json"]),
    (["-A", "--as", "jane", "recover", "x"], ["recover", "-A", "--as", "jane", "x"]),
    (["-n", "ns", "-A", "version"], ["version"]),           # namespaces mean nothing there
    (["-A", "serve"], ["serve"]),
    (["-n", "ns", "serve"], ["serve", "-n", "ns"]),
    (["status", "-n", "ns"], ["status", "-n", "ns"]),       # nothing before the verb
    (["--help"], ["--help"]),
    (["-n", "ns"], []),                                     # no verb: the help
])
def test_hoist_global_flags(argv, expected):
    from kubectl_flux_plunger.cli import cli
    from kubectl_flux_plunger.cli import serve  # noqa: F401 - registers the serve verb
    from kubectl_flux_plunger.cli.argv import hoist_global_flags
    assert hoist_global_flags(cli, argv) == expected


def test_hoist_refuses_a_flag_without_its_value():
    import click

    from kubectl_flux_plunger.cli import cli
    from kubectl_flux_plunger.cli.argv import hoist_global_flags
    with pytest.raises(click.UsageError, match="flag needs an argument: -n"):
        hoist_global_flags(cli, ["-n"])


def test_the_restore_examples_name_a_file_recover_backup_dir_writes(tmp_path):
    import re
    from kubectl_flux_plunger.executor.backup import DirectoryBackup
    from kubectl_flux_plunger.cli.examples import EXAMPLES
    shape = re.compile(r"[a-z0-9-]+_[a-z0-9.-]+_v\d{8}_\d{8}T\d{12}Z\.json")
    written = DirectoryBackup(tmp_path).file_name(
        {"metadata": {"namespace": "team-a", "name": "podinfo"}},
        {"metadata": {"labels": {"version": "3"}}})
    assert shape.fullmatch(written), written
    files = re.findall(r"restore (\S+)", EXAMPLES["restore"])
    assert files and all(shape.fullmatch(f.rsplit("/", 1)[-1]) for f in files), files


def test_stop_deployment_help_names_the_not_found_case_the_hook_relies_on():
    """tests/apiserver/test_deploy_manifests.py: without the Deployment the sweep still runs;
    the help must not promise that no fence is touched then."""
    out = " ".join(run("release-fence", "--help").stdout.split())
    assert "unless the scale succeeded or the Deployment does not exist" in out, out
