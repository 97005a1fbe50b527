"""X-ray and fault injection on the REAL native program (smollm2), through ``bringup-run
--dump-hidden``.

The clean program (built by the workflow: the ``smollm2_build`` fixture) is dumped on a short
prompt and compared with the float64 numpy reference: no checkpoint may exceed the X-ray
tolerance. Then three test-only variants of the program are compiled into a temporary folder from
the same conversion (``results/smollm2/convert``, read only) with the bringup.ir / planner /
codegen / build APIs, each with one fault injected into the IR the way a wrong circuit or a wrong
kernel would put it there:

- ``rope_theta``: layer 5's RoPE ops (rope_q, rope_k) with base 10 instead of the model's 1e5;
- ``norm_eps``: layer 3's attention RMSNorm with epsilon 100 instead of 1e-5;
- ``swap_stride``: layer 7's output projection served by a test-only kernel that reads the weight
  with its row and column strides swapped (y = x W instead of x W^T).

Each must fail the parity gates against llama.cpp (and so certification), and X-ray must name the
injected layer and op from the real binary's dump.

X-ray is per-op (teacher-forced): the reference runs each op on the binary's own dumped inputs to
that op, under the activation contract the binary's providers declare (``xray.activation_contract``
of its IR: F32 for the workflow's circuit today; Q8_1 for the Q4_1 projections and Q8_0 for the
Q8_0 head in the ``clean_q8`` build), so a clean op differs from the reference only by float32
rounding: measured on this prompt, every per-op relative error is below 3e-7 in both builds,
while the end-to-end errors still grow with depth. The tolerance is the profile's
``xray.rel_tol`` (1e-3, see its reason), 1000x above the clean programs and 100x below the
faulted ops; the other activation contract is off by more than it at the first projection.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bringup.build import program as build
from bringup.certify import report as certify
from bringup.codegen import emit as codegen
from bringup.ir import lower as ir
from bringup.ir import kernel_maps as kernels
from bringup.core.errors import BringupError
from bringup.core.native import NativeProgram
from bringup.core.paths import ROOT
from bringup.parity import run as parity
from bringup.parity.reference_checks import ReferenceProgram
from bringup.parity import xray
from bringup.parity.oracles import LlamaCppOracle, NumpyReference
from bringup.plan import planner
from tests.helpers.ir import edit_ops

XRAY_REL_TOL = json.loads((ROOT / "config/parity_profiles/smollm2.json").read_text())["xray"]["rel_tol"]
CHUNK = 8          # a dump of 12 tokens covers two chunks: rows are concatenated across chunks
N_CTX = 64
PROMPT = "The lighthouse keeper climbed the stairs at dusk and"

# A test-only kernel with the linear/1 ABI (bu_kernels.h) that reads W [n_out, n_in] with its
# strides swapped: y[t, o] = sum_i x[t, i] * W[i, o]. Needs a square W; n_in <= 8192.
SWAPPED_STRIDE_C = r"""
int bu_test_linear_swapped_stride(const float *x, const void *w, const float *bias, float *y, int64_t n_tokens,
                                  int64_t n_in, int64_t n_out, void *ws, size_t ws_cap)
{
    float row[8192];
    (void)ws; (void)ws_cap; (void)bias;
    if (!x || !w || !y) return -1;
    if (n_in != n_out || n_in > 8192 || n_in % 32) return -2;
    size_t row_bytes = (size_t)n_in / 32u * 20u;  /* Q4_1: 20 bytes per 32 weights */
    for (int64_t k = 0; k < n_tokens * n_out; k++) y[k] = 0.0f;
    for (int64_t i = 0; i < n_in; i++) {
        int rc = bu_dequantize_row(3, (const uint8_t *)w + (size_t)i * row_bytes, row, n_in);
        if (rc) return rc;
        for (int64_t t = 0; t < n_tokens; t++)
            for (int64_t o = 0; o < n_out; o++) y[t * n_out + o] += x[t * n_in + i] * row[o];
    }
    return 0;
}
"""


def _set_params(irs: dict, op_ids: set[str], **params) -> None:
    """The params of ops ``op_ids`` changed in both phases (a layer's own numbers: its block binding)."""
    n = []

    def change(ops: list[dict]) -> None:
        for op in ops:
            if op["id"] in op_ids:
                op["params"].update(params)
                n.append(op["id"])

    for doc in irs.values():
        edit_ops(doc, change)
    assert len(n) == 2 * len(op_ids), f"expected {op_ids} in both phases"


def _swap_provider(irs: dict, op_id: str, maps: dict) -> dict:
    """The op's provider replaced by a copy of its map that names the swapped-stride kernel (the
    layer's block binding names it)."""
    maps = dict(maps)

    def change(ops: list[dict]) -> None:
        for op in ops:
            if op["id"] == op_id:
                orig = maps[op["provider"]]
                assert orig.weight_dtype == "Q4_1", orig.id   # the test kernel reads Q4_1 rows
                raw = copy.deepcopy(orig.raw)
                raw["id"] = "test.linear.swapped_stride"
                raw["impl"]["function"] = "bu_test_linear_swapped_stride"
                maps[raw["id"]] = dataclasses.replace(orig, id=raw["id"], raw=raw)
                op["provider"] = raw["id"]

    for doc in irs.values():
        edit_ops(doc, change)
    return maps


def _build_variant(root: Path, b: dict, man: dict, clean_irs: dict, fault: str) -> dict:
    """The clean IR (chunk CHUNK, ctx N_CTX, from the workflow's conversion) with one fault, then
    plan, codegen, build into root."""
    irs = copy.deepcopy(clean_irs[fault == "clean_q8"])
    maps = kernels.load_maps()
    extra_c = ""
    if fault == "rope_theta":
        _set_params(irs, {"layer.5.rope_q", "layer.5.rope_k"}, theta=10.0)
    elif fault == "norm_eps":
        _set_params(irs, {"layer.3.attn_norm"}, eps=100.0)
    elif fault == "swap_stride":
        maps = _swap_provider(irs, "layer.7.attn_out", maps)
        extra_c = SWAPPED_STRIDE_C
    plan = planner.plan_irs(irs)
    sha = codegen.payload_sha_from_manifest(man, irs["prefill"])
    texts = codegen.generate(irs["prefill"], irs["decode"], plan, maps, sha)
    gdir = root / "codegen"
    gdir.mkdir(parents=True)
    (gdir / "model.h").write_text(texts["model.h"])
    c = texts["model.c"]
    if extra_c:   # the test-only kernel goes into this variant's model.c, after its includes
        at = c.index('#include "model.h"\n') + len('#include "model.h"\n')
        c = c[:at] + extra_c + c[at:]
    (gdir / "model.c").write_text(c)
    build.build(gdir, root / "build")
    return {"cli": root / "build" / "bringup-run", "lib": root / "build" / "libmodel.so", "weights": b["weights"],
            "ir": irs["prefill"], "maps": maps}


FAULTS = [("rope_theta", 5, "rope_q"), ("norm_eps", 3, "attn_norm"), ("swap_stride", 7, "attn_out")]


@pytest.fixture(scope="module")
def programs(smollm2_build, tmp_path_factory):
    root = tmp_path_factory.mktemp("xray_native")
    b = smollm2_build
    man = json.loads((b["weights"].parent / "weights_manifest.json").read_text())
    cfg = json.loads(b["config"].read_text())
    # [the workflow's numerics contract (the circuit's), ggml-q8]: the faults go into the first
    irs = [ir.compile_ir(cfg, man, chunk=CHUNK, n_ctx=N_CTX),
           ir.compile_ir(cfg, man, chunk=CHUNK, n_ctx=N_CTX, numerics="ggml-q8")]
    # one gcc per variant at a time per core: the builds run side by side
    with ThreadPoolExecutor(max_workers=2) as pool:
        futs = {f: pool.submit(_build_variant, root / f, b, man, irs, f)
                for f in [f for f, _, _ in FAULTS] + ["clean_q8"]}
        return {f: fut.result() for f, fut in futs.items()}


@pytest.fixture(scope="module")
def oracle(smollm2_build):
    with LlamaCppOracle(smollm2_build["gguf"], n_ctx=256, n_threads=2) as o:
        yield o


@pytest.fixture(scope="module")
def tokens(oracle):
    return oracle.tokenize(PROMPT, add_special=oracle.add_bos())[:12]


@pytest.fixture(scope="module")
def reference(smollm2_build):
    return NumpyReference(smollm2_build["gguf"])


def _program(prog: dict, n_vocab: int | None = None, threads: int = 2) -> NativeProgram:
    return NativeProgram(prog["cli"], prog["lib"], prog["weights"], n_vocab, threads)


def _ir(prog: dict) -> dict:
    return prog["ir"] if "ir" in prog else json.loads((prog["root"] / "ir" / "ir_prefill.json").read_text())


def _xray(prog: dict, tokens, reference, d: Path) -> dict:
    """X-ray with the program's own activation contract (its providers' quant.activation)."""
    ours = xray.dump_from_cli(_program(prog, threads=1), tokens, d)
    acts = xray.activation_contract(_ir(prog), prog.get("maps"))
    # and its own KV cache type, as parity passes it (F16 when the config says memory.kv_dtype: f16)
    return xray.xray_against_reference(reference, tokens, ours, XRAY_REL_TOL, acts, xray.kv_cache_dtype(_ir(prog)))


@pytest.mark.parametrize("which", ["workflow", "clean_q8"])
def test_real_dump_matches_the_reference(smollm2_build, programs, tokens, reference, tmp_path, which):
    """The workflow's binary (its circuit's numerics) and a ggml-q8 build: every checkpoint
    dumped, all rows, every op within tolerance of the reference op on the binary's own inputs
    under the binary's activation contract; end-to-end errors larger (they accumulate)."""
    prog = smollm2_build if which == "workflow" else programs["clean_q8"]
    res = _xray(prog, tokens, reference, tmp_path / "dump")
    assert res["missing"] == [], res["missing"]
    assert res["first_divergent"] is None, res["summary"]
    assert res["method"] == "per-op" and res["activations"] == "per-op"
    assert sum(res["activation_dtypes"].values()) == 7 * 30 + 1
    if which == "clean_q8":
        assert res["activation_dtypes"] == {"Q8_0": 1, "Q8_1": 210}
    assert all(c["inputs_from_reference"] == [] for c in res["checkpoints"])   # fully teacher-forced
    errs = [c["rel_err"] for c in res["checkpoints"]]
    assert all(e is not None for e in errs)
    assert max(errs) < XRAY_REL_TOL / 1000, max(errs)   # the margin the tolerance's reason claims
    e2e = res["end_to_end"]["max_rel_err"]
    assert e2e is not None
    if which == "clean_q8":   # activation rounding differences grow with depth; per op they do not
        assert e2e > 100 * max(errs), (e2e, max(errs))
    man = json.loads((tmp_path / "dump" / "manifest.json").read_text())
    assert man["n_tokens"] == len(tokens) and man["skipped"] == []
    assert {t["name"] for t in man["tensors"]} >= set(reference.checkpoint_names)
    assert all(t["shape"][0] == len(tokens) for t in man["tensors"])   # footer ops too: every row


@pytest.mark.parametrize("which", ["workflow", "clean_q8"])
def test_the_wrong_contract_would_blame_the_first_projection(smollm2_build, programs, tokens, reference,
                                                             tmp_path, which):
    """The contract matters: under the other activation numerics the clean binary's first
    projection is off by the Q8 rounding (~0.4 %), above the tolerance; X-ray says which it used."""
    prog = smollm2_build if which == "workflow" else programs["clean_q8"]
    own = _ir(prog)["dims"]["numerics"]
    other = {"f32": "ggml-q8", "ggml-q8": "f32"}[own]
    ours = xray.dump_from_cli(_program(prog, threads=1), tokens, tmp_path / "dump")
    res = xray.xray_against_reference(reference, tokens, ours, XRAY_REL_TOL, activations=other)
    f = res["first_divergent"]
    assert res["activations"] == other and (f["layer"], f["op"]) == (0, "attn_q"), res["summary"]
    assert 1e-3 < f["rel_err"] < 5e-2 and f"({other} activations)" in res["summary"]


def test_dump_refuses_a_non_empty_folder_and_leaves_nothing_on_failure(smollm2_build, tokens, tmp_path):
    d = tmp_path / "full"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    with pytest.raises(BringupError, match="not empty"):
        xray.dump_from_cli(_program(smollm2_build), tokens, d)
    assert sorted(p.name for p in d.iterdir()) == ["keep.txt"]
    # a token outside the vocabulary fails the prefill: no dump folder, no staging folder left
    bad = tmp_path / "bad"
    with pytest.raises(BringupError, match="token id"):
        xray.dump_from_cli(_program(smollm2_build), [1, 10**6], bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]


def _small_profile() -> dict:
    """smollm2's gates and thresholds, sized down to one prompt of 16 positions and 3 greedy tokens."""
    prof = json.loads((ROOT / "config/parity_profiles/smollm2.json").read_text())
    prof.update(min_prompts=1, min_positions=16, greedy={"max_tokens": 3, "min_prefix": 3})
    for g in prof["gates"]:
        if g["id"] == "greedy_prefix":
            g["threshold"] = 1
    return prof


def _prompts(oracle) -> list[dict]:
    p = next(p for p in json.loads((ROOT / "config/prompts/default.json").read_text())["prompts"]
             if p["id"] == "prose-lighthouse")
    return [{"id": p["id"], "kind": p["kind"], "text": "",
             "tokens": oracle.tokenize(p["text"], add_special=oracle.add_bos())[:16]}]


@pytest.fixture(scope="module")
def oracle_f32(smollm2_build):
    """llama.cpp with an F32 KV cache: one of the floor's two pairs."""
    with LlamaCppOracle(smollm2_build["gguf"], n_ctx=256, n_threads=2, kv_type="f32") as o:
        yield o


def _parity(prog: dict, oracle, oracle_f32, reference) -> dict:
    # one thread: bu_linear_rows would hand the swapped-stride kernel a slice of W's rows, which it
    # cannot serve (it reads W's columns); the prefill is single-threaded either way
    ours = _program(prog, oracle.n_vocab, threads=1)
    contract = xray.activation_contract(_ir(prog), prog.get("maps"))
    doc, _ = parity.run_parity(model="smollm2", oracle=oracle, ours=ours, prompts=_prompts(oracle),
                               profile=_small_profile(), oracle_info={"name": "llama.cpp"},
                               program_info={}, inputs={},
                               reference=ReferenceProgram(reference, contract),
                               reference_llama_act=ReferenceProgram(reference, "ggml-q8"),
                               oracle_kv_f32=oracle_f32)
    return doc


@pytest.mark.parametrize("fault,layer,op", FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_fails_certification_and_xray_names_it(programs, oracle, oracle_f32, tokens, reference, tmp_path,
                                                     fault, layer, op):
    prog = programs[fault]
    doc = _parity(prog, oracle, oracle_f32, reference)
    assert doc["verdict"] == "fail", [(g["id"], g["measured"]) for g in doc["gates"]]
    prov = {"model": {"sha256": "x", "sha256_matches_pin": True},
            "build": {"artifacts_sha256": {}, "artifacts_match": True}, "bump": {"payload_sha256": None}}
    evidence = {"ldd": {"bringup-run": {"ok": True}}, "run": {"ok": True}}
    doc["inputs"] = {"gguf": {"sha256": "x"}}
    doc["program"] = {"weights": {"payload_sha256": None}}
    failed = {g["id"] for g in certify.certification_gates(doc, prov, evidence) if not g["passed"]}
    assert failed and failed <= {g["id"] for g in doc["gates"]}   # only parity's gates fail
    res = _xray(prog, tokens, reference, tmp_path / "dump")
    f = res["first_divergent"]
    assert f is not None and (f["layer"], f["op"]) == (layer, op), res["summary"]
    assert f"layer {layer}, op {op}" in res["summary"]
    assert f["rel_err"] is None or f["rel_err"] > 100 * XRAY_REL_TOL, f   # far from the tolerance
    assert f["prev_rel_err"] is not None and f["prev_rel_err"] < XRAY_REL_TOL / 100
    # downstream ops run on the faulted values but are themselves correct: per-op, they pass
    after = [c for c in res["checkpoints"] if c["layer"] is not None and c["layer"] > layer]
    assert after and all(c["rel_err"] is not None and c["rel_err"] < XRAY_REL_TOL for c in after)


def test_clean_variant_passes_the_same_small_gates(smollm2_build, oracle, oracle_f32, reference):
    """The control for the fault tests: without a fault the same gates pass."""
    doc = _parity(smollm2_build, oracle, oracle_f32, reference)
    assert doc["verdict"] == "pass", [(g["id"], g["measured"]) for g in doc["gates"]]


def test_parity_xray_section_comes_from_the_real_binary(programs, smollm2_build, tokens, tmp_path):
    """What `bringup parity --xray on-fail` records on a failed gate: X-ray on the worst-KL prompt
    through the binary's --dump-hidden (no longer "unavailable")."""
    doc = {"prompts": [{"id": "ok", "tokens": tokens, "teacher_forced": {"kl_mean": 1e-4}},
                       {"id": "worst", "tokens": tokens[:10], "teacher_forced": {"kl_mean": 0.5}}]}
    prog = programs["norm_eps"]
    # run_xray_for reads the program's activation contract from its prefill IR
    ir_path = tmp_path / "ir_prefill.json"
    ir_path.write_text(json.dumps(prog["ir"]))
    res = parity.run_xray_for(doc, smollm2_build["gguf"], _program(prog, threads=2), n_tokens=10,
                              rel_tol=XRAY_REL_TOL, ir_prefill=ir_path)
    assert res["status"] == "ran" and res["prompt"] == "worst" and res["tokens"] == tokens[:10]
    f = res["first_divergent"]
    assert (f["layer"], f["op"]) == (3, "attn_norm"), res["summary"]
