"""OCI helpers for the release and kind tiers: a real registry process (the distribution
registry built by ``testplane.binaries``) and a `docker save` archive turned into an OCI
image layout (the base hack/release.py builds on, where the base lives in a local engine)."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from . import binaries


class Registry:
    """``registry serve`` on HOST:PORT with its storage under ``workdir``; ``stop()`` ends it."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1", timeout: float = 60):
        workdir.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        self.addr = f"{host}:{port}"
        self.log_path = workdir / "registry.log"
        config = workdir / "config.yml"
        config.write_text(yaml.safe_dump({
            "version": 0.1, "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(workdir / "data")},
                        "delete": {"enabled": True}},
            "http": {"addr": self.addr}}))
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(binaries.ensure("registry")), "serve", str(config)], stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HOME": str(workdir), "OTEL_TRACES_EXPORTER": "none",
                 "OTEL_SDK_DISABLED": "true"})
        url = f"http://{self.addr}/v2/"
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError(f"the registry exited {self.proc.returncode}: "
                                   f"{self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the registry did not answer {url} within {timeout:.0f} s")
            time.sleep(0.1)  # polling a condition with a deadline

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def docker_archive_to_oci(archive: Path, out: Path) -> Path:
    """A `docker save` tarball (one image) as an OCI image layout at ``out``."""
    (out / "blobs" / "sha256").mkdir(parents=True)

    def put(data: bytes, media_type: str, **extra: object) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (out / "blobs" / "sha256" / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data), **extra}

    with tarfile.open(archive) as tar:
        [entry] = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config_bytes = tar.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
        layers = [put(tar.extractfile(name).read(),  # type: ignore[union-attr]
                      "application/vnd.oci.image.layer.v1.tar") for name in entry["Layers"]]
    config = json.loads(config_bytes)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": put(config_bytes, "application/vnd.oci.image.config.v1+json"),
                "layers": layers}
    top = put(json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json",
              platform={"os": config.get("os", "linux"),
                        "architecture": config.get("architecture", "amd64")})
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    (out / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return out
