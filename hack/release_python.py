"""hack/release.py's Python artifacts: the wheel and the sdist (``python -m build
--no-isolation``, the sdist repacked to be reproducible, ``twine check``), and the versions
the built wheel states (its metadata, its ``version --client``)."""

from __future__ import annotations

import gzip
import io
import re
import shutil
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from release_common import ReleaseError, run


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
