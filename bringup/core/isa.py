"""The CPU features a program's code needs, and whether this host has them (shared by export, its
bundle check, and the IR report's "runs here" column).

A bundle needs (a) the baseline its files were compiled for (the build's ``-march=`` / ``-m``
flags, build/provenance.json ``isa_flags``) and (b) the ISA extensions of every kernel provider the
IR selected (kernel map ``selection.isa``: those kernels are compiled with
``__attribute__((target(...)))`` and called unconditionally). Both become Linux ``/proc/cpuinfo``
flag names, so the receiver's check (Python here, ``grep`` in the bundle's verify.sh) is a set
inclusion.

Source of the levels: the x86-64 psABI microarchitecture levels (x86-64-psABI 1.0, section 3.1.1,
"Micro-Architecture Levels"); cpuinfo spells SSE3 ``pni`` and LZCNT ``abm``.
"""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from bringup.core.errors import BringupError, UnsupportedError

#: cpuinfo flags each x86-64 psABI level adds to the one before it.
_LEVEL_ADDS: dict[str, tuple[str, ...]] = {
    "x86-64": ("cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2"),
    "x86-64-v2": ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"),
    "x86-64-v3": ("abm", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"),
    "x86-64-v4": ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"),
}
LEVELS: tuple[str, ...] = tuple(_LEVEL_ADDS)

#: cpuinfo flags of an ISA extension named by a ``-m<ext>`` flag or a kernel map's selection.isa
#: (an extension implies the ones it builds on: AVX2 code may use AVX instructions).
EXTENSIONS: dict[str, tuple[str, ...]] = {
    "sse4.2": ("sse4_2",), "avx": ("avx",), "avx2": ("avx", "avx2"), "fma": ("avx", "fma"),
    "f16c": ("avx", "f16c"), "bmi2": ("bmi2",), "avx512f": ("avx", "avx2", "avx512f"),
}


def level_flags(level: str) -> list[str]:
    """cpuinfo flags of psABI ``level`` (it includes every lower level). Raises UnsupportedError
    for an unknown level."""
    if level not in _LEVEL_ADDS:
        raise UnsupportedError(f"unknown x86-64 level {level!r} (known: {', '.join(LEVELS)})")
    out: list[str] = []
    for name in LEVELS[: LEVELS.index(level) + 1]:
        out.extend(_LEVEL_ADDS[name])
    return sorted(out)


def _extension_flags(ext: str, where: str) -> tuple[str, ...]:
    if ext not in EXTENSIONS:
        raise UnsupportedError(f"{where}: ISA extension {ext!r} has no cpuinfo mapping in "
                               f"bringup.core.isa.EXTENSIONS (known: {', '.join(sorted(EXTENSIONS))})")
    return EXTENSIONS[ext]


def requirement(machine: str, isa_flags: Sequence[str], providers: Mapping[str, Sequence[str]]) -> dict:
    """What a build needs from the CPU: ``{machine, level, extensions, features, name, sources}``.

    ``isa_flags``: the build's ``-m`` flags (``-march=x86-64-v2``, ``-mavx2``); ``providers``:
    kernel provider id -> its kernel map's ``selection.isa`` list. ``features`` is the sorted union
    of cpuinfo flags; ``name`` (e.g. ``x86-64-v2`` or ``x86-64-v2+avx2``) names the bundle.
    Raises UnsupportedError for a machine other than x86_64, an unknown ``-march`` level or an
    extension without a mapping.
    """
    if machine != "x86_64":
        raise UnsupportedError(f"export knows the ISA levels of x86_64 only; the build is for {machine}")
    level, exts = "x86-64", set()
    for f in isa_flags:
        if f.startswith("-march="):
            level = f.split("=", 1)[1]
            level_flags(level)  # raises for an unknown level
        elif f.startswith("-mtune="):
            continue  # tuning changes scheduling, not the instructions a CPU must have
        elif f.startswith("-m"):
            _extension_flags(f[2:], "build flag " + f)
            exts.add(f[2:])
        else:
            raise UnsupportedError(f"build ISA flag {f!r} is not a -m flag")
    for pid, isas in sorted(providers.items()):
        for ext in isas:
            _extension_flags(ext, f"kernel provider {pid}")
            exts.add(ext)
    features = set(level_flags(level))
    for ext in exts:
        features.update(EXTENSIONS[ext])
    return {"machine": machine, "level": level, "extensions": sorted(exts), "features": sorted(features),
            "name": _name(level, exts),
            "sources": {"build_isa_flags": list(isa_flags),
                        "provider_isa": {k: list(v) for k, v in sorted(providers.items()) if v}}}


def _name(level: str, exts: Iterable[str]) -> str:
    extra = sorted(e for e in exts if not set(EXTENSIONS[e]) <= set(level_flags(level)))
    return "+".join([level, *extra])


def name_of(isa_flags: Sequence[str], provider_isa: Iterable[str] = ()) -> str:
    """The ISA name :func:`requirement` gives a build with these flags and provider extensions
    (e.g. ``x86-64-v2``), without the machine check: the workflow names the bundle with it before
    the build exists. Raises UnsupportedError like :func:`requirement`."""
    return requirement("x86_64", isa_flags, {"_": list(provider_isa)})["name"]


def host_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU flags of the first processor in ``cpuinfo`` (Linux's ``flags`` line). Raises
    BringupError when the file is unreadable or has no flags line."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError as e:
        raise BringupError(f"cannot read {cpuinfo} to check the CPU's features: {e.strerror}") from None
    for line in text.splitlines():
        key, _, val = line.partition(":")
        if key.strip() == "flags":
            return set(val.split())
    raise BringupError(f"{cpuinfo} has no 'flags' line: cannot check the CPU's features")


def missing_features(required: Iterable[str], have: set[str]) -> list[str]:
    """The required cpuinfo flags absent from ``have``, sorted."""
    return sorted(set(required) - have)


def check_host(req: Mapping, have: set[str] | None = None, machine: str | None = None) -> None:
    """Raise UnsupportedError (exit 4) naming what is missing when this host (or ``machine`` /
    ``have``) cannot run code with requirement ``req`` (from :func:`requirement`)."""
    machine = machine or platform.machine()
    if machine != req["machine"]:
        raise UnsupportedError(f"bundle is for {req['machine']}; this host is {machine}")
    lost = missing_features(req["features"], host_flags() if have is None else have)
    if lost:
        raise UnsupportedError(f"this CPU lacks {', '.join(lost)}, which the bundle's code needs "
                               f"({req['name']}); run a bundle built for a lower level")
