"""The IR's layer loop (bringup.ir.block): the block lowering states (body ops once, a binding
table per layer), its one expansion back to the op list, and the refusal of a block that is not
one. Expected values come from the models (gemma3: 5 sliding-window layers to 1 global, llama.cpp
set_swa_pattern; its Q4_K_M file stores some layers' ffn_down as Q6_K, some attn_v as Q8_0), not from the code."""
from __future__ import annotations

import copy
import json

import pytest

from bringup.core import canonjson, schemas
from bringup.core.errors import BringupError
from bringup.ir import block, circuits
from bringup.ir import kernel_maps as kernels
from bringup.ir import lower as ir
from bringup.ir import resolve
from bringup.plan import cli as plan_cli
from bringup.plan import ir_report, planner
from tests.helpers.ir import TINY_HP, edit_ops, model_inputs, synth_inputs


@pytest.fixture(scope="module")
def gemma3(gemma3_gguf):
    cfg, man = model_inputs(gemma3_gguf)
    return cfg, man, ir.compile_ir(cfg, man, chunk=64, n_ctx=1024)


@pytest.fixture(scope="module")
def tiny():
    cfg, man = synth_inputs("llama", TINY_HP)
    return ir.compile_ir(cfg, man, chunk=4, n_ctx=32)


def test_gemma3_binding_table_holds_the_local_global_pattern(gemma3):
    *_, irs = gemma3
    for doc in irs.values():
        blk = doc["block"]
        assert blk["n_layer"] == 18 == len(blk["layers"])
        assert len(blk["ops"]) == len(circuits.for_architecture("gemma3").data["block"]["ops"]) == 19
        is_global = [L % 6 == 5 for L in range(18)]
        for L, b in enumerate(blk["layers"]):
            assert b["values"]["is_swa"] is not is_global[L]
            assert b["values"]["window"] == (0 if is_global[L] else 512)
            assert b["values"]["theta_l"] == (1e6 if is_global[L] else 10000.0)
            assert b["weights"]["wq"] == f"layer.{L}.wq" and b["state"]["k_cache"] == f"layer.{L}.k_cache"
            assert b["inputs"]["$in"] == ("header.x" if L == 0 else f"layer.{L - 1}.x_out")
        body = {o["id"]: o for o in blk["ops"]}
        assert body["attn"]["params"]["window"] == {"layer_value": "window"}
        assert body["rope_q"]["params"]["theta"] == body["rope_k"]["params"]["theta"] == {"layer_value": "theta_l"}
        assert body["attn_q"]["weights"] == {"w": "wq"} and body["attn_norm"]["inputs"] == {"x": "$in"}
        assert "$" not in json.dumps(doc["header"] + doc["footer"]).replace("$defs", "")


def test_a_q6_k_layer_binds_another_provider(gemma3):
    """Q4_K_M: some layers' ffn_down are Q6_K (the others Q4_K), some attn_v Q8_0 (the others
    Q5_0); the body op then names no provider and every layer binds the one of its weight's format."""
    *_, irs = gemma3
    doc = irs["decode"]
    body = {o["id"]: o for o in doc["block"]["ops"]}
    for rel, role in (("attn_v", "wv"), ("ffn_down", "w_down")):
        assert "provider" not in body[rel]
        dtypes = set()
        for b in doc["block"]["layers"]:
            dtype = doc["tensors"][b["weights"][role]]["dtype"]
            dtypes.add(dtype)
            assert b["resolved"][rel]["provider"] == f"linear.{dtype.lower()}.fast"
        assert dtypes == {"attn_v": {"Q5_0", "Q8_0"}, "ffn_down": {"Q4_K", "Q6_K"}}[rel]
    assert body["attn_q"]["provider"] == "linear.q5_0.fast"   # the same in every layer: once, in the body
    assert all(set(b["resolved"]) == {"attn_v", "ffn_down"} for b in doc["block"]["layers"])


def test_expansion_is_the_unrolled_op_list_lowering_emits(gemma3):
    """block.expand gives back, field for field, the op list lowering emits layer by layer (the
    IR's op list before the block existed), resolved the same way."""
    cfg, man, irs = gemma3
    circuit = circuits.for_architecture("gemma3")
    maps = kernels.load_maps()
    for phase, doc in irs.items():
        unrolled = ir.lower(circuit, cfg, man, phase, 64, 1024)
        resolve.resolve_all(unrolled, maps)
        want = json.loads(canonjson.dumps(unrolled["ops"]))
        got = block.expand(json.loads(canonjson.dumps(doc)))   # as every reader sees it: from the file
        assert got == want
        assert [o["index"] for o in got] == list(range(1 + 18 * 19 + 2))
        assert len(canonjson.dumps(doc)) < len(canonjson.dumps({**doc, "ops": want}))


def test_expand_gives_fresh_ops(tiny):
    doc = copy.deepcopy(tiny["prefill"])
    ops = block.expand(doc)
    ops[1]["params"]["eps"] = 7.0
    ops[1]["selection"]["rule"] = "changed"
    assert block.expand(doc) == block.expand(tiny["prefill"])


@pytest.mark.parametrize("breakage, message", [
    (lambda d: d["block"]["layers"].pop(), r"^IR block: n_layer is 2 but the binding table lists layers \[0\]$"),
    (lambda d: d["block"].update(n_layer=3), r"^IR block: n_layer is 3 but the binding table lists layers \[0, 1\]$"),
    (lambda d: d["block"]["layers"][1]["weights"].pop("wq"),
     r"^block op attn_q in layer 1: the layer binds no weight 'wq'$"),
    (lambda d: d["block"]["layers"][0]["inputs"].pop("$in"),
     r"^block op attn_norm in layer 0: the layer binds no input '\$in'$"),
    (lambda d: d["block"]["layers"][1]["state"].pop("v_cache"),
     r"^block op attn in layer 1: the layer binds no state 'v_cache'$"),
    (lambda d: d["block"]["ops"][0]["params"].update(eps={"layer_value": "nope"}),
     r"^block op attn_norm in layer 0: the layer binds no value 'nope'$"),
    (lambda d: d["block"]["layers"][1].update(resolved={"attn_q": {k: d["block"]["ops"][1][k] for k in block.RESOLUTION}}),
     r"^block op attn_q in layer 1: the provider is in both the body op and the layer's resolved table$"),
])
def test_a_block_whose_bindings_do_not_match_is_refused_in_one_line(tiny, tmp_path, breakage, message):
    doc = copy.deepcopy(tiny["prefill"])
    breakage(doc)
    with pytest.raises(BringupError, match=message):
        block.expand(doc)
    # the plan stage reads the IR files: the same line, with the file's name, exit 2 through the CLI
    d = tmp_path / "ir"
    d.mkdir()
    (d / "ir_prefill.json").write_text(canonjson.dumps(doc))
    (d / "ir_decode.json").write_text(canonjson.dumps(tiny["decode"]))
    with pytest.raises(BringupError, match=r"ir_prefill\.json: " + message.lstrip("^")):
        plan_cli.arena_main(["--ir-dir", str(d), "--out", str(tmp_path / "plan.json")])


def test_the_schema_refuses_a_malformed_block(tiny):
    doc = copy.deepcopy(tiny["decode"])
    schemas.validate(doc, "ir")
    bad = copy.deepcopy(doc)
    bad["block"]["ops"][0]["params"]["eps"] = {"layer": "eps"}
    with pytest.raises(BringupError, match=r"^IR does not match schema ir: at /block/ops/0/params/eps: "):
        schemas.validate(bad, "ir", "IR")
    bad = copy.deepcopy(doc)
    del bad["block"]["ops"][0]["selection"]    # a provider without its selection trace
    with pytest.raises(BringupError, match=r"'selection' is a dependency of 'provider'"):
        schemas.validate(bad, "ir", "IR")
    bad = copy.deepcopy(doc)
    bad["block"]["layers"][0]["inputs"]["in"] = "header.x"    # a block input is named $<name>
    with pytest.raises(BringupError, match=r"at /block/layers/0/inputs: "):
        schemas.validate(bad, "ir", "IR")


def test_fold_refuses_a_layer_that_is_not_the_block(tiny):
    doc = copy.deepcopy(tiny["prefill"])
    with pytest.raises(BringupError, match=r"^layer 1 op ffn_up: op 'add' differs from layer 0's 'linear'; "):
        edit_ops(doc, lambda ops: next(o for o in ops if o["id"] == "layer.1.ffn_up").update(op="add"))
    with pytest.raises(BringupError, match=r"^block op layer\.1\.attn_q reads header\.x, which is neither the "
                                           r"layer's nor a block input$"):
        edit_ops(doc, lambda ops: next(o for o in ops if o["id"] == "layer.1.attn_q")["inputs"].update(x="header.x"))
    with pytest.raises(BringupError, match=r"^layer 1 has fewer ops than the block \(no op ffn_residual\)$"):
        edit_ops(doc, lambda ops: ops.remove(next(o for o in ops if o["id"] == "layer.1.ffn_residual")))
    # a number that differs is a binding: named after the op and port when no layer value names it
    edit_ops(doc, lambda ops: next(o for o in ops if o["id"] == "layer.1.attn_norm")["params"].update(eps=0.5))
    assert doc["block"]["ops"][0]["params"]["eps"] == {"layer_value": "attn_norm.eps"}
    assert [b["values"]["attn_norm.eps"] for b in doc["block"]["layers"]] == [TINY_HP["norm_eps"], 0.5]


def test_ir_report_shows_the_layer_loop(gemma3):
    *_, irs = gemma3
    plan = planner.plan_irs(irs)
    loop = ir_report.report_data(irs, plan)["loop"]["decode"]
    assert (loop["n_header"], len(loop["body"]), loop["n_layer"], loop["n_footer"]) == (1, 19, 18, 2)
    assert loop["columns"] == ["is_swa", "theta_l", "window", "attn_v provider", "ffn_down provider"]
    assert loop["rows"][5][:4] == [5, False, 1e6, 0] and loop["rows"][0][:4] == [0, True, 10000.0, 512]
    assert {o["id"]: o["provider"] for o in loop["body"]}["attn_v"] == "per layer"
    page = ir_report.render(irs, plan)
    assert "a block of 19 ops run by 18 layers" in page and "<th>attn_v provider</th>" in page
