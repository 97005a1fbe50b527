"""Circuits as data: schema, the checks beyond it, the expression language, the family contracts."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bringup.formats import chat
from bringup.ir import circuits
from bringup.core import canonjson
from bringup.core.errors import BringupError, UnsupportedError
from bringup.core.paths import CIRCUITS


def load(name):
    return json.loads((CIRCUITS / f"{name}.json").read_text())


def test_all_circuits_load_and_claim_distinct_architectures():
    cs = circuits.all_circuits()
    assert set(cs) >= {"llama", "qwen2", "qwen3", "gemma3", "mistral3"}
    claimed = [(a, c.data.get("when", {}).get("hparam")) for c in cs.values() for a in c.data["architectures"]]
    assert len(claimed) == len(set(claimed))
    for arch in ("llama", "qwen2", "qwen3", "gemma3", "mistral3"):
        assert circuits.for_architecture(arch, hparams={"n_ff": 128}).name == arch


def test_llama_with_experts_is_the_moe_variant(tmp_path):
    """llama with expert_count (config hparam n_expert, from the GGUF) is circuit llama_moe (Mixtral), without it
    llama; the choice is the model's: no hparams with variants present is an error, never the base
    by default. Two variants a model matches, or a second base / same-hparam variant, are errors."""
    assert circuits.for_architecture("llama", hparams={"n_expert": 8, "n_expert_used": 2}).name == "llama_moe"
    assert circuits.for_architecture("llama", hparams={"n_expert": None}).name == "llama"
    with pytest.raises(BringupError, match="has circuit variants .* the model's hparams choose one"):
        circuits.for_architecture("llama")
    assert circuits.for_architecture("qwen3moe").name == "qwen3moe"   # no variants: no hparams needed
    for name in ("llama", "llama_moe"):
        (tmp_path / f"{name}.json").write_text((circuits.CIRCUITS / f"{name}.json").read_text())
    other = json.loads((circuits.CIRCUITS / "llama_moe.json").read_text())
    other["name"], other["when"]["hparam"] = "llama_x", "n_expert_shared"
    canonjson.write(tmp_path / "llama_x.json", other)
    with pytest.raises(BringupError, match="hparams of circuit variants llama_moe, llama_x"):
        circuits.for_architecture("llama", tmp_path, {"n_expert": 8, "n_expert_shared": 1})
    assert circuits.for_architecture("llama", tmp_path, {"n_expert_shared": 1}).name == "llama_x"
    other["when"]["hparam"] = "n_expert"
    canonjson.write(tmp_path / "llama_x.json", other)
    with pytest.raises(BringupError, match="claimed with when.hparam 'n_expert' by circuits 'llama_moe' and 'llama_x'"):
        circuits.all_circuits(tmp_path)


def test_unknown_architecture():
    with pytest.raises(UnsupportedError, match=r"no circuit for architecture 'rwkv7'; supported: gemma2, gemma3, llama") as e:
        circuits.for_architecture("rwkv7")
    assert e.value.exit_code == 4


def test_every_op_is_in_the_catalogue_and_weights_use_canonical_roles():
    roles = {"tok_embd", "output_norm", "output", "attn_norm", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "q_norm",
             "k_norm", "post_attn_norm", "ffn_norm", "w_gate", "w_up", "w_down", "post_ffn_norm",
             "ffn_router", "w_gate_exps", "w_up_exps", "w_down_exps"}  # docs/architecture.md
    for c in circuits.all_circuits().values():
        for sec in circuits.SECTIONS:
            for op in c.data[sec]["ops"]:
                assert op["op"] in circuits.OPS
                for ref in op.get("weights", {}).values():
                    names = [ref] if isinstance(ref, str) else [ref["role"], ref["tied"]]
                    assert set(names) <= roles, (c.name, op["id"], names)


def test_qwen2_and_qwen3_differ_only_in_data():
    q2, q3 = load("qwen2"), load("qwen3")
    ops2 = [o["id"] for o in q2["block"]["ops"]]
    ops3 = [o["id"] for o in q3["block"]["ops"]]
    assert [o for o in ops3 if o not in ops2] == ["q_norm", "k_norm"]    # Qwen3 adds per-head Q/K norm
    assert [o for o in ops2 if o not in ops3] == []
    biases2 = {o["id"]: o["weights"].get("bias") for o in q2["block"]["ops"] if o["op"] == "linear"}
    biases3 = {o["id"]: o["weights"].get("bias") for o in q3["block"]["ops"] if o["op"] == "linear"}
    assert {k: v for k, v in biases2.items() if v} == {"attn_q": "bq", "attn_k": "bk", "attn_v": "bv"}
    assert not any(biases3.values())                                     # and drops the biases
    assert q2["contracts"]["attention"]["rope_layout"] == q3["contracts"]["attention"]["rope_layout"] == "neox"
    assert q3["contracts"]["attention"]["qk_norm"] and not q2["contracts"]["attention"]["qk_norm"]


def test_rope_layouts_follow_llama_cpp_rope_type():
    # llama.cpp src/llama-model.cpp llama_model_rope_type: LLAMA -> NORM; QWEN2, QWEN3, GEMMA3 -> NEOX; MISTRAL3 -> NORM
    want = {"llama": "normal", "mistral3": "normal", "qwen2": "neox", "qwen3": "neox", "gemma3": "neox"}
    for name, layout in want.items():
        assert load(name)["contracts"]["attention"]["rope_layout"] == layout


def test_gemma3_sliding_window_pattern_and_constants():
    g = circuits.for_architecture("gemma3")
    ns = {"rope_theta_local": None, "head_dim": 256, "n_embd": 640, "rope_dim": None, "rope_theta": 1e6,
          "sliding_window": 512}
    for name, spec in g.data["constants"].items():
        ns[name] = spec.get("value", None) if "value" in spec else circuits.evaluate(spec["expr"], ns)
    assert ns["rope_theta_swa"] == 10000.0 and ns["embed_scale"] == 640 ** 0.5 and ns["attn_scale"] == 1 / 16
    assert ns["rot_dim"] == 256
    lv = g.data["layer_values"]
    globals_ = []
    for L in range(18):
        env = dict(ns, L=L)
        for k, spec in lv.items():
            env[k] = circuits.evaluate(spec["expr"], env)
        if env["window"] == 0:
            globals_.append(L)
            assert env["theta_l"] == 1e6
        else:
            assert env["window"] == 512 and env["theta_l"] == 1e4
    assert globals_ == [L for L in range(18) if (L + 1) % 6 == 0] == [5, 11, 17]


def test_chat_contracts():
    sm = load("llama")["contracts"]["chat"]["formats"][0]
    assert (sm["turn_prefix"], sm["turn_suffix"]) == ("<|im_start|>{role}\n", "<|im_end|>\n")
    g = load("gemma3")["contracts"]["chat"]["formats"][0]
    assert g["turn_prefix"] == "<start_of_turn>{role}\n" and g["turn_suffix"] == "<end_of_turn>\n"
    assert g["roles"]["assistant"] == "model" and g["generation_prefix"] == "<start_of_turn>model\n"
    assert g["render"]["system"] == "merge_into_first_user"
    for name in ("qwen2", "qwen3"):
        assert load(name)["contracts"]["chat"]["formats"][-1]["detect"] == "<|im_start|>"


def test_choose_chat_format():
    cs = circuits.all_circuits()
    smollm_tmpl = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                   "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                   "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                   "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                   "{% endif %}")   # the SmolLM2-135M-Instruct GGUF's tokenizer.chat_template
    fmt, why = circuits.choose_chat_format(cs["llama"], smollm_tmpl)
    assert fmt["name"] == "chatml_smollm2" and "contains" in why
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "2+2?"}]
    assert chat.render_chat_format(fmt["render"], msgs, True) == chat.render_template(smollm_tmpl, msgs, True)
    assert circuits.choose_chat_format(cs["llama"], "{{ '<|start_header_id|>' }}")[0]["name"] == "llama3"
    fmt, why = circuits.choose_chat_format(cs["gemma3"], None)
    assert fmt["name"] == "gemma" and "no chat_template" in why
    # llama.cpp src/llama-chat.cpp LLM_CHAT_TEMPLATE_GEMMA, written out by hand
    sys_user = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "}]
    assert chat.render_chat_format(fmt["render"], sys_user, True) == \
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    with pytest.raises(UnsupportedError, match="no chat format of circuit llama matches"):
        circuits.choose_chat_format(cs["llama"], "{{ messages }}")
    with pytest.raises(UnsupportedError, match="no chat_template and circuit llama declares no format"):
        circuits.choose_chat_format(cs["llama"], None)


def test_chat_flat_fields_must_agree_with_render():
    data = load("llama")
    data["contracts"]["chat"]["formats"][0]["turn_suffix"] = "<|end|>\n"
    with pytest.raises(BringupError, match="render turn .* differs from the flat fields"):
        circuits.check(data)
    data = load("llama")
    data["contracts"]["chat"]["formats"][0]["render"]["system"] = "sometimes"
    with pytest.raises(BringupError, match="chat format 'chatml_smollm2': render: chat format is invalid"):
        circuits.check(data)


# ------------------------------------------------------------------ errors in circuit files

def _bad(mutate):
    data = load("llama")
    mutate(data)
    return data


def test_unknown_op_lists_the_known_ones():
    data = _bad(lambda d: d["block"]["ops"][0].update(op="layernorm"))
    with pytest.raises(BringupError, match=r"block op #0 \('attn_norm'\): unknown op 'layernorm'; known ops: add, argmax"):
        circuits.check(data, "llama.json")


def test_unknown_and_missing_ports():
    data = _bad(lambda d: d["block"]["ops"][0]["inputs"].update(z="$in"))
    with pytest.raises(BringupError, match=r"inputs: unknown \['z'\]"):
        circuits.check(data)
    data = _bad(lambda d: d["block"]["ops"][0]["weights"].pop("w"))
    with pytest.raises(BringupError, match=r"weights: missing \['w'\]"):
        circuits.check(data)
    data = _bad(lambda d: d["block"]["ops"][1]["dims"].pop("n_out"))
    with pytest.raises(BringupError, match=r"dims: missing \['n_out'\]"):
        circuits.check(data)


def test_reading_an_undefined_tensor():
    data = _bad(lambda d: d["block"]["ops"][1]["inputs"].update(x="nowhere"))
    with pytest.raises(BringupError, match="reads 'nowhere', which no earlier op of the block writes"):
        circuits.check(data)


def test_writing_a_tensor_twice():
    data = _bad(lambda d: d["block"]["ops"][2]["outputs"].update(y="q"))
    with pytest.raises(BringupError, match="writes 'q', already written"):
        circuits.check(data)


def test_in_not_available_in_header():
    data = _bad(lambda d: d["header"]["ops"][0]["inputs"].update(tokens="$in"))
    with pytest.raises(BringupError, match=r"\$in is not available in the header"):
        circuits.check(data)


def test_schema_violation_is_reported():
    data = _bad(lambda d: d.pop("contracts"))
    with pytest.raises(BringupError, match="does not match schema circuit"):
        circuits.check(data)


def test_circuit_file_name_must_match(tmp_path):
    (tmp_path / "other.json").write_text((CIRCUITS / "llama.json").read_text())
    with pytest.raises(BringupError, match="must be llama.json"):
        circuits.all_circuits(tmp_path)


def test_two_circuits_claiming_one_architecture(tmp_path):
    (tmp_path / "llama.json").write_text((CIRCUITS / "llama.json").read_text())
    d = load("mistral3")
    d["architectures"] = ["llama"]
    (tmp_path / "mistral3.json").write_text(json.dumps(d))
    with pytest.raises(BringupError, match="claimed by circuits 'llama' and 'mistral3'"):
        circuits.all_circuits(tmp_path)


# ------------------------------------------------------------------ expressions

def test_expression_language():
    ns = {"a": 6, "b": 4, "n": None, "s": "neox"}
    assert circuits.evaluate("a * b + a // b - a % b", ns) == 6 * 4 + 6 // 4 - 6 % 4
    assert circuits.evaluate("1.0 / sqrt(a * b * 6)", ns) == 1 / 12
    assert circuits.evaluate("a if n is None else b", ns) == 6
    assert circuits.evaluate("(a + 1) % 6 != 0 and b < a", ns) is True
    assert circuits.evaluate("s", ns) == "neox"
    with pytest.raises(circuits.ExprError, match=r"arithmetic on a null value \(names \['n'\] are null\)"):
        circuits.evaluate("a * n", ns)
    with pytest.raises(circuits.ExprError, match="unknown name 'zz'"):
        circuits.evaluate("zz + 1", ns)
    with pytest.raises(circuits.ExprError, match="division by zero"):
        circuits.evaluate("a / (b - 4)", ns)


@pytest.mark.parametrize("expr", ["__import__('os')", "a.real", "[a][0]", "(lambda: 1)()", "open('x')",
                                  "{'k': 1}", "f'{a}'", "a if a else exec('1')"])
def test_expressions_cannot_run_code(expr):
    with pytest.raises(circuits.ExprError):
        circuits.evaluate(expr, {"a": 1})


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**6, 10**6), st.integers(1, 10**6), st.sampled_from(["+", "-", "*", "//", "%"]))
def test_arithmetic_matches_python(x, y, op):
    assert circuits.evaluate(f"x {op} y", {"x": x, "y": y}) == eval(f"{x} {op} {y}")  # noqa: S307 - test oracle on ints
