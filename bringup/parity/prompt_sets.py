"""Which prompts a model's parity run uses: sized per model by its parity profile.

A profile names its full prompt set (``prompt_set``, with ``min_prompts`` and ``min_positions``,
the smallest evidence its gates accept) and may name a quick one for CI-sized runs (``quick``:
``{prompt_set, min_prompts, min_positions, reason}``). The workflow's ``parity.prompts`` setting
(config/config.yaml) chooses: ``full`` (the profile's set), ``quick`` (the profile's quick block:
a smoke run, recorded as such in parity.json ``settings.prompt_set`` and in the certificate), or
the path of a prompt set every model then uses with its profile's full minimums.

The run's JSON inputs (profile, prompt set) are read here too: :func:`resolve_profile`,
:func:`load_input`.
"""
from __future__ import annotations

from pathlib import Path

from bringup.core import canonjson
from bringup.core.errors import BringupError
from bringup.core.hashing import sha256_file
from bringup.core.paths import ROOT, rel
from bringup.core.schemas import validate

#: The settings of config parity.prompts that name a size of the profile's (anything else is a path).
SIZES = ("full", "quick")


def choose(profile: dict, setting: str) -> tuple[str, dict, str]:
    """(root-relative path of the prompt set, the profile with the minimums that apply, the size:
    "full", "quick" or "given") for ``setting`` (config parity.prompts, see the module docstring).
    Raises BringupError for "quick" with a profile that has no quick block."""
    if setting == "quick":
        quick = profile.get("quick")
        if not quick:
            raise BringupError(f"parity profile of {profile.get('model')!r} has no quick prompt set (its 'quick' "
                               "block); use parity.prompts full or a prompt set's path")
        return quick["prompt_set"], {**profile, "min_prompts": quick["min_prompts"],
                                     "min_positions": quick["min_positions"]}, "quick"
    if setting == "full":
        return profile["prompt_set"], profile, "full"
    return setting, profile, "given"


def load_input(path: Path, schema: str, what: str) -> tuple[dict, str]:
    """A JSON input of the run (profile, prompt set), schema-validated, and the SHA-256 (hex) of
    its bytes for ``parity.json`` -> ``inputs``. Raises BringupError if it is missing, not JSON
    or not valid."""
    obj = canonjson.read(path, what)
    validate(obj, schema, str(path))
    return obj, sha256_file(path)


def resolve_profile(model: str, given: Path | None) -> tuple[dict, dict]:
    """The parity profile for ``model``: ``given``, else ``config/parity_profiles/{model}.json``,
    else ``config/parity_profiles/default.json`` (a model without its own profile). Returns (profile,
    its record for ``parity.json`` -> ``inputs.profile``: path, sha256, ``default`` (whether it is the
    default profile, whose ``model`` is "default")). Raises BringupError for a profile written for
    another model, or one that is missing or invalid."""
    profiles = ROOT / "config" / "parity_profiles"
    path = given or profiles / f"{model}.json"
    if given is None and not path.is_file():
        path = profiles / "default.json"
    profile, sha = load_input(path, "parity_profile", "parity profile")
    if profile["model"] not in (model, "default"):
        raise BringupError(f"parity profile {path} is for model {profile['model']!r}, not {model!r}")
    return profile, {"path": rel(path), "sha256": sha, "default": profile["model"] == "default"}
