"""Which prompts a model's parity run uses: sized per model by its parity profile.

A profile names its full prompt set (``prompt_set``, with ``min_prompts`` and ``min_positions``,
the smallest evidence its gates accept) and may name a quick one for CI-sized runs (``quick``:
``{prompt_set, min_prompts, min_positions, reason}``). The workflow's ``parity.prompts`` setting
(config/config.yaml) chooses: ``full`` (the profile's set), ``quick`` (the profile's quick block:
a smoke run, recorded as such in parity.json ``settings.prompt_set`` and in the certificate), or
the path of a prompt set every model then uses with its profile's full minimums.
"""
from __future__ import annotations

from bringup.core.errors import BringupError

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
