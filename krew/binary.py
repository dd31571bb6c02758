"""The self-contained plugin: PyInstaller freezes the interpreter, the package and its locked
dependencies into one directory per platform, packed as that platform's krew archive.

    kubectl-flux_plunger-vX.Y.Z-OS-ARCH.tar.gz
        kubectl-flux_plunger[.exe]   the bootloader + the frozen entry point (0755)
        _internal/                   libpython, the stdlib, the extension modules and shared
                                     libraries they load, the compiled package (a PYZ archive),
                                     the CLI sources entry.fingerprint reads (data files)
        LICENSE

One-directory mode, not one-file: a one-file build unpacks ~26 MiB into a temporary directory on
every run (docs/BENCHMARKS.md has the start-up figures of both).  The executable finds
``_internal`` next to its real path, so krew's symlink to it, Flux's plugin link and the
completion link all work.

What is frozen is fixed by committed files: controller/requirements.lock (the application's
dependencies, the image's lock) and krew/requirements-binary.txt (PyInstaller and its own
dependencies, hash-pinned for every platform), installed with ``pip --require-hashes
--only-binary=:all:`` into a build virtualenv made from the interpreter running this module.
That virtualenv is cached outside the work tree (~/.cache/kubectl-flux-plunger/binary/venv-KEY,
KEY = the two requirement files, the interpreter, the platform), so a build after a change of
the package alone only freezes.  The archive itself is cached too, keyed by everything that
goes into it (the package's files, the virtualenv's key, this module, the epoch): a second
build of the same tree is a copy unless asked for a fresh one (``fresh=True``: what the
reproducibility test uses).

Reproducible where PyInstaller allows: ``PYTHONHASHSEED=0`` and ``SOURCE_DATE_EPOCH`` for the
freeze, the tree frozen from one fixed path (a staging copy, so the paths written into the
bytecode and the build's own logs are the same for every checkout), the archive written here
with sorted entries, mtime = epoch, uid/gid 0, no owner names, modes 0755/0644, gzip without
name or time.  Two freezes of one tree on one machine give the same bytes
(tests/release/test_release_build.py); what a different machine changes is the interpreter
and the system libraries that are bundled (libpython, OpenSSL, zlib, libffi, ...).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import platform as _platform
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import buildroot  # noqa: E402
import floor  # noqa: E402
from buildroot import Builder  # noqa: E402,F401  (krew/build.py: binary.Builder)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PACKAGE = "kubectl_flux_plunger"
BIN = "kubectl-flux_plunger"
ENTRY = HERE / "frozen_entry.py"
REQUIREMENTS = HERE / "requirements-binary.txt"
LOCK = Path("controller") / "requirements.lock"
PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64")
# entry.fingerprint() reads these sources to know the prerendered help is current: they are
# shipped as data files next to the frozen package (the code itself is in the PYZ)
FINGERPRINTED = ("__init__.py", "verbs/version.py", "cli/*.py")
# imported through importlib by kube._client_modules (PyInstaller only follows import statements)
HIDDEN = ("kubernetes.client.configuration", "kubernetes.client.rest", "kubernetes.config")
# never imported by the plugin, but reachable in the import graph (PyInstaller's own
# dependency, the REPL, Tk): leaving them out saves ~4 MiB
EXCLUDES = ("setuptools", "pkg_resources", "_distutils_hack", "tkinter", "readline", "pip")
# PyInstaller's runtime hooks that run on every start for modules that are merely reachable,
# each for a feature the plugin never uses:
# * multiprocessing's: imports multiprocessing + spawn (~20 ms), only for the child processes
#   multiprocessing starts by re-running the executable (the client's ThreadPool is the only
#   use here, and threads need no hook);
# * inspect's: imports inspect and lists base_library.zip (~6 ms), only so that
#   inspect.getsourcefile works for frozen code, which nothing here calls;
# * pkgutil's: imports pkgutil and with it typing, re and enum (~15 ms), only so that
#   pkgutil.iter_modules sees the frozen modules, and nothing here calls pkgutil.
DROP_RUNTIME_HOOKS = ("pyi_rth_multiprocessing", "pyi_rth_inspect", "pyi_rth_pkgutil")
STAGE = "flux-plunger-freeze"  # the fixed directory name the tree is frozen from
KEEP_ARCHIVES = 4               # cached archives kept (newest first)
# what the binary needs of the system it runs on, written into _internal/ after the freeze:
# `version --client` prints it (kubectl_flux_plunger.frozen.runs_on)
RUNS_ON = "flux-plunger-runs-on.txt"


class BinaryError(RuntimeError):
    """The binary cannot be built; the message is the one line printed."""


def host_platform() -> str:
    """``os/arch`` of this machine, in krew's (Go's) names."""
    osname = {"linux": "linux", "darwin": "darwin", "win32": "windows"}.get(sys.platform)
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64",
            "arm64": "arm64"}.get(_platform.machine().lower())
    if osname is None or arch is None:
        raise BinaryError(f"no binary build for {sys.platform}/{_platform.machine()}; "
                          f"the platforms are {', '.join(PLATFORMS)}")
    return f"{osname}/{arch}"


def bin_name(plat: str) -> str:
    return BIN + (".exe" if plat.startswith("windows/") else "")


def archive_name(tag: str, plat: str) -> str:
    return f"{BIN}-{tag}-{plat.replace('/', '-')}.tar.gz"


def cache_dir() -> Path:
    """~/.cache/kubectl-flux-plunger/binary (beside the test binaries' cache)."""
    env = os.environ.get("FLUX_PLUNGER_BINARY_CACHE")
    if env:
        return Path(env)
    sys.path.insert(0, str(ROOT))
    from testplane import binaries

    return binaries.cache_root().parent / "binary"


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:20]


def requirements_text(tree: Path) -> str:
    return (tree / LOCK).read_text() + "\n" + REQUIREMENTS.read_text()


def venv_key(tree: Path, builder: Builder = Builder()) -> str:
    """What the build virtualenv is a function of: the requirements and the interpreter (the
    host's, or the floor root's, by the root's key)."""
    if builder.root is not None:
        interp = f"floor|{builder.root.name}"
    else:
        interp = f"{sys.version}|{os.path.realpath(sys.executable)}|{sys.platform}|" \
                 f"{_platform.machine()}"
    return _sha(requirements_text(tree).encode(), interp.encode())


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def venv_dir(tree: Path, cache: Path, builder: Builder = Builder()) -> Path:
    """Where the build virtualenv is: the cache, or inside the floor root (/opt/venvs)."""
    if builder.root is not None:
        return builder.root / "opt" / "venvs" / f"venv-{venv_key(tree, builder)}"
    return cache / f"venv-{venv_key(tree)}"


def _venv_done(venv: Path) -> bool:
    """Made, and still there: its mark and its python (a link; in the floor root it names a
    path inside the root, so only the link itself is looked at)."""
    return (venv / "done").is_file() and os.path.lexists(venv_python(venv))


def venv_ready(tree: Path, builder: Builder) -> bool:
    return _venv_done(venv_dir(tree, cache_dir(), builder))


def build_venv(tree: Path, cache: Path, offline: bool, builder: Builder = Builder()) -> Path:
    """The cached build virtualenv (created once per key); returns its python.  In the floor
    root it lives inside the root (/opt/venvs), made by the root's interpreter.  One process
    at a time makes it (a lock in the cache): two set-ups at once on one machine (two work
    trees) once left a floor venv holding nothing but its ``done`` mark, each having removed
    the other's half-made one."""
    venv = venv_dir(tree, cache, builder)
    if _venv_done(venv):
        return venv_python(venv)
    with _locked(cache / "venv.lock"):
        return _build_venv(tree, cache, offline, builder, venv)


def _build_venv(tree: Path, cache: Path, offline: bool, builder: Builder, venv: Path) -> Path:
    if _venv_done(venv):
        return venv_python(venv)  # made by the process that held the lock before us
    if offline:
        raise BinaryError(f"--offline, but the build virtualenv {venv} is missing; "
                          "run python3 krew/build.py --fetch once")
    if builder.root is not None:
        return _root_venv(tree, venv, builder)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=venv.name + ".", dir=cache))
    try:
        # a virtualenv must be created where it stays (its scripts name their own path)
        shutil.rmtree(tmp)
        _run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
        reqs = tmp.with_suffix(".txt")
        reqs.write_text(requirements_text(tree))
        try:
            _run([str(venv_python(venv)), "-m", "pip", "install", "--quiet",
                  "--disable-pip-version-check", "--no-input", "--require-hashes",
                  "--only-binary=:all:", "--no-deps", "-r", str(reqs)],
                 "pip install of the locked dependencies and PyInstaller")
        finally:
            reqs.unlink()
        (venv / "done").write_text("")
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise
    return venv_python(venv)


def _root_venv(tree: Path, venv: Path, builder: Builder) -> Path:
    """The build virtualenv inside the floor root: the root interpreter's ``-m venv`` (its
    pip is the one Debian's python3.11 source ships in ensurepip), then the locked wheels."""
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    reqs = venv.with_suffix(".txt")
    reqs.write_text(requirements_text(tree))
    env = {"PATH": buildroot.PATH, "HOME": "/root",
           "PIP_CERT": builder.inner(buildroot.host_ca_bundle(builder.root)),
           **{k: v for k, v in os.environ.items() if k in buildroot.PIP_PASSED}}
    try:
        _run([buildroot.PYTHON, "-m", "venv", builder.inner(venv)],
             "python -m venv in the floor root", env=env, builder=builder)
        _run([builder.inner(venv_python(venv)), "-m", "pip", "install", "--quiet",
              "--disable-pip-version-check", "--no-input", "--require-hashes",
              "--only-binary=:all:", "--no-deps", "-r", builder.inner(reqs)],
             "pip install of the locked dependencies and PyInstaller in the floor root",
             env=env, builder=builder)
        (venv / "done").write_text("")
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise
    finally:
        reqs.unlink()
    return venv_python(venv)


def _run(argv: list[str], what: str, env: dict[str, str] | None = None,
         cwd: Path | None = None, builder: Builder = Builder()) -> str:
    proc = builder.run(argv, env=env, cwd=cwd)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise BinaryError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))
    return proc.stdout


def spec(stage: Path, strip: bool, onefile: bool = False, builder: Builder = Builder()) -> str:
    """The PyInstaller spec: one-directory, console, no UPX, the package's every module
    (``onefile``: the same as one self-unpacking executable; bench/startup_bench.py only).
    Paths as the freeze sees them (``builder.inner``: inside the floor root)."""
    datas = []
    for pattern in FINGERPRINTED:
        for path in sorted((stage / PACKAGE).glob(pattern)):
            rel = path.relative_to(stage).parent.as_posix()
            datas.append((builder.inner(path), rel))
    inner = builder.inner(stage)
    return f"""# generated by krew/binary.py
from PyInstaller.utils.hooks import collect_submodules

a = Analysis(
    [{inner + "/" + ENTRY.name!r}],
    pathex=[{inner!r}],
    hiddenimports=sorted(set(collect_submodules({PACKAGE!r}) + {list(HIDDEN)!r})),
    excludes={list(EXCLUDES)!r},
    datas={datas!r},
    noarchive=False,
)
a.scripts = [s for s in a.scripts if s[0] not in {list(DROP_RUNTIME_HOOKS)!r}]
pyz = PYZ(a.pure)
""" + (f"""exe = EXE(pyz, a.scripts, a.binaries, a.datas, [], name={BIN!r}, console=True,
          debug=False, strip={strip!r}, upx=False)
""" if onefile else f"""exe = EXE(pyz, a.scripts, [], exclude_binaries=True, name={BIN!r}, console=True,
          debug=False, strip={strip!r}, upx=False)
coll = COLLECT(exe, a.binaries, a.datas, strip={strip!r}, upx=False, name={BIN!r})
""")


def freeze(tree: Path, python: Path, work: Path, epoch: int, cache: Path,
           onefile: bool = False, builder: Builder = Builder()) -> Path:
    """PyInstaller over a staging copy of ``tree`` at a fixed path; returns the bundle dir
    (``onefile``: the one executable).  ``work`` is under ``builder.tmp()`` in a floor build."""
    stage = builder.tmp() / STAGE
    with _locked(cache / "freeze.lock"):
        return _freeze(tree, python, work, epoch, cache, stage, onefile, builder)


def _freeze(tree: Path, python: Path, work: Path, epoch: int, cache: Path, stage: Path,
            onefile: bool, builder: Builder) -> Path:
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    try:
        shutil.copytree(tree / PACKAGE, stage / PACKAGE,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copyfile(ENTRY, stage / ENTRY.name)
        strip = sys.platform.startswith("linux")  # symbols: ~25 MiB of libpython and the .so
        (stage / "flux-plunger.spec").write_text(spec(stage, strip, onefile, builder))
        if builder.root is None:
            env = {**os.environ, "PYINSTALLER_CONFIG_DIR": str(cache / "pyinstaller-config")}
            for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
                env.pop(var, None)
        else:  # the root's own tools only
            env = {"PATH": buildroot.PATH, "HOME": "/root",
                   "PYINSTALLER_CONFIG_DIR": "/var/cache/pyinstaller"}
        env.update(PYTHONHASHSEED="0", SOURCE_DATE_EPOCH=str(epoch))
        _run([builder.inner(python), "-m", "PyInstaller", "--noconfirm", "--clean",
              "--log-level", "WARN", "--distpath", builder.inner(work / "dist"),
              "--workpath", builder.inner(work / "build"),
              builder.inner(stage / "flux-plunger.spec")], "PyInstaller", env=env, cwd=stage,
             builder=builder)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    bundle = work / "dist" / (bin_name(host_platform()) if onefile else BIN)
    if not bundle.exists():
        raise BinaryError(f"PyInstaller made no {bundle}")
    return bundle


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One freeze at a time on this machine (the staging path is fixed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            import fcntl
        except ImportError:  # Windows: a release runner builds one at a time anyway
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def bundle_entries(bundle: Path) -> list[tuple[str, Path]]:
    """(archive name, real path) of everything under ``bundle``, links followed: krew unpacks
    only regular files and directories, so a link inside the bundle (PyInstaller makes them
    for macOS frameworks, e.g. ``Versions/Current``) is stored as a copy of its target."""
    root = bundle.resolve()
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(bundle, followlinks=True):
        here = Path(dirpath)
        real = here.resolve()
        if real != root and root not in real.parents:
            raise BinaryError(f"{here.relative_to(bundle)} links outside the bundle, to {real}")
        if here != bundle:
            parent = here.parent.resolve()
            if real == parent or real in parent.parents:
                raise BinaryError(f"{here.relative_to(bundle)} links back into its own parent")
        for name in dirnames:
            out.append(((here / name).relative_to(bundle).as_posix(), here / name))
        for name in filenames:
            path = here / name
            target = path.resolve()
            if root not in target.parents:
                raise BinaryError(f"{path.relative_to(bundle)} links outside the bundle, "
                                  f"to {target}")
            out.append((path.relative_to(bundle).as_posix(), target))
    return out


def write_archive(bundle: Path, license_file: Path, out: Path, epoch: int) -> None:
    """A krew-readable tar.gz of the bundle + LICENSE: regular files and directories only
    (links stored as copies: :func:`bundle_entries`), sorted, mtime = epoch, root-owned,
    0755/0644, gzip without name or time."""
    entries = sorted([("LICENSE", license_file), *bundle_entries(bundle)])
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, p in entries:
            if ".." in rel:  # krew refuses any entry whose name contains ".."
                raise BinaryError(f"krew would refuse the archive entry {rel!r}")
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            if p.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif p.is_file():
                data = p.read_bytes()
                info.size = len(data)
                info.mode = 0o755 if os.access(p, os.X_OK) else 0o644
                tar.addfile(info, io.BytesIO(data))
            else:
                raise BinaryError(f"{rel} is neither a file nor a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0,
                                              compresslevel=9) as gz:
        gz.write(raw.getvalue())
    tmp.replace(out)


def archive_key(tree: Path, epoch: int, plat: str, builder: Builder = Builder()) -> str:
    """Everything the archive is made of: the package's files, the license, the build
    virtualenv (requirements + interpreter: the host's or the floor root's), this module and
    the floor modules, the frozen script, the epoch."""
    parts = [venv_key(tree, builder).encode(), f"{epoch}|{plat}".encode(),
             Path(__file__).read_bytes(), Path(buildroot.__file__).read_bytes(),
             Path(floor.__file__).read_bytes(), ENTRY.read_bytes(),
             (tree / "LICENSE").read_bytes()]
    pkg = tree / PACKAGE
    for p in sorted(pkg.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            parts.append(p.relative_to(pkg).as_posix().encode() + b"\0" + p.read_bytes())
    return _sha(*parts)


def build_archive(tree: Path, out_dir: Path, tag: str, *, epoch: int, offline: bool,
                  cache: Path | None = None, fresh: bool = False,
                  builder: Builder = Builder()) -> Path:
    """The host platform's archive of ``tree`` in ``out_dir``, frozen by ``builder`` (the
    host's interpreter, or the floor root's); reused from the cache when one with the same
    inputs was built before, unless ``fresh``."""
    plat = host_platform()
    cache = cache or cache_dir()
    name = archive_name(tag, plat)
    entry = cache / "archives" / archive_key(tree, epoch, plat, builder)
    out = out_dir / name
    out_dir.mkdir(parents=True, exist_ok=True)
    if not fresh and (entry / name).is_file():
        shutil.copyfile(entry / name, out)
        os.utime(entry)
        return out
    python = build_venv(tree, cache, offline, builder)
    with tempfile.TemporaryDirectory(prefix="flux-plunger-binary-", dir=builder.tmp()) as tmp:
        bundle = freeze(tree, python, Path(tmp), epoch, cache, builder=builder)
        mark_floor(bundle, plat, builder)
        smoke(bundle / bin_name(plat), builder)
        write_archive(bundle, tree / "LICENSE", out, epoch)
    entry.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out, entry / (name + ".tmp"))
    (entry / (name + ".tmp")).replace(entry / name)
    prune(cache / "archives")
    return out


def prune(archives: Path) -> None:
    entries = sorted(archives.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[KEEP_ARCHIVES:]:
        shutil.rmtree(old, ignore_errors=True)


def mark_floor(bundle: Path, plat: str, builder: Builder = Builder()) -> str:
    """Measure what the bundle needs of the system and write it where ``version --client``
    reads it (_internal/RUNS_ON); a floor build that needs more than its root's glibc fails.
    Linux: the newest GLIBC_ version any ELF file needs (krew/floor.py); macOS: the
    deployment target; Windows: nothing to say."""
    text = plat
    if plat.startswith("linux/"):
        rows = floor.glibc_needs(bundle)
        bad = floor.above(rows, builder.floor) if builder.floor else []
        if bad:
            raise BinaryError("the floor build needs more than its root's glibc: " + bad[0])
        text += f", glibc {floor.newest(rows) or '(any)'} or newer"
    elif plat.startswith("darwin/"):
        import sysconfig

        target = (os.environ.get("MACOSX_DEPLOYMENT_TARGET")
                  or sysconfig.get_config_var("MACOSX_DEPLOYMENT_TARGET"))
        text += f", macOS {target} or newer" if target else ""
    (bundle / "_internal" / RUNS_ON).write_text(text + "\n")
    return text


def smoke(exe: Path, builder: Builder = Builder()) -> None:
    """The frozen build answers ``version --client`` with nothing but itself (empty PATH);
    a floor build does so inside its root."""
    env = {"PATH": "", **({"SYSTEMROOT": os.environ["SYSTEMROOT"]}
                          if "SYSTEMROOT" in os.environ else {})}
    proc = builder.run([builder.inner(exe), "version", "--client"], env=env, timeout=120)
    if proc.returncode != 0 or not proc.stdout.startswith("Client Version: "):
        raise BinaryError(f"the frozen {exe.name} does not run: exit {proc.returncode}, "
                          f"{(proc.stdout + proc.stderr).strip()[-500:]!r}")
