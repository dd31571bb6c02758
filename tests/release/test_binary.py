"""The self-contained binary of the release (dist/kubectl-flux_plunger-vX.Y.Z-linux-amd64.tar.gz,
hack/release.py → krew/build.py → PyInstaller) as a user runs it, with no Python anywhere:

* installed by the real krew (v0.4.3) with `kubectl krew install --manifest --archive`, it runs
  `status -A` and a real `recover` through the real kubectl against the real kube-apiserver
  with a PATH holding only kubectl and krew's bin directory (no python3 findable);
* the archive holds an ELF executable, its `_internal/` and LICENSE, every entry a regular file
  or directory, sorted, root-owned, mtime 1980, and no Python interpreter executable;
* in a container image that has no Python at all (the bundle plus the few system libraries
  its executable loads — glibc's and zlib — built from files and `docker import`ed into the
  Docker engine here), `status` reads the real apiserver;
* `flux plunger status -A` through the real flux v2.9.5 with the binary linked as the plugin
  by krew/install-flux-plugin.sh, and `kubectl flux-plunger <TAB>` through the completion link
  docs/INSTALL.md gives;
* bad input gives the wheel's one-line errors and exit codes, byte for byte (an unreadable
  kubeconfig, a bad flag, an unreachable server), Ctrl-C exits 130, never a traceback nor a
  PyInstaller message.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from testplane.signals import default_sigint
from testplane import binaries
from testplane.cluster import SimulatedHelmController

from .conftest import ROOT, VERSION

X_Y_Z = VERSION.lstrip("v")
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
ARCHIVE = f"kubectl-flux_plunger-{VERSION}-linux-amd64.tar.gz"
PYI_MARKS = ("Traceback", "[PYI-", "Failed to execute script", "pyi_", "_MEIPASS")


@pytest.fixture(scope="module")
def archive(dist) -> Path:
    return dist / ARCHIVE


@pytest.fixture(scope="module")
def nopy(tmp_path_factory) -> Path:
    """A directory holding only a link to kubectl: with krew's bin dir, the whole PATH."""
    d = tmp_path_factory.mktemp("nopy")
    (d / "kubectl").symlink_to(KUBECTL)
    return d


@pytest.fixture(scope="module")
def installed(dist, archive, tmp_path_factory) -> Path:
    """KREW_ROOT with the plugin installed by the real krew from the release's manifest."""
    krew_bin = tmp_path_factory.mktemp("krew-bin")
    (krew_bin / "kubectl-krew").symlink_to(binaries.ensure("krew"))
    root = tmp_path_factory.mktemp("krew-root")
    env = {"HOME": str(root / "home"), "KREW_ROOT": str(root), "KREW_NO_UPGRADE_CHECK": "1",
           "PATH": f"{root / 'bin'}:{krew_bin}:/usr/bin:/bin"}
    proc = subprocess.run([KUBECTL, "krew", "install", f"--manifest={dist / 'flux-plunger.yaml'}",
                           f"--archive={archive}"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Installed plugin: flux-plunger" in proc.stdout + proc.stderr
    assert "no Python" in proc.stdout + proc.stderr  # the caveats say nothing else is needed
    return root


def path_without_python(installed: Path, nopy: Path) -> str:
    path = f"{installed / 'bin'}:{nopy}"
    for name in ("python3", "python", f"python3.{sys.version_info[1]}"):
        assert shutil.which(name, path=path) is None, f"{name} is findable on {path}"
    return path


def env_of(installed: Path, nopy: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": path_without_python(installed, nopy), "HOME": str(tmp_path),
            "KREW_ROOT": str(installed), **extra}


def clean(stderr: str) -> None:
    for mark in PYI_MARKS:
        assert mark not in stderr, stderr


# -- the archive ------------------------------------------------------------------------

def test_archive_is_the_frozen_bundle_with_no_interpreter_executable(archive):
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        head = tar.extractfile("kubectl-flux_plunger").read(4)
    names = [m.name for m in members]
    assert names == sorted(names)
    assert {n.split("/")[0] for n in names} == {"LICENSE", "_internal", "kubectl-flux_plunger"}
    assert all(m.isfile() or m.isdir() for m in members)  # krew unpacks nothing else
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 315532800)}
    assert head == b"\x7fELF"
    modes = {m.name: m.mode for m in members}
    assert modes["kubectl-flux_plunger"] == 0o755 and set(modes.values()) <= {0o755, 0o644}
    assert not [m.name for m in members
                if m.isfile() and Path(m.name).name.startswith("python")]  # no interpreter
    assert any(n.startswith("_internal/libpython3.") for n in names)
    # the sources entry.fingerprint reads, as data files
    assert "_internal/kubectl_flux_plunger/cli/__init__.py" in names
    assert archive.stat().st_size <= 30 * 2**20  # the goal: <= 30 MiB compressed


def test_the_runners_smoke_test_passes_here(archive):
    """hack/smoke-binary.sh, what release.yml runs on every platform's runner."""
    proc = subprocess.run(["bash", str(ROOT / "hack" / "smoke-binary.sh"), str(archive), X_Y_Z],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == ["ok"] * 4


def test_krew_links_the_binary(installed):
    link = installed / "bin" / "kubectl-flux_plunger"
    target = Path(os.path.realpath(link))
    store = installed / "store" / "flux-plunger" / VERSION
    assert link.is_symlink() and target == store / "kubectl-flux_plunger"
    assert (store / "_internal").is_dir() and (store / "LICENSE").is_file()


# -- against the real apiserver, no Python on PATH -----------------------------------------

def test_status_and_recover_run_with_no_python_on_path(installed, nopy, plane, cluster, tmp_path):
    ns = cluster.namespace("bin")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    env = env_of(installed, nopy, tmp_path, KUBECONFIG=str(plane.kubeconfig))

    status = subprocess.run([KUBECTL, "flux-plunger", "status", "-A"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert status.returncode == 0, status.stderr
    rows = [line.split() for line in status.stdout.splitlines()]
    assert rows[0][:2] == ["NAMESPACE", "NAME"]
    mine = [r for r in rows if r[:2] == [ns, "demo"]]
    assert mine and "stuck" in mine[0], status.stdout

    with SimulatedHelmController(cluster, ns):
        rec = subprocess.run([KUBECTL, "flux-plunger", "recover", "-n", ns, "demo"],
                             capture_output=True, text=True, env=env, timeout=300)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert "helmrelease.helm.toolkit.fluxcd.io/demo recovered" in rec.stdout
    assert cluster.secret_names(ns, "demo") == ["sh.helm.release.v1.demo.v1"]
    clean(rec.stderr)

    version = subprocess.run([KUBECTL, "flux-plunger", "version"], capture_output=True,
                             text=True, env=env, timeout=120)
    assert version.returncode == 0, version.stderr
    server = plane.kube().server_version()["gitVersion"]
    assert version.stdout.splitlines()[:2] == [f"Client Version: {X_Y_Z}",
                                               f"Server Version: {server}"]


def test_an_exec_credential_plugin_gets_the_users_environment(installed, nopy, plane, tmp_path):
    """A kubeconfig whose user is an exec credential plugin (as for EKS, GKE, AKS): it runs
    with the LD_LIBRARY_PATH the user had, not the bundle's, and none of PyInstaller's own
    variables; the credentials it hands back (the test apiserver's admin certificate) work."""
    import base64
    import json

    import yaml

    f = plane.files
    seen = tmp_path / "plugin.env"
    plugin = tmp_path / "credential-plugin"
    cred = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
            "status": {"clientCertificateData": Path(f["admin_cert"]).read_text(),
                       "clientKeyData": Path(f["admin_key"]).read_text()}}
    plugin.write_text(f"#!/bin/sh\n/usr/bin/env > {seen}\ncat <<'EOF'\n{json.dumps(cred)}\nEOF\n")
    plugin.chmod(0o755)
    kubeconfig = tmp_path / "exec.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {
            "server": plane.server,
            "certificate-authority-data": base64.b64encode(
                Path(f["serving_ca"]).read_bytes()).decode()}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
            "interactiveMode": "Never"}}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}]}))
    for before in (None, "/opt/users-own-lib"):
        extra = {"KUBECONFIG": str(kubeconfig)}
        if before:
            extra["LD_LIBRARY_PATH"] = before
        env = env_of(installed, nopy, tmp_path, **extra)
        proc = subprocess.run([KUBECTL, "flux-plunger", "version"], capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[1].startswith("Server Version: v"), proc.stdout
        child = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
        assert child.get("LD_LIBRARY_PATH") == before, child.get("LD_LIBRARY_PATH")
        assert not [k for k in child if k.startswith("_PYI") or k.endswith("_ORIG")], child


# -- in a container image without Python -------------------------------------------------

def docker(*args: str, check: bool = True, timeout: float = 300,
           **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        assert proc.returncode == 0, f"docker {' '.join(args)}: {proc.stderr}"
    return proc


def copy_system_libraries(bundle: Path, root: Path) -> None:
    """Copy into ``root`` (at their own paths) the system libraries the bundle loads
    (``system_libraries``): glibc's and zlib at least."""
    libs = system_libraries(bundle)
    assert {Path(p).name for p in libs} >= {"libc.so.6", "libz.so.1"}
    for lib in sorted(libs):
        dest = root / lib.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.realpath(lib), dest)
        dest.chmod(0o755)


def system_libraries(bundle: Path) -> set[str]:
    """The host libraries the bundle loads that it does not carry: everything its executable
    links (the bootloader runs before any bundled library can be found) and what the bundled
    libraries need beyond each other, as `ldd` resolves them."""
    bundled = {p.name for p in (bundle / "_internal").rglob("*.so*")}
    libs: set[str] = set()
    for elf in [bundle / "kubectl-flux_plunger", *sorted((bundle / "_internal").rglob("*.so*"))]:
        out = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, timeout=60).stdout
        for line in out.splitlines():
            path = next((w for w in line.split() if w.startswith("/")), None)
            if path and (elf.name == "kubectl-flux_plunger" or Path(path).name not in bundled):
                libs.add(path)
    return libs


@pytest.fixture(scope="module")
def image(archive, plane, tmp_path_factory):
    """An image of the bundle at /opt/flux-plunger plus the system libraries it loads, and
    nothing else (no shell, no Python), imported into the Docker engine DOCKER_HOST names.
    /kubeconfig in it is the test apiserver's, certificates embedded (a bind mount is not
    used: the engine may not see this process's temporary directories)."""
    assert shutil.which("docker"), "no docker client: run KIND_ENGINE=start ./hack/test.sh"
    assert docker("info", check=False, timeout=30).returncode == 0, (
        "no Docker engine answers (DOCKER_HOST): eval \"$(hack/kind/engine.sh env)\"")
    tmp = tmp_path_factory.mktemp("image")
    rootfs = tmp / "rootfs"
    (rootfs / "opt" / "flux-plunger").mkdir(parents=True)
    (rootfs / "tmp").mkdir()
    (rootfs / "tmp").chmod(0o1777)  # as a distribution's /tmp (the engine's tmpfs copies it)
    with tarfile.open(archive) as tar:
        tar.extractall(rootfs / "opt" / "flux-plunger", filter="tar")
    copy_system_libraries(rootfs / "opt" / "flux-plunger", rootfs)
    (rootfs / "kubeconfig").write_bytes(plane.self_contained_kubeconfig())
    (rootfs / "kubeconfig").chmod(0o644)
    files = [p.relative_to(rootfs).as_posix() for p in rootfs.rglob("*") if p.is_file()]
    assert not [f for f in files if Path(f).name.startswith("python") or f.endswith("/sh")]
    tarball = tmp / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(rootfs, arcname=".")
    tag = f"kfp.local/flux-plunger-binary:{X_Y_Z}-{os.getpid()}"
    docker("import", str(tarball), tag)
    yield tag
    docker("rmi", "-f", tag, check=False)


def test_status_in_a_container_without_python(image, plane, cluster):
    ns = cluster.namespace("img")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    # a writable /tmp, as a pod's emptyDir: the client writes embedded certificates there
    base = ["run", "--rm", "--read-only", "--tmpfs", "/tmp", "--network", "host",
            "--user", "65532:65532"]
    which = docker("run", "--rm", image, "/usr/bin/python3", "-V", check=False)
    assert which.returncode != 0  # there is no python3 to run
    proc = docker(*base, image, "/opt/flux-plunger/kubectl-flux_plunger", "status", "-n", ns,
                  "--kubeconfig", "/kubeconfig", check=False)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert rows[0][0] == "NAME" and rows[1][0] == "demo" and "stuck" in rows[1], proc.stdout
    down = docker(*base, image, "/opt/flux-plunger/kubectl-flux_plunger", "status", "-A",
                  "--server", "https://127.0.0.1:1", check=False)
    assert down.returncode == 1
    assert len(down.stderr.splitlines()) == 1 and down.stderr.startswith("error: ")


# -- flux and kubectl completion through the binary ------------------------------------------

def test_flux_plunger_status_through_the_real_flux(installed, nopy, plane, cluster, tmp_path):
    ns = cluster.namespace("flux")
    cluster.create_hr(ns, "demo")
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    plugins = tmp_path / "plugins"
    link = subprocess.run(["/bin/sh", str(ROOT / "krew" / "install-flux-plugin.sh")],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{installed / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
                               "FLUXCD_PLUGINS": str(plugins)})
    assert link.returncode == 0, link.stderr
    assert os.path.realpath(plugins / "flux-plunger") == str(
        installed / "store" / "flux-plunger" / VERSION / "kubectl-flux_plunger")
    flux = str(binaries.ensure("flux"))
    env = env_of(installed, nopy, tmp_path, FLUXCD_PLUGINS=str(plugins),
                 KUBECONFIG=str(plane.kubeconfig))
    proc = subprocess.run([flux, "plunger", "status", "-A"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [r for r in (line.split() for line in proc.stdout.splitlines())
            if r[:2] == [ns, "demo"] and "stuck" in r], proc.stdout
    helped = subprocess.run([flux, "plunger", "--help"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: flux plunger ")
    usage = subprocess.run([flux, "plunger", "status", "--bogus"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert usage.returncode == 2, usage.stderr
    assert usage.stderr.startswith("error: ") and "--bogus" in usage.stderr.splitlines()[0]


def test_kubectl_completion_through_the_binary(installed, nopy, plane, cluster, tmp_path):
    ns = cluster.namespace("cmpl")
    [caveat] = [line for line in (ROOT / "docs" / "INSTALL.md").read_text().splitlines()
                if line.startswith("ln -sf kubectl-flux_plunger ")]  # krew's link
    env = env_of(installed, nopy, tmp_path, KUBECONFIG=str(plane.kubeconfig))
    subprocess.run(["/bin/sh", "-c", caveat], check=True, timeout=30,
                   env={**env, "PATH": "/usr/bin:/bin"})
    verbs = subprocess.run([KUBECTL, "__complete", "flux-plunger", "st"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert verbs.returncode == 0, verbs.stderr
    assert verbs.stdout.splitlines() == ["status", ":4"]
    names = subprocess.run([KUBECTL, "__complete", "flux-plunger", "status", "-n", ns[:-2]],
                           capture_output=True, text=True, env=env, timeout=60)
    assert names.returncode == 0, names.stderr
    assert ns in names.stdout.splitlines()  # from the cluster


# -- bad input: the wheel's errors ---------------------------------------------------------

@pytest.fixture(scope="module")
def wheel_argv(dist, tmp_path_factory) -> list[str]:
    """The release's wheel run as its console script (this interpreter, isolated, with the
    venv's dependencies)."""
    target = tmp_path_factory.mktemp("wheel")
    with zipfile.ZipFile(dist / f"kubectl_flux_plunger-{X_Y_Z}-py3-none-any.whl") as zf:
        zf.extractall(target)
    code = ("import sys; sys.path[:0] = [sys.argv.pop(1), sys.argv.pop(1)]; "
            "sys.argv[0] = 'kubectl-flux_plunger'; "
            "from kubectl_flux_plunger.entry import main; sys.exit(main())")
    return [sys.executable, "-I", "-S", "-c", code, str(target), sysconfig.get_paths()["purelib"]]


def bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    garbage = tmp_path / "garbage.kubeconfig"
    garbage.write_text("{{{ this is not yaml: [\n")
    return {
        "kubeconfig is a directory": (["status", "-A"], {"KUBECONFIG": str(tmp_path)}),
        "kubeconfig is not YAML": (["status", "-A"], {"KUBECONFIG": str(garbage)}),
        "a bad flag": (["status", "--bogus"], {}),
        "a bad verb": (["stauts"], {}),
        "a bad value": (["status", "-o", "xml"], {}),
        "an unreachable server": (["status", "-A", "--server", "https://127.0.0.1:1"], {}),
    }


def test_bad_input_gives_the_wheels_one_line_errors(installed, nopy, wheel_argv, tmp_path):
    for what, (args, extra) in bad_inputs(tmp_path).items():
        env = env_of(installed, nopy, tmp_path, **extra)
        frozen = subprocess.run([KUBECTL, "flux-plunger", *args], capture_output=True, text=True,
                                env=env, timeout=120)
        wheel = subprocess.run([*wheel_argv, *args], capture_output=True, text=True,
                               env={**env, "PATH": "/usr/bin:/bin"}, timeout=120)
        assert (frozen.returncode, frozen.stdout, frozen.stderr) == \
            (wheel.returncode, wheel.stdout, wheel.stderr), what
        assert frozen.returncode in (1, 2), (what, frozen)
        assert frozen.stderr.startswith("error: "), (what, frozen.stderr)
        lines = frozen.stderr.splitlines()
        assert len(lines) == (2 if frozen.returncode == 2 else 1), (what, lines)
        clean(frozen.stderr)


def interrupted(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``status --watch`` on a terminal (a pty: output is line-buffered, as for a person),
    wait until its table's header is shown, then send SIGINT, which is what Ctrl-C does."""
    import pty
    import select

    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, env=env, preexec_fn=default_sigint)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"NAME" not in seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no table within 60s: {seen!r}"
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the child closed the terminal: it exited
                    chunk = b""
                assert chunk, f"the watch ended before its table: {seen!r}"
                seen += chunk
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return subprocess.CompletedProcess(argv, proc.returncode, seen.decode(errors="replace"), err)


def test_ctrl_c_exits_130_like_the_wheel(installed, nopy, wheel_argv, plane, cluster, tmp_path):
    ns = cluster.namespace("intr")
    cluster.create_hr(ns, "demo")  # stuck: the watch shows a table (an idle one says so on stderr)
    cluster.storage(ns, "demo", [(1, "superseded"), (2, "uninstalling")])
    cluster.make_stuck(ns, "demo")
    env = env_of(installed, nopy, tmp_path, KUBECONFIG=str(plane.kubeconfig))
    args = ["status", "-n", ns, "--watch"]
    frozen = interrupted([KUBECTL, "flux-plunger", *args], env)
    wheel = interrupted([*wheel_argv, *args], {**env, "PATH": "/usr/bin:/bin"})
    assert frozen.returncode == wheel.returncode == 130, (frozen, wheel)
    assert frozen.stderr == wheel.stderr
    clean(frozen.stderr)
