"""A night that fits: each model's parity prompt set is its profile's (full) or the profile's quick
block (CI-sized), chosen by config parity.prompts (bringup.parity.prompt_sets)."""
from __future__ import annotations

import json

import pytest

from bringup.core.errors import BringupError
from bringup.parity.prompt_sets import load_input
from bringup.core.paths import ROOT
from bringup.parity import prompt_sets


def _positions_proxy(path) -> int:
    """Characters of a prompt set's texts and messages: its cost, before tokenizing."""
    ps = json.loads((ROOT / path).read_text())
    return sum(len(p.get("text", "")) + sum(len(m["content"]) for m in p.get("messages", [])) for p in ps["prompts"])


@pytest.mark.parametrize("profile", sorted(p.name for p in (ROOT / "config/parity_profiles").glob("*.json")))
def test_every_profile_has_a_smaller_quick_set_with_its_own_minimums(profile):
    prof, _ = load_input(ROOT / "config/parity_profiles" / profile, "parity_profile", "parity profile")
    full_path, full, size = prompt_sets.choose(prof, "full")
    assert (full_path, full, size) == (prof["prompt_set"], prof, "full")
    quick_path, quick, size = prompt_sets.choose(prof, "quick")
    assert size == "quick" and quick["gates"] == prof["gates"]       # the same gates, less evidence
    assert (quick["min_prompts"], quick["min_positions"]) == (prof["quick"]["min_prompts"], prof["quick"]["min_positions"])
    qs, _ = load_input(ROOT / quick_path, "prompt_set", "prompt set")
    assert len(qs["prompts"]) >= quick["min_prompts"]
    assert _positions_proxy(quick_path) * 4 < _positions_proxy(full_path)


def test_a_path_is_used_as_given_and_quick_needs_a_quick_block():
    prof = {"model": "m", "prompt_set": "config/prompts/default.json", "min_prompts": 8, "min_positions": 1024}
    assert prompt_sets.choose(prof, "config/prompts/quick.json") == ("config/prompts/quick.json", prof, "given")
    with pytest.raises(BringupError, match="has no quick prompt set"):
        prompt_sets.choose(prof, "quick")
