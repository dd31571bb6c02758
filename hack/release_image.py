"""hack/release.py's controller image, assembled without a container engine: the base
image's layers as they are (``--base-image``, an OCI image layout) plus one deterministic
layer per platform holding /opt/flux-plunger (the locked wheels and this wheel) and
/licenses/LICENSE, with controller/Containerfile's config; written as an OCI image layout
tar (an index when more than one platform)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from release_common import DIST_NAME, PACKAGE, ReleaseError, Stamp, run
from release_wheels import fetch_image_wheels, lock_without_build_tools, pip_selection

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
IMAGE_PATH = "/opt/flux-plunger/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LAUNCHER = """#!/usr/bin/env python3
# kubectl-flux_plunger in the controller image: the vendored libraries, then the entry point.
import sys

sys.path[:0] = ["/opt/flux-plunger/lib"]
from kubectl_flux_plunger.entry import main

sys.exit(main())
"""



def install_app(tree: Path, wheel: Path, arch: str, pyver: str, wheels: Path, dest: Path) -> None:
    lib = dest / "opt" / "flux-plunger" / "lib"
    with tempfile.TemporaryDirectory() as tmp:
        lock = Path(tmp) / "requirements.lock"
        lock.write_text(lock_without_build_tools(tree))
        run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--target", str(lib), "--no-index", "--find-links", str(wheels), "--no-compile",
             "--no-warn-script-location", *pip_selection(arch, pyver), "-r", str(lock)],
            what=f"pip install --target of the locked wheels ({arch})")
    with zipfile.ZipFile(wheel) as zf:  # this project: a pure wheel, unpacked as pip would
        for name in zf.namelist():  # (its dist-info too: what an SBOM scanner reads)
            if name.startswith(f"{PACKAGE}/") or (
                    name.startswith(f"{DIST_NAME}-") and ".dist-info/" in name
                    and not name.endswith("/RECORD")):
                target = lib / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
    shutil.rmtree(lib / "bin", ignore_errors=True)  # console scripts with this host's shebang
    for path in sorted(lib.rglob("*")):
        if path.is_dir() and path.name == "__pycache__":
            shutil.rmtree(path)
        elif path.is_file() and path.parent.name.endswith(".dist-info") and path.name in (
                "RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
            path.unlink()  # installer bookkeeping, naming this host's paths
    bindir = dest / "opt" / "flux-plunger" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "kubectl-flux_plunger").write_text(LAUNCHER)
    (bindir / "kubectl-flux_plunger").chmod(0o755)
    (dest / "licenses").mkdir()
    shutil.copyfile(tree / "LICENSE", dest / "licenses" / "LICENSE")


def layer_tar(root: Path, epoch: int) -> bytes:
    """A deterministic tar of ``root``: sorted, mtime = epoch, root-owned, 0755/0644."""
    raw = io.BytesIO()
    entries = sorted(root.rglob("*"), key=lambda p: p.relative_to(root).as_posix())
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in entries:
            info = tarfile.TarInfo(p.relative_to(root).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            if p.is_symlink():
                raise ReleaseError(f"a symlink in the image layer: {p}")
            if p.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                data = p.read_bytes()
                info.size = len(data)
                info.mode = 0o755 if os.access(p, os.X_OK) else 0o644
                tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def gz(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as g:
        g.write(data)
    return buf.getvalue()


def canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class Layout:
    """An OCI image layout being written (blobs by digest)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)

    def put(self, data: bytes, media_type: str, **extra: object) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (self.root / "blobs" / "sha256" / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data), **extra}

    def copy_blob(self, src: Path, desc: dict[str, object]) -> None:
        digest = str(desc["digest"]).split(":", 1)[1]
        dest = self.root / "blobs" / "sha256" / digest
        if not dest.exists():
            shutil.copyfile(src / "blobs" / "sha256" / digest, dest)


def read_blob(layout: Path, desc: dict[str, object]) -> bytes:
    algo, digest = str(desc["digest"]).split(":", 1)
    return (layout / "blobs" / algo / digest).read_bytes()


def base_manifests(base: Path) -> dict[str, dict[str, object]]:
    """linux/ARCH → the base's image manifest descriptor (an index is walked one level)."""
    index = json.loads((base / "index.json").read_text())
    out: dict[str, dict[str, object]] = {}
    for desc in index.get("manifests", []):
        if desc.get("mediaType") in (OCI_INDEX, DOCKER_LIST):
            inner = json.loads(read_blob(base, desc))
            for d in inner.get("manifests", []):
                plat = d.get("platform") or {}
                if plat.get("os") == "linux" and not plat.get("variant", "").startswith("v7"):
                    out.setdefault(plat.get("architecture", "?"), d)
        elif desc.get("mediaType") in (OCI_MANIFEST, DOCKER_MANIFEST):
            manifest = json.loads(read_blob(base, desc))
            config = json.loads(read_blob(base, manifest["config"]))
            out.setdefault(config.get("architecture", "?"), desc)
    return out


def build_image(tree: Path, wheel: Path, base: Path, out: Path, stamp: Stamp, *,
                platforms: list[str], pyver: str | None,
                offline: bool) -> tuple[Path, str, list[str]]:
    """The controller image as an OCI layout tar; (path, digest, platforms built)."""
    from datetime import datetime, timezone

    version, sha, epoch, source = stamp.version, stamp.sha, stamp.epoch, stamp.source

    available = base_manifests(base)
    arches = [p.split("/", 1)[1] for p in platforms if p.split("/", 1)[1] in available]
    if not arches:
        raise ReleaseError(f"the base image {base} has none of the platforms {platforms} "
                           f"(it has {sorted(available)})")
    created = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {"org.opencontainers.image.source": source,
              "org.opencontainers.image.revision": sha,
              "org.opencontainers.image.version": version,
              "org.opencontainers.image.created": created,
              "org.opencontainers.image.licenses": "Apache-2.0",
              "org.opencontainers.image.title": "kubectl-flux-plunger"}
    with tempfile.TemporaryDirectory(prefix="release-image-") as tmp:
        layout = Layout(Path(tmp) / "layout")
        descs = []
        for arch in arches:
            mdesc = available[arch]
            manifest = json.loads(read_blob(base, mdesc))
            config = json.loads(read_blob(base, manifest["config"]))
            env = config.get("config", {}).get("Env") or []
            py = pyver or next((e.split("=", 1)[1] for e in env
                                if e.startswith("PYTHON_VERSION=")), None)
            if not py:
                raise ReleaseError("the base image sets no PYTHON_VERSION; give --base-python X.Y")
            py = ".".join(py.split(".")[:2])
            wheels = fetch_image_wheels(tree, [arch], py, offline)
            root = Path(tmp) / f"root-{arch}"
            root.mkdir()
            install_app(tree, wheel, arch, py, wheels, root)
            raw = layer_tar(root, epoch)
            layer = layout.put(gz(raw), OCI_LAYER_GZ)
            for ldesc in manifest["layers"]:
                layout.copy_blob(base, ldesc)
            cdesc = layout.put(canonical(image_config(config, arch, raw, created=created,
                                                      labels=labels, version=version)),
                               OCI_CONFIG)
            new_manifest = image_manifest(manifest, mdesc, cdesc, layer, labels)
            descs.append(layout.put(canonical(new_manifest), OCI_MANIFEST, platform={
                "os": "linux", "architecture": arch,
                **({"variant": config["variant"]} if config.get("variant") else {})}))
        if len(descs) == 1:
            top = {k: v for k, v in descs[0].items() if k != "platform"}
        else:
            index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": descs,
                     "annotations": labels}
            top = layout.put(canonical(index), OCI_INDEX)
        ref = {**top, "annotations": {"org.opencontainers.image.ref.name": version}}
        (layout.root / "index.json").write_bytes(canonical(
            {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [ref]}))
        (layout.root / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))
        path = out / f"kubectl-flux-plunger-{version}.oci.tar"
        with open(path, "wb") as fh:
            fh.write(layer_tar(layout.root, epoch))
    return path, str(top["digest"]), [f"linux/{a}" for a in arches]


LAYER_TYPES = {OCI_LAYER_GZ, "application/vnd.docker.image.rootfs.diff.tar.gzip",
               "application/vnd.oci.image.layer.v1.tar"}


def image_config(config: dict, arch: str, raw: bytes, *, created: str,
                 labels: dict[str, str], version: str) -> dict[str, object]:
    """The base's image config with our layer (``raw``, uncompressed) on top and
    controller/Containerfile's settings: env, user, ports, entrypoint, labels."""
    env = config.get("config", {}).get("Env") or []
    cfg = dict(config.get("config") or {})
    keep = [e for e in env if not e.startswith(("PATH=", "PYTHONDONTWRITEBYTECODE=",
                                                "PYTHONUNBUFFERED="))]
    cfg["Env"] = [*keep, f"PATH={IMAGE_PATH}", "PYTHONDONTWRITEBYTECODE=1",
                  "PYTHONUNBUFFERED=1"]
    cfg["User"] = "65532:65532"
    cfg["ExposedPorts"] = {"8080/tcp": {}, "8081/tcp": {}}
    cfg["Entrypoint"] = ["kubectl-flux_plunger"]
    cfg["Cmd"] = ["serve"]
    cfg["Labels"] = {**(cfg.get("Labels") or {}), **labels}
    cfg.pop("StopSignal", None)
    new_config = {
        "created": created, "architecture": config.get("architecture", arch),
        "os": config.get("os", "linux"), "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [
            *config["rootfs"]["diff_ids"], "sha256:" + hashlib.sha256(raw).hexdigest()]},
        "history": [*(config.get("history") or []),
                    {"created": created, "created_by": f"hack/release.py {version}",
                     "comment": "kubectl-flux-plunger in /opt/flux-plunger"}],
    }
    if config.get("variant"):
        new_config["variant"] = config["variant"]
    return new_config


def image_manifest(manifest: dict, mdesc: dict[str, object], cdesc: dict[str, object],
                   layer: dict[str, object], labels: dict[str, str]) -> dict[str, object]:
    """The image manifest: the base's layers (as OCI media types) and ours, the new config."""
    for ldesc in manifest["layers"]:
        if ldesc.get("mediaType") not in LAYER_TYPES:
            raise ReleaseError(f"a base layer of type {ldesc.get('mediaType')}")
    base_layers = [{"mediaType": OCI_LAYER_GZ if "gzip" in str(d["mediaType"])
                    else "application/vnd.oci.image.layer.v1.tar",
                    "digest": d["digest"], "size": d["size"]} for d in manifest["layers"]]
    return {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cdesc,
        "layers": [*base_layers, layer],
        "annotations": {**labels, "org.opencontainers.image.base.digest":
                        str(mdesc["digest"])},
    }


def unpack_layout(oci_tar: Path, dest: Path) -> Path:
    """The OCI layout of ``oci_tar`` as a directory (what crane push and the tests read)."""
    with tarfile.open(oci_tar) as tar:
        tar.extractall(dest, filter="data")
    return dest
