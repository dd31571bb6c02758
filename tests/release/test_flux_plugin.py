"""`flux plugin install plunger` (issue 48): the release's single file and Flux plugin catalog
as Flux's own plugin manager installs them, with the real flux v2.9.5 (built from its Go
module, testplane.binaries target ``flux``) and no Python on its PATH:

* a loopback HTTP server serves the release's catalog.yaml and plunger.yaml (the release's
  own, written again by krew/flux_plugin.py with the server's URL as the only difference) and
  the single file; FLUXCD_PLUGIN_CATALOG names it, FLUXCD_PLUGINS a temporary directory;
* `flux plugin search`, `flux plugin install plunger`, `flux plugin list`, `flux plunger
  version --client`, `flux plunger status -A` against the real kube-apiserver, `flux plugin
  update plunger` to a second version (this commit frozen again with the next patch version),
  `flux plugin uninstall plunger`; a checksum that is not the file's is refused by flux and
  installs nothing;
* the single file is the release's krew archive (the krew manifest's sha256) inside a static
  launcher; concurrent first runs unpack it once; it runs where /tmp is mounted noexec, in a
  root file system with no Python and nothing but the system libraries the bundle loads
  (under chroot, and as a container in the Docker engine), and in the Debian 11 floor root
  (glibc 2.31) where this machine has it.
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, VERSION
from .test_binary import copy_system_libraries, docker

sys.path.insert(0, str(ROOT / "krew"))
import binary  # noqa: E402
import buildroot  # noqa: E402
import flux_plugin  # noqa: E402

X_Y_Z = VERSION.lstrip("v")
NEXT = re.sub(r"(\d+)$", lambda m: str(int(m.group(1)) + 1), X_Y_Z.split("-")[0])
SINGLE = f"flux-plunger-{VERSION}-linux-amd64"
ARCHIVE = f"kubectl-flux_plunger-{VERSION}-linux-amd64.tar.gz"
SYSTEM_PATH = "/usr/bin:/bin"


@pytest.fixture(scope="module", autouse=True)
def _linux_amd64():
    if binary.host_platform() != "linux/amd64":
        pytest.skip(f"the release tier builds linux/amd64; this is {binary.host_platform()}")


@pytest.fixture(scope="module")
def second(tmp_path_factory) -> Path:
    """The single file of a second version: this commit (git archive HEAD) with
    ``__version__`` set to the next patch version, frozen by its own krew/build.py and made
    into its single file by its own krew/flux_plugin.py (what a release of it would do)."""
    tmp = tmp_path_factory.mktemp("second")
    tree = tmp / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT,
                             capture_output=True, check=True, timeout=120).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True, timeout=120)
    init = tree / "kubectl_flux_plunger" / "__init__.py"
    text = init.read_text()
    assert f'__version__ = "{X_Y_Z}"' in text
    init.write_text(text.replace(f'__version__ = "{X_Y_Z}"', f'__version__ = "{NEXT}"'))
    out = tmp / "out"
    proc = subprocess.run([sys.executable, str(tree / "krew" / "build.py"), "--offline",
                           "--out-dir", str(out), "--manifest", str(out / "flux-plunger.yaml")],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "SOURCE_DATE_EPOCH": "315532800"})
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, str(tree / "krew" / "flux_plugin.py"), "build",
                           str(out / f"kubectl-flux_plunger-v{NEXT}-linux-amd64.tar.gz"),
                           "--out-dir", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out / f"flux-plunger-v{NEXT}-linux-amd64"


class Catalog:
    """A loopback HTTP server of one directory: the catalog base URL flux is given."""

    def __init__(self, root: Path) -> None:
        self.root = root
        handler = functools.partial(_Quiet, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.requests: list[str] = []
        self.server.requests = self.requests  # type: ignore[attr-defined]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def publish(self, dist: Path, *singles: Path) -> dict:
        """catalog.yaml from ``dist`` as it is, the single files, and plunger.yaml written
        from their checksums with this server as the url base (newest first)."""
        shutil.copyfile(dist / "catalog.yaml", self.root / "catalog.yaml")
        previous = None
        for single in reversed(singles):
            shutil.copyfile(single, self.root / single.name)
            sums = self.root.parent / f"{single.name}.sha256"
            sums.write_text(f"{hashlib.sha256(single.read_bytes()).hexdigest()}  {single.name}\n")
            tag = "v" + single.name.split("-v", 1)[1].rsplit("-", 2)[0]
            out = self.root.parent / f"manifest-{tag}"
            proc = subprocess.run([sys.executable, str(ROOT / "krew" / "flux_plugin.py"),
                                   "manifest", str(sums), "--out-dir", str(out), "--tag", tag,
                                   "--url-base", self.url,
                                   *(["--previous", str(previous)] if previous else [])],
                                  capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
            previous = out / "plunger.yaml"
        shutil.copyfile(previous, self.root / "plunger.yaml")
        return yaml.safe_load(previous.read_text())

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        self.server.requests.append(self.path)


@pytest.fixture
def catalog(tmp_path):
    (tmp_path / "served").mkdir()
    server = Catalog(tmp_path / "served")
    yield server
    server.stop()


@pytest.fixture
def env(tmp_path, catalog, plane) -> dict[str, str]:
    plugins = tmp_path / "plugins"
    plugins.mkdir()  # flux creates only its default ~/.fluxcd/plugins, not $FLUXCD_PLUGINS
    return {"PATH": SYSTEM_PATH, "HOME": str(tmp_path / "home"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "FLUXCD_PLUGINS": str(plugins),
            "FLUXCD_PLUGIN_CATALOG": catalog.url, "KUBECONFIG": str(plane.kubeconfig)}


def flux(binary_: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary_), *args], capture_output=True, text=True, env=env,
                          timeout=300, stdin=subprocess.DEVNULL)


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


# -- the release's files ----------------------------------------------------------------------

def test_the_release_has_the_single_file_of_its_krew_archive_and_a_catalog_that_passes(dist):
    single, archive = dist / SINGLE, dist / ARCHIVE
    proc = subprocess.run([sys.executable, str(ROOT / "krew" / "flux_plugin.py"), "verify",
                           str(single), str(archive)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{SINGLE}: a static launcher embedding {ARCHIVE}\n"
    krew = yaml.safe_load((dist / "flux-plunger.yaml").read_text())
    [sha] = [p["sha256"] for p in krew["spec"]["platforms"] if p["uri"].endswith(ARCHIVE)]
    assert sha == hashlib.sha256(archive.read_bytes()).hexdigest()  # the same bundle as krew's
    plugin = yaml.safe_load((dist / "plunger.yaml").read_text())
    assert flux_plugin.check(plugin) == []
    assert flux_plugin.check(yaml.safe_load((dist / "catalog.yaml").read_text())) == []
    assert plugin["versions"] == [{"version": X_Y_Z, "platforms": [{
        "os": "linux", "arch": "amd64",
        "url": f"https://github.com/cozystack/kubectl-flux-plunger/releases/download/{VERSION}/{SINGLE}",
        "checksum": "sha256:" + hashlib.sha256(single.read_bytes()).hexdigest()}]}]
    sums = (dist / "SHA256SUMS").read_text()
    for name in (SINGLE, "plunger.yaml", "catalog.yaml"):
        assert f"  {name}\n" in sums


# -- the real flux's plugin manager ---------------------------------------------------------

def test_flux_installs_runs_updates_and_uninstalls_the_plugin(
        flux_binary, dist, second, catalog, env, plane, cluster, tmp_path):
    plugins = Path(env["FLUXCD_PLUGINS"])
    served = catalog.publish(dist, dist / SINGLE)
    assert [v["version"] for v in served["versions"]] == [X_Y_Z]
    release = yaml.safe_load((dist / "plunger.yaml").read_text())
    # what is served is the release's plunger.yaml, but for where the file is
    release["versions"][0]["platforms"][0]["url"] = catalog.url + SINGLE
    assert served == release

    search = flux(flux_binary, env, "plugin", "search")
    assert search.returncode == 0, search.stderr
    assert rows(search.stdout)[0] == ["NAME", "DESCRIPTION", "INSTALLED"]
    assert search.stdout.splitlines()[1].split()[0] == "plunger"
    assert flux_plugin.DESCRIPTION in search.stdout

    bare = flux(flux_binary, env, "plunger", "--help")
    assert bare.returncode != 0 and "Usage: flux plunger" not in bare.stdout  # not there yet
    install = flux(flux_binary, env, "plugin", "install", "plunger")
    assert install.returncode == 0, install.stderr
    assert f"installed plunger v{X_Y_Z}" in install.stderr
    assert (plugins / "flux-plunger").read_bytes() == (dist / SINGLE).read_bytes()
    receipt = yaml.safe_load((plugins / "flux-plunger.yaml").read_text())
    assert receipt["version"] == X_Y_Z and receipt["platform"]["url"] == catalog.url + SINGLE

    listed = flux(flux_binary, env, "plugin", "list")
    assert listed.returncode == 0, listed.stderr
    assert rows(listed.stdout) == [["NAME", "VERSION", "PATH"],
                                   ["plunger", X_Y_Z, str(plugins / "flux-plunger")]]

    version = flux(flux_binary, env, "plunger", "version", "--client")
    assert version.returncode == 0, version.stderr
    assert version.stdout.splitlines()[0] == f"Client Version: {X_Y_Z}"
    assert re.fullmatch(r"Runs On: linux/amd64, glibc \d+\.\d+ or newer",
                        version.stdout.splitlines()[1])
    helped = flux(flux_binary, env, "plunger", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: flux plunger "), helped
    # answered by the launcher (what the bundle printed when the release built it): nothing
    # unpacked yet; the first verb unpacks
    assert not (tmp_path / "cache" / "flux-plunger").exists()

    ns = cluster.namespace("fluxcat")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    status = flux(flux_binary, env, "plunger", "status", "-A")
    assert status.returncode == 0, status.stderr
    table = rows(status.stdout)
    assert table[0][:2] == ["NAMESPACE", "NAME"]
    assert any(r[:2] == [ns, "demo"] and "stuck" in r for r in table), status.stdout
    unpacked = sorted((tmp_path / "cache" / "flux-plunger").iterdir())
    assert [p.name for p in unpacked] == [
        f"{VERSION}-{hashlib.sha256((dist / ARCHIVE).read_bytes()).hexdigest()[:16]}"]
    bundled = subprocess.run([str(unpacked[0] / "flux-plunger"), "version", "--client"],
                             capture_output=True, text=True, timeout=120, env=env)
    assert bundled.stdout == version.stdout  # the launcher's answer is the bundle's

    # a second version in the catalog: update
    served = catalog.publish(dist, second, dist / SINGLE)
    assert [v["version"] for v in served["versions"]] == [NEXT, X_Y_Z]
    update = flux(flux_binary, env, "plugin", "update", "plunger")
    assert update.returncode == 0, update.stderr
    assert f"updated plunger v{X_Y_Z} → v{NEXT}" in update.stderr, update.stderr
    assert (plugins / "flux-plunger").read_bytes() == second.read_bytes()
    version = flux(flux_binary, env, "plunger", "version", "--client")
    assert version.returncode == 0, version.stderr
    assert version.stdout.splitlines()[0] == f"Client Version: {NEXT}"
    listed = flux(flux_binary, env, "plugin", "list")
    assert rows(listed.stdout)[1][:2] == ["plunger", NEXT]
    again = flux(flux_binary, env, "plugin", "update", "plunger")
    assert again.returncode == 0 and f"plunger already up to date (v{NEXT})" in again.stderr
    status = flux(flux_binary, env, "plunger", "status", "-n", ns)
    assert status.returncode == 0 and "stuck" in status.stdout, status

    uninstall = flux(flux_binary, env, "plugin", "uninstall", "plunger")
    assert uninstall.returncode == 0, uninstall.stderr
    assert "uninstalled plunger" in uninstall.stderr
    assert sorted(p.name for p in plugins.iterdir()) == []
    listed = flux(flux_binary, env, "plugin", "list")
    assert listed.returncode == 0, listed.stderr
    assert (listed.stdout + listed.stderr).strip() == "No plugins found"  # cobra's Println
    gone = flux(flux_binary, env, "plunger", "version", "--client")
    assert gone.returncode != 0 and "Client Version" not in gone.stdout


def test_flux_refuses_a_checksum_that_is_not_the_files(flux_binary, dist, second, catalog, env):
    plugins = Path(env["FLUXCD_PLUGINS"])
    catalog.publish(dist, dist / SINGLE)
    manifest = catalog.root / "plunger.yaml"
    doc = yaml.safe_load(manifest.read_text())
    wrong = "sha256:" + hashlib.sha256(second.read_bytes()).hexdigest()
    right = doc["versions"][0]["platforms"][0]["checksum"]
    doc["versions"][0]["platforms"][0]["checksum"] = wrong
    assert flux_plugin.check(doc, loopback_ok=True) == []  # well-formed, only not this file's
    manifest.write_text(yaml.safe_dump(doc))
    proc = flux(flux_binary, env, "plugin", "install", "plunger")
    assert proc.returncode == 1
    assert f"checksum verification failed (expected: {wrong}, got: {right})" in proc.stderr
    assert f"/{SINGLE}" in catalog.requests  # it was downloaded, then refused
    assert list(plugins.iterdir()) == []     # and nothing is installed
    assert not (Path(env["XDG_CACHE_HOME"]) / "flux-plunger").exists()


# -- where it runs ------------------------------------------------------------------------------

def test_it_runs_where_tmp_is_mounted_noexec(dist, plane, cluster, tmp_path):
    """In a private mount namespace /tmp is a fresh noexec tmpfs (the test's own files are
    bind-mounted at /mnt/t first): the first run unpacks into the user's cache, not /tmp,
    and `status` reads the real apiserver (the client may still write to /tmp)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) to mount a noexec /tmp in a mount namespace")
    ns = cluster.namespace("noexec")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    (tmp_path / "plugins").mkdir()
    shutil.copyfile(dist / SINGLE, tmp_path / "plugins" / "flux-plunger")
    (tmp_path / "plugins" / "flux-plunger").chmod(0o755)
    (tmp_path / "kubeconfig").write_bytes(plane.self_contained_kubeconfig())
    script = ('mount -t tmpfs tmpfs /mnt && mkdir /mnt/t && mount --bind "$1" /mnt/t && '
              'mount -t tmpfs -o noexec tmpfs /tmp && cp /bin/true /tmp/true && '
              '{ /tmp/true 2>/dev/null && echo "/tmp is not noexec" && exit 99 || :; } && '
              'HOME=/mnt/t/home /mnt/t/plugins/flux-plunger version --client && '
              'HOME=/mnt/t/home /mnt/t/plugins/flux-plunger status -n "$2" '
              '--kubeconfig /mnt/t/kubeconfig')
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                           "sh", str(tmp_path), ns], capture_output=True, text=True,
                          timeout=300, env={"PATH": SYSTEM_PATH})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"Client Version: {X_Y_Z}"
    assert lines[2].split()[0] == "NAME" and lines[3].split()[0] == "demo", proc.stdout
    assert "stuck" in lines[3].split(), proc.stdout
    assert len(list((tmp_path / "home" / ".cache" / "flux-plunger").iterdir())) == 1


def test_concurrent_first_runs_of_the_real_single_file(dist, tmp_path):
    """Six first runs at once, each needing the bundle, with one empty cache: every one
    answers, and one complete version directory is left (no temporary one)."""
    from concurrent.futures import ThreadPoolExecutor

    cache = tmp_path / "cache"
    env = {"PATH": SYSTEM_PATH, "HOME": str(tmp_path), "FLUX_PLUNGER_UNPACK_DIR": str(cache)}

    def first(_: int) -> subprocess.CompletedProcess:
        return subprocess.run([str(dist / SINGLE), "status", "--help"], capture_output=True,
                              text=True, timeout=300, env=env)

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(first, range(6)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    assert {r.stdout for r in results} == {results[0].stdout}
    assert results[0].stdout.startswith("Usage: flux plunger status ")  # named flux-plunger-…
    [unpacked] = list(cache.iterdir())
    with tarfile.open(dist / ARCHIVE) as tar:
        names = {m.name for m in tar.getmembers()}
    assert names <= {p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*")}


def _root_without_python(dist: Path, plane, root: Path) -> Path:
    """A root file system holding the single file (/plugins/flux-plunger), the system
    libraries its bundle loads (glibc's, zlib), the test apiserver's kubeconfig (/kubeconfig,
    certificates embedded) and nothing else — no shell, no Python."""
    for d in ("plugins", "home", "proc", "dev", "tmp"):
        (root / d).mkdir(parents=True)
    (root / "tmp").chmod(0o1777)
    (root / "home").chmod(0o1777)
    shutil.copyfile(dist / SINGLE, root / "plugins" / "flux-plunger")
    (root / "plugins" / "flux-plunger").chmod(0o755)
    bundle = root.parent / "bundle"
    with tarfile.open(dist / ARCHIVE) as tar:
        tar.extractall(bundle, filter="tar")
    copy_system_libraries(bundle, root)
    (root / "kubeconfig").write_bytes(plane.self_contained_kubeconfig())
    (root / "kubeconfig").chmod(0o644)
    files = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    assert not [f for f in files if Path(f).name.startswith("python") or f.endswith("/sh")]
    return root


def _stuck_demo(cluster, prefix: str) -> str:
    ns = cluster.namespace(prefix)
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    return ns


def test_it_runs_in_a_root_without_python(dist, plane, cluster, tmp_path):
    """The root without Python (``_root_without_python``) under chroot with /proc: the
    single file unpacks itself into $HOME/.cache and reads the real apiserver."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for chroot and a private /proc mount")
    ns = _stuck_demo(cluster, "nopy")
    root = _root_without_python(dist, plane, tmp_path / "root")

    def chrooted(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount -t proc proc "$1/proc" && r=$1 && shift && exec chroot "$r" "$@"', "sh",
             str(root), "/plugins/flux-plunger", *args],
            capture_output=True, text=True, timeout=300,
            # the host's, for unshare and chroot; nothing is there inside the root
            env={"HOME": "/home", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})

    version = chrooted("version", "--client")
    assert version.returncode == 0, version.stderr
    assert version.stdout.splitlines()[0] == f"Client Version: {X_Y_Z}"
    status = chrooted("status", "-n", ns, "--kubeconfig", "/kubeconfig")
    assert status.returncode == 0, status.stderr
    table = rows(status.stdout)
    assert table[1][0] == "demo" and "stuck" in table[1], status.stdout
    assert len(list((root / "home" / ".cache" / "flux-plunger").iterdir())) == 1


def test_it_runs_in_a_container_without_python(dist, plane, cluster, tmp_path):
    """The same root as an image in the Docker engine DOCKER_HOST names (KIND_ENGINE=start
    starts the project's own): read-only, an unprivileged user, /tmp a tmpfs mounted noexec
    (Docker's default), $HOME a writable tmpfs as a pod's emptyDir; the single file unpacks
    itself there and reads the real apiserver over the host's network."""

    assert shutil.which("docker"), "no docker client: run KIND_ENGINE=start ./hack/test.sh"
    assert docker("info", check=False, timeout=30).returncode == 0, (
        "no Docker engine answers (DOCKER_HOST): eval \"$(hack/kind/engine.sh env)\"")
    ns = _stuck_demo(cluster, "nopyc")
    root = _root_without_python(dist, plane, tmp_path / "root")
    tarball = tmp_path / "root.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(root, arcname=".")
    tag = f"kfp.local/flux-plunger-single:{X_Y_Z}-{os.getpid()}"
    docker("import", str(tarball), tag)
    try:
        assert docker("run", "--rm", tag, "/usr/bin/python3", "-V", check=False).returncode != 0
        status = docker("run", "--rm", "--read-only", "--tmpfs", "/tmp",
                        "--tmpfs", "/home:exec,mode=1777", "-e", "HOME=/home",
                        "--network", "host", "--user", "65532:65532", tag,
                        "/plugins/flux-plunger", "status", "-n", ns, "--kubeconfig", "/kubeconfig",
                        check=False)
        assert status.returncode == 0, status.stderr
        table = rows(status.stdout)
        assert table[1][0] == "demo" and "stuck" in table[1], status.stdout
    finally:
        docker("rmi", "-f", tag, check=False)


def test_it_runs_in_the_debian_11_floor_root(dist, plane, cluster):
    """The release's single file (its archive frozen in the floor root, what krew/build.py
    does where that root is built) in the Debian 11 root (glibc 2.31): version, floor,
    status against the real apiserver."""
    why = buildroot.unusable()
    if why:
        pytest.skip(f"no floor root on this machine: {why}")
    found = buildroot.ready(binary.cache_dir())
    if found is None:
        pytest.fail(f"the floor root {buildroot.root_dir(binary.cache_dir())} is not built: "
                    "hack/setup.sh --stage late (krew/build.py --fetch-floor) builds it",
                    pytrace=False)
    ns = cluster.namespace("floorfp")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    inside = buildroot.Builder(found)
    import tempfile

    with tempfile.TemporaryDirectory(dir=inside.tmp(), prefix="flux-single-") as tmp:
        here = Path(tmp)
        (here / "plugins").mkdir()
        (here / "home").mkdir()
        shutil.copyfile(dist / SINGLE, here / "plugins" / "flux-plunger")
        (here / "plugins" / "flux-plunger").chmod(0o755)
        (here / "kubeconfig").write_bytes(plane.self_contained_kubeconfig())
        env = {"PATH": "/usr/bin:/bin", "HOME": inside.inner(here / "home")}
        exe = inside.inner(here / "plugins" / "flux-plunger")
        ldd = inside.run(["/usr/bin/ldd", "--version"], env=env, timeout=60)
        assert "2.31" in ldd.stdout.splitlines()[0], ldd.stdout
        version = inside.run([exe, "version", "--client"], env=env, timeout=120)
        assert version.returncode == 0, version.stderr
        lines = version.stdout.splitlines()
        assert lines[0] == f"Client Version: {X_Y_Z}"
        m = re.fullmatch(r"Runs On: linux/amd64, glibc (\d+)\.(\d+) or newer", lines[1])
        assert m and (int(m.group(1)), int(m.group(2))) <= (2, 31), lines
        status = inside.run([exe, "status", "-n", ns, "--kubeconfig",
                             inside.inner(here / "kubeconfig")], env=env, timeout=120)
        assert status.returncode == 0, status.stderr
        assert rows(status.stdout)[1][0] == "demo" and "stuck" in rows(status.stdout)[1], status.stdout
