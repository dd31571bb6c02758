#!/usr/bin/env python3
"""flux-plunger through Flux's own plugin manager (Flux CLI >= 2.9: ``flux plugin install
plunger``): the single-file executable per platform, the plugin manifest ``plunger.yaml``
(``kind: Plugin``) and ``catalog.yaml`` (``kind: PluginCatalog``), and the checks of both.

    python3 krew/flux_plugin.py build ARCHIVE [--out-dir D]     # the single file of one krew archive
    python3 krew/flux_plugin.py manifest SHA256SUMS --out-dir D [--url-base URL] [--all-platforms]
                                                                # plunger.yaml + catalog.yaml
    python3 krew/flux_plugin.py check FILE...                   # the schema's rules, our own code
    python3 krew/flux_plugin.py verify SINGLE ARCHIVE           # embeds it; static on Linux

What Flux v2.9.5 does (github.com/fluxcd/flux2/v2, internal/plugin/, pkg/plugin/types.go):
``flux plugin install NAME`` fetches ``<catalog>NAME.yaml`` (the catalog base URL: the latest
release of github.com/fluxcd/plugins, or ``$FLUXCD_PLUGIN_CATALOG``), picks the newest version's
entry for its os/arch, downloads ``url``, refuses it unless its sha256 is ``checksum``, and
installs ONE file as ``$FLUXCD_PLUGINS/<bin>`` (else ~/.fluxcd/plugins): the archive entry
named ``bin`` (or ``extractPath``), or, for a URL that is no archive, the download itself.
``flux plugin search`` reads ``<catalog>catalog.yaml``.

The krew archive is a one-directory bundle (the executable and ``_internal/``), which Flux
cannot install.  So the Flux face is one file per platform, built here from that very archive:
krew/launcher (a small static Go program, cross-built for the platform) with the archive
embedded byte for byte; on its first run it unpacks the archive once into a versioned cache
directory and execs it from there on every run (krew/launcher/main.go says how, and why not
PyInstaller's one-file mode).  So it is the krew archive's code, lock, freeze and floor, and
its sha256 is in the single file's name of the cache directory.

    flux-plunger-vX.Y.Z-OS-ARCH[.exe]   the release asset; Flux installs it as flux-plunger

The release writes ``plunger.yaml`` (this release's version, one platform entry per single
file, ``checksum: sha256:<its sha256>``) and ``catalog.yaml`` beside the other assets, so that
``FLUXCD_PLUGIN_CATALOG=https://github.com/OWNER/REPO/releases/latest/download/ flux plugin
install plunger`` works before any upstream listing, and the same ``plunger.yaml`` is what to
propose to fluxcd/plugins (which keeps the older versions below the new one there).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import binary  # noqa: E402

LAUNCHER = HERE / "launcher"
API_VERSION = "cli.fluxcd.io/v1beta1"
NAME = "plunger"                 # `flux plunger`
BIN = "flux-plunger"             # what Flux installs (flux-<name>; .exe added on Windows)
DESCRIPTION = "Unstick Flux HelmReleases a Helm revision blocks"
LICENSE = "Apache-2.0"
DEFAULT_REPO = "cozystack/kubectl-flux-plunger"
GO_FLAGS = ("-trimpath", "-buildvcs=false")


class FluxPluginError(RuntimeError):
    """The single file or the manifest cannot be made; the message is the one line printed."""


def asset_name(tag: str, plat: str) -> str:
    """The single file's release asset: ``flux-plunger-vX.Y.Z-linux-amd64`` (``.exe``)."""
    return f"{BIN}-{tag}-{plat.replace('/', '-')}" + (".exe" if plat.startswith("windows/") else "")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- the single file ---------------------------------------------------------------------------

def archive_platform(archive: Path) -> tuple[str, str]:
    """(tag, os/arch) of a krew archive, from its name (krew/binary.py's archive_name)."""
    m = re.fullmatch(rf"{binary.BIN}-(v[^-]+(?:-[^-]+)*?)-(linux|darwin|windows)-(amd64|arm64)"
                     r"\.tar\.gz", archive.name)
    if not m:
        raise FluxPluginError(f"{archive.name} is not named like a krew archive "
                              f"({binary.archive_name('vX.Y.Z', 'OS/ARCH')})")
    return m.group(1), f"{m.group(2)}/{m.group(3)}"


def go() -> str:
    found = shutil.which("go")
    if not found:
        raise FluxPluginError("the single file's launcher is Go: no `go` on PATH (Go >= 1.26)")
    return found


FAST_ARGS = (["--help"], ["-h"], ["--version"], ["version", "--client"])
FAST_PROGS = {"flux plunger": "flux-plunger", "kubectl flux-plunger": binary.BIN}


def capture_answers(archive: Path, plat: str) -> dict[str, str]:
    """What the archive's executable prints for the invocations its entry point answers from
    pre-rendered text (krew/launcher's fastKey: ``ARGS|PROG|WIDTH``), for both program names
    and the two widths there is pre-rendered text for (80, 100): run here, so only for this
    machine's platform ({} for another: that launcher runs the bundle every time).  An
    invocation that does not exit 0 with nothing on stderr is left out."""
    if plat != binary.host_platform():
        return {}
    out: dict[str, str] = {}
    exe_suffix = ".exe" if plat.startswith("windows/") else ""
    with tempfile.TemporaryDirectory(prefix="flux-plunger-answers-") as tmp:
        import tarfile

        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="tar")
        for prog, name in FAST_PROGS.items():
            exe = Path(tmp) / (name + exe_suffix)
            if not exe.exists():  # a copy beside _internal/ runs as well as the original
                shutil.copyfile(Path(tmp) / (binary.BIN + exe_suffix), exe)
                exe.chmod(0o755)
            for args in FAST_ARGS:
                for width in (80, 100):
                    env = {"PATH": "", "COLUMNS": str(width), "HOME": tmp,
                           **{k: os.environ[k] for k in ("SYSTEMROOT",)
                              if k in os.environ}}
                    proc = subprocess.run([str(exe), *args], capture_output=True, env=env,
                                          stdin=subprocess.DEVNULL, timeout=120)
                    if proc.returncode == 0 and not proc.stderr:
                        out[f"{' '.join(args)}|{prog}|{width}"] = proc.stdout.decode()
    return out


def answers_go(answers: dict[str, str]) -> str:
    """The generated Go file that sets krew/launcher's ``answers``."""
    import json

    rows = "".join(f"\t\t{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n"
                   for k, v in sorted(answers.items()))
    return ("// generated by krew/flux_plugin.py: what the bundle printed for these invocations\n"
            f"package main\n\nfunc init() {{\n\tanswers = map[string]string{{\n{rows}\t}}\n}}\n")


def build(archive: Path, out_dir: Path) -> Path:
    """The single file of ``archive`` in ``out_dir``: the launcher cross-built for the
    archive's platform with the archive embedded (``bundle.go`` generated in a staging copy
    of krew/launcher), the tag and the archive's sha256 set at link time.  Reproducible: the
    same archive and Go toolchain give the same bytes (``-trimpath``, no build ID, no VCS
    stamp)."""
    tag, plat = archive_platform(archive)
    goos, goarch = plat.split("/")
    digest = sha256_of(archive)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / asset_name(tag, plat)
    with tempfile.TemporaryDirectory(prefix="flux-plunger-launcher-") as tmp:
        stage = Path(tmp) / "launcher"
        shutil.copytree(LAUNCHER, stage)
        shutil.copyfile(archive, stage / "bundle.tar.gz")
        (stage / "bundle.go").write_text(
            "// generated by krew/flux_plugin.py: the krew archive this executable unpacks\n"
            "package main\n\nimport _ \"embed\"\n\n//go:embed bundle.tar.gz\n"
            "var embedded string\n\nfunc init() { bundle = embedded }\n")
        (stage / "answers.go").write_text(answers_go(capture_answers(archive, plat)))
        env = {**os.environ, "GOOS": goos, "GOARCH": goarch, "CGO_ENABLED": "0",
               "GOTOOLCHAIN": "local", "GOFLAGS": "", "GOWORK": "off", "GOPROXY": "off"}
        ldflags = f"-s -w -buildid= -X main.version={tag} -X main.sum={digest}"
        proc = subprocess.run([go(), "build", *GO_FLAGS, "-ldflags", ldflags, "-o",
                               str(out.with_name(out.name + ".tmp")), "."],
                              cwd=stage, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise FluxPluginError(f"go build of the launcher for {plat} failed: "
                                  + " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:]))
    out.with_name(out.name + ".tmp").replace(out)
    out.chmod(0o755)
    return out


def embedded_archive(single: Path, archive: Path) -> bool:
    """Whether ``single`` holds ``archive`` byte for byte (what the release tier checks)."""
    return archive.read_bytes() in single.read_bytes()


def verify(single: Path, archive: Path) -> str:
    """That ``single`` is ``archive``'s single file: it embeds the archive byte for byte, and
    on Linux its launcher needs no glibc version at all (a static executable), so the single
    file's glibc floor is the archive's (krew/floor.py checks that).  Returns what it found."""
    import floor

    tag, plat = archive_platform(archive)
    if single.name != asset_name(tag, plat):
        raise FluxPluginError(f"{single.name} is not the single file of {archive.name} "
                              f"({asset_name(tag, plat)})")
    if not embedded_archive(single, archive):
        raise FluxPluginError(f"{single.name} does not embed {archive.name}")
    if plat.startswith("linux/"):
        needs = floor.needed_versions(single.read_bytes(), single.name)
        if needs:
            raise FluxPluginError(f"{single.name}'s launcher is not static: it needs "
                                  f"{', '.join(sorted(needs))}")
        return f"{single.name}: a static launcher embedding {archive.name}"
    return f"{single.name}: embeds {archive.name}"


# -- plunger.yaml and catalog.yaml -------------------------------------------------------------

def plugin_manifest(version: str, files: dict[str, tuple[str, str]], repo: str = DEFAULT_REPO,
                    previous: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``plunger.yaml``: ``files`` maps os/arch to (url, sha256 hex); ``version`` is X.Y.Z
    (no v, as the schema says); ``previous`` versions (newest first) follow this one."""
    platforms = [{"os": p.split("/")[0], "arch": p.split("/")[1], "url": files[p][0],
                  "checksum": f"sha256:{files[p][1]}"}
                 for p in binary.PLATFORMS if p in files]
    older = [v for v in (previous or []) if v.get("version") != version]
    return {"apiVersion": API_VERSION, "kind": "Plugin", "name": NAME,
            "description": DESCRIPTION, "homepage": f"https://github.com/{repo}",
            "source": f"https://github.com/{repo}", "bin": BIN,
            "versions": [{"version": version, "platforms": platforms}, *older]}


def catalog(repo: str = DEFAULT_REPO) -> dict[str, Any]:
    """``catalog.yaml``: this one plugin, what ``flux plugin search`` lists."""
    return {"apiVersion": API_VERSION, "kind": "PluginCatalog",
            "plugins": [{"name": NAME, "description": DESCRIPTION,
                         "homepage": f"https://github.com/{repo}",
                         "source": f"https://github.com/{repo}", "license": LICENSE}]}


def dump(doc: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1000)


def write_manifests(sums: dict[str, str], out_dir: Path, tag: str, *, url_base: str,
                    repo: str = DEFAULT_REPO, all_platforms: bool = False,
                    previous: Path | None = None) -> tuple[Path, Path]:
    """``plunger.yaml`` and ``catalog.yaml`` in ``out_dir`` from the single files' sha256
    (``sums``: file name -> hex); ``url_base`` + the file name is each platform's url.
    ``all_platforms``: every platform of binary.PLATFORMS must be there (the release's last
    job); else the ones built (one, on this machine).  Both are checked before written."""
    files = {}
    for plat in binary.PLATFORMS:
        name = asset_name(tag, plat)
        if name in sums:
            files[plat] = (url_base + name, sums[name])
    missing = [asset_name(tag, p) for p in binary.PLATFORMS if p not in files]
    if not files or (all_platforms and missing):
        raise FluxPluginError(f"no checksum of {', '.join(missing)}")
    older = None
    if previous is not None:
        import yaml

        older = (yaml.safe_load(previous.read_text()) or {}).get("versions") or []
    plugin = plugin_manifest(tag.lstrip("v"), files, repo, older)
    docs = {"plunger.yaml": plugin, "catalog.yaml": catalog(repo)}
    loopback = url_base.startswith(LOOPBACK)
    for name, doc in docs.items():
        errors = check(doc, loopback_ok=loopback)
        if errors:
            raise FluxPluginError(f"the generated {name} breaks the schema: {errors[0]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, doc in docs.items():
        (out_dir / name).write_text(dump(doc))
    return out_dir / "plunger.yaml", out_dir / "catalog.yaml"


# -- the checks: the rules of fluxcd/plugins' JSON schemas (schemas/plugin-cli-v1beta1.json,
# plugincatalog-cli-v1beta1.json) and of flux's own loader (internal/plugin/catalog.go), as
# code of this project ------------------------------------------------------------------------

NAME_RE = re.compile(r"[a-z][a-z0-9-]*")
VERSION_RE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(-.+)?")
CHECKSUM_RE = re.compile(r"sha256:[a-f0-9]{64}")
OSES = ("darwin", "linux", "windows")
ARCHES = ("amd64", "arm64")
RESERVED = ("plugin", "help")    # flux's reservedNames; builtin commands are refused too
# flux fetches any http(s) URL; the schema wants https.  A loopback http URL (the release
# tier's server) is allowed when asked (loopback_ok); nothing else.
LOOPBACK = "http://127.0.0.1:"


def _fields(doc: Any, where: str, required: tuple[str, ...], allowed: tuple[str, ...],
            errors: list[str]) -> bool:
    if not isinstance(doc, dict):
        errors.append(f"{where}: not a mapping")
        return False
    for key in required:
        if key not in doc:
            errors.append(f"{where}: {key} is required")
    for key in doc:
        if key not in allowed:
            errors.append(f"{where}: {key} is not allowed (additionalProperties: false)")
    return True


def _string(doc: dict[str, Any], key: str, where: str, errors: list[str],
            pattern: re.Pattern[str] | None = None, enum: tuple[str, ...] = ()) -> None:
    if key not in doc:
        return
    value = doc[key]
    if not isinstance(value, str) or not value:
        errors.append(f"{where}.{key}: a non-empty string is required, not {value!r}")
    elif pattern is not None and not pattern.fullmatch(value):
        errors.append(f"{where}.{key}: {value!r} does not match {pattern.pattern}")
    elif enum and value not in enum:
        errors.append(f"{where}.{key}: {value!r} is not one of {', '.join(enum)}")


def _url(doc: dict[str, Any], key: str, where: str, errors: list[str], loopback_ok: bool) -> None:
    value = doc.get(key)
    if key not in doc or not isinstance(value, str):
        _string(doc, key, where, errors)
        return
    ok = re.fullmatch(r"https://[^\s/]+(/\S*)?", value) or (
        loopback_ok and re.fullmatch(r"http://127\.0\.0\.1:\d+/\S*", value))
    if not ok:
        errors.append(f"{where}.{key}: {value!r} is not an https:// URL")


def check_plugin(doc: Any, *, loopback_ok: bool = False) -> list[str]:
    """Every way ``doc`` breaks the Plugin schema or flux's loader (empty: none)."""
    errors: list[str] = []
    top = ("apiVersion", "kind", "name", "description", "homepage", "source", "bin", "versions")
    if not _fields(doc, "Plugin", top, top, errors):
        return errors
    if doc.get("apiVersion") != API_VERSION:
        errors.append(f"Plugin.apiVersion: {doc.get('apiVersion')!r} is not {API_VERSION}")
    if doc.get("kind") != "Plugin":
        errors.append(f"Plugin.kind: {doc.get('kind')!r} is not Plugin")
    _string(doc, "name", "Plugin", errors, NAME_RE)
    if doc.get("name") in RESERVED:
        errors.append(f"Plugin.name: {doc['name']!r} is reserved by flux")
    _string(doc, "description", "Plugin", errors)
    for key in ("homepage", "source"):
        _url(doc, key, "Plugin", errors, loopback_ok=False)
    _string(doc, "bin", "Plugin", errors, NAME_RE)
    if isinstance(doc.get("bin"), str) and not doc["bin"].startswith("flux-"):
        errors.append(f"Plugin.bin: {doc['bin']!r} does not start with flux- (flux refuses it)")
    versions = doc.get("versions")
    if "versions" in doc and (not isinstance(versions, list) or not versions):
        errors.append("Plugin.versions: a list of at least one version is required")
        return errors
    seen: set[str] = set()
    for i, ver in enumerate(versions or []):
        where = f"Plugin.versions[{i}]"
        if not _fields(ver, where, ("version", "platforms"), ("version", "platforms"), errors):
            continue
        _string(ver, "version", where, errors, VERSION_RE)
        if ver.get("version") in seen:
            errors.append(f"{where}.version: {ver['version']!r} is listed twice")
        seen.add(ver.get("version"))
        plats = ver.get("platforms")
        if not isinstance(plats, list) or not plats:
            errors.append(f"{where}.platforms: a list of at least one platform is required")
            continue
        pairs: set[tuple[str, str]] = set()
        for j, plat in enumerate(plats):
            pw = f"{where}.platforms[{j}]"
            keys = ("os", "arch", "url", "checksum")
            if not _fields(plat, pw, keys, keys, errors):
                continue
            _string(plat, "os", pw, errors, enum=OSES)
            _string(plat, "arch", pw, errors, enum=ARCHES)
            _url(plat, "url", pw, errors, loopback_ok)
            _string(plat, "checksum", pw, errors, CHECKSUM_RE)
            pair = (plat.get("os"), plat.get("arch"))
            if pair in pairs:  # flux takes the first: a second is never installed
                errors.append(f"{pw}: {pair[0]}/{pair[1]} is listed twice")
            pairs.add(pair)
    return errors


def check_catalog(doc: Any) -> list[str]:
    """Every way ``doc`` breaks the PluginCatalog schema (empty: none)."""
    errors: list[str] = []
    top = ("apiVersion", "kind", "plugins")
    if not _fields(doc, "PluginCatalog", top, top, errors):
        return errors
    if doc.get("apiVersion") != API_VERSION:
        errors.append(f"PluginCatalog.apiVersion: {doc.get('apiVersion')!r} is not {API_VERSION}")
    if doc.get("kind") != "PluginCatalog":
        errors.append(f"PluginCatalog.kind: {doc.get('kind')!r} is not PluginCatalog")
    plugins = doc.get("plugins")
    if "plugins" in doc and (not isinstance(plugins, list) or not plugins):
        errors.append("PluginCatalog.plugins: a list of at least one plugin is required")
        return errors
    for i, entry in enumerate(plugins or []):
        where = f"PluginCatalog.plugins[{i}]"
        keys = ("name", "description", "homepage", "source", "license")
        if not _fields(entry, where, keys, keys, errors):
            continue
        _string(entry, "name", where, errors, NAME_RE)
        _string(entry, "description", where, errors)
        _string(entry, "license", where, errors)
        for key in ("homepage", "source"):
            _url(entry, key, where, errors, loopback_ok=False)
    return errors


def check(doc: Any, *, loopback_ok: bool = False) -> list[str]:
    """The errors of a Plugin or PluginCatalog document, by its kind."""
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind == "PluginCatalog":
        return check_catalog(doc)
    if kind == "Plugin":
        return check_plugin(doc, loopback_ok=loopback_ok)
    return [f"kind {kind!r} is neither Plugin nor PluginCatalog"]


def check_files(paths: list[Path], loopback_ok: bool = False) -> int:
    import yaml

    failed = 0
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            errors = [f"cannot read it: {exc}".splitlines()[0]]
        else:
            errors = check(doc, loopback_ok=loopback_ok)
        for err in errors:
            print(f"error: {path}: {err}", file=sys.stderr)
        if not errors:
            print(f"ok: {path}")
        failed += bool(errors)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="the single-file executable of one krew archive")
    b.add_argument("archive", type=Path, nargs="+")
    b.add_argument("--out-dir", type=Path, default=HERE / "dist")
    m = sub.add_parser("manifest", help="plunger.yaml and catalog.yaml from SHA256SUMS")
    m.add_argument("sums", type=Path, help="sha256sum lines of the single files")
    m.add_argument("--out-dir", type=Path, required=True)
    m.add_argument("--tag", help="vX.Y.Z (default: the package's version)")
    m.add_argument("--repo", default=DEFAULT_REPO)
    m.add_argument("--url-base", help="where the files are (default: the release's "
                   "https://github.com/REPO/releases/download/TAG/)")
    m.add_argument("--all-platforms", action="store_true",
                   help="fail unless every platform's single file is in SUMS (the release)")
    m.add_argument("--previous", type=Path,
                   help="a plunger.yaml whose versions follow this one (the upstream listing)")
    v = sub.add_parser("verify", help="SINGLE embeds ARCHIVE, and (Linux) needs no glibc")
    v.add_argument("single", type=Path)
    v.add_argument("archive", type=Path)
    c = sub.add_parser("check", help="check plunger.yaml / catalog.yaml files")
    c.add_argument("files", type=Path, nargs="+")
    c.add_argument("--loopback-ok", action="store_true",
                   help="allow http://127.0.0.1:PORT/ urls (the tests' server)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            for archive in args.archive:
                out = build(archive, args.out_dir)
                print(f"{out} sha256={sha256_of(out)} ({out.stat().st_size / 2**20:.1f} MiB)",
                      file=sys.stderr)
            return 0
        if args.cmd == "manifest":
            import build as krew_build

            tag = args.tag or "v" + krew_build.version()
            base = args.url_base or f"https://github.com/{args.repo}/releases/download/{tag}/"
            plugin, cat = write_manifests(krew_build.read_sums(args.sums), args.out_dir, tag,
                                          url_base=base, repo=args.repo,
                                          all_platforms=args.all_platforms,
                                          previous=args.previous)
            print(f"{plugin}, {cat} written for {tag}", file=sys.stderr)
            return 0
        if args.cmd == "verify":
            print(verify(args.single, args.archive))
            return 0
        return check_files(args.files, args.loopback_ok)
    except FluxPluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
