"""The Flux CLI face: krew/install-flux-plugin.sh puts flux-plunger where flux (>= 2.9)
looks for plugins, and the linked executable behaves as `flux plunger`.

What flux v2.9.5 does with a plugin (github.com/fluxcd/flux2/v2 internal/plugin,
discovery.go and exec_unix.go): it lists $FLUXCD_PLUGINS, else ~/.fluxcd/plugins/, takes
every entry named flux-<name> that os.Stat (following symlinks) reports as a regular,
executable file, and runs it with syscall.Exec(path, [path, args...]).  These tests check
that contract on what the script installs and then exec the plugin exactly that way.

The flux binary itself is not run: github.com/fluxcd/flux2/v2 does not build from its Go
module.  cmd/flux embeds `manifests/*.yaml` (`//go:embed` in cmd/flux/manifests.embed.go),
a directory its Makefile generates with kustomize from release assets downloaded from
GitHub; the module zip does not contain it, so `go build .../cmd/flux` fails at package
load with "pattern manifests/*.yaml: no matching files found".
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "krew" / "install-flux-plugin.sh"
VENV_BIN = Path(sys.executable).parent
SYSTEM_PATH = "/usr/bin:/bin"


def install(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def discovered(plugin_dir: Path) -> list[Path]:
    """flux 2.9.5's Discover(): flux-* entries that stat as regular executable files."""
    out = []
    for entry in sorted(plugin_dir.iterdir()):
        if not entry.name.startswith("flux-") or entry.name == "flux-":
            continue
        try:
            st = os.stat(entry)  # follows symlinks, like Go's os.Stat
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
            out.append(entry)
    return out


def exec_like_flux(plugin: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    """syscall.Exec(path, [path, args...], os.Environ())."""
    return subprocess.run([str(plugin), *args], executable=str(plugin), capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)


def test_links_the_pip_installed_flux_plunger_into_FLUXCD_PLUGINS(plane, cluster, tmp_path):
    plugins = tmp_path / "plugins"
    env = {"PATH": f"{VENV_BIN}:{SYSTEM_PATH}", "HOME": str(tmp_path / "home"),
           "FLUXCD_PLUGINS": str(plugins)}
    proc = install(env)
    assert proc.returncode == 0, proc.stderr
    link = plugins / "flux-plunger"
    assert proc.stdout.splitlines()[0] == f"linked {link} -> {VENV_BIN / 'flux-plunger'}"
    assert discovered(plugins) == [link]
    assert os.path.realpath(link) == os.path.realpath(VENV_BIN / "flux-plunger")

    ns = cluster.namespace("fluxplug")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    run_env = dict(env, KUBECONFIG=str(plane.kubeconfig))
    status = exec_like_flux(link, "status", "-A", env=run_env)
    assert status.returncode == 0, status.stderr
    rows = [line.split() for line in status.stdout.splitlines()]
    assert rows[0][:2] == ["NAMESPACE", "NAME"]
    assert any(r[:2] == [ns, "demo"] and "stuck" in r for r in rows), status.stdout
    helped = exec_like_flux(link, "--help", env=run_env)
    assert helped.stdout.startswith("Usage: flux plunger ")
    bad = exec_like_flux(link, "status", "--bogus", env=run_env)
    assert bad.returncode == 2
    assert "See 'flux plunger status --help' for usage." in bad.stderr


def test_flags_typed_before_the_plugin_name_reach_the_verb(plane, cluster, tmp_path):
    """`flux -n NS plunger status`: cobra finds `plunger` past the root's flags and the plugin
    command (DisableFlagParsing) gets every other word, so flux execs
    `flux-plunger -n NS status` (cmd/flux/plugin.go, internal/plugin/exec_unix.go)."""
    plugins = tmp_path / "plugins"
    env = {"PATH": f"{VENV_BIN}:{SYSTEM_PATH}", "HOME": str(tmp_path / "home"),
           "FLUXCD_PLUGINS": str(plugins)}
    assert install(env).returncode == 0
    link = plugins / "flux-plunger"
    ns = cluster.namespace("teamb")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    run_env = dict(env, KUBECONFIG=str(plane.kubeconfig))
    for argv in (["-n", ns, "status"], [f"--namespace={ns}", "status"],
                 ["--kubeconfig", str(plane.kubeconfig), "-n", ns, "status", "-o", "name"]):
        res = exec_like_flux(link, *argv, env=run_env)
        assert res.returncode == 0, (argv, res.stderr)
        assert "demo" in res.stdout and "NAMESPACE" not in res.stdout, (argv, res.stdout)
    # `flux -n NS plunger version`: -n means nothing to version and is ignored, like kubectl
    res = exec_like_flux(link, "-n", ns, "version", "--client", env=run_env)
    assert res.returncode == 0 and res.stdout.startswith("Client Version: "), res.stderr


def test_flux_completion_protocol_offers_namespaces_and_releases(plane, cluster, tmp_path):
    """`flux plunger status -n <TAB>` runs `flux-plunger __complete status -n ''`
    (internal/plugin/completion.go): namespaces, then HelmRelease names, from the cluster."""
    plugins = tmp_path / "plugins"
    env = {"PATH": f"{VENV_BIN}:{SYSTEM_PATH}", "HOME": str(tmp_path / "home"),
           "FLUXCD_PLUGINS": str(plugins), "KUBECONFIG": str(plane.kubeconfig)}
    assert install(env).returncode == 0
    link = plugins / "flux-plunger"
    ns = cluster.namespace("compl")
    cluster.create_hr(ns, "alpha")
    cluster.create_hr(ns, "beta")
    res = exec_like_flux(link, "__complete", "status", "-n", ns[:-2], env=env)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert ns in lines[:-1] and lines[-1] == ":4", res.stdout
    res = exec_like_flux(link, "__complete", "recover", "-n", ns, "alpha", "", env=env)
    assert res.stdout.splitlines() == ["beta", ":4"]
    res = exec_like_flux(link, "__complete", "-n", ns, "status", "a", env=env)
    assert res.stdout.splitlines() == ["alpha", ":4"]


def test_defaults_to_the_home_plugin_directory(tmp_path):
    home = tmp_path / "home"
    env = {"PATH": f"{VENV_BIN}:{SYSTEM_PATH}", "HOME": str(home)}
    proc = install(env)
    assert proc.returncode == 0, proc.stderr
    assert discovered(home / ".fluxcd" / "plugins") == [home / ".fluxcd" / "plugins" / "flux-plunger"]
    # running it again replaces the link rather than failing
    assert install(env).returncode == 0


@pytest.fixture(scope="module")
def krew_launcher(tmp_path_factory) -> Path:
    """The krew archive built from this tree, extracted (as krew's store holds it)."""
    import tarfile
    out = tmp_path_factory.mktemp("krew-build")
    proc = subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "--out-dir", str(out),
                           "--manifest", str(out / "flux-plunger.yaml")], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    store = out / "store"
    with tarfile.open(next(out.glob("*.tar.gz"))) as tar:
        tar.extractall(store, filter="tar")
    return store / "kubectl-flux_plunger"


def test_links_the_krew_launcher_when_no_flux_plunger_is_installed(krew_launcher, tmp_path):
    bin_dir = tmp_path / "krew-bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl-flux_plunger").symlink_to(krew_launcher)
    plugins = tmp_path / "plugins"
    env = {"PATH": f"{bin_dir}:{SYSTEM_PATH}", "HOME": str(tmp_path), "FLUXCD_PLUGINS": str(plugins)}
    proc = install(env)
    assert proc.returncode == 0, proc.stderr
    link = plugins / "flux-plunger"
    assert discovered(plugins) == [link]
    helped = exec_like_flux(link, "--help", env=dict(env, PATH=f"{os.path.dirname(sys.executable)}:{SYSTEM_PATH}"))
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("Usage: flux plunger ")


def test_fails_clearly_when_nothing_is_installed(tmp_path):
    proc = install({"PATH": SYSTEM_PATH, "HOME": str(tmp_path)})
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: neither flux-plunger nor kubectl-flux_plunger is on PATH")
    assert not (tmp_path / ".fluxcd").exists()
