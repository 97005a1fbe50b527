"""What may reach the generated C: the patterns every name and number is checked against before
codegen puts it into C source, and the final check of everything a template interpolates.

Nothing read from a model (tensor names, op ids, circuit ops, numbers) reaches the C text unless
it passes these checks; a value that fails is a BringupError (exit 2), never an escape attempt.
"""
from __future__ import annotations

import math
import re
from typing import Any

from bringup.core.errors import BringupError

ALIGN = 64
NAME_RE = re.compile(r"^[A-Za-z0-9_.]{1,95}$")          # BUMP / tensor / state names
FUNC_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # C function names
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")  # kernel-map ports used as C field names
CIRCUIT_OP_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,127}$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
CTYPE_RE = re.compile(r"^(const )?(float|double|int8_t|int32_t|int64_t|uint8_t|uint16_t|size_t|void)( \*)?$")
# Anything the template interpolates must match this (defence in depth behind the checks above):
# no quote, backslash, newline, '#', ';', braces, or comment opener/closer.
_SAFE_RE = re.compile(r"^[A-Za-z0-9_.,:/ ()+\-\[\]*<>=]*$")


def check(pattern: re.Pattern, value: Any, what: str) -> str:
    """``value`` if it is a string matching ``pattern``; else BringupError naming ``what``."""
    if not isinstance(value, str) or not pattern.match(value):
        raise BringupError(f"{what} {value!r} does not match {pattern.pattern}; refusing to put it in C source")
    return value


def integer(value: Any, what: str, lo: int = 0, hi: int = 2**62) -> int:
    """``value`` if it is an int (not a bool) in ``[lo, hi]``; else BringupError."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BringupError(f"{what} = {value!r} is not an integer in [{lo}, {hi}]")
    return value


def c_float(value: Any, what: str) -> str:
    """C literal of a finite number: Python's shortest round-trip double repr (``repr``), which the
    C compiler reads back to the same double; passed to a ``float`` parameter it is converted as a
    cast would (C11 6.5.2.2p7). BringupError for a non-number or a non-finite value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BringupError(f"{what} = {value!r} is not a number")
    v = float(value)
    if not math.isfinite(v):
        raise BringupError(f"{what} = {v!r} is not finite")
    r = repr(v)
    return r if ("." in r or "e" in r) else r + ".0"


def ident(name: str) -> str:
    """The C identifier part of a checked name (``NAME_RE``): dots become underscores."""
    return name.replace(".", "_")


def check_values(value: Any, where: str = "context") -> None:
    """Every string the templates may interpolate, checked against ``_SAFE_RE`` (and no comment
    opener/closer): the last line of defence behind the per-field patterns."""
    if isinstance(value, dict):
        for k, v in value.items():
            check_values(k, where)
            check_values(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_values(v, f"{where}[{i}]")
    elif isinstance(value, str):
        if not _SAFE_RE.match(value) or "/*" in value or "*/" in value or "//" in value:
            raise BringupError(f"{where} = {value!r} contains characters not allowed in generated C")
    elif value is None or isinstance(value, (bool, int, float)):
        pass
    else:
        raise BringupError(f"{where}: a {type(value).__name__} cannot be rendered into C")
