"""Checks that a bundle depends on nothing of the machine that built it.

- Every ELF file's dynamic section (``readelf -d``): RPATH / RUNPATH entries must start with
  ``$ORIGIN`` (the file's own folder), NEEDED entries must be bare sonames (no path), so the
  loader finds the bundle's files relative to themselves and everything else on the system.
- No file holds an absolute path of the build: the checkout, the results folder, the output
  folder (byte search, binaries and weights included).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from bringup.core.errors import BringupError
from bringup.core.native import run_command

ELF_MAGIC = b"\x7fELF"
_DYN = re.compile(r"\((NEEDED|RPATH|RUNPATH)\)\s+[^\[]*\[([^\]]*)\]")


def is_elf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == ELF_MAGIC


def dynamic_section(path: Path) -> dict[str, list[str]]:
    """NEEDED, RPATH and RUNPATH entries of an ELF file, from ``readelf -d`` (binutils). Raises
    BringupError when readelf is missing or fails on the file."""
    p = run_command(["readelf", "-d", str(path)], timeout_s=60, what="readelf (binutils)")
    if p.returncode != 0:
        raise BringupError(f"readelf -d {path.name} failed: {p.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    out: dict[str, list[str]] = {"NEEDED": [], "RPATH": [], "RUNPATH": []}
    for kind, val in _DYN.findall(p.stdout.decode("utf-8", "replace")):
        out[kind].extend(val.split(":") if kind != "NEEDED" else [val])
    return out


def check_elf(path: Path, name: str) -> list[str]:
    """The sonames ``path`` needs; raises BringupError for a search path not relative to
    ``$ORIGIN`` or a NEEDED entry with a path."""
    dyn = dynamic_section(path)
    for kind in ("RPATH", "RUNPATH"):
        bad = [e for e in dyn[kind] if not e.startswith("$ORIGIN")]
        if bad:
            raise BringupError(f"bundle file {name}: {kind} {':'.join(dyn[kind])} is not relative to $ORIGIN")
    pathed = [e for e in dyn["NEEDED"] if "/" in e]
    if pathed:
        raise BringupError(f"bundle file {name}: NEEDED {', '.join(pathed)} names a path, not a soname")
    return dyn["NEEDED"]


def check_no_paths(folder: Path, names: Iterable[str], forbidden: Iterable[str | Path]) -> None:
    """Raise BringupError naming the first file under ``folder`` that contains one of the
    absolute paths ``forbidden`` (as bytes)."""
    pats = sorted({str(Path(f).resolve()).encode() for f in forbidden}, key=len, reverse=True)
    for name in sorted(names):
        data = (folder / name).read_bytes()
        for pat in pats:
            if pat in data:
                raise BringupError(f"bundle file {name} contains the build machine's path {pat.decode()}: "
                                   "it would not be relocatable")
