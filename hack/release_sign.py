#!/usr/bin/env python3
"""The release's SBOMs, and its signatures (issue 31).

hack/release.py calls :func:`write_sboms` while it builds dist/ (two SPDX JSON documents,
written by syft and made reproducible here); the signing runs afterwards, on what was built:

    hack/release_sign.py blobs DIST                   # the files signed as blobs, one a line
    hack/release_sign.py sign-blobs DIST [--key K]    # cosign sign-blob --bundle FILE.bundle
    hack/release_sign.py sign REPO@DIGEST [--key K]   # cosign sign of an image or chart
    hack/release_sign.py attest REPO@DIGEST SBOM [--key K]   # the SBOM as a signed attestation

Without ``--key`` cosign signs keyless (Fulcio certificate for the workflow's OIDC identity,
Rekor entry): what .github/workflows/release.yml runs.  With ``--key`` (a cosign key pair,
``COSIGN_PASSWORD`` in the environment) it signs offline, with no transparency log: what the
release tier does against its loopback registry.  Images and charts are signed by digest
only (a reference by tag is refused), in both of cosign's formats (see :func:`sign`); the
SBOM attestation and the blobs in the bundle format.

The blobs are every krew archive in DIST (every file a krew manifest in DIST names by its
``uri``, however many platforms and archives there are) and SHA256SUMS, which covers every
other file of the release.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

IMAGE_SBOM = "kubectl-flux-plunger-{version}.image.spdx.json"
PYTHON_SBOM = "kubectl-flux-plunger-{version}.python.spdx.json"
SBOM_PLATFORM = "linux/amd64"   # the image's SBOM describes this platform's manifest
# krew/build.py writes this sha256 (of an empty file) for a platform built on another machine
NOT_BUILT_HERE = hashlib.sha256(b"").hexdigest()
KEYED = ["--tlog-upload=false", "--use-signing-config=false"]  # no Rekor, no TUF: offline


class SignError(RuntimeError):
    """A signing or SBOM step failed; the message is the one line printed."""


def tool(name: str) -> str:
    from testplane import binaries

    return str(binaries.ensure(name))


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-8:]
        raise SignError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))
    return proc.stdout


# -- SBOMs ----------------------------------------------------------------------------------

def _syft(target: str, out: Path, *, version: str, tmp: Path, extra: list[str]) -> dict:
    """``syft scan TARGET -o spdx-json``, as a dict (syft's HOME, cache and config kept in tmp,
    no update check: nothing goes to the network)."""
    home = tmp / "syft-home"
    home.mkdir(exist_ok=True)
    raw = tmp / (out.name + ".raw")
    _run([tool("syft"), "scan", target, "--quiet", "--source-name", "kubectl-flux-plunger",
          "--source-version", version, *extra, "-o", f"spdx-json={raw}"],
         what=f"syft scan of {target}",
         env={"HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
              "XDG_CONFIG_HOME": str(home / "config"), "SYFT_CHECK_FOR_APP_UPDATE": "false"})
    return json.loads(raw.read_text())


def normalise_spdx(doc: dict, *, epoch: int, namespace: str) -> bytes:
    """syft's document with its two run-dependent fields fixed: ``creationInfo.created`` (the
    scan's time) becomes SOURCE_DATE_EPOCH and ``documentNamespace`` (a random UUID) a URI
    made from the release and the document's content.  Everything else syft writes is a
    function of what it scanned."""
    doc = dict(doc)
    doc["creationInfo"] = {**doc.get("creationInfo", {}), "created": datetime.fromtimestamp(
        epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    doc.pop("documentNamespace", None)
    body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    doc["documentNamespace"] = f"{namespace}-{hashlib.sha256(body).hexdigest()[:16]}"
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def python_locks(tree: Path, image_lock: str) -> dict[str, str]:
    """The Python dependency set as locked requirement files (name -> text): the image's lock
    (``image_lock``: controller/requirements.lock without its build tools) and the krew
    archive's vendored wheels (krew/requirements-*.txt).  Named ``*requirements*.txt``, the
    files syft's Python cataloger reads."""
    locks = {"controller/requirements.lock.txt": image_lock}
    for path in sorted((tree / "krew").glob("requirements-*.txt")):
        locks[f"krew/{path.name}"] = path.read_text()
    return locks


def write_sboms(out: Path, *, version: str, repo: str, epoch: int, image_oci_tar: Path,
                locks: dict[str, str]) -> list[Path]:
    """The image's SBOM (``SBOM_PLATFORM`` of the OCI layout tar ``image_oci_tar``: the base's
    packages and everything under /opt/flux-plunger) and the Python dependency set's (the
    locked requirement files ``locks``, name -> text: what the image and the krew archive
    install), into ``out``; their paths."""
    import tarfile

    base = f"https://github.com/{repo}/releases/download/{version}"
    written = []
    with tempfile.TemporaryDirectory(prefix="release-sbom-") as name:
        tmp = Path(name)
        layout = tmp / "layout"
        with tarfile.open(image_oci_tar) as tar:
            tar.extractall(layout, filter="data")
        image = out / IMAGE_SBOM.format(version=version)
        doc = _syft(f"oci-dir:{layout}", image, version=version, tmp=tmp,
                    extra=["--platform", SBOM_PLATFORM])
        image.write_bytes(normalise_spdx(doc, epoch=epoch, namespace=f"{base}/{image.name}"))
        written.append(image)
        deps = tmp / "python"
        for rel, text in sorted(locks.items()):
            (deps / rel).parent.mkdir(parents=True, exist_ok=True)
            (deps / rel).write_text(text)
        python = out / PYTHON_SBOM.format(version=version)
        doc = _syft(f"dir:{deps}", python, version=version, tmp=tmp, extra=[])
        python.write_bytes(normalise_spdx(doc, epoch=epoch, namespace=f"{base}/{python.name}"))
        written.append(python)
    return written


def spdx_packages(doc: dict) -> set[tuple[str, str]]:
    """(name, version) of every package an SPDX document lists."""
    return {(p.get("name", ""), p.get("versionInfo", "")) for p in doc.get("packages", [])}


# -- what is signed -------------------------------------------------------------------------

def krew_archives(dist: Path) -> list[Path]:
    """Every file of ``dist`` a krew manifest in ``dist`` names by a platform's ``uri``, but
    for platforms built on another machine (``sha256`` of an empty file, krew/build.py's
    NOT_BUILT_HERE: the manifest of a local ``hack/release.py`` run; the released manifest,
    written from every archive's checksum, has none)."""
    import yaml

    names: set[str] = set()
    for manifest in sorted(dist.glob("*.yaml")):
        try:
            docs = list(yaml.safe_load_all(manifest.read_text()))
        except yaml.YAMLError:
            continue
        for doc in docs:
            if not (isinstance(doc, dict) and doc.get("kind") == "Plugin"
                    and str(doc.get("apiVersion", "")).startswith("krew.googlecontainertools.github.com/")):
                continue
            for plat in (doc.get("spec") or {}).get("platforms") or []:
                if plat.get("sha256") == NOT_BUILT_HERE:
                    continue           # built on its own runner: no archive of it here
                uri = str(plat.get("uri") or "")
                names.add(Path(urllib.parse.urlparse(uri).path).name)
    missing = sorted(n for n in names if not (dist / n).is_file())
    if missing:
        raise SignError(f"the krew manifest in {dist} names {', '.join(missing)}, "
                        f"which {dist} does not hold")
    if not names:
        raise SignError(f"{dist} holds no krew manifest naming an archive")
    return [dist / n for n in sorted(names)]


def blobs(dist: Path) -> list[Path]:
    sums = dist / "SHA256SUMS"
    if not sums.is_file():
        raise SignError(f"{dist} has no SHA256SUMS")
    return [*krew_archives(dist), sums]


def _key_args(key: Path | None) -> list[str]:
    if key is None:
        return []                      # keyless: the OIDC identity of the run
    if not key.is_file():
        raise SignError(f"the signing key {key} does not exist")
    if "COSIGN_PASSWORD" not in os.environ:
        raise SignError("COSIGN_PASSWORD is not set (the key's password; empty for none)")
    return ["--key", str(key), *KEYED]


def sign_blobs(dist: Path, key: Path | None) -> list[Path]:
    """``cosign sign-blob --bundle FILE.bundle FILE`` for each of :func:`blobs`."""
    out = []
    for blob in blobs(dist):
        bundle = blob.with_name(blob.name + ".bundle")
        _run([tool("cosign"), "sign-blob", "--yes", *_key_args(key), "--bundle", str(bundle),
              str(blob)], what=f"cosign sign-blob {blob.name}")
        out.append(bundle)
    return out


def by_digest(ref: str) -> str:
    if not re.search(r"@sha256:[0-9a-f]{64}$", ref):
        raise SignError(f"{ref} is not a reference by digest (REPOSITORY@sha256:…): "
                        f"a tag can move after it was signed")
    return ref


def _registry_args(insecure: bool) -> list[str]:
    return ["--allow-insecure-registry", "--allow-http-registry"] if insecure else []


def sign(ref: str, key: Path | None, insecure: bool = False) -> None:
    """Two signatures of one digest: a Sigstore bundle (cosign v3's format, an OCI referrer,
    what source-controller >= v1.9 finds first) and a simple-signing ``.sig`` (the format
    before it: what source-controller v1.7, built on cosign v2, and cosign v2 read)."""
    by_digest(ref)
    common = ["--yes", *_key_args(key), *_registry_args(insecure)]
    _run([tool("cosign"), "sign", *common, ref], what=f"cosign sign {ref}")
    legacy = ["--new-bundle-format=false"] + ([] if key else ["--use-signing-config=false"])
    _run([tool("cosign"), "sign", *common, *legacy, ref], what=f"cosign sign (.sig) {ref}")


def attest(ref: str, sbom: Path, key: Path | None, insecure: bool = False) -> None:
    if not sbom.is_file():
        raise SignError(f"the SBOM {sbom} does not exist")
    _run([tool("cosign"), "attest", "--yes", *_key_args(key), *_registry_args(insecure),
          "--type", "spdxjson", "--predicate", str(sbom), by_digest(ref)],
         what=f"cosign attest {ref}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("blobs", help="print the files signed as blobs")
    p.add_argument("dist", type=Path)
    for name, helptext in (("sign-blobs", "sign every blob: FILE.bundle beside it"),
                           ("sign", "sign an image or chart by digest"),
                           ("attest", "attach the SBOM as a signed spdxjson attestation")):
        p = sub.add_parser(name, help=helptext)
        if name == "sign-blobs":
            p.add_argument("dist", type=Path)
        else:
            p.add_argument("ref", help="REPOSITORY@sha256:DIGEST")
            if name == "attest":
                p.add_argument("sbom", type=Path)
            p.add_argument("--insecure-registry", action="store_true",
                           help="the registry speaks plain HTTP (tests on loopback)")
        p.add_argument("--key", type=Path, help="a cosign private key (default: keyless)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "blobs":
            for path in blobs(args.dist):
                print(path)
        elif args.cmd == "sign-blobs":
            for bundle in sign_blobs(args.dist, args.key):
                print(bundle)
        elif args.cmd == "sign":
            sign(args.ref, args.key, args.insecure_registry)
        else:
            attest(args.ref, args.sbom, args.key, args.insecure_registry)
    except SignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
