"""Benchmark: the CPU cost of starting the plugin through kubectl (issue #13, item 4).

    .venv/bin/python bench/startup_bench.py [--runs 40] [--modes floor,pip,binary,onefile]

Runs, alternating so a change in machine load hits every variant alike:

  * ``kubectl version --client`` (the reference: a Go binary doing next to nothing),
  * ``kubectl flux-plunger --help`` and ``kubectl flux-plunger version --client`` through
    real kubectl plugin dispatch, with the plugin installed

      - ``pip``:  as a non-editable pip install puts it: a console script in a fresh venv
        whose site-packages holds the package (a ``.pth`` to this tree, no editable finder)
        and the dependencies (a ``.pth`` to this venv's site-packages);
      - ``floor``: a plugin that is pip's console-script template importing nothing of
        ours — what the interpreter alone costs, the bound no Python plugin goes below;
      - ``binary``: the krew archive (the self-contained PyInstaller build, one directory)
        as krew installs it: unpacked into a store, linked from a bin directory; the archive
        is ``--archive`` or a fresh ``krew/build.py`` of the first ``--root``;
      - ``onefile``: the same tree frozen in PyInstaller's one-file mode (krew/binary.py with
        ``onefile=True``), which unpacks itself into a temporary directory on every run —
        what the choice of one-directory mode rests on.

Each run's CPU is the child's user+system time from ``wait4`` (kubectl execs the plugin, so
the plugin's CPU — and any helper process it waits for — is counted in the same child).
Prints the median CPU and wall time per command and the ratio to ``kubectl version
--client``.  A benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds user+sys, wall seconds) of one run."""
    t = time.monotonic()
    pid = os.posix_spawn(argv[0], argv, env,
                         file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                                       (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    _, status, ru = os.wait4(pid, 0)
    wall = time.monotonic() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}")
    return ru.ru_utime + ru.ru_stime, wall


def make_venv(base: Path) -> Path:
    """A fresh venv (once per run); returns its python."""
    venv = base / "pip-venv"
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


def entry_module(root: Path) -> str:
    """The console scripts' module in the tree at ``root`` (older trees: the click CLI)."""
    return ("kubectl_flux_plunger.entry" if (root / "kubectl_flux_plunger" / "entry.py").exists()
            else "kubectl_flux_plunger.cli")


def pip_layout(base: Path, root: Path) -> Path:
    """A venv as ``pip install kubectl-flux-plunger`` (non-editable) leaves it; returns the
    directory to put on PATH."""
    py = make_venv(base)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # the package, then the dependencies (this venv's site-packages: its own .pth files,
    # e.g. the editable finder, are not processed from a .pth-added directory)
    bindir = base / f"pip-bin-{root.name}"
    bindir.mkdir()
    pkgdir = base / f"pip-pkg-{root.name}"
    pkgdir.mkdir()
    (pkgdir / "kubectl_flux_plunger").symlink_to(root / "kubectl_flux_plunger")
    with open(Path(site, "flux_plunger_bench.pth"), "a") as fh:
        fh.write(f"{sysconfig.get_paths()['purelib']}\n")
    script = bindir / "kubectl-flux_plunger"
    # the package comes first on sys.path, as from site-packages
    script.write_text(f"#!{py}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                      f"sys.path.insert(0, {str(pkgdir)!r})\n"
                      f"from {entry_module(root)} import main\n"
                      "if __name__ == '__main__':\n"
                      "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                      "    sys.exit(main())\n")
    script.chmod(0o755)
    return bindir


def floor_layout(base: Path, root: Path) -> Path:
    """The least any Python plugin can cost: pip's console-script template (``import re,
    sys``) on the same interpreter and venv, importing nothing of ours."""
    py = make_venv(base)
    bindir = base / "floor-bin"
    if bindir.exists():
        return bindir
    bindir.mkdir()
    script = bindir / "kubectl-flux_plunger"
    script.write_text(f"#!{py}\nimport re\nimport sys\nsys.exit(0)\n")
    script.chmod(0o755)
    return bindir


def binary_layout(base: Path, root: Path, archive: Path | None = None) -> Path:
    """The binary archive unpacked as krew's store holds it, linked from a bin directory."""
    import tarfile

    if archive is None:
        out = base / f"archive-{root.name}"
        subprocess.run([sys.executable, str(root / "krew" / "build.py"), "--out-dir", str(out),
                        "--manifest", str(out / "flux-plunger.yaml")], check=True)
        archive = next(out.glob("kubectl-flux_plunger-v*-*-*.tar.gz"))
    name = f"{root.name}-{archive.parent.name}"
    store = base / f"binary-store-{name}"
    with tarfile.open(archive) as tar:
        tar.extractall(store, filter="tar")
    bindir = base / f"binary-bin-{name}"
    bindir.mkdir()
    (bindir / "kubectl-flux_plunger").symlink_to(store / "kubectl-flux_plunger")
    return bindir


def onefile_layout(base: Path, root: Path) -> Path:
    """The tree frozen in one-file mode with the same spec, in a bin directory."""
    sys.path.insert(0, str(root / "krew"))
    import binary

    cache = binary.cache_dir()
    python = binary.build_venv(root, cache, offline=False)
    exe = binary.freeze(root, python, base / f"onefile-work-{root.name}", 315532800, cache,
                        onefile=True)
    bindir = base / f"onefile-bin-{root.name}"
    bindir.mkdir()
    (bindir / "kubectl-flux_plunger").symlink_to(exe)
    return bindir


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--modes", default="floor,pip,binary,onefile")
    ap.add_argument("--archive", type=Path, action="append",
                    help="the binary archive (default: build one); repeat to compare builds "
                         "in one run (issue 37: the floor build and a --host build), each "
                         "labelled by its directory's name")
    ap.add_argument("--root", type=Path, action="append", default=None,
                    help="source tree(s) to install the plugin from (repeat to compare "
                         "before/after in one run); default: this tree")
    a = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="startup-bench-"))
    try:
        layouts = {"pip": pip_layout, "binary": binary_layout, "onefile": onefile_layout,
                   "floor": floor_layout}
        env0 = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        pydir = str(Path(sys.executable).parent)
        cases: list[tuple[str, list[str], dict[str, str]]] = [
            ("kubectl version --client", [KUBECTL, "version", "--client"], env0)]
        for root in a.root or [ROOT]:
            for mode in a.modes.split(","):
                if mode == "floor" and root != (a.root or [ROOT])[0]:
                    continue
                for archive in (a.archive or [None]) if mode == "binary" else [None]:
                    bindir = (binary_layout(base, root, archive) if mode == "binary"
                              else layouts[mode](base, root))
                    env = dict(env0, PATH=f"{bindir}:{pydir}:{env0.get('PATH', '')}")
                    tag = mode if mode == "floor" else f"{mode} {root.name}"
                    if archive is not None and len(a.archive) > 1:
                        tag += f" {archive.parent.name}"
                    for args in ([["--help"]] if mode == "floor"
                                 else [["--help"], ["version", "--client"]]):
                        cases.append((f"[{tag}] kubectl flux-plunger {' '.join(args)}",
                                      [KUBECTL, "flux-plunger", *args], env))
        for _, argv, env in cases:       # warm the page cache
            measure(argv, env)
        cpu: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        wall: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        for _ in range(a.runs):
            for name, argv, env in cases:
                c, w = measure(argv, env)
                cpu[name].append(c)
                wall[name].append(w)
        ref = statistics.median(cpu[cases[0][0]])
        print(f"load average before/after: {os.getloadavg()[0]:.2f} (1 min), "
              f"{a.runs} runs each, {os.cpu_count()} CPUs")
        for name, _, _ in cases:
            c, w = statistics.median(cpu[name]), statistics.median(wall[name])
            print(f"{name:58s} CPU {c * 1000:6.1f} ms  wall {w * 1000:6.1f} ms  "
                  f"CPU ratio {c / ref:.2f}x")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
