"""hack/release.py's inputs: the commit (the tag's, or ``--commit``; or the work tree as it
is, ``--worktree``) exported into a temporary tree, and every place that tree states its
version, which must all be the one released."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from release_common import CHART, PACKAGE, ROOT, ReleaseError, run

# -- the commit -----------------------------------------------------------------------------

def resolve(tag: str | None, version: str | None, commit: str | None,
            source: Path = ROOT) -> tuple[str, str]:
    """(version tag 'vX.Y.Z', commit sha)."""
    if tag and version:
        raise ReleaseError("give a TAG or --version, not both")
    if not tag and not version:
        raise ReleaseError("give the TAG to release, or --version vX.Y.Z for an untagged commit")
    ref = commit or (f"refs/tags/{tag}" if tag else "HEAD")
    try:
        sha = run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=source,
                  what=f"git rev-parse {ref}").strip()
    except ReleaseError:
        raise ReleaseError(f"{ref} names no commit here") from None
    ver = tag or version or ""
    if not re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", ver):
        raise ReleaseError(f"{ver!r} is not a version tag vX.Y.Z[-pre]")
    return ver, sha


def export(sha: str, dest: Path, source: Path = ROOT) -> int:
    """``git archive`` of the commit into ``dest``; the commit time (the default epoch)."""
    archive = subprocess.run(["git", "archive", "--format=tar", sha], cwd=source,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="tar")
    return int(run(["git", "log", "-1", "--format=%ct", sha], cwd=source).strip())


def export_worktree(source: Path, dest: Path) -> tuple[int, str]:
    """The work tree's files git would commit (tracked and untracked, not ignored), as they
    are now, into ``dest``; (HEAD's commit time, HEAD's sha + '-dirty' when they differ).
    For test builds of uncommitted changes (the kind tier), never for a release."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                 cwd=source)
    for rel in sorted(set(filter(None, listed.split("\0")))):
        src = source / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    sha = run(["git", "rev-parse", "HEAD"], cwd=source).strip()
    dirty = run(["git", "status", "--porcelain"], cwd=source).strip()
    epoch = int(run(["git", "log", "-1", "--format=%ct", sha], cwd=source).strip())
    return epoch, sha + ("-dirty" if dirty else "")


# -- versions -------------------------------------------------------------------------------

def tree_versions(tree: Path) -> dict[str, str]:
    """Every place the tree states its version, as 'vX.Y.Z'."""
    import yaml

    out: dict[str, str] = {}
    init = (tree / PACKAGE / "__init__.py").read_text()
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', init, re.M)
    out["pyproject (kubectl_flux_plunger.__version__)"] = "v" + (m.group(1) if m else "?")
    chart = yaml.safe_load((tree / CHART / "Chart.yaml").read_text())
    out["chart version"] = "v" + str(chart.get("version"))
    out["chart appVersion"] = str(chart.get("appVersion"))
    manifest = yaml.safe_load((tree / "krew" / "flux-plunger.yaml").read_text())
    out["krew manifest spec.version"] = str(manifest["spec"]["version"])
    return out


def check_versions(want: str, found: dict[str, str]) -> None:
    bad = [f"{where} says {v}" for where, v in found.items() if v != want]
    if bad:
        raise ReleaseError(f"version mismatch: releasing {want}, but " + "; ".join(bad))
