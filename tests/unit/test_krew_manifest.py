"""krew/ without building: the committed manifest is the template filled for the current
version, one entry per platform (five), and follows krew's validation rules
(internal/index/validation/validate.go and cmd/validate-krew-manifest of krew v0.4.3; the real
validator and the real install run in tests/apiserver/test_krew.py); the release's manifest
is written from every archive's checksum; the build's requirement files are hash-pinned; the
shipped shell scripts are POSIX sh; the archive writer refuses what krew cannot unpack."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "krew"
MANIFEST = KREW / "flux-plunger.yaml"
SCRIPTS = [KREW / "kubectl_complete-flux_plunger", KREW / "install-flux-plugin.sh"]
SUPPORTED = {("windows", "386"), ("windows", "amd64"), ("windows", "arm64"), ("linux", "386"),
             ("linux", "amd64"), ("linux", "arm"), ("linux", "arm64"), ("linux", "ppc64le"),
             ("darwin", "386"), ("darwin", "amd64"), ("darwin", "arm64")}
PLATFORMS = {("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64"),
             ("windows", "amd64")}


def load(name: str):
    sys.path.insert(0, str(KREW))
    spec = importlib.util.spec_from_file_location(f"krew_{name}", KREW / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


build = load("build")
binary = load("binary")
TAG = "v" + build.version()


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def test_committed_manifest_is_the_template_filled_for_this_version(manifest):
    amd64 = binary.archive_name(TAG, "linux/amd64")
    [sha] = [p["sha256"] for p in manifest["spec"]["platforms"]
             if p["selector"]["matchLabels"] == {"os": "linux", "arch": "amd64"}]
    repo = re.match(r"https://github.com/([^/]+/[^/]+)$", manifest["spec"]["homepage"]).group(1)
    assert MANIFEST.read_text() == build.render_manifest(TAG, {amd64: sha}, repo)


def test_manifest_follows_krews_validation_rules(manifest):
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == MANIFEST.stem == "flux-plunger"
    spec = manifest["spec"]
    assert spec["shortDescription"] and not re.search(r"[\r\n]", spec["shortDescription"])
    assert re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", spec["version"])
    assert spec["version"] == TAG
    assert spec["homepage"].startswith("https://")
    assert "python3" not in spec["caveats"] and "no Python" in spec["caveats"]
    pairs = []
    for p in spec["platforms"]:
        assert set(p) <= {"selector", "uri", "sha256", "bin", "files"}
        assert re.fullmatch(r"[a-f0-9]{64}", p["sha256"])
        labels = p["selector"]["matchLabels"]
        assert set(labels) == {"os", "arch"} and "matchExpressions" not in p["selector"]
        plat = f"{labels['os']}/{labels['arch']}"
        assert p["bin"] == ("kubectl-flux_plunger.exe" if labels["os"] == "windows"
                            else "kubectl-flux_plunger")
        assert p["uri"] == ("https://github.com/cozystack/kubectl-flux-plunger/releases/download/"
                            f"{TAG}/kubectl-flux_plunger-{TAG}-{plat.replace('/', '-')}.tar.gz")
        pairs.append((labels["os"], labels["arch"]))
    assert set(pairs) == PLATFORMS and len(pairs) == 5
    assert set(pairs) <= SUPPORTED and len(set(pairs)) == len(pairs)  # no overlap


def test_only_linux_amd64_is_built_here_and_the_others_can_install_nothing(manifest):
    empty = hashlib.sha256(b"").hexdigest()
    shas = {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]): p["sha256"]
            for p in manifest["spec"]["platforms"]}
    assert shas.pop(("linux", "amd64")) != empty
    assert set(shas.values()) == {empty} == {build.NOT_BUILT_HERE}
    assert MANIFEST.read_text().count("sha256 of an empty file, which no archive has") == 4


def test_the_release_manifest_is_written_from_every_archives_checksum(tmp_path):
    sums = {binary.archive_name(TAG, p): hashlib.sha256(p.encode()).hexdigest()
            for p in binary.PLATFORMS}
    sums_file = tmp_path / "SHA256SUMS"
    sums_file.write_text("".join(f"{h}  {n}\n" for n, h in sums.items())
                         + f"{'0' * 64}  kubectl_flux_plunger-x.whl\n")
    out = tmp_path / "flux-plunger.yaml"
    build.from_sums(sums_file, out, "cozystack/kubectl-flux-plunger")
    doc = yaml.safe_load(out.read_text())
    got = {p["uri"].rsplit("/", 1)[1]: p["sha256"] for p in doc["spec"]["platforms"]}
    assert got == sums
    assert build.NOT_BUILT_HERE not in out.read_text()
    # one archive missing: refused, naming it
    sums_file.write_text("".join(f"{h}  {n}\n" for n, h in list(sums.items())[:-1]))
    with pytest.raises(build.BuildError, match=r"no checksum of kubectl-flux_plunger-v.*-windows-amd64"):
        build.from_sums(sums_file, out, "cozystack/kubectl-flux-plunger")


def _pins(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=[a-z])", re.sub(r"(?m)^#.*\n", "", text).strip()):
        m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", block)
        assert m, block
        out[m.group(1).lower()] = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
    return out


def test_the_build_requirements_are_hash_pinned_and_pyinstaller_is_6_22_3():
    pins = _pins((KREW / "requirements-binary.txt").read_text())
    assert "pyinstaller==6.22.3" in (KREW / "requirements-binary.txt").read_text()
    assert len(pins["pyinstaller"]) == 4  # linux x86_64 + aarch64, macOS universal2, Windows
    assert all(pins.values()), pins
    lock = (ROOT / "controller" / "requirements.lock").read_text()
    assert not set(pins) & set(re.findall(r"(?m)^([a-z0-9_.-]+)==", lock))  # no double pin


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shipped_scripts_are_executable_posix_sh(script):
    assert os.access(script, os.X_OK), f"{script} is not executable"
    assert script.read_text().startswith("#!/bin/sh\n")
    proc = subprocess.run(["/bin/sh", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_archive_writer_stores_links_as_copies_and_refuses_what_krew_cannot_unpack(tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "_internal").mkdir(parents=True)
    (bundle / "kubectl-flux_plunger").write_bytes(b"\x7fELF")
    (bundle / "kubectl-flux_plunger").chmod(0o755)
    (bundle / "_internal" / "Python.real").write_bytes(b"lib")
    (bundle / "_internal" / "Python").symlink_to("Python.real")
    (bundle / "_internal" / "Versions" / "3.11").mkdir(parents=True)
    (bundle / "_internal" / "Versions" / "3.11" / "lib").write_bytes(b"fw")
    (bundle / "_internal" / "Versions" / "Current").symlink_to("3.11")
    lic = tmp_path / "LICENSE"
    lic.write_text("licence\n")
    out = tmp_path / "a.tar.gz"
    binary.write_archive(bundle, lic, out, 315532800)
    with tarfile.open(out) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile("_internal/Python").read() == b"lib"
        assert tar.extractfile("_internal/Versions/Current/lib").read() == b"fw"
    assert list(members) == sorted(members)
    assert members["_internal/Python"].isfile() and members["kubectl-flux_plunger"].mode == 0o755
    assert members["_internal/Versions/Current"].isdir()
    assert members["LICENSE"].mode == 0o644
    with open(out, "rb") as fh:
        head = fh.read(10)
    assert head[4:8] == b"\0\0\0\0"  # gzip mtime 0
    (bundle / "_internal" / "bad..name").write_bytes(b"")
    with pytest.raises(binary.BinaryError, match="krew would refuse"):
        binary.write_archive(bundle, lic, out, 315532800)
    (bundle / "_internal" / "bad..name").unlink()
    (bundle / "_internal" / "out").symlink_to(tmp_path / "LICENSE")
    with pytest.raises(binary.BinaryError, match="links outside the bundle"):
        binary.write_archive(bundle, lic, out, 315532800)
    (bundle / "_internal" / "out").unlink()
    (bundle / "_internal" / "Versions" / "loop").symlink_to("..")
    with pytest.raises(binary.BinaryError, match="links back into its own parent"):
        binary.write_archive(bundle, lic, out, 315532800)


def test_template_has_no_unfilled_placeholder_after_rendering():
    text = build.render_manifest("v9.9.9", {}, "owner/repo")
    assert not re.search(r"@[a-z0-9]+@", text)
    assert "releases/download/v9.9.9/kubectl-flux_plunger-v9.9.9-windows-amd64.tar.gz" in text
    with pytest.raises(build.BuildError):
        build.render_manifest("v1", {}, "@repo@")


def test_the_archive_key_changes_with_the_package_and_not_with_a_pycache(tmp_path):
    tree = tmp_path / "tree"
    (tree / "kubectl_flux_plunger").mkdir(parents=True)
    (tree / "controller").mkdir()
    (tree / "controller" / "requirements.lock").write_text("x==1\n")
    (tree / "LICENSE").write_text("l\n")
    (tree / "kubectl_flux_plunger" / "a.py").write_text("a = 1\n")
    key = binary.archive_key(tree, 1, "linux/amd64")
    (tree / "kubectl_flux_plunger" / "__pycache__").mkdir()
    (tree / "kubectl_flux_plunger" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"x")
    assert binary.archive_key(tree, 1, "linux/amd64") == key
    (tree / "kubectl_flux_plunger" / "a.py").write_text("a = 2\n")
    assert binary.archive_key(tree, 1, "linux/amd64") != key
    assert binary.archive_key(tree, 2, "linux/amd64") != binary.archive_key(tree, 1, "linux/amd64")


def test_host_platform_names_are_krews():
    assert binary.host_platform() in binary.PLATFORMS
    assert binary.bin_name("windows/amd64") == "kubectl-flux_plunger.exe"
    assert binary.archive_name("v1.2.3", "darwin/arm64") == "kubectl-flux_plunger-v1.2.3-darwin-arm64.tar.gz"


def test_spec_ships_the_fingerprinted_sources_and_the_hidden_client_modules(tmp_path):
    (tmp_path / "kubectl_flux_plunger" / "cli").mkdir(parents=True)
    (tmp_path / "kubectl_flux_plunger" / "verbs").mkdir()
    for rel in ("__init__.py", "cli/__init__.py", "cli/status.py", "verbs/version.py"):
        (tmp_path / "kubectl_flux_plunger" / rel).write_text("")
    text = binary.spec(tmp_path, strip=True)
    compile(text, "spec", "exec")
    for rel, dest in (("cli/status.py", "kubectl_flux_plunger/cli"),
                      ("verbs/version.py", "kubectl_flux_plunger/verbs"),
                      ("__init__.py", "kubectl_flux_plunger")):
        assert repr((str(tmp_path / "kubectl_flux_plunger" / rel), dest)) in text
    for mod in ("kubernetes.client.configuration", "kubernetes.client.rest", "kubernetes.config"):
        assert repr(mod) in text
    assert "pyi_rth_multiprocessing" in text and "upx=False" in text
    # the fingerprint's own list of files is what the spec ships
    entry = (ROOT / "kubectl_flux_plunger" / "entry.py").read_text()
    assert 'os.path.join("verbs", "version.py")' in entry and '"__init__.py"' in entry
