"""Codegen (bringup.codegen): determinism, the looped forward pass (one loop body over the layers,
per-layer tables, own code only for layers that differ), and refusal of anything unsafe or
inconsistent. The generated code's numbers are checked in tests/test_cli.py (against numpy); here
a layer with its own code is checked to compute exactly what the loop body computes."""
from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess

import numpy as np
import pytest

from bringup.ir import block
from bringup.build import program as build
from bringup.codegen import emit as codegen
from bringup.convert import importer
from bringup.core.errors import BringupError, UnsupportedError
from bringup.formats import chat
from bringup.ir import kernel_maps as kernels
from bringup.ir import lower
from bringup.parity import xray
from bringup.plan import planner
from tests.helpers.ir import edit_ops
from tests.helpers.pipeline import tiny_pipeline



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


def expand(c: str) -> str:
    """model.c as the compiler sees it after preprocessing (macros expanded, adjacent string literals
    joined); the includes are left out, so names they define stay as they are."""
    src = "".join(line for line in c.splitlines(keepends=True) if not line.startswith("#include"))
    out = subprocess.run(["gcc", "-E", "-P", "-x", "c", "-"], input=src, capture_output=True, text=True,
                         check=True).stdout
    return re.sub(r'"\s+"', "", out)


def forward(c: str, phase: str) -> str:
    body = c[c.index(f"static int forward_{phase}("):]
    return body[: body.index("\n}\n")]


def executed(c: str, phase: str) -> list[tuple[int, str]]:
    """The (op index, kernel) sequence forward_<phase> runs, the layer loop unrolled with the LAYERS
    table: every OP_DONE names its op, the call before it its kernel."""
    f = forward(c, phase)
    head, rest = f.split("    for (int32_t l = 0; l < BU_MODEL_N_LAYER; l++) {\n")
    loop, tail = rest.split("\n    }\n", 1)
    calls = r"rc = (?:bu_linear_(?:rows|tiles)\(x, |IN_RANGE\(|ON_THREAD0\()?([\w>-]+)\(?.*?\n\s*OP_(?:DONE|NEXT)\(([^,]+),"
    own = {int(n): blk for n, blk in re.findall(r"if \(l == (\d+)\) \{(.*?)continue;", loop, re.S)}
    body = re.sub(r"if \(l == \d+\) \{.*?continue;\n\s*\}", "", loop, flags=re.S)
    table = expand(c)
    rows = re.findall(r"\{(\.op = .*?)\}", table[table.index("LAYERS["):], re.S)
    layers = [dict(re.findall(r"\.(\w+) = (\w+)", r)) for r in rows]
    seq = [(int(ref), fn) for fn, ref in re.findall(calls, head, re.S)]
    for L, ly in enumerate(layers):
        for fn, ref in re.findall(calls, own.get(L, body), re.S):
            fn = ly[fn[len("ly->"):]] if fn.startswith("ly->") else fn
            seq.append((int(ref) if L in own else int(ly["op"]) + int((ref.split("+") + ["0"])[1]), fn))
    return seq + [(int(ref), fn) for fn, ref in re.findall(calls, tail, re.S)]


def test_same_inputs_byte_identical_output(inputs):
    a, b = gen(inputs), gen(inputs)
    assert a == b
    p = tiny_pipeline()
    assert (p["codegen"] / "model.c").read_text() == a["model.c"]   # the stage wrote the same text


def test_layers_share_one_loop_body_that_runs_every_ir_op_in_order(inputs):
    irp, ird, plan, maps, sha = inputs
    g = codegen.emit_sources(irp, ird, plan, maps, sha)
    assert g.loops == {ph: {"body": [0, 1]} for ph in ("prefill", "decode")}
    c = g.texts["model.c"]
    for phase, ir in (("prefill", irp), ("decode", ird)):
        f = forward(c, phase)
        assert f.count("for (int32_t l = 0; l < BU_MODEL_N_LAYER; l++)") == 1
        # the layer body is written once: one call per op of the header, of one layer, of the footer
        assert f.count("rc = ") == sum(op["layer"] in (None, 0) for op in block.expand(ir))
        assert executed(c, phase) == [(op["index"], maps[op["provider"]].function) for op in block.expand(ir)]
        # the residual stream a layer reads is the previous layer's output (layer 0's: the embedding)
        assert "rc = IN_RANGE(bu_rmsnorm_f32_scalar(AT(A(prev_x_out), b, " in f
        comments = re.findall(r"/\* layer\.l\.(\S+) - circuit op (\S+), provider ([^,\s]+), "
                              r"(?:by [a-z ]+|on one thread) \*/", f)
        assert comments == [(op["id"][len("layer.0."):], op["circuit_op"], op["provider"])
                            for op in block.expand(ir) if op["layer"] == 0]
        n_linear = sum(op["op"] == "linear" for op in block.expand(ir) if op["layer"] in (None, 0))
        want_rows = n_linear if phase == "decode" else sum(op["op"] == "linear" and op["id"].startswith("footer.")
                                                            for op in block.expand(ir))
        assert f.count("rc = bu_linear_rows(x, ") == want_rows
    assert max(len(line) for line in c.splitlines()) < 120


def test_plan_offsets_are_named_constants(inputs):
    """Every arena tensor the code names has its planned offset in model.h: outside the loop by its
    full name, in the loop body by its name within the layer (one offset for every layer)."""
    irp, _, plan, *_ = inputs
    h = gen(inputs)["model.h"]
    for name, rec in plan["phases"]["prefill"]["tensors"].items():
        if irp["tensors"].get(name, {}).get("kind") != "activation":
            continue
        m = re.match(r"layer\.(\d+)\.(.+)", name)
        macro = "BU_PREFILL_OFF_" + (m.group(2) if m else name).replace(".", "_")
        assert f"#define {macro} ((size_t){rec['offset']}u)" in h, name
    assert f"#define BU_MODEL_ARENA_BYTES ((size_t){plan['arena']['bytes']}u)" in h
    assert "#define BU_MODEL_N_LAYER 2" in h


def test_weight_list_and_payload_hash_embedded(inputs):
    """WEIGHTS, as the compiler sees it (LAYER_WEIGHTS expanded), is the canonical weight list."""
    irp, _, _, _, sha = inputs
    c = gen(inputs)["model.c"]
    assert f'"{sha}"' in c
    assert "#define LAYER_WEIGHTS(L) \\" in c
    table = expand(c)
    table = table[table.index("WEIGHTS["):]
    entries = re.findall(r'\{"([\w.]+)", (\d+)u, (\d+)u, \{(\d+)u, (\d+)u, (\d+)u, (\d+)u\}\}',
                         table[: table.index("};")])
    want = []
    for name in sorted(irp["weights"]["bound"]):
        t = irp["tensors"][name]
        shape = list(reversed(t["shape"])) + [1] * (4 - len(t["shape"]))
        want.append((name, str(t["weight"]["ggml_type"]), str(len(t["shape"])), *map(str, shape)))
    assert entries == want


def test_logits_tail_loops_over_rows(inputs):
    c = gen(inputs)["model.c"]
    pre = forward(c, "prefill")
    loop = pre[pre.index("for (int64_t r = first; r < x->n_tokens; r++)"):]
    assert "footer.output_norm" in loop and "footer.lm_head" in loop and "layer.l." not in loop
    assert "x->logits + (size_t)(r - first) * 260u" in loop
    assert "ROW(layer_1_x_out, r, 256)" in loop   # the last layer's output, row r


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
        irp["header"][0]["circuit_op"] = value
    with pytest.raises(BringupError, match="refusing to put it in C source"):
        gen(inputs, irp=irp, ird=ird)


def test_non_finite_and_non_numeric_params_refused(inputs):
    irp = copy.deepcopy(inputs[0])
    op = next(o for o in irp["block"]["ops"] if o["op"] == "rmsnorm")   # in every layer
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
    """After each op one OP_DONE (the kernel status, then the observer branch: nothing else when
    none is installed); the op table, as the compiler sees it (LAYER_OPS expanded), names the IR op
    id, kernel, circuit op, layer, output dtype and row width the observer gets (--dump-hidden)."""
    irp, ird, _, maps, _ = inputs
    c = gen(inputs)["model.c"]
    assert "bu_op_done(x, ops, (op), rc, (out), (row0), (n_rows))" in c
    expanded = expand(c)
    for phase, ir in (("prefill", irp), ("decode", ird)):
        f = forward(c, phase)
        assert f.count("OP_DONE(") + f.count("OP_NEXT(") == f.count("rc = ")
        table = expanded[expanded.index(f"OPS_{phase.upper()}["):]
        rows = re.findall(r'\{"(\w+)", "([^"]+)", (-?\d+), "([^"]+)", (BU_OBS_\w+), (\d+)\}', table[: table.index("};")])
        want = []
        for op in block.expand(ir):
            out = ir["tensors"][next(iter(op["outputs"].values()))]
            want.append((maps[op["provider"]].function, op["circuit_op"], str(-1 if op["layer"] is None else op["layer"]),
                         op["id"], "BU_OBS_F32", str(int(np.prod(out["shape"][1:])))))
        assert rows == want


def test_observer_refuses_ops_it_cannot_describe(inputs):
    irp, ird, *_ = inputs
    bad = copy.deepcopy(irp)
    out = next(iter(block.expand(bad)[1]["outputs"].values()))
    bad["tensors"][out]["dtype"] = "F16"
    with pytest.raises(UnsupportedError, match="observations carry F32 or I32"):
        gen(inputs, irp=bad)
    bad = copy.deepcopy(irp)
    bad["block"]["ops"][0]["id"] = 'x"); system("id'
    with pytest.raises(BringupError, match="refusing to put it in C source"):
        gen(inputs, irp=bad)


# -- layers that differ: table data, or their own code --

def _variant(inputs, root, **changes) -> dict:
    """The tiny model's IR with ``changes`` (op id -> {"params": {...}} / {"circuit_op": ...}) in both
    phases, planned, generated and built into ``root``."""
    irp, ird, _, maps, sha = inputs
    irs = {"prefill": copy.deepcopy(irp), "decode": copy.deepcopy(ird)}

    def change(ops: list[dict]) -> None:
        for op in ops:
            for key, value in changes.get(op["id"].replace(".", "_"), {}).items():
                if key == "params":
                    op["params"].update(value)
                else:
                    op[key] = value

    for doc in irs.values():
        edit_ops(doc, change)
    g = codegen.emit_sources(irs["prefill"], irs["decode"], planner.plan_irs(irs), maps, sha)
    (root / "codegen").mkdir(parents=True)
    for name, text in g.texts.items():
        (root / "codegen" / name).write_text(text)
    build.build(root / "codegen", root / "build")
    return {"gen": g, "cli": root / "build" / "bringup-run", "lib": root / "build" / "libmodel.so"}


def _run(prog: dict, out, *args) -> dict:
    """Prefill 9 tokens (chunks of 4, 4, 1): every position's logits, every op's output, then 4
    greedy decode steps; their token ids."""
    toks = "104,101,108,108,111,32,119,111,114"
    subprocess.run([str(prog["cli"]), str(prog["lib"]), str(tiny_pipeline()["bump"]), "--prompt-tokens", toks,
                    "--max-tokens", "0", "--all-logits", out / "logits.f32", "--dump-hidden", out / "dump"],
                   check=True, capture_output=True)
    r = subprocess.run([str(prog["cli"]), str(prog["lib"]), str(tiny_pipeline()["bump"]), "--prompt-tokens", toks,
                        "--max-tokens", "4", "--no-stop", "--json"], check=True, capture_output=True, text=True)
    return {"logits": (out / "logits.f32").read_bytes(), "dump": xray.load_dump(out / "dump"),
            "tokens": json.loads(r.stdout)["generated_tokens"]}


@pytest.fixture(scope="module")
def looped_run(tmp_path_factory):
    p = tiny_pipeline()
    return _run(p, tmp_path_factory.mktemp("looped"))


def test_a_layer_is_the_block_or_refused(inputs):
    """The IR states one block for every layer: a layer whose op differs from the block (another
    circuit op) cannot be written as IR, and a layer bound to a provider that needs another call
    form (here: another C prototype) is refused by codegen with one line, never given other code."""
    irp, ird, plan, maps, sha = inputs
    with pytest.raises(BringupError, match=r"^layer 1 op attn_norm: circuit_op 'block/attn_norm_other' differs "
                                           r"from layer 0's 'block/attn_norm'; a block is the same ops in every layer$"):
        edit_ops(copy.deepcopy(irp), lambda ops: next(o for o in ops if o["id"] == "layer.1.attn_norm").update(
            circuit_op="block/attn_norm_other"))
    maps = dict(maps)
    norm = next(o for o in irp["block"]["ops"] if o["id"] == "attn_norm")
    other = copy.deepcopy(maps[norm["provider"]].raw)
    other["id"] = "rmsnorm.other.test"
    other["impl"]["declaration"] = other["impl"]["declaration"].replace("int64_t n,", "int32_t n,")
    assert other["impl"]["declaration"] != maps[norm["provider"]].declaration
    maps[other["id"]] = dataclasses.replace(maps[norm["provider"]], id=other["id"], raw=other)
    docs = []
    for doc in (irp, ird):
        doc = copy.deepcopy(doc)
        edit_ops(doc, lambda ops: next(o for o in ops if o["id"] == "layer.1.attn_norm").update(provider=other["id"]))
        assert doc["block"]["layers"][1]["resolved"]["attn_norm"]["provider"] == other["id"]
        docs.append(doc)
    with pytest.raises(UnsupportedError, match=r"^prefill: block op attn_norm of layer 1 calls provider "
                                               r"rmsnorm.other.test in another form than layer 0's"):
        codegen.generate(docs[0], docs[1], plan, maps, sha)


@pytest.mark.slow   # builds another whole (tiny) model: the fast lane builds one per session
def test_a_number_that_differs_by_layer_is_a_table_column(inputs, tmp_path, looped_run):
    """Layer 1's RoPE base differs (as gemma3's global layers do): both layers still share the loop
    body, LAYERS gets a theta column, and only layer 1 from its RoPE on computes differently."""
    theta = {"params": {"theta": 10.0}}
    v = _variant(inputs, tmp_path, layer_1_rope_q=theta, layer_1_rope_k=theta)
    c = v["gen"].texts["model.c"]
    assert all(v["gen"].loops[ph] == {"body": [0, 1]} for ph in ("prefill", "decode"))
    assert "    double theta; /* param theta (rope_q, rope_k) */" in c
    assert re.findall(r"\.theta = ([\d.e+-]+)", c) == ["10000.0", "10.0"]
    assert forward(c, "prefill").count("ly->theta") == 2
    got = _run(v, tmp_path)
    names = list(looped_run["dump"])
    first = names.index("layer.1.rope_q")
    for name in names[:first]:
        np.testing.assert_array_equal(got["dump"][name], looped_run["dump"][name], err_msg=name)
    assert not np.array_equal(got["dump"]["layer.1.rope_q"], looped_run["dump"]["layer.1.rope_q"])


def test_a_block_whose_binding_table_does_not_match_is_refused(inputs):
    irp = copy.deepcopy(inputs[0])
    irp["block"]["layers"].pop()    # n_layer says 2, the table binds layer 0 only
    with pytest.raises(BringupError, match=r"^IR block: n_layer is 2 but the binding table lists layers \[0\]$"):
        gen(inputs, irp=irp)


# -- the real models: smollm2 reads like llama2.c's forward(), gemma3's local/global layers are data --

@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def real(request):
    gguf = request.getfixturevalue(f"{request.param}_gguf")
    conv = importer.plan_conversion(gguf)
    irs = lower.compile_ir(conv["config"], conv["manifest"], chunk=64, n_ctx=2048)
    g = codegen.emit_sources(irs["prefill"], irs["decode"], planner.plan_irs(irs), payload_sha256="0" * 64)
    return request.param, irs, g


def test_real_models_run_their_layers_in_one_loop(real):
    model, irs, g = real
    c = g.texts["model.c"]
    lines = c.splitlines()
    assert max(len(line) for line in lines) < 120
    n_layer = irs["prefill"]["dims"]["n_layer"]
    for phase, ir in irs.items():
        assert g.loops[phase] == {"body": list(range(n_layer))}
        f = forward(c, phase)
        assert f.count("for (int32_t l = 0; l < BU_MODEL_N_LAYER; l++)") == 1
        assert f.count("rc = ") == sum(op["layer"] in (None, 0) for op in block.expand(ir))   # the body once
        # every projection is cut over the threads (by output rows, or by token rows in prefill)
        linear = [op for op in block.expand(ir) if op["op"] == "linear" and op["layer"] in (None, 0)]
        assert f.count("rc = bu_linear_rows(x, ") + f.count("rc = bu_linear_tiles(x, ") == len(linear)
    if model == "smollm2":
        assert len(lines) < 500
        assert "    int32_t op; " in c and "double theta" not in c   # nothing but indices differs by layer
    else:
        # the 5 local : 1 global pattern is table data: window and RoPE base per layer
        rows = re.findall(r"\{\.op = \d+.*?\}", c, re.S)
        window = [int(re.search(r"\.window = (\d+)", r).group(1)) for r in rows]
        theta = [float(re.search(r"\.theta = ([\d.e+]+)", r).group(1)) for r in rows]
        assert window == [0 if L % 6 == 5 else 512 for L in range(n_layer)]
        assert theta == [1e6 if L % 6 == 5 else 1e4 for L in range(n_layer)]
        assert "ly->window" in forward(c, "decode") and "ly->theta" in forward(c, "decode")
