"""The image hack/release.py assembles (no container engine involved) runs, pulled by digest
from a real registry: built on this machine's Debian python3 base (testplane.images'
``rootfs-python``, Python 3.11, the only runnable base here: python:3.12-slim cannot be
pulled), pushed with crane to the loopback registry, pulled by the project's Docker engine
by digest and run read-only as uid 65532:

* `version --client` answers the release's version;
* the vendored compiled wheels load (PyYAML's libyaml binding, aiohttp's speedups), and the
  controller's modules import;
* the labels and the user are those of the release.

Without a Docker engine, or before the Debian base is built (`KIND_ENGINE=start ./hack/test.sh`
or `python -m testplane.images python` builds it), these fail; `KIND_ENGINE=off ./hack/test.sh`
leaves this file out and says so."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile

import pytest

from .conftest import VERSION, release

X_Y_Z = VERSION.lstrip("v")


def docker(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"docker {' '.join(args)}: {proc.stderr}"
    return proc


def python_base() -> str | None:
    """The tag of the Debian python3 base in the Docker engine DOCKER_HOST names, or None."""
    from testplane import images

    if not shutil.which("docker"):
        return None
    try:
        tags = docker("images", "--format", "{{.Repository}}:{{.Tag}}", check=False, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    want = f"{images.PREFIX}/rootfs-python:"
    found = [t for t in tags.stdout.split() if t.startswith(want)] if tags.returncode == 0 else []
    return found[0] if found else None


BASE = python_base()


@pytest.fixture(scope="module", autouse=True)
def engine_and_base() -> None:
    """No Docker engine or no Debian base fails these loudly (hack/test.sh leaves this file
    out, saying so, only when told KIND_ENGINE=off)."""
    assert BASE is not None, (
        "no Docker engine answers (DOCKER_HOST), or the Debian python base image is not built: "
        "run KIND_ENGINE=start ./hack/test.sh, or python -m testplane.images python")


@pytest.fixture(scope="module")
def pulled(registry, tmp_path_factory):
    """(reference by digest, image-digest) of the release image on the Debian base, pulled
    by the Docker engine from the loopback registry."""
    from testplane import binaries
    from testplane.oci import docker_archive_to_oci

    tmp = tmp_path_factory.mktemp("image-runs")
    saved = tmp / "base.tar"
    docker("save", "-o", str(saved), BASE)
    base = docker_archive_to_oci(saved, tmp / "base")
    saved.unlink()
    repo = f"{registry}/cozystack/kubectl-flux-plunger"
    dist = tmp / "dist"
    pyver = docker("run", "--rm", "--entrypoint", "python3", BASE, "-c",
                   "import sys; print('%d.%d' % sys.version_info[:2])").stdout.strip()
    proc = release(dist, base, "--base-python", pyver, "--platforms", "linux/amd64",
                   "--image", repo)
    assert proc.returncode == 0, proc.stderr
    digest = (dist / "image-digest.txt").read_text().strip()
    layout = tmp / "layout"
    with tarfile.open(dist / f"kubectl-flux-plunger-{VERSION}.oci.tar") as tar:
        tar.extractall(layout, filter="data")
    env = {**os.environ, "HOME": str(tmp), "DOCKER_CONFIG": str(tmp / "docker")}
    push = subprocess.run([str(binaries.ensure("crane")), "push", "--insecure", str(layout),
                           f"{repo}:{VERSION}"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert push.returncode == 0, push.stderr
    ref = f"{repo}@{digest}"
    docker("pull", ref)
    yield ref, digest
    docker("rmi", "-f", ref, check=False)


def run(ref: str, *args: str, entrypoint: str | None = None) -> subprocess.CompletedProcess:
    return docker("run", "--rm", "--read-only", *(["--entrypoint", entrypoint] if entrypoint else []),
                  ref, *args, check=False, timeout=300)


def test_the_pulled_image_answers_version(pulled):
    ref, _ = pulled
    proc = run(ref, "version", "--client")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"Client Version: {X_Y_Z}"


def test_compiled_wheels_load_and_the_controller_imports_as_uid_65532(pulled):
    ref, _ = pulled
    code = ("import os, sys; sys.path[:0] = ['/opt/flux-plunger/lib']; "
            "import yaml, aiohttp._http_parser, kubernetes, prometheus_client; "
            "import kubectl_flux_plunger.serve; "
            "print(os.getuid(), os.getgid(), yaml.__with_libyaml__, kubectl_flux_plunger.serve.__file__)")
    proc = run(ref, "-c", code, entrypoint="python3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["65532", "65532", "True",
                                   "/opt/flux-plunger/lib/kubectl_flux_plunger/serve/__init__.py"]


def test_labels_and_config_as_released(pulled):
    ref, _ = pulled
    info = json.loads(docker("image", "inspect", ref).stdout)[0]["Config"]
    assert info["Labels"]["org.opencontainers.image.version"] == VERSION
    assert info["Entrypoint"] == ["kubectl-flux_plunger"] and info["Cmd"] == ["serve"]
    assert info["User"] == "65532:65532"
