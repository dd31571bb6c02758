"""The glibc floor of the linux/amd64 krew archive (issue 37), with the real tools:

* the archive built here (krew/build.py, what hack/release.py runs, frozen in the floor root:
  Debian 11, glibc 2.31, CPython 3.11 built there) unpacked into that Debian 11 root and run
  there by ``chroot`` with no Python on the PATH: ``--help``, ``version --client`` (which says
  the floor), ``status -A`` and a real ``recover`` against the real kube-apiserver, the
  kubeconfig copied into the root;
* krew/floor.py passes that archive at glibc 2.31 and fails a freeze made with the host's
  interpreter (this machine: Debian 12), naming the file and the GLIBC_ version — the check
  can fail — and that freeze indeed does not start in the Debian 11 root;
* the committed krew manifest's linux/amd64 sha256 is that archive's (``krew/build.py
  --check``, which says how to refresh a stale one).

The floor root is built once per machine by hack/setup.sh's late stage (as root, on
linux/amd64: krew/build.py --fetch-floor).  Where it cannot be (not root, another platform:
a release runner), these tests skip saying so; where it could be but is not, they fail.
"""
from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from testplane.cluster import SimulatedHelmController

from .conftest import ROOT, VERSION

sys.path.insert(0, str(ROOT / "krew"))
import binary  # noqa: E402
import buildroot  # noqa: E402

X_Y_Z = VERSION.lstrip("v")
FLOOR_PY = ROOT / "krew" / "floor.py"
ARCHIVE = f"kubectl-flux_plunger-{VERSION}-linux-amd64.tar.gz"


@pytest.fixture(scope="module")
def root() -> Path:
    why = buildroot.unusable()
    if why:
        pytest.skip(f"no floor build on this machine: {why}")
    found = buildroot.ready(binary.cache_dir())
    if found is None:
        pytest.fail(f"the floor root {buildroot.root_dir(binary.cache_dir())} is not built: "
                    "hack/setup.sh --stage late (krew/build.py --fetch-floor) builds it",
                    pytrace=False)
    return found


@pytest.fixture(scope="module")
def archive(root, tmp_path_factory) -> Path:
    """The archive built here: ``krew/build.py`` (what hack/release.py runs; the cached
    archive of this tree, the same bytes as the release's), frozen in the floor root."""
    out = tmp_path_factory.mktemp("floor-build")
    proc = subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "--floor",
                           "--offline", "--out-dir", str(out), "--manifest",
                           str(out / "flux-plunger.yaml")], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "frozen in the floor root (glibc 2.31)" in proc.stderr
    return out / ARCHIVE


def glibc_of(path: Path) -> str:
    """The newest glibc version krew/floor.py finds in ``path``."""
    proc = subprocess.run([sys.executable, str(FLOOR_PY), str(path)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"the newest glibc version needed: (\d+\.\d+)", proc.stdout)
    assert m, proc.stdout
    return m.group(1)


def test_the_archive_runs_in_a_debian_11_root_against_the_real_apiserver(
        root, archive, plane, cluster):
    ns = cluster.namespace("floor")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    inside = buildroot.Builder(root)
    with tempfile.TemporaryDirectory(dir=inside.tmp(), prefix="floor-test-") as tmp:
        here = Path(tmp)
        with tarfile.open(archive) as tar:
            tar.extractall(here / "plugin", filter="tar")
        (here / "kubeconfig").write_bytes(plane.self_contained_kubeconfig())
        (here / "home").mkdir()
        env = {"PATH": "/usr/bin:/bin", "HOME": inside.inner(here / "home"),
               "KUBECONFIG": inside.inner(here / "kubeconfig")}
        exe = inside.inner(here / "plugin" / "kubectl-flux_plunger")

        def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
            return inside.run(list(args), env=env, timeout=timeout)

        ldd = run("/usr/bin/ldd", "--version")
        assert ldd.returncode == 0 and "2.31" in ldd.stdout.splitlines()[0], ldd.stdout
        nopy = run("/bin/sh", "-c", "command -v python3 python python3.11")
        assert nopy.returncode != 0 and nopy.stdout == "", nopy.stdout  # no Python on PATH

        help_ = run(exe, "--help")
        assert help_.returncode == 0 and help_.stdout.startswith("Usage: "), help_.stderr
        version = run(exe, "version", "--client")
        assert version.returncode == 0, version.stderr
        lines = version.stdout.splitlines()
        assert lines[0] == f"Client Version: {X_Y_Z}"
        m = re.fullmatch(r"Runs On: linux/amd64, glibc (\d+)\.(\d+) or newer", lines[1])
        assert m and (int(m.group(1)), int(m.group(2))) <= (2, 31), lines

        status = run(exe, "status", "-A")
        assert status.returncode == 0, status.stderr
        mine = [r.split() for r in status.stdout.splitlines() if r.split()[:2] == [ns, "demo"]]
        assert mine and "stuck" in mine[0], status.stdout
        with SimulatedHelmController(cluster, ns):
            rec = run(exe, "recover", "-n", ns, "demo", timeout=300)
        assert rec.returncode == 0, rec.stdout + rec.stderr
        assert "helmrelease.helm.toolkit.fluxcd.io/demo recovered" in rec.stdout
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]


def test_the_floor_check_passes_the_floor_build(archive):
    proc = subprocess.run([sys.executable, str(FLOOR_PY), str(archive), "--glibc", "2.31"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "<= 2.31: ok" in proc.stdout and proc.stderr == ""
    # the archive says the floor it was measured to have
    floor = glibc_of(archive)
    with tarfile.open(archive) as tar:
        said = tar.extractfile(f"_internal/{binary.RUNS_ON}").read().decode().strip()
    assert said == f"linux/amd64, glibc {floor} or newer"


def test_the_floor_check_fails_a_freeze_from_the_host_interpreter(root, tmp_path):
    """The same tree frozen with this interpreter (krew/build.py --host): its libpython and
    OpenSSL come from the host (Debian 12) and need a newer glibc; the check names them."""
    proc = subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "--host",
                           "--offline", "--out-dir", str(tmp_path), "--manifest",
                           str(tmp_path / "flux-plunger.yaml")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "frozen with this interpreter (a host build" in proc.stderr
    host = tmp_path / ARCHIVE
    check = subprocess.run([sys.executable, str(FLOOR_PY), str(host), "--glibc", "2.31"],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 1, check.stdout + check.stderr
    named = re.findall(r"^error: \S+: (\S+) needs GLIBC_(\d+\.\d+) \(from (\S+)\), above the "
                       r"floor glibc 2\.31$", check.stderr, re.M)
    assert named, check.stderr
    assert all(tuple(map(int, v.split("."))) > (2, 31) for _, v, _ in named)
    assert any(f.startswith("_internal/libpython3") for f, _, _ in named), named
    assert "> 2.31: FAILS" in check.stdout
    # and what the check says is what the Debian 11 loader says: that freeze does not start
    inside = buildroot.Builder(root)
    with tempfile.TemporaryDirectory(dir=inside.tmp(), prefix="floor-test-host-") as tmp:
        with tarfile.open(host) as tar:
            tar.extractall(tmp, filter="tar")
        run = inside.run([inside.inner(Path(tmp) / "kubectl-flux_plunger"), "version",
                          "--client"], env={"PATH": "/usr/bin:/bin"}, timeout=120)
    assert run.returncode != 0
    assert re.search(r"version `GLIBC_2\.(3[2-9]|[4-9]\d)' not found", run.stderr), run.stderr


# -- the committed manifest is the floor build's (moved here from the apiserver tier) -------

def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "--check",
                           "--offline", *args], capture_output=True, text=True, timeout=900)


def test_the_committed_manifest_is_what_this_tree_builds_in_the_floor_root(archive):
    """krew/build.py --check (hack/test.sh runs it before this tier) builds in the floor root
    and compares; the release's manifest names the same sha256, the archive's."""
    proc = check()
    assert proc.returncode == 0, proc.stderr
    committed = ROOT / "krew" / "flux-plunger.yaml"
    assert proc.stderr.startswith(f"{committed} matches a fresh build ({ARCHIVE} sha256 ")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    assert f"sha256 {digest})" in proc.stderr
    assert f"sha256: {digest}\n" in committed.read_text()


def test_check_fails_on_a_stale_manifest_and_says_how_to_refresh_it(archive, tmp_path):
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    stale = tmp_path / "flux-plunger.yaml"
    good = (ROOT / "krew" / "flux-plunger.yaml").read_text()
    stale.write_text(good.replace(digest, "0" * 64))
    proc = check("--manifest", str(stale))
    assert proc.returncode == 1
    assert proc.stderr == (f"error: {stale} is stale: its sha256 {'0' * 64} is not the "
                           f"archive's {digest}; refresh it with: python3 krew/build.py\n")
    stale.write_text(good)
    assert check("--manifest", str(stale)).returncode == 0
