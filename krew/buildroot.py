"""Where krew/binary.py freezes: the host's interpreter, or the floor root (issue 37).

The floor root is a Debian 11 (bullseye, glibc 2.31) root file system with CPython 3.11 built
``--enable-shared`` inside it from Debian's python3.11 source package (krew/floor-root.sh).
Frozen there, with PyInstaller run by that interpreter under ``chroot``, the archive bundles
only bullseye's libraries (libpython, OpenSSL, libffi, zlib, ...) and so needs no glibc symbol
newer than 2.31 (krew/floor.py checks every ELF file of it).  On the host, the archive needs
whatever the host's interpreter and libraries need (glibc 2.35+ on a current distribution).

The root is cached beside the build virtualenvs (~/.cache/kubectl-flux-plunger/binary/floor/
bullseye-KEY, KEY = krew/floor-root.sh and hack/kind/mirror.sh and the machine), built once
per machine by ``krew/build.py --fetch-floor`` (hack/setup.sh's late stage), ~1 GiB.  Commands
run in it through a private mount namespace with /proc and /dev (``unshare -m``), which is
gone with the command: nothing stays mounted.  Both need root, as debootstrap does.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "floor-root.sh"
MIRROR = HERE.parent / "hack" / "kind" / "mirror.sh"
GLIBC = "2.31"                      # bullseye's: the floor of a build in the root
PYTHON = "/opt/python3.11/bin/python3.11"
PATH = "/usr/local/bin:/usr/bin:/bin"
# what the host's pip is told that pip in the root is told too (a registry mirror, a proxy)
PIP_PASSED = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_DEFAULT_TIMEOUT", "HTTP_PROXY",
              "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


class RootError(RuntimeError):
    """The floor root cannot be built or used; the message is the one line printed."""


def key() -> str:
    """The root's inputs: the two scripts' commands (their comments aside: a root takes
    ~16 min to build) and the machine."""
    h = hashlib.sha256()
    for script in (SCRIPT, MIRROR):
        code = [line for line in script.read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
        h.update(hashlib.sha256("\n".join(code).encode()).digest())
    h.update(hashlib.sha256(platform.machine().encode()).digest())
    return h.hexdigest()[:20]


def root_dir(cache: Path) -> Path:
    return cache / "floor" / f"bullseye-{key()}"


def unusable() -> str | None:
    """Why this machine cannot build in the floor root (None: it can)."""
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return "the floor root is built for linux/amd64 only"
    if os.geteuid() != 0:
        return "the floor root needs root (debootstrap, chroot)"
    return None


def ready(cache: Path) -> Path | None:
    """The floor root when it is built and usable here, else None."""
    root = root_dir(cache)
    return root if unusable() is None and (root / PYTHON.lstrip("/")).is_file() else None


def build(cache: Path) -> Path:
    """The floor root, built (~15 min: debootstrap, the build dependencies, CPython) unless it
    is; older roots (another KEY) are removed."""
    why = unusable()
    if why:
        raise RootError(why)
    root = root_dir(cache)
    with locked(cache / "floor.lock"):
        if not (root / PYTHON.lstrip("/")).is_file():
            # its steps (and, when one fails, the log's tail) on stderr
            proc = subprocess.run(["bash", str(SCRIPT), str(root)], stdout=subprocess.DEVNULL)
            if proc.returncode != 0:
                raise RootError(f"krew/floor-root.sh failed (exit {proc.returncode}); its log: "
                                f"{root}.log")
        for old in root.parent.glob("bullseye-*"):  # older roots and their logs
            if old.name.split(".")[0] != root.name:
                shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
    return root


def host_ca_bundle(root: Path) -> Path:
    """The certificates the host's pip trusts (PIP_CERT, else the system bundle), copied into
    the root for its pip: a machine behind a TLS-inspecting proxy trusts that proxy's CA,
    which bullseye's ca-certificates does not know."""
    src = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
    dst = root / "etc" / "ssl" / "host-ca-certificates.crt"
    shutil.copyfile(src, dst)
    return dst


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    import fcntl  # (this module is imported on Windows too: only the floor root locks)

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Builder:
    """Where a build step runs: the host (``root`` None) or a chroot into ``root``.  Paths are
    host paths; :meth:`inner` is how the command sees one."""

    root: Path | None = None

    @property
    def floor(self) -> str | None:
        return GLIBC if self.root else None

    def inner(self, path: Path) -> str:
        if self.root is None:
            return str(path)
        return "/" + path.relative_to(self.root).as_posix()

    def tmp(self) -> Path:
        """A temporary directory both sides see."""
        if self.root is None:
            return Path(tempfile.gettempdir())
        (self.root / "tmp").mkdir(exist_ok=True)
        return self.root / "tmp"

    def argv(self, argv: list[str], env: dict[str, str] | None, cwd: Path | None) -> list[str]:
        if self.root is None:
            return argv
        envv = [f"{k}={v}" for k, v in sorted((env or {"PATH": PATH}).items())]
        return ["unshare", "-m", "--propagation", "private", "sh", "-c",
                'r=$1; shift; mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" '
                '&& exec chroot "$r" "$@"', "sh", str(self.root),
                "/usr/bin/env", "-i", *envv, "/bin/sh", "-c", 'cd "$0" && exec "$@"',
                self.inner(cwd) if cwd else "/", *argv]

    def run(self, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess:
        """``argv`` here (``env`` None: the host's own environment; in the root: PATH alone)."""
        return subprocess.run(self.argv(argv, env, cwd), capture_output=True, text=True,
                              env=env if self.root is None else None,
                              cwd=cwd if self.root is None else None, timeout=timeout)
