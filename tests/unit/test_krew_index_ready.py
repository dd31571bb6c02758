"""krew-index readiness of the krew manifest (issue 48), beyond krew's own validation
(tests/unit/test_krew_manifest.py; the real validate-krew-manifest in
tests/apiserver/test_krew.py): what the index's review asks of a plugin's texts.

* ``shortDescription`` at most 50 characters (``kubectl krew search`` cuts it there);
* ``description`` wrapped at 80 columns, with no usage examples (no command lines: those
  belong to the homepage and ``--help``);
* ``caveats`` only prerequisites: no commands to run, no usage.
Checked on the template and on the committed manifest, with each rule shown to fail."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "krew"
COMMAND = re.compile(r"(^|\s)(kubectl|flux|ln|sh|helm|\$)\s|`[^`]*\s[^`]*`|^\s{2,}\S")


def problems(spec: dict) -> list[str]:
    out = []
    short = spec.get("shortDescription", "")
    if len(short) > 50:
        out.append(f"shortDescription is {len(short)} characters, more than 50")
    for key in ("description", "caveats"):
        for line in spec.get(key, "").splitlines():
            if len(line) > 80:
                out.append(f"{key} has a line of {len(line)} columns: {line!r}")
            if COMMAND.search(line):
                out.append(f"{key} has a command or usage line: {line!r}")
    return out


@pytest.mark.parametrize("path", [KREW / "flux-plunger.yaml", KREW / "flux-plunger.yaml.tmpl"],
                         ids=lambda p: p.name)
def test_the_manifest_texts_are_what_the_index_asks(path):
    text = path.read_text().replace("@tag@", "v0.0.0").replace("@repo@", "o/r")
    text = text.replace("@platforms@\n", "  - {}\n")
    spec = yaml.safe_load(text)["spec"]
    assert problems(spec) == []
    assert "no Python" in spec["caveats"]  # the one thing said about this machine
    # the description's lines are wrapped, not one long line
    assert len(spec["description"].splitlines()) >= 3


@pytest.mark.parametrize(("key", "value", "found"), [
    ("shortDescription", "x" * 51, "shortDescription is 51 characters"),
    ("description", "word " * 17 + "\n", "description has a line of 85 columns"),
    ("description", "Run it:\n  kubectl flux-plunger status -A\n", "description has a command"),
    ("caveats", "Link it:\n  ln -sf a b\n", "caveats has a command"),
    ("caveats", "Then run `flux plunger status`.\n", "caveats has a command"),
])
def test_each_rule_fails_what_breaks_it(key, value, found):
    spec = yaml.safe_load((KREW / "flux-plunger.yaml").read_text())["spec"]
    spec[key] = value
    assert any(p.startswith(found) for p in problems(spec)), problems(spec)
