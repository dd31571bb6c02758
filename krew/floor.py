#!/usr/bin/env python3
"""The glibc floor of a Linux krew archive: the newest ``GLIBC_`` symbol version any ELF file
in it needs (issue 37).  The dynamic loader refuses a file that needs a version the system's
glibc does not define ("version `GLIBC_2.35' not found"), so that newest version is the
oldest glibc the archive starts on.

    python3 krew/floor.py ARCHIVE... --glibc 2.31   # exit 1 naming every file (and the
                                                     # version, and the library it is from)
                                                     # that needs more than glibc 2.31
    python3 krew/floor.py ARCHIVE...                 # print each archive's floor

What is read is each ELF file's version-needed section (``.gnu.version_r``, SHT_GNU_verneed:
what ``objdump -p`` prints under "Version References"), the list the loader checks, for
every file of the archive (the executable, libpython, OpenSSL, every extension module):
parsed here with the standard library alone, so the check runs on any release runner and in
the tests with nothing installed.  The archive may be a .tar.gz or an unpacked directory.
"""
from __future__ import annotations

import argparse
import re
import struct
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

SHT_GNU_VERNEED = 0x6FFFFFFE
GLIBC = re.compile(r"GLIBC_(\d+(?:\.\d+)+)$")


class FloorError(RuntimeError):
    """A file cannot be read as ELF; the message is the one line printed."""


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def needed_versions(data: bytes, name: str = "") -> dict[str, str]:
    """{version name: the library it is needed from} of one ELF file (every version its
    .gnu.version_r lists: GLIBC_2.34 from libc.so.6, OPENSSL_1_1_0 from libssl.so.1.1, ...);
    {} for an ELF file that needs none (a static binary)."""
    if data[:4] != b"\x7fELF":
        raise FloorError(f"{name or 'the file'} is not an ELF file")
    ei_class, ei_data = data[4], data[5]
    if ei_class not in (1, 2) or ei_data not in (1, 2):
        raise FloorError(f"{name}: unknown ELF class {ei_class} / data {ei_data}")
    end = "<" if ei_data == 1 else ">"
    if ei_class == 2:  # ELF64: e_shoff at 0x28, e_shentsize/shnum/shstrndx at 0x3a
        (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        sh = end + "IIQQQQIIQQ"
    else:
        (shoff,) = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        sh = end + "IIIIIIIIII"
    sections = [struct.unpack_from(sh, data, shoff + i * shentsize) for i in range(shnum)]
    if not sections:
        raise FloorError(f"{name}: no section headers, so its version needs cannot be read")
    out: dict[str, str] = {}
    for _name, stype, _fl, _addr, offset, _size, link, count, *_ in sections:
        if stype != SHT_GNU_VERNEED:
            continue
        strtab = sections[link][4]

        def cstr(at: int) -> str:
            return data[strtab + at:data.index(b"\0", strtab + at)].decode()

        pos = offset
        for _ in range(count):
            _v, cnt, vn_file, vn_aux, vn_next = struct.unpack_from(end + "HHIII", data, pos)
            aux = pos + vn_aux
            for _ in range(cnt):
                _h, _f, _o, vna_name, vna_next = struct.unpack_from(end + "IHHII", data, aux)
                out[cstr(vna_name)] = cstr(vn_file)
                aux += vna_next
            pos += vn_next
    return out


def elf_files(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every ELF file in an archive (.tar.gz) or a directory."""
    if path.is_dir():
        for p in sorted(path.rglob("*")):
            if p.is_file() and not p.is_symlink():
                with open(p, "rb") as fh:
                    if fh.read(4) == b"\x7fELF":
                        yield p.relative_to(path).as_posix(), p.read_bytes()
        return
    with tarfile.open(path) as tar:
        for member in tar:
            if member.isfile():
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                if data[:4] == b"\x7fELF":
                    yield member.name, data


def glibc_needs(path: Path) -> list[tuple[str, str, str]]:
    """(file, GLIBC_ version, library) for every glibc version every ELF file of ``path``
    needs, newest first."""
    rows = []
    for name, data in elf_files(path):
        for ver, lib in needed_versions(data, name).items():
            m = GLIBC.match(ver)
            if m:
                rows.append((name, m.group(1), lib))
    rows.sort(key=lambda r: (version_tuple(r[1]), r[0]), reverse=True)
    return rows


def newest(rows: list[tuple[str, str, str]]) -> str | None:
    """The newest glibc version of :func:`glibc_needs`' rows: the oldest glibc the archive
    starts on (None: no ELF file needs one)."""
    return rows[0][1] if rows else None


def above(rows: list[tuple[str, str, str]], floor: str) -> list[str]:
    """One line per (file, version) of :func:`glibc_needs`' rows above ``floor``: empty when
    the archive meets it."""
    limit = version_tuple(floor)
    return [f"{name} needs GLIBC_{ver} (from {lib}), above the floor glibc {floor}"
            for name, ver, lib in rows if version_tuple(ver) > limit]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archives", nargs="+", type=Path, help=".tar.gz archives or directories")
    ap.add_argument("--glibc", metavar="X.Y",
                    help="fail when any ELF file needs a GLIBC_ version above X.Y")
    args = ap.parse_args(argv)
    rc = 0
    for path in args.archives:
        try:
            files = sum(1 for _ in elf_files(path))
            rows = glibc_needs(path)
            found = newest(rows)
            bad = above(rows, args.glibc) if args.glibc else []
        except (OSError, tarfile.TarError, FloorError, struct.error, IndexError) as exc:
            print(f"error: {path}: cannot read it: {exc}", file=sys.stderr)
            rc = 1
            continue
        if files == 0:
            print(f"error: {path}: no ELF file in it (not a Linux archive?)", file=sys.stderr)
            rc = 1
            continue
        for line in bad:
            print(f"error: {path}: {line}", file=sys.stderr)
        rc = rc or (1 if bad else 0)
        verdict = ("" if not args.glibc else
                   f" > {args.glibc}: FAILS" if bad else f" <= {args.glibc}: ok")
        print(f"{path}: {files} ELF files; the newest glibc version needed: "
              f"{found or 'none'}{verdict}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
