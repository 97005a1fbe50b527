"""Validation of every JSON document bringup defines, against config/schemas/{name}.schema.json."""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import jsonschema

from bringup.core.errors import BringupError
from bringup.core.paths import SCHEMAS


@lru_cache(maxsize=None)
def _validator(name: str) -> jsonschema.protocols.Validator:
    path = SCHEMAS / f"{name}.schema.json"
    if not path.exists():
        raise BringupError(f"no schema named {name!r} ({path})")
    schema = json.loads(path.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(obj: Any, name: str, what: str = "") -> None:
    """Validate ``obj`` against schema ``name``; raise BringupError listing the violations (the
    first 20, on one line: each ``at /path: message``, separated by ``; ``)."""
    errors = sorted(_validator(name).iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        items = [f"at /{'/'.join(map(str, e.absolute_path))}: {_short(e.message)}" for e in errors[:20]]
        more = f"; ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise BringupError(f"{what or name} does not match schema {name}: " + "; ".join(items) + more)


def _short(message: str, limit: int = 200) -> str:
    """jsonschema repeats the offending value in its message: keep a hostile value from filling the line."""
    return message if len(message) <= limit else message[:limit] + f"... ({len(message)} characters)"
