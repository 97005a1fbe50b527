"""Codegen (bringup.codegen): determinism, structure, and refusal of anything unsafe or
inconsistent. The generated code's numbers are checked in tests/test_cli.py (against numpy)."""
from __future__ import annotations

import copy
import json
import re

import pytest

from bringup.formats import chat
from bringup.codegen import emit as codegen
from bringup.ir import kernel_maps as kernels
from bringup.core.errors import BringupError, UnsupportedError

from test_build import tiny_pipeline


@pytest.fixture(scope="module")
def inputs():
    p = tiny_pipeline()
    irp = json.loads((p["ir"] / "ir_prefill.json").read_text())
    ird = json.loads((p["ir"] / "ir_decode.json").read_text())
    plan = json.loads(p["plan"].read_text())
    sha = codegen.payload_sha_from_manifest(json.loads(p["manifest"].read_text()), irp)
    return irp, ird, plan, kernels.load_maps(), sha


def gen(inputs, **over):
    irp, ird, plan, maps, sha = inputs
    return codegen.generate(over.get("irp", irp), over.get("ird", ird), over.get("plan", plan), maps,
                            over.get("sha", sha))


def test_same_inputs_byte_identical_output(inputs):
    a, b = gen(inputs), gen(inputs)
    assert a == b
    p = tiny_pipeline()
    assert (p["codegen"] / "model.c").read_text() == a["model.c"]   # the stage wrote the same text


def test_one_commented_call_per_ir_op_in_order(inputs):
    irp, ird, *_ = inputs
    c = gen(inputs)["model.c"]
    for phase, ir in (("prefill", irp), ("decode", ird)):
        body = c[c.index(f"static int forward_{phase}("):]
        body = body[: body.index("\n}\n")]
        comments = re.findall(r"/\* op (\d+): (\S+) - circuit op (\S+), layer (\S+), provider (\S+) \*/", body)
        assert [int(x[0]) for x in comments] == list(range(len(ir["ops"])))
        for (idx, oid, cop, layer, prov), op in zip(comments, ir["ops"]):
            assert (oid, cop, prov) == (op["id"], op["circuit_op"], op["provider"])
            assert layer == ("-" if op["layer"] is None else str(op["layer"]))
        assert body.count("rc = bu_") == len(ir["ops"])
        n_linear = sum(op["op"] == "linear" for op in ir["ops"])
        want_rows = n_linear if phase == "decode" else sum(op["op"] == "linear" and op["id"].startswith("footer.")
                                                            for op in ir["ops"])
        assert body.count("rc = bu_linear_rows(x, bu_linear_") == want_rows


def test_plan_offsets_are_constants(inputs):
    irp, _, plan, *_ = inputs
    h = gen(inputs)["model.h"]
    for name, rec in plan["phases"]["prefill"]["tensors"].items():
        if irp["tensors"].get(name, {}).get("kind") == "activation":
            macro = "BU_PREFILL_OFF_" + name.replace(".", "_")
            assert f"#define {macro} ((size_t){rec['offset']}u)" in h
    assert f"#define BU_MODEL_ARENA_BYTES ((size_t){plan['arena']['bytes']}u)" in h


def test_weight_list_and_payload_hash_embedded(inputs):
    irp, _, _, _, sha = inputs
    c = gen(inputs)["model.c"]
    assert f'"{sha}"' in c
    for name in irp["weights"]["bound"]:
        t = irp["tensors"][name]
        shape = list(reversed(t["shape"])) + [1] * (4 - len(t["shape"]))
        assert f'{{"{name}", {t["weight"]["ggml_type"]}u, {len(t["shape"])}u, {{{"u, ".join(map(str, shape))}u}}}}' in c


def test_logits_tail_loops_over_rows(inputs):
    c = gen(inputs)["model.c"]
    pre = c[c.index("static int forward_prefill("):]
    pre = pre[: pre.index("\n}\n")]   # the function body (the decode op table follows it)
    loop = pre[pre.index("for (int64_t r = first; r < x->n_tokens; r++)"):]
    assert "footer.output_norm" in loop and "footer.lm_head" in loop and "layer." not in loop
    assert "x->logits + (size_t)(r - first) * 260u" in loop


@pytest.mark.parametrize("field,value", [
    ("weight name", 'tok_embd"); system("rm -rf /'),
    ("weight name", "tok_embd */ evil(); /*"),
    ("circuit_op", "header/embed */ evil(); /*"),
])
def test_hostile_strings_never_reach_c(inputs, field, value):
    irp, ird, *_ = inputs
    irp, ird = copy.deepcopy(irp), copy.deepcopy(ird)
    if field == "weight name":
        for ir in (irp, ird):
            ir["tensors"]["tok_embd"]["weight"]["name"] = value
    else:
        irp["ops"][0]["circuit_op"] = value
    with pytest.raises(BringupError, match="refusing to put it in C source"):
        gen(inputs, irp=irp, ird=ird)


def test_non_finite_and_non_numeric_params_refused(inputs):
    irp = copy.deepcopy(inputs[0])
    op = next(o for o in irp["ops"] if o["op"] == "rmsnorm")
    op["params"]["eps"] = "1e-5); evil(("
    with pytest.raises(BringupError, match="is not a number"):
        gen(inputs, irp=irp)
    op["params"]["eps"] = float("nan")
    with pytest.raises(BringupError, match="not finite"):
        gen(inputs, irp=irp)


def test_inconsistent_inputs_are_errors(inputs):
    irp, ird, plan, *_ = inputs
    bad = copy.deepcopy(plan)
    name = next(n for n, t in irp["tensors"].items() if t["kind"] == "activation")
    del bad["phases"]["prefill"]["tensors"][name]
    with pytest.raises(BringupError, match="no offset in the memory plan"):
        gen(inputs, plan=bad)
    bad = copy.deepcopy(plan)
    bad["phases"]["prefill"]["tensors"][name]["offset"] += 1
    with pytest.raises(BringupError, match="not 64-aligned"):
        gen(inputs, plan=bad)
    bad = copy.deepcopy(plan)
    rec = bad["phases"]["prefill"]["tensors"][name]
    next(b for b in bad["phases"]["prefill"]["buffers"] if b["id"] == rec["buffer"])["size"] = 64
    with pytest.raises(BringupError, match="not inside its planned buffer"):
        gen(inputs, plan=bad)
    with pytest.raises(BringupError, match="payload SHA-256"):
        gen(inputs, sha="not-a-hash")
    with pytest.raises(BringupError, match="expected the prefill IR"):
        gen(inputs, irp=ird)
    allir = copy.deepcopy(irp)
    allir["logits"] = "all"
    with pytest.raises(UnsupportedError, match="--prefill-logits last"):
        gen(inputs, irp=allir)


def test_manifest_must_be_the_one_the_ir_was_compiled_from(inputs):
    p = tiny_pipeline()
    man = json.loads(p["manifest"].read_text())
    man["counts"]["gguf"] += 1
    with pytest.raises(BringupError, match="not the one the IR was compiled from"):
        codegen.payload_sha_from_manifest(man, inputs[0])


def test_chat_format_blob():
    import json as _json
    from bringup.core.paths import CIRCUITS
    fmts = {f["name"]: f for c in ("llama", "gemma3")
            for f in _json.loads((CIRCUITS / f"{c}.json").read_text())["contracts"]["chat"]["formats"]}
    parts = chat.pack_chat_format(fmts["chatml_smollm2"]).split(b"\0")
    assert parts[0] == b"BUCHAT2" and parts[1] == b"chatml_smollm2" and parts[2] == b"1"
    assert parts[3:9] == [b"<|im_start|>system\n", b"<|im_end|>\n", b"<|im_start|>user\n", b"<|im_end|>\n",
                          b"<|im_start|>assistant\n", b"<|im_end|>\n"]
    assert parts[10:12] == [b"1", b"You are a helpful AI assistant named SmolLM, trained by Hugging Face"]
    assert parts[12:15] == [b"turn", b"", b"0"] and parts[15:17] == [b"1", b"<|im_end|>"] and parts[17] == b""
    g = chat.pack_chat_format(fmts["gemma"]).split(b"\0")
    assert g[2] == b"0" and g[10] == b"0" and g[12:15] == [b"merge_into_first_user", b"\n\n", b"1"]
    with pytest.raises(BringupError, match="render"):
        chat.pack_chat_format({"name": "x"})
    bad = _json.loads(_json.dumps(fmts["chatml"]))
    del bad["render"]["generation_prompt"]
    with pytest.raises(BringupError):
        chat.pack_chat_format(bad)


def test_every_op_reports_to_the_observer_with_its_ir_id(inputs):
    """After each op one observer branch (nothing else when none is installed); the op table names
    the IR op id, output dtype and row width the observer gets (--dump-hidden)."""
    irp, ird, *_ = inputs
    c = gen(inputs)["model.c"]
    for phase, ir in (("prefill", irp), ("decode", ird)):
        body = c[c.index(f"static int forward_{phase}("):]
        body = body[: body.index("\n}\n")]
        seen = [int(i) for i in re.findall(r"if \(x->observer && observed\(x, ops, (\d+), ", body)]
        assert seen == list(range(len(ir["ops"])))
        table = c[c.index(f"OPS_{phase.upper()}["):]
        rows = re.findall(r'\{"(\w+)", "([^"]+)", (-?\d+), "([^"]+)", (BU_OBS_\w+), (\d+)\}', table[: table.index("};")])
        assert len(rows) == len(ir["ops"])
        for (func, cop, layer, oid, dtype, width), op in zip(rows, ir["ops"]):
            out = ir["tensors"][next(iter(op["outputs"].values()))]
            want = 1
            for d in out["shape"][1:]:
                want *= d
            assert (oid, dtype, int(width)) == (op["id"], "BU_OBS_F32", want)


def test_observer_refuses_ops_it_cannot_describe(inputs):
    irp, ird, *_ = inputs
    bad = copy.deepcopy(irp)
    out = next(iter(bad["ops"][1]["outputs"].values()))
    bad["tensors"][out]["dtype"] = "F16"
    with pytest.raises(UnsupportedError, match="observations carry F32 or I32"):
        gen(inputs, irp=bad)
    bad = copy.deepcopy(irp)
    bad["ops"][1]["id"] = 'layer.0.x"); system("id'
    with pytest.raises(BringupError, match="refusing to put it in C source"):
        gen(inputs, irp=bad)
