"""The release's artifacts installed as a user installs them, with the real tools, offline.

* `pipx install dist/kubectl_flux_plunger-X.Y.Z-py3-none-any.whl` (its dependencies from the
  wheels `hack/release.py --fetch` cached, no index) gives `kubectl-flux_plunger` and
  `flux-plunger` executables whose `version --client` is the release's version, and whose
  code is the wheel's (not the work tree's editable install);
* `kubectl krew install --manifest=dist/flux-plunger.yaml --archive=dist/kubectl-flux_plunger-
  vX.Y.Z-linux-amd64.tar.gz` (the self-contained binary) with the real krew (v0.4.3, from its
  Go module) gives a `kubectl flux-plunger` that answers `version --client` through the real
  kubectl.

Every process gets HOME, PIPX_* and KREW_ROOT under its tmp dir."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from testplane import binaries

from .conftest import VERSION

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack"))
import release as release_mod  # noqa: E402

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
X_Y_Z = VERSION.lstrip("v")


def test_pipx_install_of_the_wheel_runs_version(dist, tmp_path):
    wheels = release_mod.user_wheels_dir()
    assert any(wheels.glob("kubernetes-*.whl")), \
        f"no dependency wheels in {wheels}: run `.venv/bin/python hack/release.py --fetch` once"
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "PIPX_HOME": str(tmp_path / "pipx"),
           "PIPX_BIN_DIR": str(tmp_path / "bin"), "PIPX_MAN_DIR": str(tmp_path / "man"),
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    wheel = dist / f"kubectl_flux_plunger-{X_Y_Z}-py3-none-any.whl"
    proc = subprocess.run([sys.executable, "-m", "pipx", "install", str(wheel)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for exe in ("kubectl-flux_plunger", "flux-plunger"):
        path = tmp_path / "bin" / exe
        assert path.exists(), proc.stdout
        out = subprocess.run([str(path), "version", "--client"], capture_output=True,
                             text=True, env=env, timeout=120, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"Client Version: {X_Y_Z}"
    where = subprocess.run(
        [str(tmp_path / "pipx" / "venvs" / "kubectl-flux-plunger" / "bin" / "python"), "-c",
         "import kubectl_flux_plunger as p; print(p.__file__)"],
        capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)  # not the checkout
    assert where.stdout.startswith(str(tmp_path / "pipx" / "venvs")), where.stdout + where.stderr


def test_krew_install_from_the_built_manifest_and_archive(dist, tmp_path):
    krew_bin = tmp_path / "krew-bin"
    krew_bin.mkdir()
    (krew_bin / "kubectl-krew").symlink_to(binaries.ensure("krew"))
    root = tmp_path / "krew-root"
    env = {**os.environ, "HOME": str(tmp_path / "home"), "KREW_ROOT": str(root),
           "KREW_NO_UPGRADE_CHECK": "1",
           "PATH": f"{root / 'bin'}:{krew_bin}:{os.environ['PATH']}"}
    env.pop("KUBECONFIG", None)
    archive = dist / f"kubectl-flux_plunger-{VERSION}-linux-amd64.tar.gz"
    proc = subprocess.run([KUBECTL, "krew", "install", f"--manifest={dist / 'flux-plunger.yaml'}",
                           f"--archive={archive}"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Installed plugin: flux-plunger" in proc.stdout + proc.stderr
    assert (root / "store" / "flux-plunger" / VERSION / "kubectl-flux_plunger").is_file()
    out = subprocess.run([KUBECTL, "flux-plunger", "version", "--client"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    # the frozen binary says under its version what it runs on (issue 37)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == f"Client Version: {X_Y_Z}", out.stdout
    assert re.fullmatch(r"Runs On: linux/amd64, glibc 2\.\d+ or newer", lines[1]), out.stdout
    assert len(lines) == 2, out.stdout
