"""krew/: the archive krew/build.py makes, checked with the real krew (sigs.k8s.io/krew
v0.4.3, built from its Go module) and run through the real kubectl against the test
apiserver.

* the build is reproducible and writes a manifest whose sha256 is the archive's;
* the COMMITTED krew/flux-plunger.yaml is that manifest (`build.py --check` says so, and
  says how to refresh it when it is stale), and every install below uses it;
* the archive holds only regular files and directories, no compiled code;
* `validate-krew-manifest` accepts the manifest, structurally and by installing every
  platform (it runs `kubectl krew install --manifest` per platform; a `kubectl` shim adds
  `--archive` because the release URL cannot be fetched here);
* `kubectl krew install --manifest … --archive …` into a temporary KREW_ROOT gives a
  `kubectl flux-plunger` that runs `version` and `status -A` against the apiserver using
  only its bundled libraries;
* a python3 older than 3.10 gets one clear `error:` line (real old interpreters).
"""
from __future__ import annotations

import glob
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from testplane import binaries

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "krew"
VERSION = re.search(r'__version__ = "([^"]+)"',
                    (ROOT / "kubectl_flux_plunger" / "__init__.py").read_text()).group(1)
TAG = f"v{VERSION}"
ARCHIVE = f"kubectl-flux_plunger-{TAG}.tar.gz"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

VENDORED = {  # top-level importable names the archive's lib/ must hold (and nothing else)
    "_yaml", "certifi", "charset_normalizer", "click", "dateutil", "durationpy", "idna",
    "kubernetes", "oauthlib", "prometheus_client", "requests", "requests_oauthlib", "six",
    "urllib3", "websocket", "yaml",
}


def build(out: Path) -> tuple[Path, Path, str]:
    manifest = out / "flux-plunger.yaml"
    proc = subprocess.run([sys.executable, str(KREW / "build.py"), "--out-dir", str(out),
                           "--manifest", str(manifest)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out / ARCHIVE, manifest, proc.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(archive, manifest) from one build of the current tree."""
    archive, manifest, _ = build(tmp_path_factory.mktemp("krew-build"))
    return archive, manifest


COMMITTED = KREW / "flux-plunger.yaml"
STALE = ("krew/flux-plunger.yaml is stale (every change to the package changes the archive's "
         "sha256): refresh it with `python3 krew/build.py` and commit it")


@pytest.fixture(scope="module")
def committed(built) -> Path:
    """The committed manifest, once it is known to describe the archive just built."""
    archive, _ = built
    shas = {p["sha256"] for p in yaml.safe_load(COMMITTED.read_text())["spec"]["platforms"]}
    assert shas == {sha256(archive)}, STALE
    return COMMITTED


@pytest.fixture(scope="module")
def krew_bin(tmp_path_factory) -> Path:
    """A directory with the real krew as `kubectl-krew` (kubectl dispatches to it)."""
    d = tmp_path_factory.mktemp("krew-bin")
    (d / "kubectl-krew").symlink_to(binaries.ensure("krew"))
    return d


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the build ------------------------------------------------------------------------

def test_build_is_reproducible_and_the_manifest_carries_its_sha256(built, tmp_path):
    archive, manifest = built
    again, manifest2, log = build(tmp_path)
    assert archive.read_bytes() == again.read_bytes()
    assert manifest.read_text() == manifest2.read_text()
    doc = yaml.safe_load(manifest.read_text())
    assert doc["spec"]["version"] == TAG
    platforms = doc["spec"]["platforms"]
    assert {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"])
            for p in platforms} == {("linux", "amd64"), ("linux", "arm64"),
                                    ("darwin", "amd64"), ("darwin", "arm64")}
    for p in platforms:
        assert p["sha256"] == sha256(archive)
        assert p["uri"].endswith(f"/releases/download/{TAG}/{ARCHIVE}")
        assert p["bin"] == "kubectl-flux_plunger"
    assert "yaml/_yaml.cpython-310-x86_64-linux-gnu.so" in log  # the one compiled file, removed


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(KREW / "build.py"), "--check", "--offline", *args],
                          capture_output=True, text=True, timeout=600)


def test_the_committed_manifest_is_what_this_tree_builds(built):
    proc = check()
    assert proc.returncode == 0, f"{STALE}\n{proc.stderr}"
    assert proc.stderr.startswith(f"{COMMITTED} matches a fresh build (sha256 ")


def test_check_fails_on_a_stale_manifest_and_says_how_to_refresh_it(built, tmp_path):
    archive, manifest = built
    stale = tmp_path / "flux-plunger.yaml"
    stale.write_text(manifest.read_text().replace(sha256(archive), "0" * 64))
    proc = check("--manifest", str(stale))
    assert proc.returncode == 1
    assert proc.stderr == (f"error: {stale} is stale: its sha256 {'0' * 64} is not the "
                           f"archive's {sha256(archive)}; refresh it with: python3 krew/build.py\n")
    stale.write_text(manifest.read_text())
    assert check("--manifest", str(stale)).returncode == 0


def test_archive_holds_launcher_package_pure_libraries_and_licence(built):
    archive, _ = built
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert {m.mtime for m in members} == {315532800}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    assert all(m.isfile() or m.isdir() for m in members)  # krew refuses anything else
    modes = {m.name: m.mode for m in members}
    assert modes["kubectl-flux_plunger"] == 0o755
    assert {mode for name, mode in modes.items() if name != "kubectl-flux_plunger"} \
        <= {0o644, 0o755}
    assert "LICENSE" in names and "kubectl_flux_plunger/cli/__init__.py" in names
    top = {n.split("/")[0] for n in names}
    assert top == {"LICENSE", "kubectl-flux_plunger", "kubectl_flux_plunger", "lib"}
    lib_top = {n.split("/")[1].removesuffix(".py") for n in names if n.startswith("lib/")}
    lib_top = {n for n in lib_top if not n.endswith(".dist-info")}
    assert lib_top == VENDORED
    assert not [n for n in names if re.search(r"\.(so|pyd|dylib|dll|exe|pyc)$|\.so\.", n)]
    assert not [n for n in names if n.startswith("lib/bin/")]
    assert "lib/kubernetes-36.0.3.dist-info/METADATA" in names
    with tarfile.open(archive) as tar:
        for m in members:
            if m.isfile():
                head = tar.extractfile(m).read(4)
                assert not head.startswith((b"\x7fELF", b"\xcf\xfa\xed\xfe", b"MZ")), m.name
        assert tar.extractfile("LICENSE").read() == (ROOT / "LICENSE").read_bytes()


# -- krew's own validator -------------------------------------------------------------

def validator(manifest: Path, *args: str, path: str | None = None):
    env = dict(os.environ, PATH=path or os.environ["PATH"])
    return subprocess.run([str(binaries.ensure("validate-krew-manifest")), "-manifest",
                           str(manifest), *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_committed_manifest_passes_validate_krew_manifest():
    proc = validator(KREW / "flux-plunger.yaml", "-skip-install")
    assert proc.returncode == 0, proc.stderr
    assert "structural validation OK" in proc.stderr
    assert "no overlapping spec.platform[].selector" in proc.stderr


def test_validate_krew_manifest_installs_every_platform(built, committed, krew_bin, tmp_path):
    archive, _ = built
    manifest = committed
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "kubectl").write_text(
        "#!/bin/sh\n"
        "# the release URL cannot be fetched here: hand krew the built archive instead\n"
        f'if [ "$1" = krew ] && [ "$2" = install ]; then exec {KUBECTL} "$@" --archive={archive}; fi\n'
        f'exec {KUBECTL} "$@"\n')
    (shim / "kubectl").chmod(0o755)
    proc = validator(manifest, path=f"{shim}:{krew_bin}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    assert "all 4 spec.platforms installed fine" in proc.stderr
    assert proc.stderr.count("installed  spec.platforms[") == 4


# -- a real install, run through kubectl ----------------------------------------------

def krew_env(krew_root: Path, krew_bin: Path, **extra) -> dict:
    """kubectl/krew environment for ``krew_root``.  `krew list`/`uninstall` insist on a
    plugin index that is a git clone (krew's checkIndex); offline, an empty local git
    repository stands in for it.  `install --manifest` needs none."""
    index = krew_root / "index" / "default"
    if not (index / ".git").is_dir():
        index.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", str(index)], check=True, timeout=60)
    env = dict(os.environ, KREW_ROOT=str(krew_root), KREW_NO_UPGRADE_CHECK="1",
               PATH=f"{krew_root / 'bin'}:{krew_bin}:{os.environ['PATH']}")
    env.pop("KUBECONFIG", None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def installed(built, committed, krew_bin, tmp_path_factory):
    """KREW_ROOT with flux-plunger installed by `kubectl krew install --manifest --archive`
    from the committed manifest."""
    archive, _ = built
    manifest = committed
    root = tmp_path_factory.mktemp("krew-root")
    proc = subprocess.run([KUBECTL, "krew", "install", f"--manifest={manifest}",
                           f"--archive={archive}"], capture_output=True, text=True,
                          env=krew_env(root, krew_bin), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Installed plugin: flux-plunger" in proc.stderr + proc.stdout
    assert "python3 >= 3.10" in proc.stderr + proc.stdout  # the caveats are shown
    return root


def test_krew_install_links_the_launcher(installed, krew_bin):
    link = installed / "bin" / "kubectl-flux_plunger"
    assert link.is_symlink()
    target = Path(os.path.realpath(link))
    assert target == installed / "store" / "flux-plunger" / TAG / "kubectl-flux_plunger"
    assert os.access(target, os.X_OK)
    listed = subprocess.run([KUBECTL, "krew", "list"], capture_output=True, text=True,
                            env=krew_env(installed, krew_bin), timeout=60)
    assert listed.returncode == 0 and "flux-plunger" in listed.stdout


def test_installed_plugin_runs_version_and_status_through_kubectl(installed, krew_bin, plane,
                                                                   cluster, tmp_path):
    ns = cluster.namespace("krew")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    # a poisoned PYTHONPATH proves the bundled libraries are the ones used (-I -S)
    poison = tmp_path / "poison" / "kubernetes"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('host kubernetes used')\n")
    env = krew_env(installed, krew_bin, KUBECONFIG=str(plane.kubeconfig),
                   PYTHONPATH=str(poison.parent))

    version = subprocess.run([KUBECTL, "flux-plunger", "version"], capture_output=True,
                             text=True, env=env, timeout=120)
    assert version.returncode == 0, version.stderr
    server = plane.kube().server_version()["gitVersion"]
    assert version.stdout.splitlines()[:2] == [f"Client Version: {VERSION}",
                                               f"Server Version: {server}"]

    status = subprocess.run([KUBECTL, "flux-plunger", "status", "-A"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAMESPACE", "NAME"]
    row = [line.split() for line in lines[1:] if line.split()[:2] == [ns, "demo"]]
    assert row and "stuck" in row[0], status.stdout

    helped = subprocess.run([KUBECTL, "flux-plunger", "--help"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert helped.stdout.startswith("Usage: kubectl flux-plunger ")


def test_krew_uninstall_removes_the_plugin(built, committed, krew_bin, tmp_path):
    archive, _ = built
    manifest = committed
    env = krew_env(tmp_path, krew_bin)
    for argv in ([KUBECTL, "krew", "install", f"--manifest={manifest}", f"--archive={archive}"],
                 [KUBECTL, "krew", "uninstall", "flux-plunger"]):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "bin" / "kubectl-flux_plunger").exists()
    assert not (tmp_path / "store" / "flux-plunger").exists()


# -- the python3 the launcher accepts -------------------------------------------------

def _version_of(python: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d %d %d' % sys.version_info[:3])"],
                             capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    if out.returncode != 0:
        return None
    return tuple(int(x) for x in out.stdout.split())


PYENV_HOMES = sorted({os.path.expanduser("~/.pyenv"), os.environ.get("PYENV_ROOT") or "",
                      os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".pyenv")} - {""})
SYSTEM_BINS = ("/usr/bin", "/usr/local/bin")


def old_pythons() -> list[tuple[str, str]]:
    """Real interpreters older than 3.10 installed on this machine: pyenv's (under ``~/.pyenv``,
    ``$PYENV_ROOT``, and the account's home even when HOME points elsewhere) and the system's."""
    candidates: set[str] = set()
    for root in PYENV_HOMES:
        candidates |= set(glob.glob(os.path.join(root, "versions", "*", "bin", "python[23]")))
    for d in SYSTEM_BINS:
        candidates |= set(glob.glob(os.path.join(d, "python3.[0-9]")))
        candidates |= set(glob.glob(os.path.join(d, "python2*")))
    found = {}
    for c in sorted(candidates):
        v = _version_of(c)
        if v and v < (3, 10) and v not in found.values():
            found[c] = v
    return [(path, ".".join(map(str, v))) for path, v in found.items()]


# no old interpreter: one case that fails saying so (the launcher's check needs a real one),
# never an empty parameter set pytest would turn into a skip
OLD = old_pythons() or [(None, "none-found")]


def _bin_with(tmp_path: Path, **links: str) -> Path:
    """A PATH directory holding only the launcher's tools and the given interpreters."""
    d = tmp_path / "onlybin"
    d.mkdir(exist_ok=True)
    (d / "readlink").symlink_to(shutil.which("readlink"))
    for name, target in links.items():
        (d / name).symlink_to(target)
    return d


@pytest.mark.parametrize("python, version", OLD, ids=[v for _, v in OLD])
def test_a_too_old_python3_gets_one_clear_error(installed, tmp_path, python, version):
    """kubectl runs the krew link; the only python3 on PATH is a real old interpreter."""
    assert python is not None, (
        f"no Python older than 3.10 under {', '.join(PYENV_HOMES)} (pyenv) or "
        f"{', '.join(SYSTEM_BINS)}: this test needs a real one (e.g. pyenv install 3.9.18)")
    only = _bin_with(tmp_path, python3=python)
    proc = subprocess.run([KUBECTL, "flux-plunger", "version", "--client"], capture_output=True,
                          text=True, timeout=60,
                          env={"PATH": f"{installed / 'bin'}:{only}", "HOME": str(tmp_path)})
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == (f"error: kubectl flux-plunger needs python3 >= 3.10; found python3 "
                           f"{version} (set FLUX_PLUNGER_PYTHON to another interpreter)\n")
    forced = subprocess.run([KUBECTL, "flux-plunger", "version", "--client"],
                            capture_output=True, text=True, timeout=60,
                            env={"PATH": f"{installed / 'bin'}:{only}", "HOME": str(tmp_path),
                                 "FLUX_PLUNGER_PYTHON": python})
    assert forced.returncode == 1
    assert forced.stderr == (f"error: kubectl flux-plunger needs python3 >= 3.10; found {python} "
                             f"{version} (set FLUX_PLUNGER_PYTHON to another interpreter)\n")


def test_no_python3_at_all_gets_one_clear_error(installed, tmp_path):
    only = _bin_with(tmp_path)
    proc = subprocess.run([KUBECTL, "flux-plunger", "version", "--client"], capture_output=True,
                          text=True, timeout=60,
                          env={"PATH": f"{installed / 'bin'}:{only}", "HOME": str(tmp_path)})
    assert proc.returncode == 1
    assert proc.stderr == ("error: kubectl flux-plunger needs python3 >= 3.10 on PATH; none found "
                           "(set FLUX_PLUNGER_PYTHON)\n")


def test_launcher_falls_back_to_a_versioned_python3(installed, tmp_path):
    """python3 is too old (when an old one exists) but python3.N is new enough: it runs."""
    marker = tmp_path / "used"
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho "$1 $2 $3 $4" >> {marker}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    minor = f"python3.{sys.version_info[1]}"
    links = {minor: str(wrapper)}
    if OLD:
        links["python3"] = OLD[0][0]
    only = _bin_with(tmp_path, **links)
    proc = subprocess.run([KUBECTL, "flux-plunger", "version", "--client"], capture_output=True,
                          text=True, timeout=60,
                          env={"PATH": f"{installed / 'bin'}:{only}", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"Client Version: {VERSION}\n"
    calls = marker.read_text().splitlines()
    assert len(calls) == 1, calls             # python started once: no separate version probe
    assert calls[0] == "-E -s -S -c"          # the bundle ran isolated on that interpreter


def test_python_starts_once(installed, tmp_path):
    marker = tmp_path / "used"
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho run >> {marker}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    only = _bin_with(tmp_path, python3=str(wrapper))
    proc = subprocess.run([KUBECTL, "flux-plunger", "version", "--client"], capture_output=True,
                          text=True, timeout=60,
                          env={"PATH": f"{installed / 'bin'}:{only}", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "run\n"


def test_FLUX_PLUNGER_PYTHON_pointing_at_nothing_says_so(installed, tmp_path):
    only = _bin_with(tmp_path, python3=sys.executable)
    proc = subprocess.run([KUBECTL, "flux-plunger", "version", "--client"], capture_output=True,
                          text=True, timeout=60,
                          env={"PATH": f"{installed / 'bin'}:{only}", "HOME": str(tmp_path),
                               "FLUX_PLUNGER_PYTHON": "/opt/nowhere/python3"})
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == ("error: FLUX_PLUNGER_PYTHON is set to /opt/nowhere/python3, which is "
                           "not an executable (unset it to use python3 from PATH)\n")


def test_completion_link_completes_through_kubectl_and_dies_with_the_plugin(
        built, committed, krew_bin, tmp_path):
    """The caveat's link (kubectl_complete-flux_plunger -> kubectl-flux_plunger in krew's
    bin) answers `kubectl __complete flux-plunger ...`; after `krew uninstall` it points at
    nothing, so kubectl offers no plugin completion and runs nothing of ours."""
    archive, _ = built
    env = krew_env(tmp_path, krew_bin)
    proc = subprocess.run([KUBECTL, "krew", "install", f"--manifest={committed}",
                           f"--archive={archive}"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    caveat = [line[line.index("ln -sf "):] for line in (proc.stdout + proc.stderr).splitlines()
              if "ln -sf " in line]
    assert caveat, proc.stdout + proc.stderr
    subprocess.run(["/bin/sh", "-c", caveat[0]], check=True, env=env, timeout=30)
    done = subprocess.run([KUBECTL, "__complete", "flux-plunger", "st"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["status", ":4"]
    proc = subprocess.run([KUBECTL, "krew", "uninstall", "flux-plunger"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    gone = subprocess.run([KUBECTL, "__complete", "flux-plunger", "st"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert "status" not in gone.stdout.splitlines()
