"""krew/floor.py, the glibc floor check of every Linux krew archive (issue 37), on this
machine's own ELF files: what it reads of each file is what ``objdump -p`` (binutils) lists
under "Version References"; a floor below what a file needs fails naming the file, the
version and the library; a tar.gz and a directory read alike; a file that is not ELF is
ignored in an archive and refused alone.  (The archive built in the floor root, and a host
freeze the check fails, are tests/release/test_floor.py.)"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "krew"))
import floor  # noqa: E402

OBJDUMP = shutil.which("objdump")
SAMPLES = [Path(p) for p in ("/bin/ls", "/bin/sh", sys.executable) if Path(p).is_file()]


def objdump_versions(path: Path) -> set[str]:
    out = subprocess.run([OBJDUMP, "-p", str(path)], capture_output=True, text=True,
                         check=True).stdout
    refs = out.split("Version References:")[1] if "Version References:" in out else ""
    return set(re.findall(r"0x[0-9a-f]+ 0x\d+ \d+ (\S+)", refs))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_it_reads_what_objdump_reads(path):
    # binutils comes with the C toolchain every machine of the project has (the floor root's
    # CPython build needs it): its absence is a broken machine, not a reason to skip
    assert OBJDUMP is not None, "binutils' objdump is not installed (apt-get install binutils)"
    real = Path(path).resolve()
    assert set(floor.needed_versions(real.read_bytes(), str(real))) == objdump_versions(real)


def test_a_floor_below_a_file_fails_naming_file_version_and_library(tmp_path):
    ls = Path("/bin/ls").resolve()
    (tmp_path / "bin").mkdir()
    shutil.copyfile(ls, tmp_path / "bin" / "ls")
    (tmp_path / "README").write_text("not ELF\n")
    rows = floor.glibc_needs(tmp_path)
    newest = floor.newest(rows)
    assert newest and floor.version_tuple(newest) > (2, 2, 5)
    assert floor.above(rows, newest) == []
    bad = floor.above(rows, "2.2.5")
    assert bad and all(line.startswith("bin/ls needs GLIBC_") for line in bad)
    assert f"bin/ls needs GLIBC_{newest} (from libc.so.6), above the floor glibc 2.2.5" in bad

    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "bin", "bin")
        tar.add(tmp_path / "README", "README")
    assert floor.glibc_needs(archive) == floor.glibc_needs(tmp_path)
    assert floor.main([str(archive), "--glibc", newest]) == 0
    assert floor.main([str(archive), "--glibc", "2.2.5"]) == 1


def test_no_elf_or_not_elf_is_refused(tmp_path, capsys):
    (tmp_path / "x").write_text("text")
    assert floor.main([str(tmp_path)]) == 1
    assert "no ELF file in it" in capsys.readouterr().err
    with pytest.raises(floor.FloorError, match="not an ELF file"):
        floor.needed_versions(b"MZ\x90\x00", "x.exe")


def _load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"krew_{name}", ROOT / "krew" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_build_freezes_in_the_floor_root_only_when_it_is_there(tmp_path, monkeypatch, capsys):
    """krew/build.py: ``--host`` is this interpreter; ``--floor`` without the root is an
    error saying how to build it; the default falls back to the host; ``--check`` on
    linux/amd64 never compares a host build with the committed (floor) sha256."""
    from kubectl_flux_plunger import frozen

    build = _load("build")
    binary = build.binary
    assert binary.RUNS_ON == frozen.RUNS_ON  # what the build writes is what the binary reads
    monkeypatch.setenv("FLUX_PLUNGER_BINARY_CACHE", str(tmp_path / "cache"))
    assert build.builder("host").root is None
    assert build.builder("auto").root is None
    with pytest.raises(build.BuildError, match="floor root|root|linux/amd64"):
        build.builder("floor")
    if binary.host_platform() == "linux/amd64":
        assert build.check(tmp_path / "flux-plunger.yaml", repo="o/r", offline=True) == 1
        assert "error: cannot check" in capsys.readouterr().err
