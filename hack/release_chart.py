"""hack/release.py's chart: controller/chart/flux-plunger with the image pinned by digest
(values.yaml's image block), linted and packaged by helm."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from release_common import CHART, ReleaseError, run


def pin_values(values: str, registry: str, repository: str, digest: str) -> str:
    """values.yaml with image.registry/repository/digest set (only inside the image block)."""
    head, sep, rest = values.partition("\nimage:\n")
    if not sep:
        raise ReleaseError("the chart's values.yaml has no top-level image: block")
    block, tail_sep, tail = rest.partition("\n\n")
    for key, value in (("registry", registry), ("repository", repository), ("digest", digest)):
        block, n = re.subn(rf"^(  {key}:) .*$", rf'\1 "{value}"', block, count=1, flags=re.M)
        if n != 1:
            raise ReleaseError(f"the chart's values.yaml has no image.{key}")
    return head + sep + block + tail_sep + tail


def build_chart(tree: Path, out: Path, *, version: str, image: str, digest: str,
                epoch: int, helm: str) -> Path:
    registry, _, repository = image.partition("/")
    if "." not in registry and ":" not in registry and registry != "localhost":
        registry, repository = "", image
    with tempfile.TemporaryDirectory(prefix="release-chart-") as tmp:
        chart = Path(tmp) / "flux-plunger"
        shutil.copytree(tree / CHART, chart)
        values = chart / "values.yaml"
        values.write_text(pin_values(values.read_text(), registry, repository, digest))
        home = Path(tmp) / "home"
        env = {"HOME": str(home), "HELM_CACHE_HOME": str(home / "cache"),
               "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data"),
               "SOURCE_DATE_EPOCH": str(epoch)}
        run([helm, "lint", str(chart)], env=env, what="helm lint")
        run([helm, "package", str(chart), "--version", version.lstrip("v"),
             "--app-version", version, "--destination", str(out)], env=env, what="helm package")
    return out / f"flux-plunger-{version.lstrip('v')}.tgz"



def find_helm() -> str:
    from testplane import binaries

    return str(binaries.ensure("helm"))
