#!/usr/bin/env python3
"""Build every release artifact of one commit into dist/, reproducibly.

    .venv/bin/python hack/release.py v0.1.0 --base-image BASE_OCI_LAYOUT   # the tag's commit
    .venv/bin/python hack/release.py --version v0.2.0-rc.1 --commit HEAD --base-image ...
    .venv/bin/python hack/release.py --fetch        # download the image's locked wheels once
    .venv/bin/python hack/release.py v0.1.0 -C /path/to/clone --base-image ...   # another repository

What lands in --out (default dist/), for version vX.Y.Z:

    kubectl_flux_plunger-X.Y.Z-py3-none-any.whl   python -m build --no-isolation; twine check
    kubectl_flux_plunger-X.Y.Z.tar.gz             the sdist (repacked: see below)
    kubectl-flux_plunger-vX.Y.Z-OS-ARCH.tar.gz    this platform's krew archive: the binary
                                                  (krew/build.py; hack/release_binary.py)
    flux-plunger.yaml                             the krew manifest (five platforms; release.yml
                                                  rewrites it from every archive's checksum)
    kubectl-flux-plunger-vX.Y.Z.oci.tar           the controller image, an OCI image layout
                                                  (tar): an index of linux/amd64 + linux/arm64
    flux-plunger-X.Y.Z.tgz                        the chart (helm package), image pinned by digest
    image-digest.txt                              the image's digest (what the chart pins)
    kubectl-flux-plunger-vX.Y.Z.image.spdx.json   the image's SBOM (syft; linux/amd64)
    kubectl-flux-plunger-vX.Y.Z.python.spdx.json  the locked Python dependencies' SBOM (syft)
    SHA256SUMS                                    sha256sum -c format, every file above

The SBOMs are written by hack/release_sign.py, which also signs the release once built
(release.yml: keyless; the release tier: with a test key).

Inputs are the commit only: the build exports it with ``git archive`` into a temporary tree
(the work tree's uncommitted changes are not part of a release), and SOURCE_DATE_EPOCH is
the commit's time unless set.  Two builds of one commit with the same tools give the same
bytes; tests/release/test_release_build.py checks it.  Where a tool does not manage that on
its own the file is normalised here: the sdist (setuptools writes the build time into the
gzip header and files it generates) is repacked with sorted entries, uid/gid 0 and mtimes
clamped to SOURCE_DATE_EPOCH.  The krew archive keeps krew/build.py's fixed epoch (1980) so
that, built on this project's machine, dist/flux-plunger.yaml is byte for byte the committed
krew/flux-plunger.yaml (elsewhere all but the sha256 must agree: hack/release_binary.py).

The image is assembled here, without a container engine, from deterministic tar layers: the
base image's layers as they are (``--base-image``: an OCI image layout, e.g. ``crane pull
--format=oci python:3.12-slim@sha256:… DIR``; release.yml does that), plus one layer per
platform holding /opt/flux-plunger (the locked wheels of controller/requirements.lock for that
platform and the base's Python, installed with ``pip install --target``, and this wheel) and
/licenses/LICENSE; the package's dist-info is kept (minus RECORD) so that an SBOM scanner
finds it.  Config as controller/Containerfile's: ENTRYPOINT kubectl-flux_plunger, CMD
serve, USER 65532:65532, ports 8080 8081, PYTHONDONTWRITEBYTECODE (no bytecode is shipped:
compiling it needs the base's own interpreter), labels org.opencontainers.image.{source,
revision,version,created}.  Platforms are those of the base among --platforms.

Versions come from the tag: the package's __version__ (pyproject's dynamic version), the
chart's version and appVersion, the committed krew manifest's spec.version and the built
wheel's ``version --client`` must all say it, or the build stops with one line naming each
that does not.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))

sys.path.insert(1, str(ROOT / "hack"))
import release_sign  # noqa: E402 - hack/release_sign.py: the SBOMs (and, after the build, signing)

PACKAGE = "kubectl_flux_plunger"
DIST_NAME = "kubectl_flux_plunger"
CHART = "controller/chart/flux-plunger"
DEFAULT_REPO = "cozystack/kubectl-flux-plunger"
DEFAULT_IMAGE = "ghcr.io/cozystack/kubectl-flux-plunger"
DEFAULT_PLATFORMS = "linux/amd64,linux/arm64"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
# pip's platform tags per architecture (the lock's compiled wheels are manylinux)
PIP_PLATFORMS = {
    "amd64": ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
              "manylinux_2_5_x86_64", "manylinux1_x86_64"],
    "arm64": ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"],
}
IMAGE_PATH = "/opt/flux-plunger/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LAUNCHER = """#!/usr/bin/env python3
# kubectl-flux_plunger in the controller image: the vendored libraries, then the entry point.
import sys

sys.path[:0] = ["/opt/flux-plunger/lib"]
from kubectl_flux_plunger.entry import main

sys.exit(main())
"""


class ReleaseError(RuntimeError):
    """The release cannot be built; the message is the one line printed."""


def log(msg: str) -> None:
    print(f"[release] {msg}", file=sys.stderr, flush=True)


def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        what: str | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-12:]
        raise ReleaseError(f"{what or argv[0]} failed (exit {proc.returncode}): "
                           + " | ".join(tail))
    return proc.stdout


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- the commit -----------------------------------------------------------------------------

def resolve(tag: str | None, version: str | None, commit: str | None,
            source: Path = ROOT) -> tuple[str, str]:
    """(version tag 'vX.Y.Z', commit sha)."""
    if tag and version:
        raise ReleaseError("give a TAG or --version, not both")
    if not tag and not version:
        raise ReleaseError("give the TAG to release, or --version vX.Y.Z for an untagged commit")
    ref = commit or (f"refs/tags/{tag}" if tag else "HEAD")
    try:
        sha = run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=source,
                  what=f"git rev-parse {ref}").strip()
    except ReleaseError:
        raise ReleaseError(f"{ref} names no commit here") from None
    ver = tag or version or ""
    if not re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", ver):
        raise ReleaseError(f"{ver!r} is not a version tag vX.Y.Z[-pre]")
    return ver, sha


def export(sha: str, dest: Path, source: Path = ROOT) -> int:
    """``git archive`` of the commit into ``dest``; the commit time (the default epoch)."""
    archive = subprocess.run(["git", "archive", "--format=tar", sha], cwd=source,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="tar")
    return int(run(["git", "log", "-1", "--format=%ct", sha], cwd=source).strip())


def export_worktree(source: Path, dest: Path) -> tuple[int, str]:
    """The work tree's files git would commit (tracked and untracked, not ignored), as they
    are now, into ``dest``; (HEAD's commit time, HEAD's sha + '-dirty' when they differ).
    For test builds of uncommitted changes (the kind tier), never for a release."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                 cwd=source)
    for rel in sorted(set(filter(None, listed.split("\0")))):
        src = source / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    sha = run(["git", "rev-parse", "HEAD"], cwd=source).strip()
    dirty = run(["git", "status", "--porcelain"], cwd=source).strip()
    epoch = int(run(["git", "log", "-1", "--format=%ct", sha], cwd=source).strip())
    return epoch, sha + ("-dirty" if dirty else "")


# -- versions -------------------------------------------------------------------------------

def tree_versions(tree: Path) -> dict[str, str]:
    """Every place the tree states its version, as 'vX.Y.Z'."""
    import yaml

    out: dict[str, str] = {}
    init = (tree / PACKAGE / "__init__.py").read_text()
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', init, re.M)
    out["pyproject (kubectl_flux_plunger.__version__)"] = "v" + (m.group(1) if m else "?")
    chart = yaml.safe_load((tree / CHART / "Chart.yaml").read_text())
    out["chart version"] = "v" + str(chart.get("version"))
    out["chart appVersion"] = str(chart.get("appVersion"))
    manifest = yaml.safe_load((tree / "krew" / "flux-plunger.yaml").read_text())
    out["krew manifest spec.version"] = str(manifest["spec"]["version"])
    return out


def check_versions(want: str, found: dict[str, str]) -> None:
    bad = [f"{where} says {v}" for where, v in found.items() if v != want]
    if bad:
        raise ReleaseError(f"version mismatch: releasing {want}, but " + "; ".join(bad))


def client_version(wheel: Path) -> str:
    """``kubectl-flux_plunger version --client`` of the built wheel (its code, this venv's
    dependencies)."""
    import sysconfig

    # -S: no site, so no editable install of the work tree can shadow the wheel
    code = ("import sys; sys.path[:0] = [sys.argv.pop(1), sys.argv.pop(1)]; "
            "sys.argv[0] = 'kubectl-flux_plunger'; "
            "import kubectl_flux_plunger as p; assert p.__file__.startswith(sys.path[0]), p; "
            "from kubectl_flux_plunger.entry import main; sys.exit(main())")
    with tempfile.TemporaryDirectory(prefix="release-wheel-") as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        out = run([sys.executable, "-I", "-S", "-c", code, tmp,
                   sysconfig.get_paths()["purelib"], "version", "--client"],
                  what="version --client of the wheel")
    m = re.search(r"Client Version:\s*(\S+)", out)
    return "v" + m.group(1).lstrip("v") if m else f"unreadable ({out.strip()!r})"


# -- wheel and sdist ------------------------------------------------------------------------

def normalise_targz(path: Path, epoch: int) -> None:
    """Repack a .tar.gz: entries sorted, mtime <= epoch, uid/gid 0, no names, gzip without
    name or time."""
    with tarfile.open(path) as src:
        members = sorted(src.getmembers(), key=lambda m: m.name)
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as out:
            for m in members:
                data = src.extractfile(m).read() if m.isfile() else None  # type: ignore[union-attr]
                m.mtime = min(int(m.mtime), epoch)
                m.uid = m.gid = 0
                m.uname = m.gname = ""
                m.pax_headers = {}
                out.addfile(m, io.BytesIO(data) if data is not None else None)
    write_gzip(path, raw.getvalue())


def write_gzip(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0,
                                              compresslevel=9) as gz:
        gz.write(data)
    tmp.replace(path)


def build_python(tree: Path, out: Path, epoch: int) -> tuple[Path, Path]:
    with tempfile.TemporaryDirectory(prefix="release-pybuild-") as tmp:
        run([sys.executable, "-m", "build", "--no-isolation", "--outdir", tmp, str(tree)],
            env={"SOURCE_DATE_EPOCH": str(epoch)}, what="python -m build")
        wheels = sorted(Path(tmp).glob("*.whl"))
        sdists = sorted(Path(tmp).glob("*.tar.gz"))
        if len(wheels) != 1 or len(sdists) != 1:
            raise ReleaseError(f"python -m build made {wheels + sdists}, not one wheel + one sdist")
        wheel = out / wheels[0].name
        sdist = out / sdists[0].name
        shutil.copyfile(wheels[0], wheel)
        shutil.copyfile(sdists[0], sdist)
    normalise_targz(sdist, epoch)
    run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        what="twine check")
    return wheel, sdist


def wheel_version(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        m = re.search(r"^Version: (\S+)", zf.read(meta).decode(), re.M)
    return "v" + (m.group(1) if m else "?")


# -- krew -----------------------------------------------------------------------------------

def build_krew(tree: Path, out: Path, repo: str, offline: bool,
               fresh: bool = False) -> tuple[Path, Path]:
    import release_binary

    try:
        return release_binary.build_krew_binary(tree, out, repo, offline, fresh)
    except release_binary.BinaryReleaseError as exc:
        raise ReleaseError(str(exc)) from None


# -- the image ------------------------------------------------------------------------------

def image_wheels_dir() -> Path:
    from testplane import binaries

    return binaries.cache_root().parent / "release-wheels"


def lock_without_build_tools(tree: Path) -> str:
    """controller/requirements.lock without setuptools (the Containerfile uninstalls it)."""
    text = (tree / "controller" / "requirements.lock").read_text()
    blocks = re.split(r"\n(?=\S)", text)
    return "\n".join(b for b in blocks if not b.startswith("setuptools==")) + "\n"


def pip_selection(arch: str, pyver: str) -> list[str]:
    args = ["--only-binary=:all:", "--no-deps", "--require-hashes", "--python-version", pyver,
            "--implementation", "cp", "--abi", "cp" + pyver.replace(".", "")]
    for plat in PIP_PLATFORMS[arch]:
        args += ["--platform", plat]
    return args


def fetch_image_wheels(tree: Path, arches: list[str], pyver: str, offline: bool) -> Path:
    """The locked wheels for every platform, downloaded once into the cache (hash-checked)."""
    lock_text = lock_without_build_tools(tree)
    wanted = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", lock_text))
    cache = image_wheels_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        lock = Path(tmp) / "requirements.lock"
        lock.write_text(lock_text)
        for arch in arches:
            stamp = cache / f".complete-{arch}-py{pyver}-{hashlib.sha256(lock_text.encode()).hexdigest()[:12]}"
            if stamp.is_file():
                continue
            if offline:
                raise ReleaseError(f"--offline, but {cache} lacks the image's wheels for {arch} "
                                   f"/ python {pyver}; run hack/release.py --fetch first")
            run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                 "-d", str(cache), *pip_selection(arch, pyver), "-r", str(lock)],
                what=f"pip download of the image's wheels ({arch}, python {pyver})")
            stamp.write_text("ok\n")
    have = {sha256_file(p) for p in cache.glob("*.whl")}
    if not have & wanted:
        raise ReleaseError(f"{cache} holds none of the locked wheels")
    return cache


def user_wheels_dir() -> Path:
    """Wheels of the package's dependencies for this Python: what the release tier's
    ``pipx install`` of the built wheel takes instead of an index."""
    return image_wheels_dir().parent / f"user-wheels-py{sys.version_info[0]}.{sys.version_info[1]}"


def fetch_user_wheels(tree: Path) -> Path:
    import tomllib

    deps = tomllib.loads((tree / "pyproject.toml").read_text())["project"]["dependencies"]
    deps = [*deps, "pip"]  # pipx upgrades the pip of its shared venv first
    out = user_wheels_dir()
    stamp = out / f".complete-{hashlib.sha256(repr(deps).encode()).hexdigest()[:12]}"
    if not stamp.is_file():
        out.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--only-binary=:all:", "-d", str(out), *deps], what="pip download of the dependencies")
        stamp.write_text("ok\n")
    return out


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


def build_image(tree: Path, wheel: Path, base: Path, out: Path, *, version: str, sha: str,
                epoch: int, source: str, platforms: list[str], pyver: str | None,
                offline: bool) -> tuple[Path, str, list[str]]:
    """The controller image as an OCI layout tar; (path, digest, platforms built)."""
    from datetime import datetime, timezone

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
            cdesc = layout.put(canonical(new_config), OCI_CONFIG)
            layer_types = {OCI_LAYER_GZ, "application/vnd.docker.image.rootfs.diff.tar.gzip",
                           "application/vnd.oci.image.layer.v1.tar"}
            for ldesc in manifest["layers"]:
                if ldesc.get("mediaType") not in layer_types:
                    raise ReleaseError(f"a base layer of type {ldesc.get('mediaType')}")
            base_layers = [{"mediaType": OCI_LAYER_GZ if "gzip" in str(d["mediaType"])
                            else "application/vnd.oci.image.layer.v1.tar",
                            "digest": d["digest"], "size": d["size"]} for d in manifest["layers"]]
            new_manifest = {
                "schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cdesc,
                "layers": [*base_layers, layer],
                "annotations": {**labels, "org.opencontainers.image.base.digest":
                                str(mdesc["digest"])},
            }
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


def unpack_layout(oci_tar: Path, dest: Path) -> Path:
    """The OCI layout of ``oci_tar`` as a directory (what crane push and the tests read)."""
    with tarfile.open(oci_tar) as tar:
        tar.extractall(dest, filter="data")
    return dest


# -- the chart ------------------------------------------------------------------------------

def pin_values(values: str, registry: str, repository: str, digest: str) -> str:
    """values.yaml with image.registry/repository/digest set (only inside the image block)."""
    head, sep, rest = values.partition("\nimage:\n")
    if not sep:
        raise ReleaseError("the chart's values.yaml has no top-level image: block")
    block, tail_sep, tail = rest.partition("\n\n")
    for key, value in (("registry", registry), ("repository", repository), ("digest", digest)):
        block, n = re.subn(rf"^(  {key}:) .*$", rf'\1 "{value}"', block, count=1, flags=re.M)
        if n != 1:
            raise ReleaseError(f"the chart's values.yaml has no image.{key}")
    return head + sep + block + tail_sep + tail


def build_chart(tree: Path, out: Path, *, version: str, image: str, digest: str,
                epoch: int, helm: str) -> Path:
    registry, _, repository = image.partition("/")
    if "." not in registry and ":" not in registry and registry != "localhost":
        registry, repository = "", image
    with tempfile.TemporaryDirectory(prefix="release-chart-") as tmp:
        chart = Path(tmp) / "flux-plunger"
        shutil.copytree(tree / CHART, chart)
        values = chart / "values.yaml"
        values.write_text(pin_values(values.read_text(), registry, repository, digest))
        home = Path(tmp) / "home"
        env = {"HOME": str(home), "HELM_CACHE_HOME": str(home / "cache"),
               "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data"),
               "SOURCE_DATE_EPOCH": str(epoch)}
        run([helm, "lint", str(chart)], env=env, what="helm lint")
        run([helm, "package", str(chart), "--version", version.lstrip("v"),
             "--app-version", version, "--destination", str(out)], env=env, what="helm package")
    return out / f"flux-plunger-{version.lstrip('v')}.tgz"


# -- the whole release ----------------------------------------------------------------------

def write_sums(out: Path) -> Path:
    lines = [f"{sha256_file(p)}  {p.name}\n" for p in sorted(out.iterdir())
             if p.is_file() and p.name != "SHA256SUMS"]
    sums = out / "SHA256SUMS"
    sums.write_text("".join(lines))
    return sums


def find_helm() -> str:
    from testplane import binaries

    return str(binaries.ensure("helm"))


def release(args: argparse.Namespace) -> Path:
    source = args.source.resolve()
    version, sha = resolve(args.tag, args.version, args.commit, source)
    final: Path = args.out.resolve()
    out = final.with_name(f".{final.name}.partial")  # renamed to --out once complete
    with tempfile.TemporaryDirectory(prefix="release-tree-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        if args.worktree:
            epoch, sha = export_worktree(source, tree)
        else:
            epoch = export(sha, tree, source)
        if os.environ.get("SOURCE_DATE_EPOCH"):
            epoch = int(os.environ["SOURCE_DATE_EPOCH"])
        check_versions(version, tree_versions(tree))
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        log(f"{version} from {sha[:12]} (SOURCE_DATE_EPOCH={epoch}) into {final}")
        wheel, sdist = build_python(tree, out, epoch)
        check_versions(version, {"the wheel's metadata": wheel_version(wheel),
                                 "version --client": client_version(wheel)})
        log(f"{wheel.name}, {sdist.name}: twine check passed")
        archive, manifest = build_krew(tree, out, args.repo, args.offline, args.fresh_binary)
        log(f"{archive.name} + {manifest.name}")
        oci, digest, plats = build_image(
            tree, wheel, args.base_image.resolve(), out, version=version, sha=sha, epoch=epoch,
            source=f"https://github.com/{args.repo}", platforms=args.platforms.split(","),
            pyver=args.base_python, offline=args.offline)
        (out / "image-digest.txt").write_text(digest + "\n")
        log(f"{oci.name}: {digest} ({', '.join(plats)})")
        chart = build_chart(tree, out, version=version, image=args.image, digest=digest,
                            epoch=epoch, helm=args.helm or find_helm())
        log(f"{chart.name}: image {args.image}:{version}@{digest}")
        sboms = release_sign.write_sboms(
            out, version=version, repo=args.repo, epoch=epoch, image_oci_tar=oci,
            locks=release_sign.python_locks(tree, lock_without_build_tools(tree)))
        log(", ".join(p.name for p in sboms) + " (syft, SPDX JSON)")
    count = len(write_sums(out).read_text().splitlines())
    if final.exists():
        shutil.rmtree(final)
    out.rename(final)
    log(f"{final / 'SHA256SUMS'}: {count} files")
    return final


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tag", nargs="?", help="the tag vX.Y.Z to release (its commit is built)")
    ap.add_argument("--version", help="vX.Y.Z for a build of an untagged commit (--commit)")
    ap.add_argument("--commit", help="the commit to build (default: the tag's, or HEAD)")
    ap.add_argument("--out", type=Path, default=ROOT / "dist")
    ap.add_argument("--base-image", type=Path,
                    help="the controller image's base, an OCI image layout directory")
    ap.add_argument("--base-python", help="the base's Python X.Y (default: its PYTHON_VERSION)")
    ap.add_argument("--platforms", default=DEFAULT_PLATFORMS)
    ap.add_argument("--image", default=DEFAULT_IMAGE, help="the image's name in the chart")
    ap.add_argument("--repo", default=DEFAULT_REPO, help="GitHub owner/name (URLs, labels)")
    ap.add_argument("--helm", help="the helm binary (default: built by testplane.binaries)")
    ap.add_argument("--offline", action="store_true", help="use cached wheels only")
    ap.add_argument("--fresh-binary", action="store_true",
                    help="freeze the binary again even if an archive of the same inputs is "
                         "cached (krew/build.py --fresh)")
    ap.add_argument("--worktree", action="store_true",
                    help="build the work tree's files as they are (tests of uncommitted "
                         "changes; the revision label gets -dirty), not the commit")
    ap.add_argument("-C", "--source", type=Path, default=ROOT,
                    help="the git repository to release from (default: this checkout)")
    ap.add_argument("--fetch", action="store_true",
                    help="only download the image's locked wheels (--platforms, --base-python)")
    args = ap.parse_args(argv)
    try:
        if args.fetch:
            fetch_image_wheels(ROOT, [p.split("/", 1)[1] for p in args.platforms.split(",")],
                               args.base_python or "3.12", offline=False)
            log(f"image wheels cached in {image_wheels_dir()}")
            log(f"dependency wheels for pipx cached in {fetch_user_wheels(ROOT)}")
            return 0
        if args.base_image is None:
            raise ReleaseError("--base-image is required (an OCI layout; see --help)")
        release(args)
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
