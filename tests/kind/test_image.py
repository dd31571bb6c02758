"""controller/Containerfile builds (on the Python base of this tier) and the image runs as
its users run it: non-root, read-only root filesystem, `version --client` works."""
from __future__ import annotations

import subprocess

import pytest

from kubectl_flux_plunger import __version__
from testplane import images
from testplane.kind import Setup

from .conftest import skip_reason

pytestmark = pytest.mark.skipif(bool(skip_reason()), reason=skip_reason())


def _docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([images.docker_bin(), *args], capture_output=True, text=True, timeout=120)


def test_image_runs_version_non_root_on_a_read_only_root(kind_setup: Setup) -> None:
    tag = images.plunger_image(kind_setup.python_image, wheels=kind_setup.local)
    res = _docker("run", "--rm", "--read-only", tag, "version", "--client")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"Client Version: {__version__}", res.stdout
    user = _docker("image", "inspect", tag, "--format", "{{.Config.User}}").stdout.strip()
    assert user == "65532:65532"
    ids = _docker("run", "--rm", "--read-only", "--entrypoint", "id", tag)
    assert ids.stdout.startswith("uid=65532 gid=65532"), ids.stdout
    write = _docker("run", "--rm", "--read-only", "--entrypoint", "python3", tag, "-c",
                    "open('/opt/flux-plunger/x', 'w')")
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write.stderr
