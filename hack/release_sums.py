"""hack/release.py's last artifact: SHA256SUMS (``sha256sum -c`` format) over every file
in the output."""

from __future__ import annotations

from pathlib import Path

from release_common import sha256_file


def write_sums(out: Path) -> Path:
    lines = [f"{sha256_file(p)}  {p.name}\n" for p in sorted(out.iterdir())
             if p.is_file() and p.name != "SHA256SUMS"]
    sums = out / "SHA256SUMS"
    sums.write_text("".join(lines))
    return sums
