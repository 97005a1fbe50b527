"""The oracles on the real smollm2 weights, and `bringup parity` end to end.

(The numpy reference is checked against llama.cpp in test_xray.py, which loads it anyway.)
The end-to-end run uses a stand-in for bringup-run that answers with
llama.cpp itself, so parity must be perfect and the output reproducible byte for byte.
"""
from __future__ import annotations

import json
import stat
import sys

import gguf
import numpy as np
import pytest

from bringup.ir.block import expand
from bringup.core.errors import BringupError
from bringup.parity import cli as parity_cli
from bringup.parity import run as parity
from bringup.parity.prompt_sets import resolve_profile
from bringup.parity.oracles import LlamaCppOracle
from bringup.core.paths import ROOT
from bringup.core.schemas import validate



@pytest.fixture(scope="module")
def oracle(smollm2_gguf):
    with LlamaCppOracle(smollm2_gguf, n_ctx=1024, n_threads=1) as o:
        yield o


def test_prompt_set_meets_the_profile_on_smollm2(oracle, smollm2_gguf):
    prof = json.loads((ROOT / "config/parity_profiles/smollm2.json").read_text())
    ps = json.loads((ROOT / prof["prompt_set"]).read_text())
    prompts, chat_source = parity.tokenize_prompts(ps, oracle)
    assert chat_source.startswith("GGUF tokenizer.chat_template")
    n = sum(len(p["tokens"]) for p in prompts)
    assert len(prompts) >= prof["min_prompts"] and n >= prof["min_positions"], n
    chat = [p for p in prompts if p["kind"] == "chat"]
    # the chat template's special markers became single special tokens, not text pieces
    im_start = oracle.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert len(im_start) == 1 and chat[0]["tokens"][0] == im_start[0]
    assert chat[0]["text"].endswith("<|im_start|>assistant\n")


def test_llama_cpp_greedy_is_deterministic_and_consistent(oracle):
    toks = oracle.tokenize("def fibonacci(n):\n", add_special=False)
    g1, g2 = oracle.greedy(toks, 12), oracle.greedy(toks, 12)
    assert g1 == g2 and len(g1) == 12
    assert int(np.argmax(oracle.logits_all(toks)[-1])) == g1[0]
    # teacher-forcing the greedy continuation predicts it again, position by position
    full = oracle.logits_all(toks + g1[:-1])
    assert list(np.argmax(full[len(toks) - 1:], axis=1)) == g1


def test_oracle_records_its_provenance(oracle):
    info = oracle.info()
    assert info["package_version"] == "0.3.36"
    assert "AVX" in info["system_info"] or "NEON" in info["system_info"]
    assert info["params"]["use_extra_bufts"] is False and info["params"]["n_threads"] == 1
    assert info["library_sha256"] and all(len(h) == 64 for h in info["library_sha256"].values())
    assert info["cpu"]["machine"]


def test_token_outside_vocabulary_is_an_error(oracle):
    with pytest.raises(BringupError, match="outside the vocabulary"):
        oracle.logits_all([1, oracle.n_vocab])


STAND_IN = r'''#!{python}
# bringup-run stand-in that answers with llama.cpp: parity against the oracle must be perfect.
import json, sys
sys.path.insert(0, {root!r})
import numpy as np
from bringup.parity.oracles import LlamaCppOracle
args = sys.argv[3:]
opt = {{args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--") and not args[i + 1].startswith("--")}}
toks = [int(t) for t in opt["--prompt-tokens"].split(",")]
o = LlamaCppOracle({gguf!r}, n_ctx=512, n_threads=int(opt["--threads"]))
if "--dump-hidden" in opt:
    sys.stderr.write("bringup-run: unknown option --dump-hidden\n"); sys.exit(2)
if "--all-logits" in opt:
    o.logits_all(toks).astype("<f4").tofile(opt["--all-logits"])
else:
    print(json.dumps({{"prompt_tokens": toks, "generated_tokens": o.greedy(toks, int(opt["--max-tokens"])),
                      "text": "", "timing": {{}}}}))
'''


def _f32_ir(gguf_path) -> dict:
    """A prefill IR whose linear ops (every projection of every layer and the head) are served by
    providers that declare F32 activations: the contract of an f32-numerics smollm2 build."""
    n_layer = int(gguf.GGUFReader(str(gguf_path)).fields["llama.block_count"].contents())
    ops = [{"id": f"layer.{L}.{op}", "op": "linear", "provider": "linear.q4_1.scalar"} for L in range(n_layer)
           for op in ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down")]
    ops = [dict(op, index=i) for i, op in enumerate(ops + [{"id": "footer.lm_head", "op": "linear",
                                                            "provider": "linear.q8_0.scalar"}])]
    # the ops as header ops of an IR with no block (what the activation contract reads: linear providers)
    return {"header": ops, "block": {"n_layer": 0, "ops": [], "layers": []}, "footer": []}


@pytest.mark.slow   # `bringup parity` end to end on the real smollm2 (reference, llama.cpp, X-ray)
def test_bringup_parity_end_to_end(tmp_path, smollm2_gguf):
    """llama.cpp itself as "our program", declaring F32 activations: it is at zero distance from
    llama.cpp, so the statistical gates pass whatever the floor, but its Q8 activation rounding is
    not the contract it declares, so the exact gates against the reference catch it."""
    cli = tmp_path / "bringup-run"
    cli.write_text(STAND_IN.format(python=sys.executable, root=str(ROOT), gguf=str(smollm2_gguf)))
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "libmodel.so").write_bytes(b"\x7fELF stand-in")
    (tmp_path / "weights.bump").write_bytes(b"BUMP" + bytes(252))
    prof = json.loads((ROOT / "config/parity_profiles/smollm2.json").read_text())
    prof.update(min_prompts=2, min_positions=20, greedy={"max_tokens": 6, "min_prefix": 4})
    (tmp_path / "profile.json").write_text(json.dumps({**prof, "model": "default"}))
    ps = json.loads((ROOT / "config/prompts/default.json").read_text())
    ps["prompts"] = [p for p in ps["prompts"] if p["id"] in ("chat-travel", "code-c")]
    (tmp_path / "prompts.json").write_text(json.dumps(ps))
    (tmp_path / "ir_prefill.json").write_text(json.dumps(_f32_ir(smollm2_gguf)))
    args = ["--model", "smollm2", "--gguf", str(smollm2_gguf), "--cli", str(cli), "--ir", str(tmp_path / "ir_prefill.json"),
            "--lib", str(tmp_path / "libmodel.so"), "--weights", str(tmp_path / "weights.bump"),
            "--profile", str(tmp_path / "profile.json"), "--prompts", str(tmp_path / "prompts.json"),
            "--xray", "always", "--xray-tokens", "4", "--threads", "1"]
    assert parity_cli.cli_main(args + ["--out-dir", str(tmp_path / "a")]) == 0
    doc = json.loads((tmp_path / "a" / "parity.json").read_text())
    validate(doc, "parity")
    gates = {g["id"]: g for g in doc["gates"]}
    o = doc["overall"]
    assert o["top1_agreement"] == 1.0 and o["kl_mean"] == 0.0 and o["max_abs_diff"] == 0.0
    assert all(p["greedy"]["identical"] for p in doc["prompts"])
    assert gates["llama_cpp_top1"]["passed"] and gates["llama_cpp_kl"]["passed"]
    # the floor was measured: llama.cpp's KV cache types and the two activation contracts disagree
    fl = gates["llama_cpp_kl"]["floor_parts"]
    assert fl["llama_cpp_kv_cache"] > 0 and fl["reference_activations"] > 1e-4
    assert gates["llama_cpp_kl"]["floor"] == max(fl.values())
    assert doc["verdict"] == "fail" and not gates["reference_kl"]["passed"]
    assert gates["reference_kl"]["measured"] > 100 * gates["reference_kl"]["threshold"]
    assert doc["reference"]["activations"]["ops_per_dtype"] == {"F32": len(expand(_f32_ir(smollm2_gguf)))}
    assert doc["inputs"]["gguf"]["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert doc["inputs"]["profile"]["default"] is True
    assert doc["oracle"]["package_version"] == "0.3.36"
    assert doc["floor"]["parts"]["llama_cpp_kv_cache"]["oracle_params"]["kv_type"] == "f32"
    # the reference's BLAS ran on one thread (its threads spin-wait beside other jobs), and says so
    assert doc["settings"]["reference_blas"]["threads"] == 1
    assert [lib.endswith("(1 threads)") for lib in doc["settings"]["reference_blas"]["libraries"]] == [True]
    assert doc["settings"]["prompt_set"] == "full"
    assert doc["inputs"]["chat_rendering"].startswith("GGUF tokenizer.chat_template")
    # a program that cannot dump hidden states: X-ray is recorded as unavailable, not dropped
    assert doc["xray"]["status"] == "unavailable" and "--dump-hidden" in doc["xray"]["error"]
    assert (tmp_path / "a" / "parity_kl.png").read_bytes()[:4] == b"\x89PNG"
    # same inputs, same bytes
    assert parity_cli.cli_main(args + ["--out-dir", str(tmp_path / "b")]) == 0
    # same bytes but for the one measurement parity.json holds: the reference's peak resident memory
    # per pass (bringup.core.rss; which pass peaked and by how much vary with the allocator and the host)
    runs = [json.loads((tmp_path / d / "parity.json").read_text()) for d in "ab"]
    for r in runs:
        mem = r["reference"]["memory"]
        assert mem["status"] == "measured" and mem["passes"] > 0
        r["reference"]["memory"] = {k: mem[k] for k in ("status", "passes", "method", "prediction")}
    assert runs[0] == runs[1]
    assert (tmp_path / "a" / "parity_kl.png").read_bytes() == (tmp_path / "b" / "parity_kl.png").read_bytes()


def test_a_model_without_a_profile_gets_the_default_recorded_as_such(tmp_path):
    prof, rec = resolve_profile("no-such-model", None)
    assert prof["model"] == "default" and rec["default"] is True
    assert rec["path"] == "config/parity_profiles/default.json"
    prof, rec = resolve_profile("smollm2", None)
    assert prof["model"] == "smollm2" and rec["default"] is False
    with pytest.raises(BringupError, match="is for model 'smollm2', not 'gemma3'"):
        resolve_profile("gemma3", ROOT / "config/parity_profiles/smollm2.json")


def test_reference_positions_other_than_zero_are_refused(tmp_path):
    with pytest.raises(BringupError, match="every position"):
        parity_cli.cli_main(["--model", "m", "--gguf", "g", "--cli", "c", "--lib", "l", "--weights", "w",
                         "--out-dir", str(tmp_path / "p"), "--reference-positions", "32"])


def test_gemma3_chat_prompts_use_the_circuit_format(gemma3_gguf):
    # the gemma3 270M GGUF carries no chat_template: the circuit's Gemma turn format renders
    with LlamaCppOracle(gemma3_gguf, n_ctx=512, n_threads=1) as o:
        ps = json.loads((ROOT / "config/prompts/default.json").read_text())
        prompts, chat_source = parity.tokenize_prompts(ps, o)
        assert chat_source.startswith("circuit chat format 'gemma'")
        chat = next(p for p in prompts if p["kind"] == "chat")
        assert chat["text"].startswith("<start_of_turn>user\n") and chat["text"].endswith("<start_of_turn>model\n")
        assert chat["tokens"][0] == o.special_tokens()["bos"]
        sot = o.tokenize("<start_of_turn>", add_special=False, parse_special=True)
        assert len(sot) == 1 and chat["tokens"][1] == sot[0]
