"""krew/flux_plugin.py and krew/launcher without a freeze (issue 48): the generated
plunger.yaml and catalog.yaml pass the project's own schema checks, and each rule of those
checks fails what breaks it; the single file built from a stand-in krew archive (a shell
script where the frozen executable would be) unpacks once, atomically, into a versioned
directory, runs the face its name asks for, survives concurrent first runs and a damaged
cache, and refuses a damaged executable.  The real archive, the real flux and the real
apiserver: tests/release/test_flux_plugin.py."""
from __future__ import annotations

import copy
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "krew"


from .test_krew_manifest import load  # noqa: E402 - the one loader of krew/ scripts

fp = load("flux_plugin")
TAG = "v" + load("build").version()
SHA = "a" * 64


def sums_of(tag: str, plats) -> dict[str, str]:
    return {fp.asset_name(tag, p): hashlib.sha256(p.encode()).hexdigest() for p in plats}


@pytest.fixture
def generated(tmp_path) -> tuple[dict, dict]:
    plugin, cat = fp.write_manifests(sums_of(TAG, fp.binary.PLATFORMS), tmp_path, TAG,
                                     url_base=f"https://github.com/o/r/releases/download/{TAG}/",
                                     repo="o/r", all_platforms=True)
    return yaml.safe_load(plugin.read_text()), yaml.safe_load(cat.read_text())


# -- plunger.yaml and catalog.yaml ----------------------------------------------------------

def test_the_generated_files_are_what_flux_reads(generated):
    plugin, cat = generated
    assert fp.check(plugin) == [] and fp.check(cat) == []
    assert (plugin["apiVersion"], plugin["kind"], plugin["name"], plugin["bin"]) == (
        "cli.fluxcd.io/v1beta1", "Plugin", "plunger", "flux-plunger")
    [ver] = plugin["versions"]
    assert ver["version"] == TAG.lstrip("v")  # the schema: no v
    got = {(p["os"], p["arch"]): (p["url"], p["checksum"]) for p in ver["platforms"]}
    assert got == {tuple(p.split("/")): (
        f"https://github.com/o/r/releases/download/{TAG}/{fp.asset_name(TAG, p)}",
        "sha256:" + hashlib.sha256(p.encode()).hexdigest()) for p in fp.binary.PLATFORMS}
    assert got[("windows", "amd64")][0].endswith("-windows-amd64.exe")
    assert cat == {"apiVersion": "cli.fluxcd.io/v1beta1", "kind": "PluginCatalog",
                   "plugins": [{"name": "plunger", "description": plugin["description"],
                                "homepage": "https://github.com/o/r",
                                "source": "https://github.com/o/r", "license": "Apache-2.0"}]}


def test_the_release_needs_every_platform_and_a_local_build_lists_what_it_built(tmp_path):
    four = sums_of(TAG, fp.binary.PLATFORMS[:-1])
    with pytest.raises(fp.FluxPluginError, match=rf"no checksum of flux-plunger-{TAG}-windows-amd64.exe"):
        fp.write_manifests(four, tmp_path, TAG, url_base="https://x/", all_platforms=True)
    plugin, _ = fp.write_manifests(sums_of(TAG, ["linux/amd64"]), tmp_path, TAG,
                                   url_base="https://x/")
    [ver] = yaml.safe_load(plugin.read_text())["versions"]
    assert [(p["os"], p["arch"]) for p in ver["platforms"]] == [("linux", "amd64")]
    with pytest.raises(fp.FluxPluginError, match="no checksum"):
        fp.write_manifests({}, tmp_path, TAG, url_base="https://x/")


def test_older_versions_follow_the_new_one_and_the_same_version_is_replaced(tmp_path):
    old, _ = fp.write_manifests(sums_of("v0.0.9", ["linux/amd64"]), tmp_path / "a", "v0.0.9",
                                url_base="https://x/")
    again, _ = fp.write_manifests(sums_of(TAG, ["linux/amd64"]), tmp_path / "b", TAG,
                                  url_base="https://x/", previous=old)
    twice, _ = fp.write_manifests(sums_of(TAG, ["linux/amd64"]), tmp_path / "c", TAG,
                                  url_base="https://y/", previous=again)
    versions = yaml.safe_load(twice.read_text())["versions"]
    assert [v["version"] for v in versions] == [TAG.lstrip("v"), "0.0.9"]
    assert versions[0]["platforms"][0]["url"].startswith("https://y/")


def test_http_is_refused_except_on_loopback_when_asked(tmp_path):
    with pytest.raises(fp.FluxPluginError, match=r"url: 'http://example.test/.*' is not an https:// URL"):
        fp.write_manifests(sums_of(TAG, ["linux/amd64"]), tmp_path, TAG,
                           url_base="http://example.test/")
    plugin, _ = fp.write_manifests(sums_of(TAG, ["linux/amd64"]), tmp_path, TAG,
                                   url_base="http://127.0.0.1:8080/")
    doc = yaml.safe_load(plugin.read_text())
    assert fp.check(doc, loopback_ok=True) == []
    assert fp.check(doc) == [f"Plugin.versions[0].platforms[0].url: 'http://127.0.0.1:8080/"
                             f"{fp.asset_name(TAG, 'linux/amd64')}' is not an https:// URL"]


def broken(doc: dict, path: list, value=None, delete: bool = False) -> dict:
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


PLAT = ["versions", 0, "platforms", 0]


@pytest.mark.parametrize(("path", "value", "delete", "error"), [
    (["apiVersion"], "cli.fluxcd.io/v1", False, "Plugin.apiVersion: 'cli.fluxcd.io/v1' is not cli.fluxcd.io/v1beta1"),
    (["kind"], "PluginCatalog", False, None),  # then it is checked as a catalog, and fails
    (["name"], "Plunger", False, "Plugin.name: 'Plunger' does not match [a-z][a-z0-9-]*"),
    (["name"], "plugin", False, "Plugin.name: 'plugin' is reserved by flux"),
    (["description"], "", False, "Plugin.description: a non-empty string is required, not ''"),
    (["homepage"], None, True, "Plugin: homepage is required"),
    (["source"], "git@github.com:o/r", False, "Plugin.source: 'git@github.com:o/r' is not an https:// URL"),
    (["bin"], "plunger", False, "Plugin.bin: 'plunger' does not start with flux- (flux refuses it)"),
    (["bin"], "flux-plunger.exe", False, "Plugin.bin: 'flux-plunger.exe' does not match [a-z][a-z0-9-]*"),
    (["license"], "Apache-2.0", False, "Plugin: license is not allowed (additionalProperties: false)"),
    (["versions"], [], False, "Plugin.versions: a list of at least one version is required"),
    (["versions", 0, "version"], TAG, False, f"Plugin.versions[0].version: '{TAG}' does not match"),
    (["versions", 0, "platforms"], [], False, "Plugin.versions[0].platforms: a list of at least one platform is required"),
    ([*PLAT, "os"], "freebsd", False, "Plugin.versions[0].platforms[0].os: 'freebsd' is not one of darwin, linux, windows"),
    ([*PLAT, "arch"], "arm", False, "Plugin.versions[0].platforms[0].arch: 'arm' is not one of amd64, arm64"),
    ([*PLAT, "checksum"], SHA, False, f"Plugin.versions[0].platforms[0].checksum: '{SHA}' does not match"),
    ([*PLAT, "checksum"], "sha256:" + SHA.upper(), False, "checksum: 'sha256:AAAA"),
    ([*PLAT, "checksum"], "sha512:" + SHA, False, "checksum: 'sha512:"),
    ([*PLAT, "checksum"], "sha256:" + SHA[:63], False, "does not match sha256:[a-f0-9]{64}"),
    ([*PLAT, "url"], None, True, "Plugin.versions[0].platforms[0]: url is required"),
    ([*PLAT, "extractPath"], "bin/flux-plunger", False, "extractPath is not allowed"),
])
def test_each_rule_fails_what_breaks_it(generated, path, value, delete, error):
    plugin, _ = generated
    errors = fp.check(broken(plugin, path, value, delete))
    assert errors, "the check passed a broken manifest"
    if error is not None:
        assert any(e.startswith(error) or error in e for e in errors), errors


def test_a_platform_or_version_listed_twice_is_refused(generated):
    plugin, _ = generated
    doubled = copy.deepcopy(plugin)
    doubled["versions"][0]["platforms"].append(doubled["versions"][0]["platforms"][0])
    assert fp.check(doubled) == ["Plugin.versions[0].platforms[5]: linux/amd64 is listed twice"]
    doubled = copy.deepcopy(plugin)
    doubled["versions"].append(doubled["versions"][0])
    assert fp.check(doubled) == [f"Plugin.versions[1].version: '{TAG.lstrip('v')}' is listed twice"]


@pytest.mark.parametrize(("path", "value", "delete", "error"), [
    (["kind"], "Plugin", False, None),
    (["plugins"], [], False, "PluginCatalog.plugins: a list of at least one plugin is required"),
    (["plugins", 0, "license"], None, True, "PluginCatalog.plugins[0]: license is required"),
    (["plugins", 0, "homepage"], "http://o.test/", False, "is not an https:// URL"),
    (["plugins", 0, "name"], "-x", False, "does not match"),
    (["plugins", 0, "bin"], "flux-plunger", False, "bin is not allowed"),
])
def test_each_catalog_rule_fails_what_breaks_it(generated, path, value, delete, error):
    _, cat = generated
    errors = fp.check(broken(cat, path, value, delete))
    assert errors, "the check passed a broken catalog"
    if error is not None:
        assert any(error in e for e in errors), errors


def test_the_check_command_names_the_file_and_exits_1(generated, tmp_path):
    plugin, cat = generated
    good, bad = tmp_path / "plunger.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(plugin))
    bad.write_text(yaml.safe_dump(broken(cat, ["plugins", 0, "license"], delete=True)))
    proc = subprocess.run([sys.executable, str(KREW / "flux_plugin.py"), "check", str(good),
                           str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stdout == f"ok: {good}\n"
    assert proc.stderr == f"error: {bad}: PluginCatalog.plugins[0]: license is required\n"


# -- the launcher, with a stand-in bundle -------------------------------------------------

SCRIPT = b'#!/bin/sh\necho "${0##*/} $*"\nexit "${STANDIN_EXIT:-0}"\n'


def standin_archive(directory: Path, tag: str = "v9.8.7") -> Path:
    """A krew archive's shape: the executable (a shell script saying its name and
    arguments), _internal/, LICENSE."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data, mode in (("LICENSE", b"l\n", 0o644), ("_internal", None, 0o755),
                                 ("_internal/lib.so", b"x" * 4096, 0o644),
                                 ("kubectl-flux_plunger", SCRIPT, 0o755)):
            info = tarfile.TarInfo(name)
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    out = directory / f"kubectl-flux_plunger-{tag}-linux-amd64.tar.gz"
    out.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return out


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> tuple[Path, Path]:
    """(single file, its stand-in archive); its pre-rendered answers are the stand-in's."""
    if fp.binary.host_platform() != "linux/amd64":
        pytest.skip("the stand-in archive is named linux/amd64; this host runs another platform")
    d = tmp_path_factory.mktemp("single")
    archive = standin_archive(d)
    return fp.build(archive, d / "out"), archive


def run(exe: Path, *args: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "FLUX_PLUNGER_UNPACK_DIR": str(cache),
                               **env})


def test_the_single_file_holds_the_archive_and_unpacks_it_once(single, tmp_path):
    exe, archive = single
    assert exe.name == "flux-plunger-v9.8.7-linux-amd64" and os.access(exe, os.X_OK)
    assert fp.embedded_archive(exe, archive)
    assert exe.read_bytes()[:4] == b"\x7fELF"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    installed = plugins / "flux-plunger"
    installed.write_bytes(exe.read_bytes())
    installed.chmod(0o755)
    cache = tmp_path / "cache"
    first = run(installed, "status", "-A", cache=cache)
    assert (first.returncode, first.stdout, first.stderr) == (0, "flux-plunger status -A\n", "")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    [unpacked] = list(cache.iterdir())
    assert unpacked.name == f"v9.8.7-{digest[:16]}"
    assert sorted(p.name for p in unpacked.iterdir()) == [
        "LICENSE", "_internal", "flux-plunger", "kubectl-flux_plunger",
        "kubectl_complete-flux_plunger"]
    assert (unpacked / "kubectl-flux_plunger").read_bytes() == SCRIPT
    assert unpacked.stat().st_mode & 0o777 == 0o755
    marker = unpacked / "_internal" / "lib.so"
    before = marker.stat().st_mtime_ns
    second = run(installed, "status", "x", cache=cache, STANDIN_EXIT="3")
    assert (second.returncode, second.stdout) == (3, "flux-plunger status x\n")
    assert marker.stat().st_mtime_ns == before and list(cache.iterdir()) == [unpacked]


def test_the_name_it_is_run_by_picks_the_face(single, tmp_path):
    exe, _ = single
    for name, face in (("kubectl-flux_plunger", "kubectl-flux_plunger"),
                       ("kubectl_complete-flux_plunger", "kubectl_complete-flux_plunger"),
                       ("flux-plunger", "flux-plunger"), ("anything", "flux-plunger")):
        link = tmp_path / name
        link.symlink_to(exe)
        proc = run(link, "x", cache=tmp_path / "cache")
        assert proc.stdout == f"{face} x\n", (name, proc)


def test_concurrent_first_runs_all_succeed_and_leave_one_directory(single, tmp_path):
    exe, _ = single
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(lambda i: run(exe, str(i), cache=cache), range(24)))
    assert [(r.returncode, r.stdout, r.stderr) for r in results] == [
        (0, f"flux-plunger {i}\n", "") for i in range(24)]
    assert [p.name for p in cache.iterdir()] == ["v9.8.7-" + hashlib.sha256(
        single[1].read_bytes()).hexdigest()[:16]]  # no temporary directory left


def test_a_damaged_cache_is_unpacked_again(single, tmp_path):
    exe, _ = single
    cache = tmp_path / "cache"
    assert run(exe, cache=cache).returncode == 0
    [unpacked] = list(cache.iterdir())
    (unpacked / "kubectl-flux_plunger").unlink()
    proc = run(exe, "again", cache=cache)
    assert (proc.returncode, proc.stdout) == (0, "flux-plunger again\n")
    assert [p.name for p in cache.iterdir()] == [unpacked.name]
    assert (unpacked / "kubectl-flux_plunger").read_bytes() == SCRIPT


def test_a_damaged_executable_is_refused_and_unpacks_nothing(single, tmp_path):
    exe, archive = single
    data = bytearray(exe.read_bytes())
    at = bytes(data).index(archive.read_bytes()) + archive.stat().st_size // 2
    data[at] ^= 0xFF
    bad = tmp_path / "flux-plunger"
    bad.write_bytes(bytes(data))
    bad.chmod(0o755)
    cache = tmp_path / "cache"
    proc = run(bad, "status", cache=cache)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"error: flux-plunger: cannot unpack into {cache}: the "
                                  "embedded bundle's sha256 is ")
    assert "the executable is damaged" in proc.stderr
    assert list(cache.iterdir()) == []


def test_the_user_cache_directory_is_the_default(single, tmp_path):
    exe, _ = single
    proc = subprocess.run([str(exe), "x"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert proc.stdout == "flux-plunger x\n", proc
    assert [p.parent.name for p in (tmp_path / "xdg" / "flux-plunger").iterdir()] == ["flux-plunger"]


def test_older_versions_beyond_three_are_pruned(tmp_path):
    if fp.binary.host_platform() != "linux/amd64":
        pytest.skip("the stand-in archive is named linux/amd64; this host runs another platform")
    cache = tmp_path / "cache"
    seen = []
    for i in range(5):
        exe = fp.build(standin_archive(tmp_path, f"v1.0.{i}"), tmp_path / "out")
        assert run(exe, cache=cache).returncode == 0
        seen.append(sorted(p.name.split("-")[0] for p in cache.iterdir()))
    assert seen[-1] == ["v1.0.2", "v1.0.3", "v1.0.4"]


def in_terminal(exe: Path, args: list[str], cols: int, cache: Path) -> str:
    """``exe ARGS`` with stdout on a pseudo-terminal ``cols`` wide; what it printed."""
    import fcntl
    import struct
    import termios

    main, sub = os.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    try:
        proc = subprocess.run([str(exe), *args], stdout=sub, stderr=subprocess.PIPE,
                              timeout=60, env={"PATH": "/usr/bin:/bin",
                                               "FLUX_PLUNGER_UNPACK_DIR": str(cache)})
        assert proc.returncode == 0, proc.stderr
        os.close(sub)
        sub = -1
        out = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the other side is closed and drained
                break
            if not chunk:
                break
            out += chunk
        return out.decode().replace("\r\n", "\n")
    finally:
        os.close(main)
        if sub >= 0:
            os.close(sub)


def test_help_and_version_are_answered_without_starting_the_bundle(single, tmp_path):
    """The invocations the entry point answers from pre-rendered text are answered by the
    launcher with what the bundle printed at build time (here the stand-in's), unpacking
    nothing; any other width, a completion request or another verb runs the bundle."""
    exe, _ = single
    cache = tmp_path / "cache"
    for args in (["--help"], ["-h"], ["--version"], ["version", "--client"]):
        for width in ("80", "100", "240"):
            proc = run(exe, *args, cache=cache, COLUMNS=width)
            assert (proc.returncode, proc.stdout) == (0, f"flux-plunger {' '.join(args)}\n")
        assert run(exe, *args, cache=cache).stdout == f"flux-plunger {' '.join(args)}\n"  # a pipe: 80
    assert in_terminal(exe, ["--help"], 120, cache) == "flux-plunger --help\n"
    assert not cache.exists()  # nothing was unpacked: the bundle never ran
    for args, env in ((["--help"], {"COLUMNS": "90"}), (["--help"], {"COLUMNS": " 100"}),
                      (["--help"], {"_FLUX_PLUNGER_COMPLETE": "bash_complete"}),
                      (["--help", "-h"], {}), (["version"], {})):
        shutil.rmtree(cache, ignore_errors=True)
        proc = run(exe, *args, cache=cache, **env)
        assert proc.stdout == f"flux-plunger {' '.join(args)}\n", (args, env)
        assert cache.is_dir(), (args, env)  # it ran the bundle, unpacked first
    shutil.rmtree(cache)
    assert in_terminal(exe, ["--help"], 90, cache) == "flux-plunger --help\n"
    assert cache.is_dir()


def test_a_closed_pipe_ends_a_fast_answer_with_exit_1_and_no_message(single, tmp_path):
    """As the bundle does (`| head` having gone): exit 1, nothing on stderr, no SIGPIPE."""
    exe, _ = single
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([str(exe), "--help"], stdout=write, stderr=subprocess.PIPE,
                              timeout=60, env={"PATH": "/usr/bin:/bin",
                                               "FLUX_PLUNGER_UNPACK_DIR": str(tmp_path)})
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (1, b"")
