"""Numbers that C owns and Python reads: the one source of a constant both sides need is its
``#define`` in a ``csrc`` header (``BU_RT_ABI_VERSION`` in csrc/include/bu_runtime.h, ``BU_DIM_MAX``
in csrc/include/bu_kernels.h), read here instead of being copied into a Python literal that could
drift. (Format facts go the other way: config/ggml_formats.json -> the generated bu_formats.h.)
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from bringup.core.errors import BringupError
from bringup.core.paths import CSRC

#: the public headers that own the constants Python reads
RUNTIME_HEADER = CSRC / "include" / "bu_runtime.h"
KERNELS_HEADER = CSRC / "include" / "bu_kernels.h"


@lru_cache(maxsize=None)
def c_define(header: Path, name: str) -> int:
    """The integer of ``#define <name> <value>`` in ``header``: a decimal literal, optionally cast
    and parenthesised (``((int64_t)2147483647)``). Raises BringupError when the header lacks the
    define or its value is anything else (an expression is refused, not evaluated)."""
    text = Path(header).read_text(encoding="utf-8")
    m = re.search(rf"^#define\s+{re.escape(name)}\s+(\S.*?)\s*(?:/\*.*)?$", text, re.M)
    v = m and re.fullmatch(r"\(*(?:\(\s*\w+\s*\))?\s*(\d+)\s*\)*", m.group(1))
    if not v:
        raise BringupError(f"{header}: #define {name} is {'missing' if not m else repr(m.group(1))}; "
                           "a decimal literal (optionally cast) is expected")
    return int(v.group(1))
