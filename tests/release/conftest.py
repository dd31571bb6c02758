"""Fixtures of the release tier: one release build (hack/release.py) of HEAD into a temporary
dist/, on a stand-in base image, with the real tools (python -m build, twine, krew/build.py,
helm) and offline once `hack/release.py --fetch` has cached the locked wheels.

The stand-in base is an OCI layout made here with linux/amd64 and linux/arm64 manifests of
one small layer each and PYTHON_VERSION=3.12.12 in their configs (python:3.12-slim's shape):
it cannot run, but the release's own layer, config, labels, index and chart pin are built on
it exactly as on the real base (release.yml pulls python:3.12-slim by digest)."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from testplane import binaries

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "hack" / "release.py"
VERSION = "v" + __import__("re").search(
    r'__version__ = "([^"]+)"', (ROOT / "kubectl_flux_plunger" / "__init__.py").read_text()).group(1)


def _blob(root: Path, data: bytes, media_type: str, **extra) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data), **extra}


def fake_base(root: Path) -> Path:
    """An OCI layout of a two-platform index, python:3.12-slim's shape, not runnable."""
    (root / "blobs" / "sha256").mkdir(parents=True)
    manifests = []
    for arch in ("amd64", "arm64"):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            data = f"stand-in base for {arch}\n".encode()
            info = tarfile.TarInfo("etc/stand-in-base")
            info.size, info.mtime = len(data), 1700000000
            tar.addfile(info, io.BytesIO(data))
        layer = raw.getvalue()
        ldesc = _blob(root, gzip.compress(layer, mtime=0),
                      "application/vnd.oci.image.layer.v1.tar+gzip")
        config = {"architecture": arch, "os": "linux",
                  "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
                                     "PYTHON_VERSION=3.12.12"], "Cmd": ["python3"]},
                  "rootfs": {"type": "layers",
                             "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}
        cdesc = _blob(root, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": cdesc, "layers": [ldesc]}
        manifests.append(_blob(root, json.dumps(manifest).encode(),
                               "application/vnd.oci.image.manifest.v1+json",
                               platform={"os": "linux", "architecture": arch}))
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": manifests}
    top = _blob(root, json.dumps(index).encode(), "application/vnd.oci.image.index.v1+json")
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return root


def release(out: Path, base: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """hack/release.py --version VERSION --commit HEAD --offline ... (HOME under tmp; a later
    --version in ARGS wins)."""
    home = out.parent / f"{out.name}-home"
    home.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, str(RELEASE), "--version", VERSION, "--commit", "HEAD", "--offline",
         "--out", str(out), "--base-image", str(base), *args],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, "HOME": str(home),
             # the binaries and wheel caches stay where they are (outside the work tree)
             "FLUX_PLUNGER_TESTBIN_CACHE": str(binaries.cache_root()), **(env or {})})


@pytest.fixture(scope="session")
def base_image(tmp_path_factory) -> Path:
    return fake_base(tmp_path_factory.mktemp("base") / "layout")


@pytest.fixture(scope="session")
def dist(tmp_path_factory, base_image) -> Path:
    """One release build of HEAD."""
    out = tmp_path_factory.mktemp("release") / "dist"
    proc = release(out, base_image)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """host:port of a distribution registry on loopback (its storage under tmp)."""
    from testplane.oci import Registry

    try:
        reg = Registry(tmp_path_factory.mktemp("registry"))
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield reg.addr
    reg.stop()
