#!/usr/bin/env python3
"""Build the krew archive and fill in the krew manifest.

    python3 krew/build.py                # krew/dist/kubectl-flux_plunger-vX.Y.Z.tar.gz + krew/flux-plunger.yaml
    python3 krew/build.py --check        # exit 1 if krew/flux-plunger.yaml does not match a fresh build
    python3 krew/build.py --fetch        # download the pinned wheels, cache the vendored lib/
    python3 krew/build.py --check --offline   # what CI runs (hack/test.sh): no network, ~4 s
    python3 krew/build.py --out-dir D --manifest D/flux-plunger.yaml   # build elsewhere (tests)

Every change to the package changes the archive and so the manifest's sha256: refresh the
committed manifest with ``python3 krew/build.py`` (it rewrites krew/flux-plunger.yaml).

The archive (every entry a regular file or directory; krew refuses anything else):

    kubectl-flux_plunger            0755  launcher: finds python3 >= 3.10 (one start), runs
                                          isolated; linked as kubectl_complete-flux_plunger
                                          it answers kubectl's completion requests
    LICENSE                               Apache-2.0 (krew's validator requires a licence file)
    kubectl_flux_plunger/                 the package, *.py only
    lib/                                  vendored dependencies, pure Python only

Vendored libraries come from the hash-pinned wheels in krew/requirements-pure.txt
(platform-independent wheels only) and krew/requirements-pyyaml.txt (one PyYAML wheel whose
libyaml binding is deleted), installed with ``pip install --target --no-deps
--only-binary=:all:`` for python 3.10.  Wheels are cached in krew/build/wheels; with every
wheel cached the build needs no network.  The installed lib/ tree is cached in krew/build too,
keyed by the requirement files and pip's version, so a build after a change of the package
alone copies it instead of running pip.  The build fails if any compiled file (by name or
by ELF/Mach-O/PE magic) would end up in the archive.

Reproducible: entries sorted, mtime = $SOURCE_DATE_EPOCH (default 1980-01-01), uid/gid 0,
no user/group names, modes 0755/0644, gzip header without name or time.  Two builds of the
same tree give the same bytes (with the same zlib; the uncompressed tar is identical anyway).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TextIO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PACKAGE = "kubectl_flux_plunger"
PLUGIN = "flux-plunger"
BIN = "kubectl-flux_plunger"
DEFAULT_REPO = "cozystack/kubectl-flux-plunger"
DEFAULT_EPOCH = 315532800  # 1980-01-01T00:00:00Z
PYTHON_FLOOR = "3.10"
EXECUTABLES = {BIN}
# The only compiled files the vendored wheels may bring; deleted (see requirements-pyyaml.txt).
STRIPPABLE = re.compile(r"^yaml/_yaml\.[^/]*\.(so|pyd)$")
COMPILED_SUFFIXES = (".so", ".pyd", ".dylib", ".dll", ".exe")
MAGICS = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"MZ")

# pip target selection per requirements file: (implementation, abi, platform)
WHEEL_SETS = (
    ("requirements-pure.txt", ("py", "none", "any")),
    ("requirements-pyyaml.txt", ("cp", "cp310", "manylinux2014_x86_64")),
)


class BuildError(RuntimeError):
    pass


def version() -> str:
    text = (ROOT / PACKAGE / "__init__.py").read_text()
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
    if not m:
        raise BuildError(f"{PACKAGE}/__init__.py has no __version__")
    return m.group(1)


def archive_name(tag: str) -> str:
    return f"{BIN}-{tag}.tar.gz"


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")


def _selection(impl: str, abi: str, plat: str) -> list[str]:
    return ["--only-binary=:all:", "--no-deps", "--require-hashes",
            "--python-version", PYTHON_FLOOR, "--implementation", impl, "--abi", abi,
            "--platform", plat]


def fetch_wheels(wheels: Path, offline: bool) -> None:
    """Download the pinned wheels into ``wheels`` unless every one is there already."""
    wheels.mkdir(parents=True, exist_ok=True)
    for req, (impl, abi, plat) in WHEEL_SETS:
        wanted = _pinned_hashes(HERE / req)
        have = {hashlib.sha256(p.read_bytes()).hexdigest() for p in wheels.glob("*.whl")}
        if wanted <= have:
            continue
        if offline:
            raise BuildError(f"--offline, but {wheels} lacks wheels of {req}")
        _pip("download", "--dest", str(wheels), *_selection(impl, abi, plat), "-r", str(HERE / req))


def _pinned_hashes(req: Path) -> set[str]:
    return set(re.findall(r"--hash=sha256:([0-9a-f]{64})", req.read_text()))


def install_vendor(lib: Path, wheels: Path) -> list[str]:
    """pip install --target the pinned wheels; return the compiled files deleted."""
    for req, (impl, abi, plat) in WHEEL_SETS:
        _pip("install", "--target", str(lib), "--no-index", "--find-links", str(wheels),
             "--no-compile", "--no-warn-script-location", *_selection(impl, abi, plat),
             "-r", str(HERE / req))
    shutil.rmtree(lib / "bin", ignore_errors=True)  # console scripts with this machine's shebang
    stripped = []
    for path in sorted(lib.rglob("*")):
        rel = path.relative_to(lib).as_posix()
        if path.is_dir() and path.name == "__pycache__":
            shutil.rmtree(path)
        elif path.is_file() and STRIPPABLE.match(rel):
            path.unlink()
            stripped.append(rel)
        elif path.is_file() and path.parent.name.endswith(".dist-info") and path.name in (
                "RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
            path.unlink()  # installer bookkeeping: RECORD would list the files removed above
    return stripped


def compiled_files(root: Path) -> list[str]:
    """Every file under ``root`` that is a native binary, by name or by content."""
    bad = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if path.name.endswith(COMPILED_SUFFIXES) or ".so." in path.name:
            bad.append(rel)
            continue
        with open(path, "rb") as fh:
            head = fh.read(4)
        if any(head.startswith(m) for m in MAGICS):
            bad.append(rel)
    return bad


def _vendor_key() -> str:
    """What the vendored lib/ tree is a function of: the pinned wheels, how they are
    selected and stripped, and the pip that unpacks them."""
    from importlib import metadata

    h = hashlib.sha256()
    for req, selection in WHEEL_SETS:
        h.update(req.encode() + b"\0" + (HERE / req).read_bytes() + b"\0"
                 + repr(selection).encode())
    h.update(f"{PYTHON_FLOOR}|{STRIPPABLE.pattern}|pip {metadata.version('pip')}".encode())
    return h.hexdigest()[:20]


def vendor(lib: Path, wheels: Path, cache: Path | None) -> list[str]:
    """Fill ``lib`` with the vendored libraries; return the compiled files deleted.

    The installed tree is cached under ``cache`` keyed by :func:`_vendor_key`, so a
    rebuild after a change of the package alone (every commit) is a copy, not two pip
    runs: ``--check`` stays cheap enough for every CI run."""
    if cache is None:
        return install_vendor(lib, wheels)
    entry = cache / f"lib-{_vendor_key()}"
    if not (entry / "done").is_file():
        tmp = Path(tempfile.mkdtemp(prefix=entry.name + ".", dir=cache))
        try:
            stripped = install_vendor(tmp / "lib", wheels)
            (tmp / "stripped").write_text("".join(f"{s}\n" for s in stripped))
            (tmp / "done").write_text("")
            try:
                tmp.rename(entry)
            except OSError:            # a concurrent build finished first
                if not (entry / "done").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(entry / "lib", lib)
    return (entry / "stripped").read_text().split()


def stage(staging: Path, wheels: Path, cache: Path | None = None) -> list[str]:
    shutil.copyfile(HERE / BIN, staging / BIN)
    shutil.copyfile(ROOT / "LICENSE", staging / "LICENSE")
    src = ROOT / PACKAGE
    for path in sorted(src.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        dest = staging / PACKAGE / path.relative_to(src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    stripped = vendor(staging / "lib", wheels, cache)
    bad = compiled_files(staging)
    if bad:
        raise BuildError("compiled files would be shipped: " + ", ".join(bad))
    return stripped


def write_tar(staging: Path, out: Path, epoch: int) -> None:
    entries = sorted(staging.rglob("*"), key=lambda p: p.relative_to(staging).as_posix())
    for p in entries:
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            raise BuildError(f"{p} is neither a regular file nor a directory")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in entries:
            rel = p.relative_to(staging).as_posix()
            info = tarfile.TarInfo(rel)
            info.mtime = epoch
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if p.is_dir():
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                data = p.read_bytes()
                info.size = len(data)
                info.mode = 0o755 if rel in EXECUTABLES else 0o644
                tar.addfile(info, io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as fh:
        with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz:
            gz.write(raw.getvalue())
    tmp.replace(out)


def render_manifest(tag: str, sha256: str, repo: str) -> str:
    text = (HERE / f"{PLUGIN}.yaml.tmpl").read_text()
    for key, value in (("tag", tag), ("repo", repo), ("archive", archive_name(tag)),
                       ("sha256", sha256)):
        text = text.replace(f"@{key}@", value)
    left = re.findall(r"@[a-z0-9]+@", text)
    if left:
        raise BuildError(f"unfilled placeholders in the manifest template: {sorted(set(left))}")
    return ("# Generated by krew/build.py from flux-plunger.yaml.tmpl; do not edit.\n" + text)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def vendor_cached(cache: Path | None) -> bool:
    return cache is not None and (cache / f"lib-{_vendor_key()}" / "done").is_file()


def build(out_dir: Path, manifest: Path | None, *, wheels: Path, repo: str, offline: bool,
          cache: Path | None = None, log: TextIO = sys.stderr) -> tuple[Path, str]:
    tag = "v" + version()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or DEFAULT_EPOCH)
    if not vendor_cached(cache):
        fetch_wheels(wheels, offline)
    with tempfile.TemporaryDirectory(prefix="flux-plunger-krew-") as tmp:
        staging = Path(tmp) / "root"
        staging.mkdir()
        stripped = stage(staging, wheels, cache)
        archive = out_dir / archive_name(tag)
        write_tar(staging, archive, epoch)
    digest = sha256_of(archive)
    if manifest is not None:
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(render_manifest(tag, digest, repo))
    print(f"{archive} sha256={digest} (removed compiled: {', '.join(stripped) or 'none'})",
          file=log)
    if manifest is not None:
        print(f"{manifest} filled for {tag}", file=log)
    return archive, digest


REFRESH = "python3 krew/build.py"


def check(manifest: Path, *, wheels: Path, repo: str, offline: bool,
          cache: Path | None) -> int:
    """0 when ``manifest`` is what a fresh build of this tree writes, else 1 with a
    one-line reason and the command that refreshes it."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / f"{PLUGIN}.yaml"
        _, digest = build(Path(tmp), fresh, wheels=wheels, repo=repo, offline=offline,
                          cache=cache, log=io.StringIO())
        committed = manifest.read_text() if manifest.is_file() else ""
        if committed != fresh.read_text():
            shas = sorted(set(re.findall(r"sha256: ([0-9a-f]{64})", committed)))
            why = (f"its sha256 {', '.join(shas)} is not the archive's {digest}"
                   if shas and digest not in shas else "it differs from the template filled "
                   f"for v{version()}" if committed else "it does not exist")
            print(f"error: {manifest} is stale: {why}; refresh it with: {REFRESH}",
                  file=sys.stderr)
            return 1
    print(f"{manifest} matches a fresh build (sha256 {digest})", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=HERE / "dist")
    ap.add_argument("--manifest", type=Path, default=HERE / f"{PLUGIN}.yaml",
                    help="where to write the filled manifest (default: krew/flux-plunger.yaml)")
    ap.add_argument("--wheels", type=Path, default=HERE / "build" / "wheels",
                    help="wheel cache (default: krew/build/wheels)")
    ap.add_argument("--cache", type=Path, default=HERE / "build",
                    help="where the installed vendored libraries are cached, keyed by the "
                         "pinned requirements (default: krew/build)")
    ap.add_argument("--fetch", action="store_true",
                    help="only download the pinned wheels and install them into the cache "
                         "(what hack/setup.sh runs, so --check --offline works later)")
    ap.add_argument("--repo", default=DEFAULT_REPO, help="GitHub owner/name of the release URLs")
    ap.add_argument("--offline", action="store_true", help="use only cached wheels")
    ap.add_argument("--check", action="store_true",
                    help="build into a temporary directory and fail unless the manifest "
                         "(--manifest) matches it")
    args = ap.parse_args(argv)
    try:
        if args.fetch:
            if not vendor_cached(args.cache):
                fetch_wheels(args.wheels, args.offline)
                with tempfile.TemporaryDirectory() as tmp:
                    vendor(Path(tmp) / "lib", args.wheels, args.cache)
            print(f"vendored libraries cached in {args.cache}", file=sys.stderr)
            return 0
        if args.check:
            return check(args.manifest, wheels=args.wheels, repo=args.repo,
                         offline=args.offline, cache=args.cache)
        build(args.out_dir, args.manifest, wheels=args.wheels, repo=args.repo,
              offline=args.offline, cache=args.cache)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
