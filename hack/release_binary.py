"""hack/release.py's krew step: this platform's self-contained binary archive and its manifest.

The archive is krew/build.py's (krew/binary.py: PyInstaller, one directory, reproducible on
one machine), built from the exported commit with the fixed 1980 epoch; the manifest names
all five platforms, with this platform's sha256 and, for the four built on other runners, the
not-built-here marker (krew/build.py explains it).  release.yml's last job rewrites the
manifest from every platform's checksum (``krew/build.py --from-sums``).

A release built on this project's machine (linux/amd64, what CI runs, with the floor root
built: krew/build.py freezes in it) writes exactly the committed krew/flux-plunger.yaml; the
test tier checks that.  (release.yml's released linux archives are frozen in an AlmaLinux 8
container instead, issue 37; its last job writes their checksums into the manifest.)  On another machine the bundled
system libraries differ, so the archive's bytes and sha256 do too: here the manifest is
checked against the committed one with the sha256 values set aside (version, URLs, bins,
platforms must agree everywhere).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

KREW_EPOCH = 315532800  # krew/build.py's DEFAULT_EPOCH: the committed manifest is built with it


class BinaryReleaseError(RuntimeError):
    pass


def _without_sha256(text: str) -> str:
    return re.sub(r"sha256: [0-9a-f]{64}.*", "sha256: -", text)


def build_krew_binary(tree: Path, out: Path, repo: str, offline: bool,
                      fresh: bool = False) -> tuple[Path, Path]:
    """(archive, manifest) in ``out``, from ``tree`` (the exported commit)."""
    manifest = out / "flux-plunger.yaml"
    proc = subprocess.run(
        [sys.executable, str(tree / "krew" / "build.py"), "--out-dir", str(out),
         "--manifest", str(manifest), "--repo", repo,
         *(["--offline"] if offline else []), *(["--fresh"] if fresh else [])],
        capture_output=True, text=True, env={**os.environ, "SOURCE_DATE_EPOCH": str(KREW_EPOCH)})
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-12:]
        raise BinaryReleaseError(f"krew/build.py failed (exit {proc.returncode}): "
                                 + " | ".join(tail))
    committed = (tree / "krew" / "flux-plunger.yaml").read_text()
    if _without_sha256(manifest.read_text()) != _without_sha256(committed):
        raise BinaryReleaseError("krew/flux-plunger.yaml committed in this commit is not the "
                                 "manifest of its archives; refresh it with: python3 krew/build.py")
    archives = sorted(out.glob("kubectl-flux_plunger-v*-*-*.tar.gz"))
    if len(archives) != 1:
        raise BinaryReleaseError(f"krew/build.py made {[a.name for a in archives]}, not one archive")
    return archives[0], manifest
