"""hack/release.py's Flux step (issue 48): this platform's single-file executable of the krew
archive just built, and the Flux plugin catalog of the release, ``plunger.yaml`` (kind
Plugin) and ``catalog.yaml`` (kind PluginCatalog).

    flux-plunger-vX.Y.Z-OS-ARCH[.exe]   krew/flux_plugin.py build: krew/launcher with the krew
                                        archive embedded byte for byte (Flux installs it as
                                        $FLUXCD_PLUGINS/flux-plunger); krew/flux_plugin.py
                                        verify checks that, and that it needs no glibc
    plunger.yaml                        this version, one platform entry per single file, its
                                        url on the GitHub release and checksum sha256:<hex>
    catalog.yaml                        the catalog `flux plugin search` reads

Both YAML files pass krew/flux_plugin.py's checks (the rules of fluxcd/plugins' schemas)
before they are written.  Here plunger.yaml names the one platform built on this machine;
release.yml's last job rewrites it from all five single files' checksums
(``krew/flux_plugin.py manifest --all-platforms``), as it does the krew manifest.  The
release's assets then serve as a catalog: ``FLUXCD_PLUGIN_CATALOG=https://github.com/REPO/
releases/latest/download/ flux plugin install plunger``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from release_common import ReleaseError, sha256_file


def build_flux_plugin(tree: Path, out: Path, archive: Path, repo: str) -> tuple[Path, Path, Path]:
    """(single file, plunger.yaml, catalog.yaml) in ``out``, with ``tree``'s (the exported
    commit's) krew/flux_plugin.py, from ``archive`` (the krew archive in ``out``)."""
    tool = tree / "krew" / "flux_plugin.py"

    def run(*args: str) -> str:
        proc = subprocess.run([sys.executable, str(tool), *args], capture_output=True, text=True,
                              timeout=900)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-8:]
            raise ReleaseError(f"krew/flux_plugin.py {args[0]} failed (exit {proc.returncode}): "
                               + " | ".join(tail))
        return proc.stderr

    # kubectl-flux_plunger-TAG-OS-ARCH.tar.gz (krew/binary.py's archive_name)
    tag, osname, arch = archive.name[len("kubectl-flux_plunger-"):-len(".tar.gz")].rsplit("-", 2)
    run("build", str(archive), "--out-dir", str(out))
    single = out / (f"flux-plunger-{tag}-{osname}-{arch}" + (".exe" if osname == "windows" else ""))
    if not single.is_file():
        raise ReleaseError(f"krew/flux_plugin.py made no {single.name}")
    run("verify", str(single), str(archive))  # it embeds the archive; static on Linux
    with tempfile.TemporaryDirectory(prefix="release-flux-") as tmp:
        sums = Path(tmp) / "single.sha256"
        sums.write_text(f"{sha256_file(single)}  {single.name}\n")
        run("manifest", str(sums), "--out-dir", str(out), "--tag", tag, "--repo", repo)
    return single, out / "plunger.yaml", out / "catalog.yaml"
