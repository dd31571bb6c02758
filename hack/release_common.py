"""hack/release.py's plumbing, shared by every step: where the tree is, what a release is
stamped with (``Stamp``), the one error a step raises (``ReleaseError``: the one line
printed), logging, running a tool, a file's sha256."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "kubectl_flux_plunger"
DIST_NAME = "kubectl_flux_plunger"
CHART = "controller/chart/flux-plunger"


@dataclass(frozen=True)
class Stamp:
    """What the artifacts of one release are stamped with: its version, the commit, the
    commit's time (``SOURCE_DATE_EPOCH``) and the repository's URL."""

    version: str
    sha: str
    epoch: int
    source: str


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
