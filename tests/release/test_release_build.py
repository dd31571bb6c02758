"""hack/release.py: one command builds every artifact of a commit into dist/.

* dist/ holds the wheel, the sdist, the krew archive and manifest, the image (OCI layout
  tar), the chart, image-digest.txt, the image's and the Python dependencies' SPDX SBOMs and
  SHA256SUMS, and `sha256sum --check` accepts it;
* a second build of the same commit gives byte-identical files (every one);
* `twine check --strict` passes on the wheel and the sdist;
* the krew archive is this machine's self-contained binary (linux/amd64); the krew manifest is
  the committed one, with five platforms, its linux/amd64 uri and sha256 naming that archive;
* two freezes of one commit give the same archive (the second forced with --fresh-binary);
* the image: an index of linux/amd64 and linux/arm64 (the stand-in base's platforms), each
  with the base's layers, one layer of ours holding the launcher, the package and the locked
  wheels of that platform (arm64's compiled modules are aarch64 code), and a config with the
  OCI labels source/revision/version, Containerfile's entrypoint, command, user and ports;
* the chart: `helm package`d with version X.Y.Z and appVersion vX.Y.Z, its values pin the
  image by the digest the build printed, and `helm template` renders that reference;
* a version mismatch stops the build with one line naming every place that disagrees.
"""
from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from testplane import binaries

from .conftest import ROOT, VERSION, release

X_Y_Z = VERSION.lstrip("v")
EXPECTED = {
    f"kubectl_flux_plunger-{X_Y_Z}-py3-none-any.whl",
    f"kubectl_flux_plunger-{X_Y_Z}.tar.gz",
    f"kubectl-flux_plunger-{VERSION}-linux-amd64.tar.gz",
    "flux-plunger.yaml",
    f"flux-plunger-{VERSION}-linux-amd64",                 # the Flux plugin (issue 48)
    "plunger.yaml",
    "catalog.yaml",
    f"kubectl-flux-plunger-{VERSION}.oci.tar",
    f"flux-plunger-{X_Y_Z}.tgz",
    "image-digest.txt",
    f"kubectl-flux-plunger-{VERSION}.image.spdx.json",     # syft's SBOMs (issue 31)
    f"kubectl-flux-plunger-{VERSION}.python.spdx.json",
    "SHA256SUMS",
}
HEAD = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                      check=True).stdout.strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_dist_holds_every_artifact_and_sha256sums_verifies_them(dist):
    assert {p.name for p in dist.iterdir()} == EXPECTED
    sums = dict(reversed(line.split("  ", 1)) for line in (dist / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == EXPECTED - {"SHA256SUMS"}
    proc = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=dist,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == len(EXPECTED) - 1


def test_two_builds_of_one_commit_are_byte_identical(dist, base_image, tmp_path):
    """The second build freezes the binary again (not the cached archive of the first)."""
    again = tmp_path / "dist"
    proc = release(again, base_image, "--fresh-binary")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in again.iterdir()) == sorted(p.name for p in dist.iterdir())
    differ = [p.name for p in dist.iterdir() if p.read_bytes() != (again / p.name).read_bytes()]
    assert differ == []


def test_twine_check_passes(dist):
    files = [str(dist / f"kubectl_flux_plunger-{X_Y_Z}-py3-none-any.whl"),
             str(dist / f"kubectl_flux_plunger-{X_Y_Z}.tar.gz")]
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *files],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2


def test_krew_manifest_is_the_committed_one_naming_the_tag_archive(dist):
    manifest = dist / "flux-plunger.yaml"
    committed = subprocess.run(["git", "show", "HEAD:krew/flux-plunger.yaml"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout
    assert manifest.read_text() == committed
    doc = yaml.safe_load(manifest.read_text())
    assert doc["spec"]["version"] == VERSION
    archive = dist / f"kubectl-flux_plunger-{VERSION}-linux-amd64.tar.gz"
    platforms = {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]): p
                 for p in doc["spec"]["platforms"]}
    assert len(platforms) == 5
    amd64 = platforms[("linux", "amd64")]
    assert amd64["sha256"] == sha256(archive)
    assert amd64["uri"] == ("https://github.com/cozystack/kubectl-flux-plunger/releases/download/"
                            f"{VERSION}/{archive.name}")
    assert platforms[("windows", "amd64")]["bin"] == "kubectl-flux_plunger.exe"


class Layout:
    def __init__(self, oci_tar: Path):
        self.tar = tarfile.open(oci_tar)

    def read(self, name: str) -> bytes:
        return self.tar.extractfile(name).read()

    def blob(self, desc: dict) -> bytes:
        data = self.read("blobs/sha256/" + desc["digest"].split(":", 1)[1])
        assert len(data) == desc["size"]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == desc["digest"]
        return data

    def json(self, desc: dict) -> dict:
        return json.loads(self.blob(desc))


def test_image_is_a_two_platform_index_labelled_with_source_revision_version(dist):
    layout = Layout(dist / f"kubectl-flux-plunger-{VERSION}.oci.tar")
    top = json.loads(layout.read("index.json"))["manifests"]
    assert len(top) == 1 and top[0]["annotations"]["org.opencontainers.image.ref.name"] == VERSION
    assert top[0]["digest"] == (dist / "image-digest.txt").read_text().strip()
    index = layout.json(top[0])
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    platforms = {m["platform"]["architecture"]: m for m in index["manifests"]}
    assert set(platforms) == {"amd64", "arm64"}
    for arch, desc in platforms.items():
        manifest = layout.json(desc)
        config = layout.json(manifest["config"])
        assert config["architecture"] == arch
        labels = config["config"]["Labels"]
        assert labels["org.opencontainers.image.source"] == \
            "https://github.com/cozystack/kubectl-flux-plunger"
        assert labels["org.opencontainers.image.revision"] == HEAD
        assert labels["org.opencontainers.image.version"] == VERSION
        assert manifest["annotations"]["org.opencontainers.image.revision"] == HEAD
        c = config["config"]
        assert (c["Entrypoint"], c["Cmd"], c["User"]) == (["kubectl-flux_plunger"], ["serve"],
                                                          "65532:65532")
        assert set(c["ExposedPorts"]) == {"8080/tcp", "8081/tcp"}
        assert [e for e in c["Env"] if e.startswith("PATH=")] == [
            "PATH=/opt/flux-plunger/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
        assert {"LANG=C.UTF-8", "PYTHON_VERSION=3.12.12", "PYTHONDONTWRITEBYTECODE=1"} <= set(c["Env"])
        assert len(manifest["layers"]) == 2 == len(config["rootfs"]["diff_ids"])
        ours = layout.blob(manifest["layers"][-1])
        raw = __import__("gzip").decompress(ours)
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == config["rootfs"]["diff_ids"][-1]
        with tarfile.open(fileobj=io.BytesIO(raw)) as layer:
            names = layer.getnames()
            assert names == sorted(names)
            assert {(m.uid, m.gid, m.uname, m.gname) for m in layer.getmembers()} == {(0, 0, "", "")}
            assert layer.getmember("opt/flux-plunger/bin/kubectl-flux_plunger").mode == 0o755
            assert "opt/flux-plunger/lib/kubectl_flux_plunger/entry.py" in names
            # its dist-info (what an SBOM scanner reads), without the installer's RECORD
            info = f"opt/flux-plunger/lib/kubectl_flux_plunger-{X_Y_Z}.dist-info"
            assert f"{info}/METADATA" in names and f"{info}/RECORD" not in names
            assert "licenses/LICENSE" in names
            assert not [n for n in names if n.endswith(".pyc") or "/bin/pip" in n]
            assert not [n for n in names if n.startswith("opt/flux-plunger/lib/setuptools")]
            so = [n for n in names if n.startswith("opt/flux-plunger/lib/yaml/_yaml.cpython-312")]
            assert len(so) == 1, so
            elf = layer.extractfile(so[0]).read(20)
            machine = int.from_bytes(elf[18:20], "little")
            assert machine == {"amd64": 62, "arm64": 183}[arch]  # EM_X86_64, EM_AARCH64


def test_chart_is_packaged_for_the_tag_with_the_image_pinned_by_digest(dist, tmp_path):
    chart = dist / f"flux-plunger-{X_Y_Z}.tgz"
    digest = (dist / "image-digest.txt").read_text().strip()
    with tarfile.open(chart) as tar:
        meta = yaml.safe_load(tar.extractfile("flux-plunger/Chart.yaml"))
        values = yaml.safe_load(tar.extractfile("flux-plunger/values.yaml"))
    assert (meta["version"], meta["appVersion"]) == (X_Y_Z, VERSION)
    assert values["image"]["digest"] == digest
    home = tmp_path / "home"
    env = {"HOME": str(home), "HELM_CACHE_HOME": str(home / "c"),
           "HELM_CONFIG_HOME": str(home / "f"), "HELM_DATA_HOME": str(home / "d"),
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([str(binaries.ensure("helm")), "template", "fp", str(chart),
                           "--namespace", "flux-plunger"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    images = {line.split("image:", 1)[1].strip().strip('"')
              for line in proc.stdout.splitlines() if line.strip().startswith("image:")}
    assert images == {f"ghcr.io/cozystack/kubectl-flux-plunger:{VERSION}@{digest}"}


def test_a_version_mismatch_stops_the_build_with_one_line(base_image, tmp_path):
    proc = release(tmp_path / "dist", base_image, "--version", "v9.9.9")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"error: version mismatch: releasing v9.9.9, but pyproject "
        f"(kubectl_flux_plunger.__version__) says {VERSION}; chart version says {VERSION}; "
        f"chart appVersion says {VERSION}; krew manifest spec.version says {VERSION}"]
    assert not (tmp_path / "dist").exists()


def test_a_tag_builds_its_own_commit_and_a_wrong_tag_says_so(base_image, tmp_path):
    """In a clone: tag HEAD v{VERSION}, commit once more, build the tag: the image's revision
    label is the tagged commit, not the newer HEAD.  A tag that is not the tree's version
    fails with the one line."""
    clone = tmp_path / "clone"
    git_env = {**__import__("os").environ, "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "t",
               "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@example.invalid"}

    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True,
                              env=git_env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300,
                   env=git_env)
    git("tag", VERSION)
    git("tag", "v9.0.0")
    tagged = git("rev-parse", "HEAD")
    (clone / "later.txt").write_text("a commit after the tag\n")
    git("add", "later.txt")
    git("commit", "-q", "-m", "after the tag")
    assert git("rev-parse", "HEAD") != tagged

    def build(tag: str, out: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "hack" / "release.py"), tag, "-C", str(clone),
             "--offline", "--out", str(out), "--base-image", str(base_image),
             "--platforms", "linux/amd64"],
            capture_output=True, text=True, timeout=900, cwd=tmp_path,
            env={**git_env, "FLUX_PLUNGER_TESTBIN_CACHE": str(binaries.cache_root())})

    proc = build(VERSION, tmp_path / "dist")
    assert proc.returncode == 0, proc.stderr
    layout = Layout(tmp_path / "dist" / f"kubectl-flux-plunger-{VERSION}.oci.tar")
    [top] = json.loads(layout.read("index.json"))["manifests"]
    manifest = layout.json(top)  # one platform: the manifest itself
    labels = layout.json(manifest["config"])["config"]["Labels"]
    assert labels["org.opencontainers.image.revision"] == tagged
    wrong = build("v9.0.0", tmp_path / "dist9")
    assert wrong.returncode == 1
    assert wrong.stderr.startswith("error: version mismatch: releasing v9.0.0, but pyproject ")
    assert len(wrong.stderr.splitlines()) == 1
