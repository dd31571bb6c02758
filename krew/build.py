#!/usr/bin/env python3
"""Build this platform's krew archive (a self-contained binary) and fill in the krew manifest.

    python3 krew/build.py                # krew/dist/kubectl-flux_plunger-vX.Y.Z-OS-ARCH.tar.gz
                                         # + krew/flux-plunger.yaml
    python3 krew/build.py --check        # exit 1 if krew/flux-plunger.yaml does not match a build
    python3 krew/build.py --fetch        # make the cached build virtualenv (PyInstaller + lock)
    python3 krew/build.py --fetch-floor  # build the floor root (~15 min, once per machine, as
                                         # root) and the build virtualenv inside it
    python3 krew/build.py --check --offline   # what CI runs (hack/test.sh, release tier)
    python3 krew/build.py --host         # freeze with this interpreter, whatever the floor
    python3 krew/build.py --out-dir D --manifest D/flux-plunger.yaml   # build elsewhere (tests)
    python3 krew/build.py --from-sums SHA256SUMS --manifest M   # the release's manifest, from
                                         # every platform's archive checksum (no build)

The archive is krew/binary.py's: the interpreter, the package and its locked dependencies
frozen by PyInstaller (one directory), plus LICENSE.  One per platform: linux/amd64,
linux/arm64, darwin/amd64, darwin/arm64, windows/amd64; each is built on its own machine
(PyInstaller does not cross-build), which release.yml does on GitHub's runners.

The manifest (from flux-plunger.yaml.tmpl) has one entry per platform, each naming its own
archive, sha256 and ``bin`` (``kubectl-flux_plunger.exe`` on Windows).  The committed
krew/flux-plunger.yaml is what this command writes on this project's machine (linux/amd64):
that platform's sha256 is the archive built here, and every platform built elsewhere carries
the sha256 of an empty file (NOT_BUILT_HERE, with a comment saying so) — no archive has it,
so krew refuses such an entry instead of installing anything unchecked.  The released manifest
is written by the release job with ``--from-sums`` from the five archives' checksums.

The glibc floor (issue 37): on linux/amd64, run as root, with the floor root built
(``--fetch-floor``; hack/setup.sh's late stage), the freeze runs inside a Debian 11 root with
its own CPython 3.11 (krew/buildroot.py), so the archive needs glibc 2.31 at most — that is the
build the committed manifest's sha256 is of, and what ``--check`` builds.  Without the root
(or with ``--host``) the freeze uses the interpreter running this script, and the archive
needs what that interpreter and the host's libraries need.  Either way the build says its
floor (``glibc X.Y or newer``, measured over every ELF file by krew/floor.py), and the binary
says it in ``version --client``.

Every change to the package changes the archive and so the manifest's sha256: refresh the
committed manifest with ``python3 krew/build.py`` (~1 min: a freeze; the build virtualenv and
the archive of an unchanged tree are cached under ~/.cache/kubectl-flux-plunger/binary).
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import TextIO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import binary  # noqa: E402
import buildroot  # noqa: E402

PACKAGE = "kubectl_flux_plunger"
PLUGIN = "flux-plunger"
DEFAULT_REPO = "cozystack/kubectl-flux-plunger"
DEFAULT_EPOCH = 315532800  # 1980-01-01T00:00:00Z
NOT_BUILT_HERE = hashlib.sha256(b"").hexdigest()
REFRESH = "python3 krew/build.py"


class BuildError(RuntimeError):
    pass


def version() -> str:
    text = (ROOT / PACKAGE / "__init__.py").read_text()
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
    if not m:
        raise BuildError(f"{PACKAGE}/__init__.py has no __version__")
    return m.group(1)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def render_manifest(tag: str, sums: dict[str, str], repo: str) -> str:
    """The template filled for ``tag``: one platform entry per binary.PLATFORMS, its sha256
    from ``sums`` (archive name -> sha256), NOT_BUILT_HERE for an archive not in ``sums``."""
    blocks = []
    for plat in binary.PLATFORMS:
        osname, arch = plat.split("/")
        name = binary.archive_name(tag, plat)
        sha = sums.get(name)
        note = "" if sha else ("  # built on its own runner at release time; this is the sha256 "
                               "of an empty file, which no archive has")
        blocks.append(
            f"  - selector:\n      matchLabels:\n        os: {osname}\n        arch: {arch}\n"
            f"    uri: https://github.com/{repo}/releases/download/{tag}/{name}\n"
            f"    sha256: {sha or NOT_BUILT_HERE}{note}\n"
            f"    bin: {binary.bin_name(plat)}\n")
    text = (HERE / f"{PLUGIN}.yaml.tmpl").read_text()
    for key, value in (("tag", tag), ("repo", repo)):
        text = text.replace(f"@{key}@", value)
    text = text.replace("@platforms@\n", "".join(blocks))
    left = re.findall(r"@[a-z0-9]+@", text)
    if left:
        raise BuildError(f"unfilled placeholders in the manifest template: {sorted(set(left))}")
    return "# Generated by krew/build.py from flux-plunger.yaml.tmpl; do not edit.\n" + text


def read_sums(path: Path) -> dict[str, str]:
    """``sha256sum`` lines (``HEX  NAME``) -> {name: hex}."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.fullmatch(r"([0-9a-f]{64}) [ *](\S+)", line.strip())
        if m:
            out[Path(m.group(2)).name] = m.group(1)
    return out


def from_sums(sums_file: Path, manifest: Path, repo: str) -> None:
    """The released manifest: every platform's archive must be in ``sums_file``."""
    tag = "v" + version()
    sums = read_sums(sums_file)
    missing = [binary.archive_name(tag, p) for p in binary.PLATFORMS
               if binary.archive_name(tag, p) not in sums]
    if missing:
        raise BuildError(f"{sums_file} has no checksum of {', '.join(missing)}")
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(render_manifest(tag, sums, repo))


def builder(mode: str, offline: bool = False) -> binary.Builder:
    """Where to freeze: ``floor`` (the floor root; an error when it is not built),
    ``host`` (this interpreter), ``auto`` (the floor root when it is built — with its build
    virtualenv, ``offline`` — else the host)."""
    if mode == "host":
        return binary.Builder()
    root = buildroot.ready(binary.cache_dir())
    if root is not None and (mode == "floor" or not offline
                             or binary.venv_ready(ROOT, binary.Builder(root))):
        return binary.Builder(root)
    if mode == "floor":
        why = buildroot.unusable() or (
            f"the floor root is not built here ({buildroot.root_dir(binary.cache_dir())}); "
            "build it once with: python3 krew/build.py --fetch-floor (~15 min, as root)")
        raise BuildError(why)
    return binary.Builder()


def build(out_dir: Path, manifest: Path | None, *, repo: str, offline: bool,
          fresh: bool = False, mode: str = "auto",
          log: TextIO = sys.stderr) -> tuple[Path, str]:
    tag = "v" + version()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or DEFAULT_EPOCH)
    where = builder(mode, offline)
    try:
        archive = binary.build_archive(ROOT, out_dir, tag, epoch=epoch, offline=offline,
                                       fresh=fresh, builder=where)
    except binary.BinaryError as exc:
        raise BuildError(str(exc)) from None
    digest = sha256_of(archive)
    if manifest is not None:
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(render_manifest(tag, {archive.name: digest}, repo))
    print(f"{archive} sha256={digest} ({archive.stat().st_size / 2**20:.1f} MiB)", file=log)
    print(f"{archive.name}: {runs_on(archive)}; frozen "
          + (f"in the floor root (glibc {where.floor})" if where.root else
             "with this interpreter (a host build: python3 krew/build.py --fetch-floor makes "
             "the floor root)" if binary.host_platform() == "linux/amd64" else
             "with this interpreter"), file=log)
    if manifest is not None:
        print(f"{manifest} filled for {tag}", file=log)
    return archive, digest


def runs_on(archive: Path) -> str:
    """What the archive says it needs (binary.RUNS_ON), e.g. ``linux/amd64, glibc 2.31 or
    newer``."""
    import tarfile

    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"_internal/{binary.RUNS_ON}")
        return member.read().decode().strip() if member else "(not stated)"


def check(manifest: Path, *, repo: str, offline: bool, mode: str = "auto") -> int:
    """0 when ``manifest`` is what a build of this tree writes, else 1 with a one-line reason
    and the command that refreshes it.  The committed sha256 is the floor build's: on
    linux/amd64 the check builds in the floor root (``mode`` auto means floor there)."""
    if mode == "auto" and binary.host_platform() == "linux/amd64":
        mode = "floor"
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / f"{PLUGIN}.yaml"
        try:
            archive, digest = build(Path(tmp), fresh, repo=repo, offline=offline, mode=mode,
                                    log=io.StringIO())
        except BuildError as exc:
            print(f"error: cannot check {manifest}: {exc}", file=sys.stderr)
            return 1
        committed = manifest.read_text() if manifest.is_file() else ""
        if committed != fresh.read_text():
            shas = sorted(set(re.findall(r"sha256: ([0-9a-f]{64})", committed)) - {NOT_BUILT_HERE})
            why = (f"its sha256 {', '.join(shas)} is not the archive's {digest}"
                   if shas and digest not in shas else "it differs from the template filled "
                   f"for v{version()}" if committed else "it does not exist")
            print(f"error: {manifest} is stale: {why}; refresh it with: {REFRESH}",
                  file=sys.stderr)
            return 1
    print(f"{manifest} matches a fresh build ({archive.name} sha256 {digest})", file=sys.stderr)
    return 0


def fetch_floor() -> int:
    """The floor root and the build virtualenv inside it (hack/setup.sh's late stage)."""
    cache = binary.cache_dir()
    try:
        root = buildroot.build(cache)
        python = binary.build_venv(ROOT, cache, False, binary.Builder(root))
    except (buildroot.RootError, binary.BinaryError) as exc:
        raise BuildError(str(exc)) from None
    print(f"floor root: {root} (glibc {buildroot.GLIBC}); build virtualenv: "
          f"{python.parent.parent}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=HERE / "dist")
    ap.add_argument("--manifest", type=Path, default=HERE / f"{PLUGIN}.yaml",
                    help="where to write the filled manifest (default: krew/flux-plunger.yaml)")
    ap.add_argument("--fetch", action="store_true",
                    help="only make the build virtualenv (PyInstaller and the locked "
                         "dependencies; what hack/setup.sh runs, so --offline works later)")
    ap.add_argument("--fetch-floor", action="store_true",
                    help="only build the floor root (krew/floor-root.sh; ~15 min, once per "
                         "machine, as root) and the build virtualenv inside it")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--floor", dest="mode", action="store_const", const="floor",
                     help="freeze in the floor root (glibc 2.31); fail when it is not built")
    how.add_argument("--host", dest="mode", action="store_const", const="host",
                     help="freeze with the interpreter running this script, whatever the floor")
    ap.add_argument("--from-sums", type=Path, metavar="SHA256SUMS",
                    help="write --manifest from these checksums of every platform's archive; "
                         "build nothing")
    ap.add_argument("--repo", default=DEFAULT_REPO, help="GitHub owner/name of the release URLs")
    ap.add_argument("--offline", action="store_true",
                    help="fail instead of installing a missing build virtualenv")
    ap.add_argument("--fresh", action="store_true",
                    help="freeze again even when an archive of the same inputs is cached")
    ap.add_argument("--check", action="store_true",
                    help="build into a temporary directory and fail unless the manifest "
                         "(--manifest) matches it")
    args = ap.parse_args(argv)
    mode = args.mode or "auto"
    try:
        if args.fetch_floor:
            return fetch_floor()
        if args.fetch:
            try:
                python = binary.build_venv(ROOT, binary.cache_dir(), args.offline)
            except binary.BinaryError as exc:
                raise BuildError(str(exc)) from None
            print(f"build virtualenv: {python.parent.parent}", file=sys.stderr)
            return 0
        if args.from_sums:
            from_sums(args.from_sums, args.manifest, args.repo)
            print(f"{args.manifest} written from {args.from_sums}", file=sys.stderr)
            return 0
        if args.check:
            return check(args.manifest, repo=args.repo, offline=args.offline, mode=mode)
        build(args.out_dir, args.manifest, repo=args.repo, offline=args.offline,
              fresh=args.fresh, mode=mode)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
