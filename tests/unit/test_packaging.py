"""The published metadata, as the installed distribution reports it (what PyPI would show),
and the documentation's promises about installing."""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_metadata_has_spdx_license_urls_classifiers_and_only_user_extras():
    md = metadata.metadata("kubectl-flux-plunger")
    assert md["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (md.get_all("License-File") or [])
    urls = dict(u.split(", ", 1) for u in md.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Issues", "Source"} <= set(urls)
    assert all(u.startswith("https://github.com/cozystack/kubectl-flux-plunger") for u in urls.values())
    classifiers = md.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.10" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]   # SPDX says it
    assert md.get_all("Provides-Extra") == ["serve"]                     # no test/kind extras
    requires = metadata.requires("kubectl-flux-plunger") or []
    assert any(r.startswith("durationpy") for r in requires)


def test_readme_links_are_absolute_for_pypi():
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links and all(link.startswith("https://") for link in links), links


def test_docs_do_not_install_an_unpublished_name():
    for path in (ROOT / "README.md", ROOT / "docs" / "INSTALL.md",
                 ROOT / "krew" / "install-flux-plugin.sh"):
        text = path.read_text()
        assert not re.search(r"pipx? install (--user )?['\"]?kubectl-flux-plunger", text), path
