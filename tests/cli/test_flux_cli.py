"""The real Flux CLI as flux-plunger's plugin host: flux v2.9.5, built from its Go module
(testplane/binaries.py, target ``flux``; its embedded install manifests are a placeholder,
which only ``flux install`` reads), with the plugin linked by krew/install-flux-plugin.sh and
found by flux's own discovery ($FLUXCD_PLUGINS, else ~/.fluxcd/plugins).  No cluster: what
needs one (flux's global flags before the verb, reaching a real apiserver) is in
tests/apiserver/test_flux_plugin.py."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "krew" / "install-flux-plugin.sh"
VENV_BIN = Path(sys.executable).parent
SYSTEM_PATH = "/usr/bin:/bin"
UNREACHABLE = """\
apiVersion: v1
kind: Config
current-context: t
clusters:
- {name: t, cluster: {server: 'https://127.0.0.1:1'}}
users:
- {name: u, user: {token: abc}}
contexts:
- {name: t, context: {cluster: t, user: u}}
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{VENV_BIN}:{SYSTEM_PATH}", "HOME": str(tmp_path / "home"), **extra}


def _install(env: dict[str, str]) -> None:
    proc = subprocess.run(["/bin/sh", str(SCRIPT)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def _flux(binary: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def plugged(tmp_path) -> dict[str, str]:
    """An environment whose $FLUXCD_PLUGINS holds the link the install script makes."""
    env = _env(tmp_path, FLUXCD_PLUGINS=str(tmp_path / "plugins"))
    _install(env)
    return env


def test_it_is_the_real_flux(flux_binary, tmp_path):
    res = _flux(flux_binary, _env(tmp_path), "version", "--client")
    assert res.returncode == 0 and "flux: v2.9.5" in res.stdout, res


def test_flux_finds_the_linked_plugin_and_only_then(flux_binary, tmp_path):
    """Before the install script ran, `flux plunger` is no command; after it, in
    $FLUXCD_PLUGINS or in the default ~/.fluxcd/plugins, flux's discovery finds it."""
    bare = _env(tmp_path, FLUXCD_PLUGINS=str(tmp_path / "empty"))
    res = _flux(flux_binary, bare, "plunger", "--help")
    assert res.returncode != 0 and "Usage: flux plunger" not in res.stdout, res
    for env in (_env(tmp_path, FLUXCD_PLUGINS=str(tmp_path / "plugins")),
                _env(tmp_path)):                                  # ~/.fluxcd/plugins
        _install(env)
        res = _flux(flux_binary, env, "plunger", "--help")
        assert res.returncode == 0 and res.stdout.startswith("Usage: flux plunger "), res
        res = _flux(flux_binary, env, "plunger", "version", "--client")
        assert res.returncode == 0 and res.stdout.startswith("Client Version: "), res


def test_exit_codes_pass_through(flux_binary, plugged, tmp_path):
    """flux execs the plugin in its own place, so the plugin's exit code is flux's: 2 for
    usage, 1 for a failure (a cluster that cannot be reached), 0 for success."""
    res = _flux(flux_binary, plugged, "plunger", "status", "--bogus")
    assert res.returncode == 2, res
    assert "See 'flux plunger status --help' for usage." in res.stderr, res
    kc = tmp_path / "unreachable"
    kc.write_text(UNREACHABLE)
    res = _flux(flux_binary, plugged, "plunger", "--kubeconfig", str(kc), "status",
                "--request-timeout", "5s")
    assert res.returncode == 1, res
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res
    assert "127.0.0.1:1" in res.stderr, res
    res = _flux(flux_binary, plugged, "plunger", "version", "--client")
    assert res.returncode == 0, res


def test_flux_completes_the_plugins_verbs_and_flag_values(flux_binary, plugged):
    """`flux plunger <TAB>`: flux asks the plugin with cobra's __complete protocol and
    relays its candidates and the directive line (4: no file completion)."""
    res = _flux(flux_binary, plugged, "__complete", "plunger", "st")
    assert res.returncode == 0, res
    assert res.stdout.splitlines() == ["status", ":4"], res
    res = _flux(flux_binary, plugged, "__complete", "plunger", "")
    assert res.stdout.splitlines() == ["recover", "release-fence", "restore", "resume-owned",
                                       "serve", "status", "version", ":4"], res
    res = _flux(flux_binary, plugged, "__complete", "plunger", "recover", "--dry-run=")
    assert res.stdout.splitlines() == ["none", "client", "server", ":4"], res


def test_flux_lists_the_plugin_in_its_help(flux_binary, plugged):
    res = _flux(flux_binary, plugged, "--help")
    assert res.returncode == 0, res
    lines = res.stdout.splitlines()
    at = lines.index("Plugin Commands:")
    assert lines[at + 1].split() == ["plunger", "Runs", "the", "plunger", "plugin"], res.stdout
