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
    flux-plunger-vX.Y.Z-OS-ARCH                   this platform's single-file executable for
                                                  `flux plugin install plunger`: the krew
                                                  archive inside a launcher (hack/release_flux.py)
    plunger.yaml, catalog.yaml                    the Flux plugin catalog (kind Plugin,
                                                  PluginCatalog; release.yml rewrites plunger.yaml
                                                  from every platform's single file)
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

One module per step, each readable and changeable apart; this script runs them in order:

    hack/release_source.py   the commit exported into a tree; the versions it states
    hack/release_python.py   the wheel and the sdist
    hack/release_binary.py   the krew archive and manifest
    hack/release_flux.py     the single file of that archive, plunger.yaml, catalog.yaml
    hack/release_wheels.py   the image's locked wheels (--fetch), the dependencies for pipx
    hack/release_image.py    the controller image
    hack/release_chart.py    the chart
    hack/release_sign.py     the SBOMs (and signing)
    hack/release_sums.py     SHA256SUMS
    hack/release_common.py   what they share (ReleaseError, run, log, sha256_file)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))

# one module per artifact (hack/release_*.py); this script runs them in order
import release_sign  # noqa: E402 - the SBOMs (and, after the build, signing)
from release_chart import build_chart, find_helm  # noqa: E402
from release_common import ReleaseError, Stamp, log  # noqa: E402
from release_flux import build_flux_plugin  # noqa: E402
from release_image import build_image  # noqa: E402
from release_python import build_python, client_version, wheel_version  # noqa: E402
from release_source import (  # noqa: E402
    check_versions,
    export,
    export_worktree,
    resolve,
    tree_versions,
)
from release_sums import write_sums  # noqa: E402
from release_wheels import (  # noqa: E402
    fetch_image_wheels,
    fetch_user_wheels,
    image_wheels_dir,
    lock_without_build_tools,
    user_wheels_dir,
)

__all__ = ["ReleaseError", "main", "release", "user_wheels_dir"]  # tests/release import these

DEFAULT_REPO = "cozystack/kubectl-flux-plunger"
DEFAULT_IMAGE = "ghcr.io/cozystack/kubectl-flux-plunger"
DEFAULT_PLATFORMS = "linux/amd64,linux/arm64"


# -- krew -----------------------------------------------------------------------------------

def build_krew(tree: Path, out: Path, repo: str, offline: bool,
               fresh: bool = False) -> tuple[Path, Path]:
    import release_binary

    try:
        return release_binary.build_krew_binary(tree, out, repo, offline, fresh)
    except release_binary.BinaryReleaseError as exc:
        raise ReleaseError(str(exc)) from None



# -- the whole release ----------------------------------------------------------------------

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
        single, plugin, catalog = build_flux_plugin(tree, out, archive, args.repo)
        log(f"{single.name} + {plugin.name} + {catalog.name} (the Flux plugin)")
        stamp = Stamp(version, sha, epoch, f"https://github.com/{args.repo}")
        oci, digest, plats = build_image(
            tree, wheel, args.base_image.resolve(), out, stamp,
            platforms=args.platforms.split(","), pyver=args.base_python, offline=args.offline)
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
