"""Metadata values read by their GGUF value type: a number stored as a string is not a number.

The rule (ggml/docs/gguf.md declares ``[llm].block_count`` and the other counts as integers,
``rope.freq_base``, ``layer_norm_rms_epsilon`` and the soft caps as ``float32``):

* an integer key accepts the eight integer types (UINT8 .. INT64), nothing else: not BOOL, not a
  float (``block_count = 2.0``), not a string (``"2"``);
* a float key accepts FLOAT32 and FLOAT64 only: not a string (``"1e5"``, ``" 5e4 "``), not an
  integer (every GGUF writer stores these as float32; an integer there is a different file);
* a string key accepts STRING only.

An ARRAY is returned as its list when its items have the key's type (the callers refuse
per-layer lists with their own message). Anything else is a BringupError (exit 2) naming the
key and the type it is stored as; the value is never converted.
"""
from __future__ import annotations

from typing import Any

import gguf

from bringup.core.errors import BringupError

T = gguf.GGUFValueType
INTEGER = frozenset((T.UINT8, T.INT8, T.UINT16, T.INT16, T.UINT32, T.INT32, T.UINT64, T.INT64))
FLOAT = frozenset((T.FLOAT32, T.FLOAT64))
STRING = frozenset((T.STRING,))
KINDS = {"int": (INTEGER, "an integer type (UINT8 .. INT64)"),
         "float": (FLOAT, "FLOAT32 or FLOAT64"),
         "str": (STRING, "STRING")}


def stored_type(reader: gguf.GGUFReader, key: str) -> T | None:
    """The GGUF value type of metadata ``key`` (for an array: of its items), None when absent."""
    f = reader.fields.get(key)
    if f is None:
        return None
    return T(f.types[-1]) if f.types else None


def typed_field(reader: gguf.GGUFReader, key: str, kind: str) -> Any | None:
    """The value of metadata ``key`` when it is stored with a type of ``kind`` ("int", "float",
    "str"; see the module docstring), None when absent. Raises BringupError (exit 2) naming the
    key and its stored type otherwise."""
    f = reader.fields.get(key)
    if f is None:
        return None
    allowed, want = KINDS[kind]
    t = stored_type(reader, key)
    if t not in allowed:
        raise BringupError(f"GGUF key {key} is stored as {t.name if t is not None else 'no type'}; "
                           f"it must be {want} (a value is never converted from another type)")
    return f.contents()
