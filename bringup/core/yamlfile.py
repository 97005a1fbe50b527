"""Errors about a YAML file that never quote the file: PyYAML's messages show the lines around
the problem, which for a file that is no YAML config at all (``--registry /etc/passwd``) would
print its content. A file's errors name the file, the line and column, and the problem only.
"""
from __future__ import annotations

from typing import Any

import yaml

from bringup.core.errors import BringupError


def describe_error(e: Exception) -> str:
    """Where and what a YAML, decoding or OS error is, without the text of the file."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        m = e.problem_mark
        return f"line {m.line + 1}, column {m.column + 1}: {e.problem}"
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 (byte {e.start})"
    if isinstance(e, yaml.YAMLError):
        return "not YAML"
    return " ".join(str(e).split())


def require_mapping(data: Any, what: str, key: str) -> dict:
    """``data`` when it is a mapping; else BringupError saying what it parsed as (a string, a
    list), never quoting it: the schema's message would repeat the whole value."""
    if not isinstance(data, dict):
        raise BringupError(f"{what} is not a YAML mapping with {key!r} (it parses as {type(data).__name__})")
    return data
