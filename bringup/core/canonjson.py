"""JSON I/O: canonical JSON (the same object always gives the same bytes: sorted keys, fixed
separators), written atomically, and the one JSON reader with clear errors. Schema validation is
``bringup.core.schemas``."""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
from typing import Any

from bringup.core.atomic import write_text
from bringup.core.errors import BringupError, IntegrityError
from bringup.core.inputs import open_regular


def _check_finite(obj: Any) -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"non-finite float {obj!r} has no canonical JSON form")
    if isinstance(obj, dict):
        for v in obj.values():
            _check_finite(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _check_finite(v)


def dumps(obj: Any, compact: bool = False) -> str:
    """Canonical text of ``obj``: sorted keys, ASCII; 2-space indent and a final newline unless compact."""
    _check_finite(obj)
    if compact:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


def sha256(obj: Any) -> str:
    """SHA-256 (hex) of the compact canonical form of ``obj``."""
    return hashlib.sha256(dumps(obj, compact=True).encode("ascii")).hexdigest()


def write(path, obj: Any) -> None:
    """Write ``obj`` as canonical JSON to ``path``, atomically."""
    write_text(path, dumps(obj))


def read(path, what: str) -> Any:
    """Parse the JSON file ``path`` (an artifact called ``what`` in messages). Raises
    BringupError naming the file when it is missing, not a regular file (``inputs``) or not JSON."""
    try:
        with open_regular(path, what) as raw, io.TextIOWrapper(raw, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as e:  # ValueError: not JSON, not UTF-8, an over-long number
        raise BringupError(f"cannot read {what} {path}: {e}") from None
    except RecursionError:
        raise BringupError(f"cannot read {what} {path}: nested too deeply") from None


def read_result(path, what: str) -> Any:
    """``read`` for a file a stage wrote into a results folder: a symbolic link there is not the
    file its stage wrote (it could name any other JSON), so it is refused as an IntegrityError
    (exit 3) before it is opened; everything else as ``read``."""
    if os.path.islink(path):
        raise IntegrityError(f"{what} {path} is a symbolic link, not the file its stage wrote")
    return read(path, what)
