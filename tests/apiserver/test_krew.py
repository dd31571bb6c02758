"""krew/: the binary archive krew/build.py makes on this machine (linux/amd64), checked with the
real krew (sigs.k8s.io/krew v0.4.3, built from its Go module) and run through the real kubectl
against the test apiserver.

* the COMMITTED krew/flux-plunger.yaml is what a build of this tree writes, but for the sha256,
  and every install below uses it when this build is the one its sha256 is of (frozen in the
  floor root, issue 37), else the manifest the build wrote (a cold run's apiserver tier comes
  before the late set-up has built the root; `build.py --check` and its stale message are
  tests/release/test_floor.py's, where the root is there);
* `validate-krew-manifest` accepts it structurally (five platforms, no overlap);
* `kubectl krew install --manifest … --archive …` into a temporary KREW_ROOT gives a `kubectl
  flux-plunger` that runs `version` and `status -A` against the apiserver, also when the only
  python3 on PATH is a real 3.9 (what used to fail) and when PYTHONPATH points at a poisoned
  client (nothing from outside the bundle is imported);
* krew refuses to install a platform built elsewhere from the committed manifest (its sha256
  is an empty file's), so it cannot install anything unchecked;
* uninstall removes it; the completion link docs/INSTALL.md gives completes and dies with it.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testplane import binaries

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "krew"
VERSION = re.search(r'__version__ = "([^"]+)"',
                    (ROOT / "kubectl_flux_plunger" / "__init__.py").read_text()).group(1)
TAG = f"v{VERSION}"
ARCHIVE = f"kubectl-flux_plunger-{TAG}-linux-amd64.tar.gz"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
COMMITTED = KREW / "flux-plunger.yaml"
STALE = ("krew/flux-plunger.yaml is stale (every change to the package changes the archive's "
         "sha256): refresh it with `python3 krew/build.py` and commit it")


def build(out: Path) -> tuple[Path, Path, bool]:
    """(archive, manifest, frozen in the floor root?)"""
    manifest = out / "flux-plunger.yaml"
    proc = subprocess.run([sys.executable, str(KREW / "build.py"), "--out-dir", str(out),
                           "--manifest", str(manifest)], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    return out / ARCHIVE, manifest, "frozen in the floor root" in proc.stderr


@pytest.fixture(scope="module")
def build_of_tree(tmp_path_factory):
    return build(tmp_path_factory.mktemp("krew-build"))


@pytest.fixture(scope="module")
def built(build_of_tree):
    """(archive, manifest) from one build of the current tree (the cached archive when the
    tree is unchanged since the last build)."""
    return build_of_tree[:2]


def without_sha256(text: str) -> str:
    return re.sub(r"sha256: [0-9a-f]{64}", "sha256: -", text)


@pytest.fixture(scope="module")
def committed(build_of_tree) -> Path:
    """The committed manifest, once it is known to describe the archive just built; for a
    build that is not the floor root's, the build's own manifest, once the committed one is
    known to be the same but for the sha256."""
    archive, manifest, floor = build_of_tree
    if floor:
        assert COMMITTED.read_text() == manifest.read_text(), STALE
        return COMMITTED
    assert without_sha256(COMMITTED.read_text()) == without_sha256(manifest.read_text()), STALE
    return manifest


@pytest.fixture(scope="module")
def krew_bin(tmp_path_factory) -> Path:
    """A directory with the real krew as `kubectl-krew` (kubectl dispatches to it)."""
    d = tmp_path_factory.mktemp("krew-bin")
    (d / "kubectl-krew").symlink_to(binaries.ensure("krew"))
    return d


# -- the committed manifest --------------------------------------------------------------

def test_committed_manifest_passes_validate_krew_manifest():
    proc = subprocess.run([str(binaries.ensure("validate-krew-manifest")), "-manifest",
                           str(COMMITTED), "-skip-install"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "structural validation OK" in proc.stderr
    assert "no overlapping spec.platform[].selector" in proc.stderr


# -- a real install, run through kubectl ----------------------------------------------

def krew_env(krew_root: Path, krew_bin: Path, **extra) -> dict:
    """kubectl/krew environment for ``krew_root``.  `krew list`/`uninstall` insist on a
    plugin index that is a git clone (krew's checkIndex); offline, an empty local git
    repository stands in for it.  `install --manifest` needs none."""
    index = krew_root / "index" / "default"
    if not (index / ".git").is_dir():
        index.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", str(index)], check=True, timeout=60)
    env = dict(os.environ, KREW_ROOT=str(krew_root), KREW_NO_UPGRADE_CHECK="1",
               PATH=f"{krew_root / 'bin'}:{krew_bin}:{os.environ['PATH']}")
    env.pop("KUBECONFIG", None)
    env.update(extra)
    return env


def krew_install(root: Path, krew_bin: Path, manifest: Path, archive: Path,
                 **extra) -> subprocess.CompletedProcess:
    return subprocess.run([KUBECTL, "krew", "install", f"--manifest={manifest}",
                           f"--archive={archive}"], capture_output=True, text=True,
                          env=krew_env(root, krew_bin, **extra), timeout=300)


@pytest.fixture(scope="module")
def installed(built, committed, krew_bin, tmp_path_factory):
    """KREW_ROOT with flux-plunger installed from the committed manifest."""
    archive, _ = built
    root = tmp_path_factory.mktemp("krew-root")
    proc = krew_install(root, krew_bin, committed, archive)
    assert proc.returncode == 0, proc.stderr
    assert "Installed plugin: flux-plunger" in proc.stderr + proc.stdout
    assert "no Python" in proc.stderr + proc.stdout  # the caveats are shown
    return root


def test_krew_install_links_the_binary(installed, krew_bin):
    link = installed / "bin" / "kubectl-flux_plunger"
    assert link.is_symlink()
    target = Path(os.path.realpath(link))
    assert target == installed / "store" / "flux-plunger" / TAG / "kubectl-flux_plunger"
    assert target.read_bytes()[:4] == b"\x7fELF" and os.access(target, os.X_OK)
    listed = subprocess.run([KUBECTL, "krew", "list"], capture_output=True, text=True,
                            env=krew_env(installed, krew_bin), timeout=60)
    assert listed.returncode == 0 and "flux-plunger" in listed.stdout


def old_python3() -> str | None:
    """A real interpreter older than 3.10 on this machine (pyenv's), or None."""
    homes = {os.path.expanduser("~/.pyenv"), os.environ.get("PYENV_ROOT") or "",
             os.path.join(os.path.expanduser("~" + os.environ.get("USER", "root")), ".pyenv")}
    for home in sorted(homes - {""}):
        for cand in sorted(glob.glob(os.path.join(home, "versions", "3.[6-9].*", "bin", "python3"))):
            return cand
    return None


def test_installed_plugin_runs_version_and_status_through_kubectl(installed, krew_bin, plane,
                                                                   cluster, tmp_path):
    ns = cluster.namespace("krew")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    # a poisoned PYTHONPATH, and the only python3 on PATH a real 3.9: neither is used
    poison = tmp_path / "poison" / "kubernetes"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('host kubernetes used')\n")
    old = old_python3()
    assert old, "no Python older than 3.10 under ~/.pyenv: this test needs one (pyenv install 3.9.18)"
    only = tmp_path / "only"
    only.mkdir()
    (only / "python3").symlink_to(old)
    env = krew_env(installed, krew_bin, KUBECONFIG=str(plane.kubeconfig),
                   PYTHONPATH=str(poison.parent), PYTHONHOME="/nonexistent",
                   PATH=f"{installed / 'bin'}:{krew_bin}:{only}:{os.path.dirname(KUBECTL)}")

    version = subprocess.run([KUBECTL, "flux-plunger", "version"], capture_output=True,
                             text=True, env=env, timeout=120)
    assert version.returncode == 0, version.stderr
    server = plane.kube().server_version()["gitVersion"]
    assert version.stdout.splitlines()[:2] == [f"Client Version: {VERSION}",
                                               f"Server Version: {server}"]

    status = subprocess.run([KUBECTL, "flux-plunger", "status", "-A"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAMESPACE", "NAME"]
    row = [line.split() for line in lines[1:] if line.split()[:2] == [ns, "demo"]]
    assert row and "stuck" in row[0], status.stdout

    helped = subprocess.run([KUBECTL, "flux-plunger", "--help"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert helped.stdout.startswith("Usage: kubectl flux-plunger ")


def test_krew_refuses_a_platform_built_elsewhere_from_the_committed_manifest(
        built, committed, krew_bin, tmp_path):
    """darwin/arm64 selected (KREW_OS/KREW_ARCH) with this archive: its sha256 in the
    committed manifest is an empty file's, so the checksum fails and nothing is installed."""
    archive, _ = built
    proc = krew_install(tmp_path, krew_bin, committed, archive, KREW_OS="darwin",
                        KREW_ARCH="arm64")
    assert proc.returncode != 0
    assert "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" in proc.stderr, \
        proc.stderr
    assert not (tmp_path / "store" / "flux-plunger").exists()


def test_krew_uninstall_removes_the_plugin(built, committed, krew_bin, tmp_path):
    archive, _ = built
    assert krew_install(tmp_path, krew_bin, committed, archive).returncode == 0
    proc = subprocess.run([KUBECTL, "krew", "uninstall", "flux-plunger"], capture_output=True,
                          text=True, env=krew_env(tmp_path, krew_bin), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "bin" / "kubectl-flux_plunger").exists()
    assert not (tmp_path / "store" / "flux-plunger").exists()


def test_completion_link_completes_through_kubectl_and_dies_with_the_plugin(
        built, committed, krew_bin, tmp_path):
    """The link docs/INSTALL.md gives (kubectl_complete-flux_plunger -> kubectl-flux_plunger
    in krew's bin; the krew manifest's caveats hold only prerequisites, issue 48) answers
    `kubectl __complete flux-plunger ...`; after `krew uninstall` it points at nothing, so
    kubectl offers no plugin completion and runs nothing of ours."""
    archive, _ = built
    env = krew_env(tmp_path, krew_bin)
    proc = krew_install(tmp_path, krew_bin, committed, archive)
    assert proc.returncode == 0, proc.stderr
    caveat = [line for line in (ROOT / "docs" / "INSTALL.md").read_text().splitlines()
              if line.startswith("ln -sf kubectl-flux_plunger ")]
    assert caveat
    subprocess.run(["/bin/sh", "-c", caveat[0]], check=True, env=env, timeout=30)
    done = subprocess.run([KUBECTL, "__complete", "flux-plunger", "st"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["status", ":4"]
    proc = subprocess.run([KUBECTL, "krew", "uninstall", "flux-plunger"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    gone = subprocess.run([KUBECTL, "__complete", "flux-plunger", "st"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert "status" not in gone.stdout.splitlines()
