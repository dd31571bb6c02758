"""Signatures and SBOMs of the release (issue 31), offline: cosign v3.1.3 and syft v1.57.2
(built from their Go modules) against the distribution registry on loopback.

release.yml signs keyless (a Fulcio certificate for the workflow's GitHub OIDC identity, a
Rekor entry); neither service is reachable here, so these tests sign with a key pair they
make (`cosign generate-key-pair`), without a transparency log, through the same
hack/release_sign.py commands release.yml runs:

* the image and the chart, signed by digest in the registry in both of cosign's formats:
  `cosign verify` with the public key passes for each; it fails once another digest is
  pushed under the tag, and with another key; a reference by tag is refused before cosign
  runs;
* the krew archive and SHA256SUMS signed as blobs (a bundle each): `cosign verify-blob`
  passes, and fails on the archive with one byte changed;
* the image's SBOM attached as a signed spdxjson attestation: `cosign verify-attestation`
  passes and its predicate names kubectl-flux-plunger and every locked dependency at its
  version; the Python dependency set's SBOM names the same and the krew archive's wheels."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from testplane import binaries

from .conftest import ROOT, VERSION

X_Y_Z = VERSION.lstrip("v")
SIGN = ROOT / "hack" / "release_sign.py"
PASSWORD = "release-tier-test"
INSECURE = ["--allow-insecure-registry", "--allow-http-registry"]  # the loopback registry is HTTP
OFFLINE = ["--insecure-ignore-tlog"]                               # no Rekor here


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("sign-home")
    return {**os.environ, "HOME": str(home), "DOCKER_CONFIG": str(home / "docker"),
            "HELM_CACHE_HOME": str(home / "helm-cache"), "HELM_CONFIG_HOME": str(home / "helm-config"),
            "HELM_DATA_HOME": str(home / "helm-data"), "COSIGN_PASSWORD": PASSWORD,
            "FLUX_PLUNGER_TESTBIN_CACHE": str(binaries.cache_root())}


def run(argv: list, env: dict, ok: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env,
                          timeout=300, cwd=cwd)
    if ok:
        assert proc.returncode == 0, f"{' '.join(map(str, argv[:3]))}: {proc.stdout}{proc.stderr}"
    return proc


def cosign(*args, env: dict, ok: bool = True) -> subprocess.CompletedProcess:
    return run([binaries.ensure("cosign"), *args], env, ok)


def key_pair(directory: Path, env: dict) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    run([binaries.ensure("cosign"), "generate-key-pair"], env, cwd=directory)
    return directory / "cosign.key", directory / "cosign.pub"


@pytest.fixture(scope="module")
def keys(tmp_path_factory, env) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("keys")
    return {"release": key_pair(root / "release", env), "other": key_pair(root / "other", env)}


def signer(*args, env: dict, ok: bool = True) -> subprocess.CompletedProcess:
    return run([sys.executable, SIGN, *args], env, ok)


@pytest.fixture(scope="module")
def signed(dist, registry, env, keys, tmp_path_factory) -> dict[str, str]:
    """The release's image and chart pushed to repositories of their own and signed there by
    digest with the release key (hack/release_sign.py sign), the image's SBOM attested."""
    key = keys["release"][0]
    layout = tmp_path_factory.mktemp("signed-layout")
    with tarfile.open(dist / f"kubectl-flux-plunger-{VERSION}.oci.tar") as tar:
        tar.extractall(layout, filter="data")
    image = f"{registry}/signed/kubectl-flux-plunger"
    run([binaries.ensure("crane"), "push", "--insecure", layout, f"{image}:{VERSION}"], env)
    image_digest = (dist / "image-digest.txt").read_text().strip()
    pushed = run([binaries.ensure("helm"), "push", dist / f"flux-plunger-{X_Y_Z}.tgz",
                  f"oci://{registry}/signed/charts", "--plain-http"], env)
    chart_digest = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", pushed.stdout + pushed.stderr,
                             re.M).group(1)
    chart = f"{registry}/signed/charts/flux-plunger"
    for ref in (f"{image}@{image_digest}", f"{chart}@{chart_digest}"):
        signer("sign", ref, "--key", key, "--insecure-registry", env=env)
    sbom = dist / f"kubectl-flux-plunger-{VERSION}.image.spdx.json"
    signer("attest", f"{image}@{image_digest}", sbom, "--key", key, "--insecure-registry", env=env)
    return {"image": image, "image_digest": image_digest, "chart": chart,
            "chart_digest": chart_digest}


def verify(ref: str, pub: Path, env: dict, ok: bool = True,
           legacy: bool = False) -> subprocess.CompletedProcess:
    """`cosign verify` with the public key; ``legacy``: of the .sig signature alone."""
    fmt = ["--new-bundle-format=false"] if legacy else []
    return cosign("verify", "--key", pub, *OFFLINE, *INSECURE, *fmt, ref, env=env, ok=ok)


BUNDLE = "https://sigstore.dev/cosign/sign/v1"    # the claim's type in a v3 bundle
SIMPLE = "cosign container image signature"       # in a simple-signing .sig


def signed_digests(proc: subprocess.CompletedProcess, kind: str) -> set[str]:
    """The manifest digests of the signatures of type ``kind`` `cosign verify` verified (it
    prints their claims as a JSON array on stdout; an attestation on the same digest is
    listed too, with its own type, and is not a signature)."""
    out = set()
    for line in proc.stdout.splitlines():
        if line.strip().startswith("["):
            for claim in json.loads(line):
                if claim["critical"]["type"] == kind:
                    out.add(claim["critical"]["image"]["docker-manifest-digest"])
    return out


def test_the_image_and_the_chart_verify_with_the_release_key(signed, keys, env):
    """Both formats, each on its own: the bundle (cosign v3's default, what source-controller
    v1.9 reads first) and the simple-signing .sig (--new-bundle-format=false: what cosign v2
    and source-controller v1.7 read)."""
    pub = keys["release"][1]
    for what in ("image", "chart"):
        by_tag = f"{signed[what]}:{VERSION if what == 'image' else X_Y_Z}"
        proc = verify(by_tag, pub, env)
        assert signed_digests(proc, BUNDLE) == {signed[f"{what}_digest"]}, proc.stdout + proc.stderr
        proc = verify(by_tag, pub, env, legacy=True)
        assert signed_digests(proc, SIMPLE) == {signed[f"{what}_digest"]}, proc.stdout + proc.stderr
        verify(f"{signed[what]}@{signed[what + '_digest']}", pub, env)


def test_verify_fails_with_another_key(signed, keys, env):
    other = keys["other"][1]
    for what in ("image", "chart"):
        for legacy in (False, True):
            proc = verify(f"{signed[what]}@{signed[what + '_digest']}", other, env, ok=False,
                          legacy=legacy)
            assert proc.returncode != 0, proc.stdout
            assert "no matching" in proc.stderr.lower() or "invalid signature" in proc.stderr.lower(), \
                proc.stderr


def test_verify_fails_on_a_tampered_tag(signed, keys, dist, registry, env, tmp_path):
    """Another digest under the signed tags: for the image an index of amd64 alone (crane index
    filter), for the chart the same chart with one value changed, pushed as the same version.
    Verification by tag fails; by the signed digest it still passes."""
    pub = keys["release"][1]
    image_tag = f"{signed['image']}:{VERSION}"
    tampered_image = f"{registry}/signed/tampered:{VERSION}"   # the tag moved, in its own repo
    crane = binaries.ensure("crane")
    run([crane, "copy", "--insecure", f"{signed['image']}@{signed['image_digest']}", tampered_image], env)
    run([crane, "index", "filter", "--insecure", tampered_image, "--platform", "linux/amd64",
         "-t", image_tag], env)
    moved = run([crane, "digest", "--insecure", image_tag], env).stdout.strip()
    assert moved != signed["image_digest"]

    src = tmp_path / "chart"
    with tarfile.open(dist / f"flux-plunger-{X_Y_Z}.tgz") as tar:
        tar.extractall(src, filter="data")
    values = src / "flux-plunger" / "values.yaml"
    values.write_text(values.read_text() + "\n# tampered\n")
    run([binaries.ensure("helm"), "package", src / "flux-plunger", "--destination", tmp_path], env)
    pushed = run([binaries.ensure("helm"), "push", tmp_path / f"flux-plunger-{X_Y_Z}.tgz",
                  f"oci://{registry}/signed/charts", "--plain-http"], env)
    chart_moved = re.search(r"^Digest: (sha256:\S+)$", pushed.stdout + pushed.stderr, re.M).group(1)
    assert chart_moved != signed["chart_digest"]
    try:
        for ref in (image_tag, f"{signed['chart']}:{X_Y_Z}"):
            for legacy in (False, True):
                proc = verify(ref, pub, env, ok=False, legacy=legacy)
                assert proc.returncode != 0, f"{ref} verified after the tag moved: {proc.stdout}"
                assert "no signatures found" in proc.stderr.lower(), proc.stderr
        for what in ("image", "chart"):
            verify(f"{signed[what]}@{signed[what + '_digest']}", pub, env)
    finally:  # the tags back where they were signed (later tests read them)
        run([crane, "tag", "--insecure", f"{signed['image']}@{signed['image_digest']}", VERSION], env)
        run([crane, "tag", "--insecure", f"{signed['chart']}@{signed['chart_digest']}", X_Y_Z], env)


def test_sign_refuses_a_reference_by_tag(signed, keys, env):
    proc = signer("sign", f"{signed['image']}:{VERSION}", "--key", keys["release"][0],
                  "--insecure-registry", env=env, ok=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"error: {signed['image']}:{VERSION} is not a reference by digest (REPOSITORY@sha256:…): "
        "a tag can move after it was signed"]


@pytest.fixture(scope="module")
def signed_blobs(dist, keys, env, tmp_path_factory) -> Path:
    """A copy of dist/ with `hack/release_sign.py sign-blobs` run on it."""
    copy = tmp_path_factory.mktemp("blobs") / "dist"
    shutil.copytree(dist, copy)
    proc = signer("sign-blobs", copy, "--key", keys["release"][0], env=env)
    assert proc.stdout.split() == [str(copy / f"kubectl-flux_plunger-{VERSION}-linux-amd64.tar.gz.bundle"),
                                   str(copy / "SHA256SUMS.bundle")]
    return copy


def verify_blob(blob: Path, bundle: Path, pub: Path, env: dict, ok: bool = True):
    return cosign("verify-blob", "--key", pub, *OFFLINE, "--bundle", bundle, blob, env=env, ok=ok)


def test_the_krew_archive_and_sha256sums_verify_as_blobs(signed_blobs, keys, env):
    pub = keys["release"][1]
    for name in (f"kubectl-flux_plunger-{VERSION}-linux-amd64.tar.gz", "SHA256SUMS"):
        proc = verify_blob(signed_blobs / name, signed_blobs / f"{name}.bundle", pub, env)
        assert "Verified OK" in proc.stderr, proc.stderr
        bundle = json.loads((signed_blobs / f"{name}.bundle").read_text())
        assert bundle["mediaType"].startswith("application/vnd.dev.sigstore.bundle")
    proc = verify_blob(signed_blobs / "SHA256SUMS", signed_blobs / "SHA256SUMS.bundle",
                       keys["other"][1], env, ok=False)
    assert proc.returncode != 0


def test_verify_blob_fails_on_one_modified_byte(signed_blobs, keys, tmp_path, env):
    name = f"kubectl-flux_plunger-{VERSION}-linux-amd64.tar.gz"
    data = bytearray((signed_blobs / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    modified = tmp_path / name
    modified.write_bytes(bytes(data))
    proc = verify_blob(modified, signed_blobs / f"{name}.bundle", keys["release"][1], env, ok=False)
    assert proc.returncode != 0, proc.stderr
    assert "Verified OK" not in proc.stderr


def test_blobs_are_every_krew_archive_a_manifest_names(tmp_path, env):
    """Generic in the archives: a manifest with one archive per platform lists each once."""
    dist = tmp_path / "dist"
    dist.mkdir()
    names = [f"kubectl-flux_plunger-{VERSION}-{p}.tar.gz" for p in ("linux-amd64", "darwin-arm64")]
    platforms = [{"uri": f"https://github.com/o/r/releases/download/{VERSION}/{n}", "sha256": "0" * 64,
                  "bin": "kubectl-flux_plunger"} for n in [*names, names[0]]]
    import yaml
    (dist / "flux-plunger.yaml").write_text(yaml.safe_dump({
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2", "kind": "Plugin",
        "metadata": {"name": "flux-plunger"}, "spec": {"platforms": platforms}}))
    (dist / "chart-values.yaml").write_text("image: {}\n")  # another YAML file: not a manifest
    for n in names:
        (dist / n).write_bytes(b"archive")
    (dist / "SHA256SUMS").write_text("")
    proc = signer("blobs", dist, env=env)
    assert proc.stdout.splitlines() == [str(dist / n) for n in sorted(names)] + [str(dist / "SHA256SUMS")]
    # a platform built on its own runner (krew/build.py's sha256 of an empty file): no
    # archive of it here, and none is asked for
    platforms[1]["sha256"] = hashlib.sha256(b"").hexdigest()
    (dist / "flux-plunger.yaml").write_text(yaml.safe_dump({
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2", "kind": "Plugin",
        "metadata": {"name": "flux-plunger"}, "spec": {"platforms": platforms}}))
    (dist / names[1]).unlink()
    proc = signer("blobs", dist, env=env)
    assert proc.stdout.splitlines() == [str(dist / names[0]), str(dist / "SHA256SUMS")]
    platforms[1]["sha256"] = "0" * 64
    (dist / "flux-plunger.yaml").write_text(yaml.safe_dump({
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2", "kind": "Plugin",
        "metadata": {"name": "flux-plunger"}, "spec": {"platforms": platforms}}))
    proc = signer("blobs", dist, env=env, ok=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"error: the krew manifest in {dist} names {names[1]}, which {dist} does not hold"]


# -- SBOMs ------------------------------------------------------------------------------------

def locked() -> set[tuple[str, str]]:
    """(name, version) of controller/requirements.lock without setuptools (the image's)."""
    text = (ROOT / "controller" / "requirements.lock").read_text()
    pins = set(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\;]+)", text, re.M))
    return {(n.lower().replace("_", "-"), v) for n, v in pins if n.lower() != "setuptools"}


def release_sign():
    """hack/release_sign.py as a module (hack/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("release_sign", SIGN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def names(packages: set[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(n.lower().replace("_", "-"), v) for n, v in packages}


def test_the_sbom_attestation_verifies_and_names_the_locked_dependencies(signed, keys, env):
    spdx_packages = release_sign().spdx_packages
    ref = f"{signed['image']}@{signed['image_digest']}"
    proc = cosign("verify-attestation", "--key", keys["release"][1], *OFFLINE, *INSECURE,
                  "--type", "spdxjson", ref, env=env)
    statements = []
    for line in proc.stdout.splitlines():
        if line.strip().startswith("{"):
            envelope = json.loads(line)
            statements.append(json.loads(base64.b64decode(envelope["payload"])))
    spdx = [s for s in statements if s.get("predicateType") == "https://spdx.dev/Document"]
    assert spdx, proc.stdout[:2000] + proc.stderr
    statement = spdx[0]
    assert statement["subject"][0]["digest"]["sha256"] == signed["image_digest"].split(":", 1)[1]
    packages = names(spdx_packages(statement["predicate"]))
    assert ("kubectl-flux-plunger", X_Y_Z) in packages
    missing = locked() - packages
    assert not missing, f"the image's SBOM lacks {sorted(missing)}"
    wrong = cosign("verify-attestation", "--key", keys["other"][1], *OFFLINE, *INSECURE,
                   "--type", "spdxjson", ref, env=env, ok=False)
    assert wrong.returncode != 0


def test_the_python_sbom_names_every_locked_dependency(dist):
    spdx_packages = release_sign().spdx_packages
    doc = json.loads((dist / f"kubectl-flux-plunger-{VERSION}.python.spdx.json").read_text())
    assert doc["spdxVersion"].startswith("SPDX-2.")
    packages = names(spdx_packages(doc))
    assert ("kubectl-flux-plunger", VERSION) in packages   # the document's root: this release
    krew = set()
    for path in sorted((ROOT / "krew").glob("requirements-*.txt")):
        krew |= set(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), re.M))
    missing = (locked() | names(krew)) - packages
    assert not missing, f"the Python SBOM lacks {sorted(missing)}"
    assert not [p for p in packages if p[0] == "setuptools"]
