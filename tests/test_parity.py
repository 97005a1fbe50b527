"""Parity metrics, gates, profile/prompt-set data and the native-program adapter, on synthetic data.

Expected metric values are hand-derived from the definitions (docs/parity.md), not from the code.
"""
from __future__ import annotations

import copy
import json
import math
import re
import stat
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bringup.core import native
from bringup.core.errors import BringupError
from bringup.core.native import NativeProgram
from bringup.parity import gates as parity_gates
from bringup.parity import metrics
from bringup.parity import run as parity
from bringup.core.paths import ROOT
from bringup.core.schemas import validate
from tests.helpers.parity import PROFILE, SMALL_GREEDY, Synthetic, run_synthetic, synthetic_prompts

PROMPTS = json.loads((ROOT / "config/prompts/default.json").read_text())


# -- metrics -------------------------------------------------------------------------------------

def test_identical_logits_are_perfect():
    a = np.random.default_rng(0).normal(size=(7, 50)).astype(np.float32)
    s = metrics.summarize(metrics.position_metrics(a, a.copy(), 5))
    assert s["top1_agreement"] == 1.0 and s["topk_overlap"] == 1.0
    assert s["kl_mean"] == 0.0 and s["max_abs_diff"] == 0.0 and s["mean_abs_diff"] == 0.0
    assert s["cosine_min"] == pytest.approx(1.0, abs=1e-12)
    assert s["n_positions"] == 7


def test_kl_two_classes_by_hand():
    # oracle p = (1/2, 1/2); ours q = (3/4, 1/4): KL(p||q) = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3)
    a = np.array([[0.0, 0.0]], dtype=np.float32)
    b = np.array([[math.log(3.0), 0.0]], dtype=np.float32)
    pm = metrics.position_metrics(a, b, 1)
    assert pm["kl"][0] == pytest.approx(0.5 * math.log(4.0 / 3.0), rel=1e-6)
    assert pm["max_abs_diff"][0] == pytest.approx(math.log(3.0), rel=1e-6)
    assert pm["mean_abs_diff"][0] == pytest.approx(math.log(3.0) / 2, rel=1e-6)
    assert pm["top1_match"][0]  # the oracle's tie resolves to id 0, ours' argmax is id 0


def test_top1_ties_resolve_to_lowest_id():
    a = np.array([[1.0, 1.0, 0.0]], dtype=np.float32)   # tie -> id 0
    b = np.array([[2.0, 1.0, 0.0]], dtype=np.float32)   # id 0
    assert metrics.position_metrics(a, b, 1)["top1_match"][0]
    c = np.array([[1.0, 2.0, 0.0]], dtype=np.float32)   # id 1
    assert not metrics.position_metrics(a, c, 1)["top1_match"][0]


def test_shift_invariance_and_cosine_by_hand():
    a = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    pm = metrics.position_metrics(a, a + 5.0, 2)
    assert pm["kl"][0] == pytest.approx(0.0, abs=1e-12)       # softmax ignores a constant shift
    assert pm["max_abs_diff"][0] == pytest.approx(5.0)
    # cos = a.(a+5) / (|a| |a+5|) = (6 + 14 + 24 + 36) / (sqrt(30) sqrt(36 + 49 + 64 + 81))
    assert pm["cosine"][0] == pytest.approx(80 / math.sqrt(30 * 230), rel=1e-6)


def test_cosine_of_zero_vectors():
    z = np.zeros((1, 3), dtype=np.float32)
    assert metrics.position_metrics(z, z, 1)["cosine"][0] == 1.0
    assert metrics.position_metrics(z, z + [[1, 0, 0]], 1)["cosine"][0] == 0.0


def test_topk_overlap_by_hand():
    a = np.array([[9.0, 8.0, 7.0, 1.0, 0.0]], dtype=np.float32)  # top-3 {0,1,2}
    b = np.array([[9.0, 0.0, 7.0, 8.0, 1.0]], dtype=np.float32)  # top-3 {0,3,2}
    assert metrics.position_metrics(a, b, 3)["topk_overlap"][0] == pytest.approx(2 / 3)


def test_hand_computed_kl_disagreeing():
    a = np.array([[0.0, math.log(3.0)]], dtype=np.float32)  # p = (1/4, 3/4)
    b = np.array([[math.log(3.0), 0.0]], dtype=np.float32)  # q = (3/4, 1/4)
    pm = metrics.position_metrics(a, b, 1)
    # KL = 1/4 ln(1/3) + 3/4 ln 3 = 1/2 ln 3
    assert pm["kl"][0] == pytest.approx(0.5 * math.log(3.0), rel=1e-6)
    assert not pm["top1_match"][0]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_logits_are_an_error(bad):
    a = np.zeros((3, 4), dtype=np.float32)
    b = a.copy()
    b[1, 2] = bad
    with pytest.raises(BringupError, match="not finite.*position 1"):
        metrics.position_metrics(a, b, 2)


def test_shape_mismatch_is_an_error():
    with pytest.raises(BringupError, match="shapes differ"):
        metrics.position_metrics(np.zeros((3, 4)), np.zeros((3, 5)), 1)
    with pytest.raises(BringupError, match="top-k"):
        metrics.position_metrics(np.zeros((3, 4)), np.zeros((3, 4)), 5)


def test_greedy_compare():
    g = metrics.greedy_compare([1, 2, 3, 4], [1, 2, 9, 4], 128)
    assert g["prefix_len"] == 2 and not g["identical"] and g["effective_prefix"] == 2
    # both stopped early at the same end-of-generation token: a full match
    g = metrics.greedy_compare([5, 6, 2], [5, 6, 2], 128)
    assert g["identical"] and g["prefix_len"] == 3 and g["effective_prefix"] == 128
    g = metrics.greedy_compare([5, 6, 2], [5, 6, 2, 7], 128)
    assert not g["identical"] and g["effective_prefix"] == 3


# -- gates ---------------------------------------------------------------------------------------

def _measured(ref=None, llama=None, dist=None):
    """Measures at which every smollm2 gate passes, with overrides."""
    r = {"top1_agreement": 1.0, "kl_mean": 1e-11, "first_generated_top1_fraction": 1.0, "greedy_identical_fraction": 1.0}
    l_ = {"top1_agreement": 0.964, "kl_mean": 3.5e-3, "first_generated_top1_fraction": 1.0, "greedy_identical_fraction": 0.25}
    return {"reference": {**r, **(ref or {})}, "llama.cpp": {**l_, **(llama or {})},
            "reference_distribution": {"entropy_ratio": 0.3, **(dist or {})}}


#: A floor like smollm2's measured one: top-1 0.965 (KV cache) / 0.963 (activations), KL 3.75e-3 / 3.59e-3.
FLOORS = {"top1_agreement": {"llama_cpp_kv_cache": 0.965, "reference_activations": 0.963},
          "kl_mean": {"llama_cpp_kv_cache": 3.75e-3, "reference_activations": 3.59e-3}}


def test_statistical_thresholds_are_floor_expressions():
    gates = {g["id"]: g for g in parity_gates.evaluate_gates(PROFILE, _measured(), FLOORS)}
    assert all(g["passed"] for g in gates.values())
    top1, kl = gates["llama_cpp_top1"], gates["llama_cpp_kl"]
    # top-1: the lower of the two agreements, minus 0.01; KL: the higher of the two means, times 1.5
    assert (top1["floor"], top1["threshold"]) == (0.963, pytest.approx(0.953))
    assert (kl["floor"], kl["threshold"]) == (3.75e-3, pytest.approx(5.625e-3))
    assert top1["margin"] == pytest.approx(0.011) and kl["margin"] == pytest.approx(2.125e-3)
    assert top1["floor_parts"] == FLOORS["top1_agreement"] and top1["kind"] == "statistical"
    assert gates["reference_kl"]["kind"] == "exact" and "floor" not in gates["reference_kl"]
    # greedy continuations against llama.cpp are reported, never gated
    assert not any(g["against"] == "llama.cpp" and g["metric"].startswith("greedy") for g in gates.values())


@pytest.mark.parametrize("against,metric,value,gate", [
    ("reference", "top1_agreement", 0.9989, "reference_top1"),
    ("reference", "kl_mean", 1.01e-5, "reference_kl"),
    ("reference", "first_generated_top1_fraction", 8 / 9, "reference_first_token"),
    ("reference", "greedy_identical_fraction", 6 / 8, "reference_greedy"),
    ("llama.cpp", "top1_agreement", 0.9529, "llama_cpp_top1"),
    ("llama.cpp", "kl_mean", 5.63e-3, "llama_cpp_kl"),
    ("reference_distribution", "entropy_ratio", 0.7501, "reference_entropy"),
])
def test_each_gate_fails_just_past_its_threshold(against, metric, value, gate):
    key = {"reference": "ref", "llama.cpp": "llama", "reference_distribution": "dist"}[against]
    m = _measured(**{key: {metric: value}})
    gates = {g["id"]: g for g in parity_gates.evaluate_gates(PROFILE, m, FLOORS)}
    assert not gates[gate]["passed"] and gates[gate]["margin"] < 0
    assert sum(not g["passed"] for g in gates.values()) == 1


def test_seven_of_eight_identical_greedy_continuations_pass():
    gates = {g["id"]: g for g in parity_gates.evaluate_gates(PROFILE, _measured(ref={"greedy_identical_fraction": 7 / 8}), FLOORS)}
    assert gates["reference_greedy"]["passed"]


def test_a_higher_floor_raises_the_bar():
    # the same measure passes against one floor and fails against a floor two points higher
    high = {"top1_agreement": {"llama_cpp_kv_cache": 0.99, "reference_activations": 0.985}, "kl_mean": FLOORS["kl_mean"]}
    assert {g["id"] for g in parity_gates.evaluate_gates(PROFILE, _measured(), high) if not g["passed"]} == {"llama_cpp_top1"}


def test_skipped_comparison_fails_its_gates_as_not_measured():
    gates = {g["id"]: g for g in parity_gates.evaluate_gates(PROFILE, {"llama.cpp": _measured()["llama.cpp"],
                                                                       "reference": None}, None)}
    assert not any(g["passed"] for g in gates.values())
    assert gates["reference_top1"]["measured"] is None and "reference was skipped" in gates["reference_top1"]["note"]
    assert gates["llama_cpp_kl"]["floor"] is None and gates["llama_cpp_kl"]["threshold"] is None


def test_unmeasured_gate_metric_is_an_error():
    with pytest.raises(BringupError, match="was not measured"):
        parity_gates.evaluate_gates(PROFILE, {"reference": {"top1_agreement": 1.0}, "llama.cpp": {}}, FLOORS)


# -- data files ----------------------------------------------------------------------------------

def test_profile_and_prompt_set_validate():
    validate(PROFILE, "parity_profile")
    validate(PROMPTS, "prompt_set")
    assert len(PROMPTS["prompts"]) >= 8
    kinds = {p["kind"] for p in PROMPTS["prompts"]}
    assert kinds == {"chat", "code", "prose", "numbers", "non-english"}
    assert (ROOT / PROFILE["prompt_set"]).is_file()
    assert PROFILE["min_prompts"] >= 8 and PROFILE["min_positions"] >= 1024


@pytest.mark.parametrize("path", sorted((ROOT / "config/parity_profiles").glob("*.json")), ids=lambda p: p.stem)
def test_every_profile_validates_and_names_its_model(path):
    prof = json.loads(path.read_text())
    validate(prof, "parity_profile", str(path))
    assert prof["model"] == path.stem and (ROOT / prof["prompt_set"]).is_file()
    if prof["prompt_set"] == "config/prompts/default.json":
        assert prof["min_prompts"] >= 8 and prof["min_positions"] >= 1024
    else:   # a set sized for its model (the billion-parameter ones): smaller, and the history says why
        assert prof["min_prompts"] >= 4 and prof["min_positions"] >= 300
        assert any(prof["prompt_set"].split("/")[-1] in h["reason"] for h in prof["history"])
    assert all(g["reason"] for g in prof["gates"])


def test_issue_gates_are_in_the_profile():
    g = {x["id"]: x for x in PROFILE["gates"]}
    assert (g["reference_top1"]["cmp"], g["reference_top1"]["threshold"]) == (">=", 0.999)
    assert (g["reference_kl"]["cmp"], g["reference_kl"]["threshold"]) == ("<=", 1e-5)
    assert g["reference_first_token"]["threshold"] == 1.0 and g["reference_greedy"]["threshold"] == 0.875
    assert (g["llama_cpp_top1"]["cmp"], g["llama_cpp_top1"]["floor_minus"]) == (">=", 0.01)
    assert (g["llama_cpp_kl"]["cmp"], g["llama_cpp_kl"]["floor_times"]) == ("<=", 1.5)
    assert "threshold" not in g["llama_cpp_top1"] and "threshold" not in g["llama_cpp_kl"]
    assert PROFILE["greedy"]["max_tokens"] == 128
    # the old hand-picked llama.cpp thresholds are gone, with a history entry saying why
    assert "teacher_forced_top1" not in g and "removed" in PROFILE["history"][-1]["reason"]


@pytest.mark.parametrize("path", sorted((ROOT / "config/parity_profiles").glob("*.json")), ids=lambda p: p.stem)
def test_reasons_are_self_contained(path):
    prof = json.loads(path.read_text())
    texts = [g["reason"] for g in prof["gates"]] + [h["reason"] for g in prof["gates"] for h in g["history"]]
    texts += [h["reason"] for h in prof["history"]] + [prof["xray"]["reason"]]
    assert not [t for t in texts if re.search(r"\bissue\s*\d", t, re.I)]


def test_a_statistical_gate_needs_a_floor_expression_not_a_number():
    bad = copy.deepcopy(PROFILE)
    g = next(x for x in bad["gates"] if x["id"] == "llama_cpp_top1")
    g["threshold"] = 0.98   # a fixed number next to the floor expression
    with pytest.raises(BringupError):
        validate(bad, "parity_profile")
    del g["floor_minus"]
    validate(bad, "parity_profile")   # a fixed threshold alone is an exact gate: valid, and visible in the diff


def test_gate_without_reason_is_rejected():
    bad = copy.deepcopy(PROFILE)
    del bad["gates"][0]["reason"]
    with pytest.raises(BringupError, match="reason"):
        validate(bad, "parity_profile")


def test_unknown_gate_metric_is_rejected():
    bad = copy.deepcopy(PROFILE)
    bad["gates"][0]["metric"] = "vibes"
    with pytest.raises(BringupError):
        validate(bad, "parity_profile")


class _TemplateOracle:
    """The parts of LlamaCppOracle that prompt tokenization reads, for a GGUF whose chat template is
    ``template`` (None: it has none) and architecture ``arch``; one token id per character."""

    def __init__(self, template, arch="llama"):
        self.template, self.arch, self.add_special = template, arch, []

    def meta(self, key):
        # None for an absent key, as llama.cpp's llama_model_meta_val_str answers (e.g. expert_count)
        return {"tokenizer.chat_template": self.template, "general.architecture": self.arch}.get(key)

    def special_tokens(self):
        return {"bos": 1, "eos": 2}

    def token_text(self, t):
        return {1: "<s>", 2: "</s>"}[t]

    def add_bos(self):
        return True

    def tokenize(self, text, add_special, parse_special=True):
        self.add_special.append(add_special)
        return [ord(c) for c in text]


CHAT_SET = {"name": "t", "prompts": [{"id": "c", "kind": "chat", "messages": [{"role": "user", "content": "hi"}]}]}


def test_chat_prompts_render_with_the_gguf_template():
    # trim_blocks + lstrip_blocks (the settings of transformers' chat templates): the newline after
    # a block tag and the indentation before one are not output
    o = _TemplateOracle("{{ bos_token }}{% for m in messages %}\n    {% if true %}<{{ m.role }}>{{ m.content }}"
                        "{% endif %}\n{% endfor %}{% if add_generation_prompt %}<assistant>{{ eos_token }}{% endif %}")
    prompts, how = parity.tokenize_prompts(CHAT_SET, o)
    assert prompts[0]["text"] == "<s><user>hi<assistant></s>"
    assert prompts[0]["tokens"] == [ord(c) for c in prompts[0]["text"]]
    assert o.add_special == [False]   # the template's text holds the BOS; nothing is added
    assert how == "GGUF tokenizer.chat_template (jinja2 sandbox)"


def test_chat_prompts_without_a_template_use_the_circuit_format():
    o = _TemplateOracle(None, arch="gemma3")
    prompts, how = parity.tokenize_prompts(CHAT_SET, o)
    assert prompts[0]["text"] == "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    assert o.add_special == [True] and how.startswith("circuit chat format 'gemma'")


@pytest.mark.parametrize("tmpl,match", [
    ("{{ messages.__class__.__mro__[1].__subclasses__() }}", "sandbox forbids"),
    ("{{ raise_exception('no system role') }}", "refused the conversation: no system role"),
    ("{{ 1 / 0 }}", "ZeroDivisionError"),
    ("{% if no_such_variable %}x{% endif %}", "undefined"),
])
def test_hostile_chat_template_is_a_clear_error(tmpl, match):
    with pytest.raises(BringupError, match=match):
        parity.tokenize_prompts(CHAT_SET, _TemplateOracle(tmpl))


# -- run_parity with synthetic programs ------------------------------------------------------------


def test_run_parity_passes_for_a_faithful_program():
    doc, _ = run_synthetic(Synthetic(noise=1e-6, seed=4))
    assert doc["verdict"] == "pass", [(g["id"], g["measured"], g["threshold"]) for g in doc["gates"]]
    assert doc["overall"]["n_positions"] == 8 * 130 and doc["overall"]["n_prompts"] == 8
    assert doc["reference"]["overall"]["greedy_identical_fraction"] == 1.0
    assert doc["reference"]["overall"]["top1_agreement"] == 1.0 and doc["reference"]["overall"]["kl_mean"] < 1e-9
    assert len(doc["prompts"][0]["kl_per_position"]) == 130
    # the floor's two parts were measured on the same prompts, and the floor is the worse of them
    parts = doc["floor"]["parts"]
    assert parts["llama_cpp_kv_cache"]["overall"]["n_positions"] == 8 * 130
    worst = min(p["overall"]["top1_agreement"] for p in parts.values())
    assert doc["floor"]["floor"]["top1_agreement"] == worst


def test_reference_pass_reused_when_the_numerics_are_one_computation():
    """SAME_AS_REFERENCE gives the document a second run of the same reference gives, and says so."""
    ours = Synthetic(noise=1e-6, seed=4)
    kw = dict(model="synthetic", ours=ours, prompts=synthetic_prompts(), profile=SMALL_GREEDY, oracle_info={"name": "synthetic"},
              program_info={}, inputs={}, reference=Synthetic(), oracle_kv_f32=Synthetic(noise=0.3, seed=3))
    reused, _ = parity.run_parity(oracle=Synthetic(noise=0.3, seed=1), reference_llama_act=parity.SAME_AS_REFERENCE, **kw)
    twice, _ = parity.run_parity(oracle=Synthetic(noise=0.3, seed=1), reference_llama_act=Synthetic(), **kw)
    validate(reused, "parity")
    part = reused["floor"]["parts"]["reference_activations"]
    assert part.pop("identical") == parity.IDENTICAL_NUMERICS and "identical" not in twice["floor"]["parts"]["reference_activations"]
    assert reused == twice
    assert part["overall"]["kl_mean"] == 0 and part["overall"]["top1_agreement"] == 1


def test_run_parity_fails_for_a_wrong_program():
    doc, _ = run_synthetic(Synthetic(noise=3.0, seed=5))
    assert doc["verdict"] == "fail"
    failed = {g["id"] for g in doc["gates"] if not g["passed"]}
    assert {"reference_top1", "reference_kl", "reference_greedy", "llama_cpp_top1", "llama_cpp_kl"} <= failed


def test_small_errors_fail_the_exact_gates_only():
    # an error far below llama.cpp's own disagreement still fails against the reference
    doc, _ = run_synthetic(Synthetic(noise=0.05, seed=6))
    failed = {g["id"] for g in doc["gates"] if not g["passed"]}
    assert "reference_kl" in failed and not failed & {"llama_cpp_top1", "llama_cpp_kl"}


def test_without_the_reference_the_exact_gates_fail_as_not_measured():
    doc, _ = run_synthetic(Synthetic(noise=1e-6, seed=4), reference=False)
    assert doc["verdict"] == "fail" and doc["reference"]["status"] == "skipped"
    by_id = {g["id"]: g for g in doc["gates"]}
    assert by_id["reference_top1"]["measured"] is None and not by_id["llama_cpp_kl"]["passed"]


# -- a program with quantized activations (the ggml-q8 build) -------------------------------------

Q8_CONTRACT = {"layer.0.attn_q": "Q8_1", "layer.0.ffn_down": "Q8_1", "output": "Q8_0"}


def test_gate_set_follows_the_activation_contract():
    float_gates, why = parity_gates.select_gates(PROFILE, {"layer.0.attn_q": "F32"})
    assert float_gates == PROFILE["gates"] and why.startswith("float activations")
    assert parity_gates.select_gates(PROFILE, None)[0] == PROFILE["gates"]     # no IR: the profile's
    q_gates, why = parity_gates.select_gates(PROFILE, Q8_CONTRACT)
    assert "1 Q8_0, 2 Q8_1 linear ops" in why
    # the quantized_activations gates replace those against the reference; llama.cpp's and the
    # reference distribution's (a property of the model) stay
    assert [g["id"] for g in q_gates] == ([g["id"] for g in PROFILE["quantized_activations"]["gates"]]
                                          + [g["id"] for g in PROFILE["gates"]
                                             if g["against"] in ("llama.cpp", "reference_distribution")])
    by_id = {g["id"]: g for g in q_gates}
    assert by_id["reference_ops"]["threshold"] == 0 and by_id["reference_kl_floor"]["floor_times"] >= 1
    bare = {k: v for k, v in PROFILE.items() if k != "quantized_activations"}
    with pytest.raises(BringupError, match="quantizes the activations of 3 linear op.*no 'quantized_activations'"):
        parity_gates.select_gates(bare, Q8_CONTRACT)


def _xray(rel_errs, missing=(), tol=1e-3, status="ran"):
    return {"status": status, "rel_tol": tol, "missing": list(missing),
            "checkpoints": [{"name": f"op{i}", "rel_err": e} for i, e in enumerate(rel_errs)]}


def test_xray_measured_counts_every_unverified_op():
    assert parity.xray_measured(_xray([1e-7, 3e-7])) == {"ops_beyond_rel_tol": 0.0}
    assert parity.xray_measured(_xray([1e-7, 2e-3, None])) == {"ops_beyond_rel_tol": 2.0}   # beyond, non-finite
    assert parity.xray_measured(_xray([1e-7], missing=["layer.3.attn_v"])) == {"ops_beyond_rel_tol": 1.0}
    assert parity.xray_measured(_xray([])) is None                        # compared nothing: not measured
    assert parity.xray_measured({"status": "unavailable", "error": "no --dump-hidden"}) is None
    assert parity.xray_measured(None) is None


def test_quantized_program_is_gated_per_op_and_on_the_floor():
    """End to end a quantized program drifts like the floor's pairs (noise 0.3 here, the synthetic
    llama.cpp's own): the exact gates would fail it, its own gates pass it once X-ray has run, and
    a wrong op X-ray finds fails it."""
    q_profile = {**SMALL_GREEDY, "gates": parity_gates.select_gates(SMALL_GREEDY, Q8_CONTRACT)[0]}
    doc, _ = parity.run_parity(model="synthetic", oracle=Synthetic(noise=0.3, seed=1),
                               ours=Synthetic(noise=0.3, seed=7), prompts=synthetic_prompts(), profile=q_profile,
                               oracle_info={"name": "synthetic"}, program_info={}, inputs={},
                               reference=Synthetic(), reference_llama_act=parity.SAME_AS_REFERENCE,
                               oracle_kv_f32=Synthetic(noise=0.3, seed=3))
    validate(doc, "parity")
    by_id = {g["id"]: g for g in doc["gates"]}
    # before X-ray: the per-op gate fails as not measured, never a silent pass
    assert doc["verdict"] == "fail" and by_id["reference_ops"]["measured"] is None
    assert "not measured" in by_id["reference_ops"]["note"] and by_id["reference_kl_floor"]["passed"]
    doc["xray"] = _xray([1e-7, 3e-7])
    parity.apply_gates(doc, q_profile)
    validate(doc, "parity")
    assert doc["verdict"] == "pass", [(g["id"], g["measured"], g["threshold"]) for g in doc["gates"]]
    assert {g["id"]: g["kind"] for g in doc["gates"]}["reference_ops"] == "exact"
    doc["xray"] = _xray([1e-7, 0.2])
    parity.apply_gates(doc, q_profile)
    assert doc["verdict"] == "fail" and [g["id"] for g in doc["gates"] if not g["passed"]] == ["reference_ops"]
    # the same program under the float gates fails the exact ones
    parity.apply_gates(doc, SMALL_GREEDY)
    assert {"reference_top1", "reference_kl"} <= {g["id"] for g in doc["gates"] if not g["passed"]}


def test_too_small_prompt_set_is_refused():
    with pytest.raises(BringupError, match="prompt set too small"):
        run_synthetic(Synthetic(), prompts=synthetic_prompts(n=8, T=100))   # 800 < 1024 positions
    with pytest.raises(BringupError, match="prompt set too small"):
        run_synthetic(Synthetic(), prompts=synthetic_prompts(n=7, T=200))   # 7 < 8 prompts


def test_greedy_by_teacher_forcing_by_hand():
    # rows 1.. follow the prompt's last position; argmax per row: 2, 3, 0, 1
    logits = np.array([[9, 0, 0, 0], [0, 0, 5, 0], [0, 0, 0, 5], [5, 0, 0, 0], [0, 5, 0, 0]], dtype=np.float32)
    assert metrics.greedy_by_teacher_forcing(logits, 2, [2, 3, 0], 3) == [2, 3, 0]      # identical
    assert metrics.greedy_by_teacher_forcing(logits, 2, [2, 1, 0], 3) == [2, 3]         # parts at the 2nd token
    assert metrics.greedy_by_teacher_forcing(logits, 2, [2, 3], 3) == [2, 3, 0]         # ours stopped, it would not
    assert metrics.greedy_by_teacher_forcing(logits, 2, [2, 3], 3, eog=[3]) == [2, 3]   # both stop after token 3
    with pytest.raises(BringupError, match="logit rows"):
        metrics.greedy_by_teacher_forcing(logits, 2, [2, 3, 0, 1], 4)


def test_greedy_by_teacher_forcing_equals_free_running_greedy():
    ref, ours = Synthetic(), Synthetic(noise=0.8, seed=9)
    for toks in ([3, 1, 4, 1, 5], [2, 7, 1, 8]):
        mine = ours.greedy(toks, 12)
        got = metrics.greedy_by_teacher_forcing(ref.logits_all(toks + mine), len(toks), mine, 12)
        free = ref.greedy(toks, 12)
        p = metrics.identical_prefix(free, mine)
        assert got == free[:p + 1] if p < 12 else got == free


def test_plot_is_deterministic(tmp_path):
    _, arrays = run_synthetic(Synthetic(noise=0.5, seed=2))
    parity.plot_kl(arrays, tmp_path / "a.png")
    parity.plot_kl(arrays, tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


# -- the one runner of bringup-run (bringup.core.native), against a stand-in CLI ------------------

FAKE_CLI = r'''#!{python}
import json, subprocess, sys
mode = "{mode}"
if mode == "hang":   # a program that never ends, with a child of its own
    child = subprocess.Popen(["sleep", "60"])
    open(sys.argv[1] + ".child", "w").write(str(child.pid))
    child.wait()
import numpy as np
args = sys.argv[3:]
opt = {{args[i]: args[i + 1] for i in range(0, len(args) - 1) if args[i].startswith("--") and not args[i + 1].startswith("--")}}
toks = [int(t) for t in opt["--prompt-tokens"].split(",")]
if mode == "fail":
    sys.stderr.write("model refused: weights were generated for another library\n"); sys.exit(3)
if "--all-logits" in opt:
    n = len(toks) - (1 if mode == "short" else 0)
    np.arange(n * 10, dtype="<f4").tofile(opt["--all-logits"])
elif "--json" in args:
    print(json.dumps({{"prompt_tokens": toks, "generated_tokens": [7] * int(opt["--max-tokens"]), "text": "",
                      "timing": {{"prompt_tok_s": 1.0}}, "argv": sys.argv[1:]}}))
'''


def _fake_cli(tmp_path, mode="ok", **kw):
    p = tmp_path / f"fake-{mode}"
    p.write_text(FAKE_CLI.format(python=sys.executable, mode=mode))
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    for name in ("libmodel.so", "weights.bump"):   # regular files, as the runner checks before it starts
        (tmp_path / name).touch()
    return NativeProgram(p, tmp_path / "libmodel.so", tmp_path / "weights.bump", n_vocab=10, **kw)


def test_native_program_reads_all_logits_and_greedy(tmp_path):
    prog = _fake_cli(tmp_path)
    lg = prog.logits_all([1, 2, 3])
    assert lg.shape == (3, 10) and lg.dtype == np.float32 and lg[2, 9] == 29.0
    assert prog.greedy([1, 2], 4) == [7, 7, 7, 7]


def test_native_program_wrong_logits_size_is_an_error(tmp_path):
    with pytest.raises(BringupError, match=r"wrote 80 bytes; expected 120"):
        _fake_cli(tmp_path, "short").logits_all([1, 2, 3])


def test_native_program_failure_quotes_stderr_and_no_paths(tmp_path):
    with pytest.raises(BringupError, match="(?s)exit 3.*generated for another library") as ei:
        _fake_cli(tmp_path, "fail").greedy([1], 2)
    # the message can end up in parity.json (X-ray unavailable): program name and options only
    assert str(tmp_path) not in str(ei.value) and "fake-fail --prompt-tokens" in str(ei.value)
    p = _fake_cli(tmp_path, "fail").run(["--prompt-tokens", "1"], check=False)
    assert p.returncode == 3 and b"another library" in p.stderr


def test_native_program_missing_cli(tmp_path):
    with pytest.raises(BringupError, match="not found"):
        NativeProgram(tmp_path / "nothing-here", "lib", "w").greedy([1], 1)


def test_native_program_timeout_kills_what_it_started(tmp_path):
    prog = _fake_cli(tmp_path, "hang", timeout_s=3.0)
    t0 = time.monotonic()
    with pytest.raises(BringupError, match="timed out after 3 s"):
        prog.greedy([1], 1)
    assert time.monotonic() - t0 < 30
    pid = int((tmp_path / "libmodel.so.child").read_text())
    # the CLI's own child is gone too (or a zombie about to be reaped by init), not left running
    stat_file = Path(f"/proc/{pid}/stat")
    for _ in range(50):
        if not stat_file.exists() or stat_file.read_text().split(")")[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the hung CLI's child {pid} still runs")


def test_native_program_command_line(tmp_path):
    # paths stay as given (certify's standalone run executes ./bringup-run in its own folder);
    # threads=None leaves --threads to the CLI's default (the memory model's calibration)
    assert NativeProgram("./bringup-run", "./libmodel.so", "./weights.bump", threads=None).argv(["--x"]) == \
        ["./bringup-run", "./libmodel.so", "./weights.bump", "--x"]
    prog = _fake_cli(tmp_path, threads=3)
    doc = prog.run_json(NativeProgram.greedy_args([5, 6], 2))
    assert doc["argv"] == [str(tmp_path / "libmodel.so"), str(tmp_path / "weights.bump"), "--prompt-tokens", "5,6",
                           "--max-tokens", "2", "--temperature", "0", "--json", "--threads", "3"]
    # in a process of its own (its peak RSS its own, for calibration): same output, same command line
    p = prog.run(["--prompt-tokens", "1", "--max-tokens", "1", "--json"], own_process=True)
    assert json.loads(p.stdout)["generated_tokens"] == [7] and p.args[0] == str(tmp_path / "fake-ok")


def test_native_program_timing(tmp_path):
    prog = _fake_cli(tmp_path)
    assert prog.timing([1, 2], 3) == {"prompt_tok_s": 1.0}
    with pytest.raises(BringupError, match="lacks decode_ms"):
        prog.timing([1, 2], 3, require=("prompt_tok_s", "decode_ms"))
    with pytest.raises(BringupError, match="no timing object"):
        native.timing_of({"generated_tokens": []})


def test_bump_identity_reads_header_hashes(tmp_path):
    head = b"BUMP" + bytes(60) + bytes(range(32)) + bytes(range(32, 64)) + bytes(128)
    (tmp_path / "w.bump").write_bytes(head)
    ident = parity.bump_identity(tmp_path / "w.bump")
    assert ident == {"payload_sha256": bytes(range(32)).hex(), "header_sha256": bytes(range(32, 64)).hex()}
    (tmp_path / "x.bump").write_bytes(b"GGUF" + bytes(200))
    with pytest.raises(BringupError, match="not a BUMP"):
        parity.bump_identity(tmp_path / "x.bump")
