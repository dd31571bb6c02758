"""krew/ without building: the committed manifest is the template filled for the current
version and follows krew's validation rules (internal/index/validation/validate.go and
cmd/validate-krew-manifest of krew v0.4.3; the real validator runs in
tests/apiserver/test_krew.py), the vendored dependency list is pinned and complete, the
shipped shell scripts are POSIX sh, and the build's compiled-file guard works."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "krew"
MANIFEST = KREW / "flux-plunger.yaml"
SCRIPTS = [KREW / "kubectl-flux_plunger", KREW / "kubectl_complete-flux_plunger",
           KREW / "install-flux-plugin.sh"]
SUPPORTED = {("windows", "386"), ("windows", "amd64"), ("windows", "arm64"), ("linux", "386"),
             ("linux", "amd64"), ("linux", "arm"), ("linux", "arm64"), ("linux", "ppc64le"),
             ("darwin", "386"), ("darwin", "amd64"), ("darwin", "arm64")}


def load_build():
    spec = importlib.util.spec_from_file_location("krew_build", KREW / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


build = load_build()


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def test_committed_manifest_is_the_template_filled_for_this_version(manifest):
    sha = manifest["spec"]["platforms"][0]["sha256"]
    repo = re.match(r"https://github.com/([^/]+/[^/]+)$", manifest["spec"]["homepage"]).group(1)
    assert MANIFEST.read_text() == build.render_manifest("v" + build.version(), sha, repo)


def test_manifest_follows_krews_validation_rules(manifest):
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == MANIFEST.stem == "flux-plunger"
    assert re.fullmatch(r"[\w-]+", manifest["metadata"]["name"])
    spec = manifest["spec"]
    assert spec["shortDescription"] and not re.search(r"[\r\n]", spec["shortDescription"])
    assert re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", spec["version"])
    assert spec["version"] == "v" + build.version()
    assert spec["homepage"].startswith("https://")
    assert "python3 >= 3.10" in spec["caveats"]
    pairs = []
    for p in spec["platforms"]:
        assert set(p) <= {"selector", "uri", "sha256", "bin", "files"}
        assert re.fullmatch(r"[a-f0-9]{64}", p["sha256"])
        assert p["bin"] == "kubectl-flux_plunger"
        assert p["uri"].startswith("https://") and p["uri"].endswith(".tar.gz")
        labels = p["selector"]["matchLabels"]
        assert set(labels) == {"os", "arch"} and "matchExpressions" not in p["selector"]
        pairs.append((labels["os"], labels["arch"]))
    assert sorted(pairs) == sorted({("linux", "amd64"), ("linux", "arm64"),
                                    ("darwin", "amd64"), ("darwin", "arm64")})
    assert set(pairs) <= SUPPORTED and len(set(pairs)) == len(pairs)  # no overlap
    assert len({p["sha256"] for p in spec["platforms"]}) == 1  # one archive for all


def _pins(name: str) -> dict[str, str]:
    out = {}
    for line in (KREW / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+) --hash=sha256:[0-9a-f]{64}", line)
        assert m, f"{name}: not pinned with a hash: {line!r}"
        key = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        assert key not in out, f"{name}: {key} twice"
        out[key] = m.group(2)
    return out


def test_vendored_dependencies_are_pinned_and_complete():
    pure, pyyaml = _pins("requirements-pure.txt"), _pins("requirements-pyyaml.txt")
    assert list(pyyaml) == ["pyyaml"]
    assert not set(pure) & set(pyyaml)
    vendored = set(pure) | set(pyyaml)
    assert pure["kubernetes"].split(".")[0] == "36"  # 37 needs compiled pydantic-core
    # everything the package needs (its own dependencies and the serve extra)
    from packaging.requirements import Requirement
    ours = metadata.requires("kubectl-flux-plunger") or []
    for req in map(Requirement, ours):
        if req.marker is None or req.marker.evaluate({"extra": "serve"}):
            assert re.sub(r"[-_.]+", "-", req.name).lower() in vendored, req
    # and what the pinned kubernetes client requires, but aiohttp (kubernetes.aio only)
    k8s = Path(metadata.distribution("kubernetes").locate_file(""))
    assert metadata.version("kubernetes") == pure["kubernetes"]
    for req in map(Requirement, metadata.requires("kubernetes") or []):
        if req.marker is not None or req.name == "aiohttp":
            continue
        assert re.sub(r"[-_.]+", "-", req.name).lower() in vendored, (req, k8s)
    for dist in ("requests",):  # requests' own dependencies
        for req in map(Requirement, metadata.requires(dist) or []):
            if req.marker is None:
                assert re.sub(r"[-_.]+", "-", req.name).lower() in vendored, req


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shipped_scripts_are_executable_posix_sh(script):
    assert os.access(script, os.X_OK), f"{script} is not executable"
    assert script.read_text().startswith("#!/bin/sh\n")
    proc = subprocess.run(["/bin/sh", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_build_guard_finds_compiled_files(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "_speedups.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF....")
    (tmp_path / "pkg" / "hidden.bin").write_bytes(b"\x7fELF\x02\x01\x01")
    (tmp_path / "pkg" / "mac").write_bytes(b"\xcf\xfa\xed\xfe....")
    assert build.compiled_files(tmp_path) == [
        "pkg/_speedups.cpython-311-x86_64-linux-gnu.so", "pkg/hidden.bin", "pkg/mac"]


def test_only_the_pyyaml_binding_may_be_stripped():
    assert build.STRIPPABLE.match("yaml/_yaml.cpython-310-x86_64-linux-gnu.so")
    assert not build.STRIPPABLE.match("charset_normalizer/md.cpython-310-x86_64-linux-gnu.so")
    assert not build.STRIPPABLE.match("yaml/sub/_yaml.cpython-310-x86_64-linux-gnu.so")


def test_template_has_no_unfilled_placeholder_after_rendering():
    text = build.render_manifest("v9.9.9", "a" * 64, "owner/repo")
    assert not re.search(r"@[a-z0-9]+@", text)
    assert "releases/download/v9.9.9/kubectl-flux_plunger-v9.9.9.tar.gz" in text
    with pytest.raises(build.BuildError):
        build.render_manifest("v1", "a" * 64, "@repo@")
