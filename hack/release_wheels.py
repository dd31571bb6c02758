"""hack/release.py's dependency wheels: the image's locked wheels per platform (from
controller/requirements.lock, hash-checked, downloaded once into the cache: ``--fetch``), and
the package's dependencies for this Python (what the release tier's ``pipx install`` of the
built wheel takes instead of an index)."""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
from pathlib import Path

from release_common import ReleaseError, run, sha256_file

# pip's platform tags per architecture (the lock's compiled wheels are manylinux)
PIP_PLATFORMS = {
    "amd64": ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
              "manylinux_2_5_x86_64", "manylinux1_x86_64"],
    "arm64": ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"],
}


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
