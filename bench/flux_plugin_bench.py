"""Benchmark: start-up of `flux plunger` as Flux's plugin manager installs it (issue 48).

    .venv/bin/python bench/flux_plugin_bench.py [--runs 30] [--cold-runs 10] [--archive A]
                                                [--onefile]

Through the real flux v2.9.5 (testplane.binaries target ``flux``), which execs the plugin in
its own place (so the plugin's time is the same child's), alternating every variant so a
change of machine load hits them alike:

  * ``flux --help`` — the reference: flux's own start;
  * ``single``: the single-file executable (krew/flux_plugin.py: krew/launcher with the krew
    archive embedded) installed as $FLUXCD_PLUGINS/flux-plunger, as `flux plugin install`
    leaves it.  **warm**: its cache directory already unpacked (every run after the first);
    **cold**: a fresh, empty cache directory for every run (FLUX_PLUNGER_UNPACK_DIR), so each
    run unpacks the ~26 MiB bundle first — the first run after an install or update;
  * ``onedir``: the krew archive unpacked and linked as flux-plunger (what
    krew/install-flux-plugin.sh makes): what the launcher adds is single-warm minus this;
  * ``onefile`` (``--onefile``): the same tree frozen in PyInstaller's one-file mode
    (krew/binary.py ``onefile=True``), which unpacks itself into $TMPDIR on every run; and
    whether it starts with $TMPDIR on a noexec mount (root only: a tmpfs mounted noexec in a
    private mount namespace), next to the single file under the same condition.

The archive is ``--archive`` or this tree's ``krew/build.py`` (cached when unchanged).  Prints
the median wall and CPU (user+system of the child, wait4) per command and the wall ratio to
``flux --help``.  A benchmark, not a test: it asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "krew"))
import binary  # noqa: E402
import flux_plugin  # noqa: E402

from testplane import binaries  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from startup_bench import measure  # noqa: E402 - one way to time a run, as startup_bench


def plugin_dir(base: Path, name: str, exe: Path, link: bool = False) -> Path:
    d = base / f"plugins-{name}"
    d.mkdir()
    if link:
        (d / "flux-plunger").symlink_to(exe)
    else:
        shutil.copyfile(exe, d / "flux-plunger")
        (d / "flux-plunger").chmod(0o755)
    return d


def noexec_start(exe_dir: Path, flux: Path, base: Path, env: dict[str, str]) -> str:
    """Whether `flux plunger version --client` starts with $TMPDIR on a noexec tmpfs."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "not measured (needs root and unshare)"
    mnt = base / "noexec"
    mnt.mkdir(exist_ok=True)
    script = 'mount -t tmpfs -o noexec tmpfs "$1" && shift && exec "$@"'
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                           str(mnt), str(flux), "plunger", "version", "--client"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(env, FLUXCD_PLUGINS=str(exe_dir), TMPDIR=str(mnt)))
    if proc.returncode == 0:
        return "starts"
    return f"fails (exit {proc.returncode}): {(proc.stderr.strip().splitlines() or [''])[-1]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--cold-runs", type=int, default=10)
    ap.add_argument("--archive", type=Path, help="the krew archive (default: krew/build.py)")
    ap.add_argument("--onefile", action="store_true",
                    help="also PyInstaller's one-file mode (a freeze: ~1 min)")
    a = ap.parse_args()

    flux = binaries.ensure("flux")
    base = Path(tempfile.mkdtemp(prefix="flux-plugin-bench-"))
    try:
        archive = a.archive
        if archive is None:
            out = base / "archive"
            subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "--out-dir",
                            str(out), "--manifest", str(out / "flux-plunger.yaml")], check=True)
            archive = next(out.glob("kubectl-flux_plunger-v*-*-*.tar.gz"))
        single = flux_plugin.build(archive, base / "single")
        store = base / "onedir"
        with tarfile.open(archive) as tar:
            tar.extractall(store, filter="tar")
        env0 = {"PATH": "/usr/bin:/bin", "HOME": str(base / "home")}
        dirs = {"single": plugin_dir(base, "single", single),
                "onedir": plugin_dir(base, "onedir", store / binary.BIN, link=True)}
        if a.onefile:
            cache = binary.cache_dir()
            python = binary.build_venv(ROOT, cache, offline=False)
            exe = binary.freeze(ROOT, python, base / "onefile-work", 315532800, cache,
                                onefile=True)
            dirs["onefile"] = plugin_dir(base, "onefile", exe)
        warm_cache = base / "unpacked"
        cases: list[tuple[str, list[str], dict[str, str] | None]] = [
            ("flux --help", [str(flux), "--help"], env0)]
        for name, d in dirs.items():
            env = dict(env0, FLUXCD_PLUGINS=str(d), FLUX_PLUNGER_UNPACK_DIR=str(warm_cache))
            for args in (["--help"], ["version", "--client"], ["status", "--help"]):
                label = f"[{name}{' warm' if name == 'single' else ''}] flux plunger {' '.join(args)}"
                cases.append((label, [str(flux), "plunger", *args], env))
                if name == "single":  # env None: a fresh cache directory per run
                    cases.append((f"[single cold] flux plunger {' '.join(args)}",
                                  [str(flux), "plunger", *args], None))
        cold = 0

        def run(argv: list[str], env: dict[str, str] | None) -> tuple[float, float]:
            nonlocal cold
            if env is None:
                cold += 1
                env = dict(env0, FLUXCD_PLUGINS=str(dirs["single"]),
                           FLUX_PLUNGER_UNPACK_DIR=str(base / f"cold-{cold}"))
            result = measure(argv, env)
            if env.get("FLUX_PLUNGER_UNPACK_DIR", "").startswith(str(base / "cold-")):
                shutil.rmtree(env["FLUX_PLUNGER_UNPACK_DIR"], ignore_errors=True)
            return result

        for _, argv, env in cases:       # the page cache, and the warm cache directory
            run(argv, env)
        cpu: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        wall: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        for i in range(a.runs):
            for name, argv, env in cases:
                if env is None and i >= a.cold_runs:
                    continue
                c, w = run(argv, env)
                cpu[name].append(c)
                wall[name].append(w)
        ref = statistics.median(wall[cases[0][0]])
        print(f"load average: {os.getloadavg()[0]:.2f} (1 min), {a.runs} runs each "
              f"({a.cold_runs} cold), {os.cpu_count()} CPUs; {archive.name}, "
              f"{single.name} {single.stat().st_size / 2**20:.1f} MiB")
        for name, _, _ in cases:
            c, w = statistics.median(cpu[name]), statistics.median(wall[name])
            print(f"{name:52s} wall {w * 1000:7.1f} ms  CPU {c * 1000:7.1f} ms  "
                  f"wall vs flux --help {w / ref:5.2f}x")
        for name in ("single", "onefile"):
            if name in dirs:
                print(f"$TMPDIR on a noexec mount, [{name}]: "
                      f"{noexec_start(dirs[name], flux, base, dict(env0, FLUX_PLUNGER_UNPACK_DIR=str(base / f'nx-{name}')))}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
