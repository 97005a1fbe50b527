"""IR lowering (`bringup ir`): the real smollm2 and gemma3 headers, every circuit on synthetic
configs, and the clear errors (missing / unused weight, null hyper-parameter, overflowing sizes,
unknown architecture).

Expected values are written from the model definitions (llama.cpp src/models/*.cpp and the
hyper-parameters in the brief), not from the lowering code.
"""
from __future__ import annotations

import copy
import json
import math

import pytest

from bringup.ir.block import expand
from bringup.core import canonjson
from bringup.ir import circuits
from bringup.formats import ggml as formats
from bringup.ir import cli as ir_cli
from bringup.ir import lower as ir
from bringup.ir import kernel_maps as kernels
from bringup.core import schemas
from bringup.core.errors import BringupError, UnsupportedError
from tests.helpers.ir import ROLES, TINY_HP, model_inputs, synth_inputs


# ------------------------------------------------------------------ inputs


SMOLLM2_HP = dict(n_layer=30, n_embd=576, n_head=9, n_head_kv=3, head_dim=64, head_dim_v=64, n_ff=1536,
                  n_vocab=49152, n_ctx_train=8192, rope_theta=1e5, rope_dim=64, norm_eps=1e-5,
                  sliding_window=None, attn_logit_softcap=None, final_logit_softcap=None)
GEMMA3_HP = dict(n_layer=18, n_embd=640, n_head=4, n_head_kv=1, head_dim=256, head_dim_v=256, n_ff=2048,
                 n_vocab=262144, n_ctx_train=32768, rope_theta=1e6, rope_dim=None, norm_eps=1e-6,
                 sliding_window=512, attn_logit_softcap=None, final_logit_softcap=None)


@pytest.fixture(scope="module")
def smollm2_inputs(smollm2_gguf):
    return model_inputs(smollm2_gguf)


@pytest.fixture(scope="module")
def gemma3_inputs(gemma3_gguf):
    return model_inputs(gemma3_gguf)


@pytest.fixture(scope="module")
def smollm2_irs(smollm2_inputs):
    return ir.compile_ir(*smollm2_inputs, chunk=64, n_ctx=1024)


@pytest.fixture(scope="module")
def gemma3_irs(gemma3_inputs):
    return ir.compile_ir(*gemma3_inputs, chunk=64, n_ctx=1024)


def ops_of(irx, layer=None, circuit_op=None):
    return [o for o in expand(irx) if (layer is None or o["layer"] == layer)
            and (circuit_op is None or o["circuit_op"] == circuit_op)]


# ------------------------------------------------------------------ real models

def test_smollm2_structure(smollm2_irs, smollm2_inputs):
    cfg, man = smollm2_inputs
    for phase, irx in smollm2_irs.items():
        schemas.validate(irx, "ir")
        # embed + 30 layers x 15 ops (llama block) + output_norm + lm_head; no soft-cap (GGUF has none)
        assert len(expand(irx)) == 1 + 30 * 15 + 2
        assert [o["index"] for o in expand(irx)] == list(range(len(expand(irx))))
        assert irx["weights"]["bound"] == sorted(t["name"] for t in man["tensors"])
        assert len(irx["weights"]["bound"]) == 272
        assert [e["name"] for e in irx["weights"]["excluded"]] == ["tokenizer.blob"]
        head = expand(irx)[-1]
        assert head["op"] == "linear" and head["weights"] == {"w": "tok_embd"}   # tied head
        assert head["provider"] == "linear.q8_0.fast"   # dispatched (ISA chosen at load)
        assert irx["tensors"]["logits"]["kind"] == "io"
        assert irx["tensors"]["logits"]["shape"] == [1, 49152]                  # last token only
        assert len(irx["state"]) == 60
        for o in ops_of(irx, layer=7):
            if o["op"] == "linear":
                assert o["provider"] == "linear.q4_1.fast"
            if o["op"] == "rope":
                assert o["variant"] == "normal" and o["provider"] == "rope.normal.f32.scalar"
                assert o["params"]["theta"] == 100000.0
            if o["op"] == "attention":
                assert o["params"] == {"scale": 1 / math.sqrt(64), "window": 0, "softcap": 0.0}
                assert o["state"] == {"k_cache": "layer.7.k_cache", "v_cache": "layer.7.v_cache"}
                assert o["dims"]["n_ctx"] == 1024
        # each op's selection trace lists every candidate and accepts exactly the chosen one
        for o in expand(irx):
            acc = [c["id"] for c in o["selection"]["candidates"] if c["accepted"]]
            assert acc == [o["provider"]]
    pre, dec = smollm2_irs["prefill"], smollm2_irs["decode"]
    assert pre["dims"]["n_tokens"] == 64 and dec["dims"]["n_tokens"] == 1
    assert pre["tensors"]["layer.0.q"]["shape"] == [64, 9 * 64]      # linear output: [n_tokens, n_out]
    assert pre["tensors"]["layer.0.q_rot"]["shape"] == [64, 9, 64]
    assert pre["tensors"]["footer.x_last"]["view"] == {"base": "layer.29.x_out", "row": "last", "rows": 1,
                                                        "row_bytes": 576 * 4}
    assert "footer.x_last" not in dec["tensors"]   # decode has one token: no view needed
    # footer ops run on the last row only in prefill; everything else on the call's tokens
    assert [o["tokens"] for o in expand(pre)[-2:]] == ["last", "last"]
    assert {o["tokens"] for o in expand(pre)[:-2]} == {"call"} == {o["tokens"] for o in expand(dec)}
    assert expand(pre)[0]["id"] == "header.embed" and expand(pre)[0]["outputs"] == {"out": "header.x"}


def test_gemma3_structure(gemma3_irs, gemma3_inputs):
    cfg, man = gemma3_inputs
    irx = gemma3_irs["prefill"]
    dtypes = {t["name"]: t["dtype"] for t in man["tensors"]}
    assert len(expand(irx)) == 1 + 18 * 19 + 2
    embed = expand(irx)[0]
    assert embed["op"] == "embed" and embed["params"]["scale"] == pytest.approx(math.sqrt(640), rel=1e-15)
    for L in range(18):
        is_global = (L + 1) % 6 == 0          # brief: every 6th layer global
        att = ops_of(irx, L, "block/attn")[0]
        assert att["params"]["window"] == (0 if is_global else 512)
        assert att["params"]["scale"] == 1 / 16                      # 1/sqrt(head_dim = 256)
        for r in ("block/rope_q", "block/rope_k"):
            rope = ops_of(irx, L, r)[0]
            assert rope["variant"] == "neox"
            assert rope["params"]["theta"] == (1e6 if is_global else 1e4)
            assert rope["dims"]["rope_dim"] == 256
        for o in ops_of(irx, L):
            if o["op"] == "linear":   # provider follows each tensor's own quant type (Q5_0/Q8_0/Q4_K/Q6_K)
                w = o["weights"]["w"]
                assert o["provider"] == f"linear.{dtypes[w].lower()}.fast"   # dispatched (ISA chosen at load)
        assert [o["circuit_op"] for o in ops_of(irx, L) if o["op"] == "rmsnorm"] == \
            ["block/attn_norm", "block/post_attn_norm", "block/ffn_norm", "block/post_ffn_norm"]
        assert [o["op"] for o in ops_of(irx, L) if o["op"] in ("geglu", "swiglu")] == ["geglu"]
    assert irx["values_source"]["rope_theta_swa"].startswith("circuit:")
    assert irx["tensors"]["logits"]["shape"] == [1, 262144]


def test_compile_is_deterministic(smollm2_inputs, smollm2_irs):
    again = ir.compile_ir(*smollm2_inputs, chunk=64, n_ctx=1024)
    for p in ir.PHASES:
        assert canonjson.dumps(again[p]) == canonjson.dumps(smollm2_irs[p])


def test_prefill_all_logits(tmp_path):
    cfg, man = synth_inputs("llama")
    irs = ir.compile_ir(cfg, man, chunk=8, n_ctx=32, logits="all")
    assert irs["prefill"]["tensors"]["logits"]["shape"] == [8, 96]
    assert not any(t["kind"] == "view" for t in irs["prefill"]["tensors"].values())
    assert irs["decode"]["tensors"]["logits"]["shape"] == [1, 96]


# ------------------------------------------------------------------ every circuit

@pytest.mark.parametrize("arch", sorted(ROLES))
def test_every_circuit_lowers(arch):
    hp = dict(TINY_HP, sliding_window=16) if arch == "gemma3" else TINY_HP
    cfg, man = synth_inputs(arch, hp)
    irs = ir.compile_ir(cfg, man, chunk=4, n_ctx=32)
    ops = expand(irs["prefill"])
    n_block = len(circuits.for_architecture(arch, hparams=cfg["hparams"]).data["block"]["ops"])
    assert len(ops) == 1 + 2 * n_block + 2
    if arch == "qwen2":
        assert ops_of(irs["prefill"], 0, "block/attn_q")[0]["weights"] == {"w": "layer.0.wq", "bias": "layer.0.bq"}
    if arch == "qwen3":
        assert ops_of(irs["prefill"], 0, "block/attn_q")[0]["weights"] == {"w": "layer.0.wq"}
        assert [o["op"] for o in ops_of(irs["prefill"], 0, "block/q_norm")] == ["rmsnorm_heads"]


def test_untied_head_binds_output():
    cfg, man = synth_inputs("llama", tied=False)
    irs = ir.compile_ir(cfg, man, chunk=4, n_ctx=32)
    assert expand(irs["decode"])[-1]["weights"] == {"w": "output"}


def test_final_softcap_when_config_has_one():
    cfg, man = synth_inputs("llama", dict(TINY_HP, final_logit_softcap=30.0))
    irs = ir.compile_ir(cfg, man, chunk=4, n_ctx=32)
    last = expand(irs["prefill"])[-1]
    assert last["op"] == "softcap" and last["params"] == {"cap": 30.0} and last["outputs"] == {"y": "logits"}


# ------------------------------------------------------------------ errors

def test_missing_weight_is_an_error():
    cfg, man = synth_inputs("llama", drop="layer.1.w_up")
    with pytest.raises(BringupError, match=r"layer\.1\.w_up.*missing from the BUMP"):
        ir.compile_ir(cfg, man, chunk=4, n_ctx=32)


def test_unused_weight_is_an_error():
    cfg, man = synth_inputs("llama", add="layer.0.post_attn_norm")
    with pytest.raises(BringupError, match=r"bound by no op.*layer\.0\.post_attn_norm"):
        ir.compile_ir(cfg, man, chunk=4, n_ctx=32)


def test_weight_shape_mismatch_is_an_error():
    cfg, man = synth_inputs("llama")
    for t in man["tensors"]:
        if t["name"] == "layer.0.wk":
            t["shape"] = [64, 128]
            t["bytes"] = formats.by_name(t["dtype"]).tensor_bytes(t["shape"])
    with pytest.raises(BringupError, match=r"layer\.0\.wk.*shape \[128, 64\].*expects \[32, 64\]"):
        ir.compile_ir(cfg, man, chunk=4, n_ctx=32)


def test_unknown_architecture_is_unsupported():
    cfg, man = synth_inputs("llama")
    cfg["architecture"] = man["architecture"] = "mamba"
    with pytest.raises(UnsupportedError, match="no circuit for architecture 'mamba'; supported: .*gemma3") as e:
        ir.compile_ir(cfg, man, chunk=4, n_ctx=32)
    assert e.value.exit_code == 4


def test_null_hparam_the_circuit_needs_is_an_error():
    cfg, man = synth_inputs("gemma3", dict(TINY_HP, sliding_window=None))
    with pytest.raises(BringupError, match="param window.*null"):
        ir.compile_ir(cfg, man, chunk=4, n_ctx=32)


def test_kv_cache_size_overflow_is_an_error():
    hp = dict(TINY_HP, n_head=1024, n_head_kv=1024, head_dim=4096, head_dim_v=4096, n_embd=64)
    cfg, man = synth_inputs("llama", hp)
    with pytest.raises(ir.SizeOverflowError, match=r"exceeds 2\^53"):
        ir.compile_ir(cfg, man, chunk=4, n_ctx=2**31 - 1)


def test_dimension_overflow_is_an_error():
    circuit = circuits.for_architecture("llama", hparams={})
    data = copy.deepcopy(circuit.data)
    data["block"]["ops"][1]["dims"]["n_out"] = "n_head * head_dim * n_vocab * n_ff * 1024 * 1024"
    bad = circuits.Circuit("llama", circuit.path, circuit.sha256, data)
    cfg, man = synth_inputs("llama")
    with pytest.raises(ir.SizeOverflowError, match=r"dim n_out .* outside \[1, 2147483647\]"):
        ir.lower(bad, cfg, man, "prefill", 4, 32)


def test_chunk_larger_than_ctx_is_an_error():
    cfg, man = synth_inputs("llama")
    with pytest.raises(BringupError, match="--chunk 64 exceeds --ctx 32"):
        ir.compile_ir(cfg, man, chunk=64, n_ctx=32)


def test_unread_tensor_is_an_error():
    circuit = circuits.for_architecture("llama", hparams={})
    data = copy.deepcopy(circuit.data)
    # an extra op whose result nobody reads
    data["block"]["ops"].insert(1, {"id": "dead", "op": "scale", "inputs": {"x": "h"}, "outputs": {"y": "dead_y"},
                                    "dims": {"n_tokens": "n_tokens", "n": "n_embd"}, "params": {"s": "2.0"}})
    circuits.check(data)
    bad = circuits.Circuit("llama", circuit.path, circuit.sha256, data)
    cfg, man = synth_inputs("llama")
    with pytest.raises(BringupError, match=r"layer\.0\.dead_y is written .* never read"):
        ir.lower(bad, cfg, man, "prefill", 4, 32)


# ------------------------------------------------------------------ CLI

def test_cli_writes_both_phases(tmp_path, capsys):
    cfg, man = synth_inputs("qwen3")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "weights_manifest.json").write_text(json.dumps(man))
    rc = ir_cli.cli_main(["--config", str(tmp_path / "config.json"), "--manifest", str(tmp_path / "weights_manifest.json"),
                      "--out-dir", str(tmp_path / "ir"), "--chunk", "8", "--ctx", "64"])
    assert rc == 0
    for p in ir.PHASES:
        doc = json.loads((tmp_path / "ir" / f"ir_{p}.json").read_text())
        schemas.validate(doc, "ir")
        assert (tmp_path / "ir" / f"ir_{p}.json").read_text() == canonjson.dumps(doc)
    assert "[compile] prefill" in capsys.readouterr().out


def test_cli_missing_input_is_a_clear_error(tmp_path):
    with pytest.raises(BringupError, match="config.json not found"):
        ir_cli.cli_main(["--config", str(tmp_path / "nope.json"), "--manifest", str(tmp_path / "m.json"),
                     "--out-dir", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        ir_cli.cli_main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--config", "--manifest", "--out-dir", "--chunk", "--ctx", "--prefill-logits", "--isa",
                 "--allow-experimental", "--numerics"):
        assert flag in out
    # the IR report needs the memory plan: the plan stage writes it (`bringup plan arena --report`)
    assert "--report" not in out


def test_no_provider_is_a_compile_error_listing_candidates():
    cfg, man = synth_inputs("llama", matrix_dtype="I32")   # no kernel map takes I32 tables or matrices
    with pytest.raises(UnsupportedError) as e:
        ir.compile_ir(cfg, man, chunk=4, n_ctx=32)
    msg = str(e.value)
    assert e.value.exit_code == 4
    assert msg.startswith("no provider for op header.embed (embed, phase prefill); candidates:")
    assert "embed.q8_0.scalar: weights port 'table' takes Q8_0; tok_embd is I32" in msg
    assert msg.count("\n  embed.") == len([m for m in kernels.load_maps().values() if m.op == "embed"])
