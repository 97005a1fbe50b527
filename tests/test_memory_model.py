"""Memory model (issue 7): exact byte counts, header-only planning, budget queries, alternatives.

Expected numbers are written out from the definitions (GGML block sizes from ggml-common.h,
KV layout [n_ctx][n_head_kv][head_dim] per layer), not computed by the code under test.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bringup.plan import memory as mm
from bringup.core.errors import BringupError, IntegrityError, UnsupportedError
from bringup.core.paths import ROOT

# ---------------------------------------------------------------------------------------------
# hand-made specs


def _spec(n_layer=4, n_head_kv=2, head_dim=64, windows=None, weights_bytes=1000, ring=True,
          arena=None, n_ctx_train=1000, overheads=None) -> mm.ModelSpec:
    """A ModelSpec built by hand: one F32 weight of ``weights_bytes`` bytes, uniform KV layers."""
    hp = {"n_layer": n_layer, "n_embd": 32, "n_head": 4, "n_head_kv": n_head_kv, "head_dim": head_dim,
          "head_dim_v": head_dim, "n_ff": 64, "n_vocab": 100, "n_ctx_train": n_ctx_train, "sliding_window": None}
    w = mm.Weight("blk.0.attn_q.weight", "F32", (weights_bytes // 4,), weights_bytes, 0, "attn_q")
    return mm.ModelSpec(
        architecture="test", name="hand-made", header_sha256="0" * 64, hparams=hp,
        sources={k: "hand" for k in hp}, weights=(w,),
        kv_layers=mm.kv_layers_uniform(n_layer, n_head_kv, head_dim, head_dim, windows),
        kv_source="hand", kv_ring_buffer=ring, kv_layout_source="hand", arena=arena, overheads=overheads)


FIXED_ARENA = mm.ArenaPlan(arena_bytes=5000, n_ctx=None, chunk=None, scratch_by_family={}, source="hand arena")


# ---------------------------------------------------------------------------------------------
# KV cache: exact bytes


def test_kv_row_bytes_per_dtype():
    # 2 heads x 64 elements: f32 4 B, f16 2 B, q8_0 34 B per 32 elements (block_q8_0: f16 d + 32 x i8)
    assert mm.kv_row_bytes(2, 64, "f32") == 512
    assert mm.kv_row_bytes(2, 64, "f16") == 256
    assert mm.kv_row_bytes(2, 64, "q8_0") == 2 * 2 * 34
    with pytest.raises(BringupError, match="multiple of the block size"):
        mm.kv_row_bytes(1, 48, "q8_0")


def test_kv_cache_bytes_exact_for_handmade_config():
    layers = mm.kv_layers_uniform(4, 2, 64, 64)
    # 4 layers x 100 positions x (K 512 + V 512) = 409600 per sequence
    assert mm.kv_cache_bytes(layers, 100, 1, "f32") == 409_600
    assert mm.kv_cache_bytes(layers, 100, 3, "f32") == 3 * 409_600
    assert mm.kv_cache_bytes(layers, 100, 1, "f16") == 204_800
    assert mm.kv_cache_bytes(layers, 100, 1, "q8_0") == 4 * 100 * 2 * 136


def test_kv_cache_k_and_v_dims_differ():
    layers = (mm.KVLayer(0, 1, 128, 64, None),)
    assert mm.kv_cache_bytes(layers, 10, 1, "f32") == 10 * (128 * 4 + 64 * 4)


def test_sliding_window_layers_hold_only_their_window():
    windows = [8, 8, None, 8, 8, None]
    layers = mm.kv_layers_uniform(6, 1, 32, 32, windows)
    per_pos = 2 * 32 * 4  # K + V, one head of 32 f32
    # decode-only (chunk 1): 4 window layers x 8 rows + 2 global x 100 rows
    assert mm.kv_cache_bytes(layers, 100, 1, "f32", ring_buffer=True, chunk=1) == (4 * 8 + 2 * 100) * per_pos
    # prefill chunk 4: the window plus 3 rows for the chunk written before it is attended
    assert mm.kv_cache_bytes(layers, 100, 1, "f32", ring_buffer=True, chunk=4) == (4 * 11 + 2 * 100) * per_pos
    # context shorter than the window: every layer holds the context
    assert mm.kv_cache_bytes(layers, 5, 1, "f32", ring_buffer=True, chunk=1) == 6 * 5 * per_pos
    # masked full-length layout (what the runtime does today): every layer holds C
    assert mm.kv_cache_bytes(layers, 100, 2, "f32", ring_buffer=False, chunk=4) == 2 * 6 * 100 * per_pos


# ---------------------------------------------------------------------------------------------
# real headers


@pytest.fixture(scope="module")
def smol_header(smollm2_gguf):
    return mm.read_model_header(smollm2_gguf)


@pytest.fixture(scope="module")
def gemma_header(gemma3_gguf):
    return mm.read_model_header(gemma3_gguf)


def test_smollm2_weights_match_gguf_own_sizes(smollm2_gguf, smol_header):
    # independent: gguf-py's reader computes n_bytes from its own GGML_QUANT_SIZES
    r = gguf.GGUFReader(smollm2_gguf)
    want = {t.name: int(t.n_bytes) for t in r.tensors}
    got = {w.name: w.bytes for w in smol_header.weights}
    assert got == want
    assert len(got) == 272
    spec = mm.spec_from_header(smol_header)
    fp = mm.evaluate(spec, mm.RunParams(2048, 1, "f32", 64))
    assert fp.components[0]["name"] == "weights" and fp.components[0]["bytes"] == sum(want.values())


def test_smollm2_kv_bytes_exact(smol_header):
    spec = mm.spec_from_header(smol_header)
    assert [L.window for L in spec.kv_layers] == [None] * 30
    fp = mm.evaluate(spec, mm.RunParams(2048, 1, "f32", 64))
    kv = next(c for c in fp.components if c["name"] == "kv_cache")
    # 30 layers x 2048 positions x (K + V) x 3 kv heads x 64 x 4 bytes
    assert kv["bytes"] == 30 * 2048 * 2 * 3 * 64 * 4 == 94_371_840
    fp16 = mm.evaluate(spec, mm.RunParams(2048, 2, "q8_0", 64))
    kv16 = next(c for c in fp16.components if c["name"] == "kv_cache")
    assert kv16["bytes"] == 2 * 30 * 2048 * 2 * 3 * 2 * 34


def test_gemma3_window_pattern_from_circuit(gemma_header):
    spec = mm.spec_from_header(gemma_header, kv_ring_buffer=True)
    windows = [L.window for L in spec.kv_layers]
    # every 6th layer global (il % 6 == 5), the others a 512-token window
    assert windows == [None if L % 6 == 5 else 512 for L in range(18)]
    fp = mm.evaluate(spec, mm.RunParams(4096, 1, "f32", 64))
    kv = next(c for c in fp.components if c["name"] == "kv_cache")
    per_pos = 2 * 1 * 256 * 4  # K + V, 1 kv head of 256 f32
    assert kv["bytes"] == (3 * 4096 + 15 * (512 + 63)) * per_pos
    # the circuit says the runtime masks full-length caches: then every layer holds C
    full = mm.spec_from_header(gemma_header)
    assert full.kv_ring_buffer is False
    kvf = next(c for c in mm.evaluate(full, mm.RunParams(4096, 1, "f32", 64)).components if c["name"] == "kv_cache")
    assert kvf["bytes"] == 18 * 4096 * per_pos


def test_header_only_file_gives_the_same_plan(smollm2_gguf, smol_header, tmp_path):
    cut = tmp_path / "header_only.gguf"
    with open(smollm2_gguf, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(smol_header.data_offset))
    assert cut.stat().st_size < os.path.getsize(smollm2_gguf) // 10
    with pytest.raises(Exception):
        gguf.GGUFReader(cut)  # the ordinary reader needs tensor data; plan-memory must not
    # the full path: IR compiled and planned in-process from the header (--activations plan)
    args = ["--ctx", "1024", "--seqs", "2", "--kv-dtype", "f16", "--chunk", "32", "--activations", "plan",
            "--per-node"]
    full_json, full_md = tmp_path / "full.json", tmp_path / "full.md"
    cut_json, cut_md = tmp_path / "cut.json", tmp_path / "cut.md"
    assert mm.cli_main(["--gguf", str(smollm2_gguf), *args, "--out", str(full_json), "--md", str(full_md)]) == 0
    assert mm.cli_main(["--gguf", str(cut), *args, "--out", str(cut_json), "--md", str(cut_md)]) == 0
    assert full_json.read_bytes() == cut_json.read_bytes()
    assert full_md.read_bytes() == cut_md.read_bytes()
    rep = json.loads(cut_json.read_text())
    act = next(c for c in rep["components"] if c["name"] == "activations")
    assert act["status"] == "sized" and "planner arena" in act["source"]
    assert rep["nodes"]["summed"] and len(rep["nodes"]["per_layer"]) > 30


def test_in_process_ir_state_equals_kv_model(smol_header):
    # independent cross-check: the IR compiler sizes the KV state from its own op catalogue
    arena, irs = mm.plan_in_process(smol_header, 777, 16)
    state = irs["prefill"]["state"]
    spec = mm.spec_from_header(smol_header)
    assert sum(s["bytes"] for s in state) == mm.kv_cache_bytes(spec.kv_layers, 777, 1, "f32", ring_buffer=False)
    assert arena.n_ctx == 777 and arena.chunk == 16 and arena.arena_bytes > 0
    # the chosen attention provider (attention.f32.fast) declares its scores scratch as 4 f32 rows
    # of n_ctx (one per query row of a tile; the reference's is one row)
    assert arena.scratch_by_family["attn.scores"] == 777 * 16


def test_header_cut_inside_metadata_is_integrity_error(smollm2_gguf, tmp_path):
    cut = tmp_path / "cut.gguf"
    with open(smollm2_gguf, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(4096))
    with pytest.raises(IntegrityError):
        mm.read_model_header(cut)


def test_hostile_architecture_string_is_refused(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from synth import write_tiny_llama
    path = write_tiny_llama(tmp_path / "bad.gguf", arch="llama|<script>")
    with pytest.raises(UnsupportedError, match="not a plain identifier"):
        mm.read_model_header(path)


def test_tiny_llama_without_circuit_window_is_all_global(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from synth import write_tiny_llama
    h = mm.read_model_header(write_tiny_llama(tmp_path / "tiny.gguf", n_layer=2, n_embd=32, n_head=2))
    spec = mm.spec_from_header(h)
    assert [L.window for L in spec.kv_layers] == [None, None]
    # 2 layers x 10 positions x (K + V) x 2 heads x 16 x f32
    kv = next(c for c in mm.evaluate(spec, mm.RunParams(10, 1, "f32", 4)).components if c["name"] == "kv_cache")
    assert kv["bytes"] == 2 * 10 * 2 * 2 * 16 * 4


# ---------------------------------------------------------------------------------------------
# components, absent inputs, load copies


def test_absent_inputs_size_nothing_and_say_so():
    spec = dataclasses.replace(_spec(), kv_layers=None, kv_source="absent: no pattern")
    fp = mm.evaluate(spec, mm.RunParams(10, 1, "f32", 4))
    by = {c["name"]: c for c in fp.components}
    assert by["kv_cache"]["status"] == "absent" and by["kv_cache"]["bytes"] == 0
    assert by["runtime_overheads"]["status"] == "absent"
    assert not fp.complete and set(fp.missing) == {"kv_cache", "runtime_overheads"}
    assert set(fp.estimated) == {"activations", "workspace"}


def test_plan_arena_replaces_estimates():
    spec = _spec(arena=FIXED_ARENA, overheads=(mm.Overhead("process", 4096, "hand"),))
    fp = mm.evaluate(spec, mm.RunParams(100, 1, "f32", 4))
    by = {c["name"]: c for c in fp.components}
    assert by["activations"]["bytes"] == 5000 + 4 * 100  # arena + the logits row (n_vocab f32)
    assert by["workspace"]["bytes"] == 0 and "inside the arena" in by["workspace"]["source"]
    assert fp.complete and fp.estimated == []
    assert fp.total_bytes == 1000 + 0 + 5400 + 0 + 409_600 + 4096


def test_load_copy_rules_mechanism():
    w = [mm.Weight("blk.0.ffn_up.weight", "Q4_0", (64, 8), 8 * 2 * 18, 0, "ffn_up"),
         mm.Weight("blk.0.attn_norm.weight", "F32", (64,), 256, 0, "attn_norm")]
    rule = {"name": "repack", "tensor_glob": "blk.*.ffn_*", "types": ["Q4_0"], "copy_as": "F32"}
    total, rows = mm.load_copy_bytes(w, [rule])
    assert total == 64 * 8 * 4 and rows == [{"tensor": "blk.0.ffn_up.weight", "rule": "repack", "bytes": 2048}]
    assert mm.load_copy_bytes(w, []) == (0, [])
    with pytest.raises(BringupError, match="matches 2 load-copy rules"):
        mm.load_copy_bytes(w, [rule, dict(rule, name="again")])
    spec = dataclasses.replace(_spec(), load_copy_rules=(rule,), weights=tuple(w))
    by = {c["name"]: c for c in mm.evaluate(spec, mm.RunParams(10, 1, "f32", 1)).components}
    assert by["load_copies"]["bytes"] == 2048


# ---------------------------------------------------------------------------------------------
# budget and inverse queries


def test_parse_bytes_and_devices():
    assert mm.parse_bytes("2GiB") == 2 * 2**30
    assert mm.parse_bytes("500MB") == 500_000_000
    assert mm.parse_bytes("123") == 123
    with pytest.raises(BringupError):
        mm.parse_bytes("2 gigs")
    devs = mm.load_devices()
    assert {"phone-2gb", "laptop-8gb", "server-64gb"} <= set(devs)
    b = mm.device_budget("phone-2gb")
    assert b.budget_bytes == 2**30 and b.usable_bytes == int(2**30 * 0.85)
    with pytest.raises(BringupError, match="unknown device"):
        mm.device_budget("toaster")


def _fixed_spec():
    # footprint(C, S) = 1000 weights + 5400 arena + 4096 overhead + S * C * 4 * 1024 (4 layers K+V)
    return _spec(arena=FIXED_ARENA, overheads=(mm.Overhead("process", 4096, "hand"),), n_ctx_train=100_000)


def test_inverse_queries_match_closed_form_and_brute_force():
    spec = _fixed_spec()
    fixed, per_pos = 1000 + 5400 + 4096, 4 * 1024
    budget = mm.Budget("hand", 10_000_000, 0.0, "hand")
    p = mm.RunParams(100, 1, "f32", 4)
    lc = mm.longest_context(spec, p, budget)
    assert lc["ctx"] == (10_000_000 - fixed) // per_pos
    assert lc["monotonic_check"]["monotonic"] is True
    ms = mm.most_sequences(spec, mm.RunParams(100, 1, "f32", 4), budget)
    assert ms["seqs"] == (10_000_000 - fixed) // (100 * per_pos)
    # brute force over a small range with the same evaluator
    small = mm.Budget("hand", 300_000, 0.0, "hand")
    want = max(c for c in range(1, 200) if mm.evaluate(spec, mm.RunParams(c, 1, "f32", 4)).total_bytes <= 300_000)
    assert mm.longest_context(spec, p, small)["ctx"] == want
    sb = mm.smallest_budget(spec, mm.RunParams(100, 2, "f32", 4), 0.1)
    total = fixed + 2 * 100 * per_pos
    assert sb["total_bytes"] == total
    assert mm.Budget("", sb["budget_bytes"], 0.1, "").fits(total)
    assert not mm.Budget("", sb["budget_bytes"] - 1, 0.1, "").fits(total)


def test_inverse_queries_with_window_layers_and_nothing_fits():
    spec = _spec(windows=[8, None, 8, None], arena=FIXED_ARENA, overheads=(), n_ctx_train=5000)
    budget = mm.Budget("hand", 2_000_000, 0.0, "hand")
    p = mm.RunParams(100, 1, "f32", 1)
    lc = mm.longest_context(spec, p, budget)
    want = max(c for c in range(1, 5001) if mm.evaluate(spec, mm.RunParams(c, 1, "f32", 1)).total_bytes <= 2_000_000)
    assert lc["ctx"] == want
    tiny = mm.Budget("hand", 100, 0.0, "hand")
    assert mm.longest_context(spec, p, tiny)["ctx"] is None
    assert mm.most_sequences(spec, p, tiny)["seqs"] is None
    roomy = mm.Budget("hand", 10**12, 0.0, "hand")
    lc = mm.longest_context(spec, p, roomy)
    assert lc["ctx"] == 5000 and lc["upper_limit"] == "n_ctx_train"  # the model's limit, and says so
    assert lc["capped"] is False  # n_ctx_train is not a search cap: 5000 is the exact answer


@settings(max_examples=60, deadline=None)
# the case CI once drew at random: 1 KV row per sequence, so 65,536 sequences (the search cap) fit
@example(n_layer=1, n_head_kv=1, head_dim=32, window=1, ring=True, chunk=1, kv="q8_0", seqs=1, budget=50_000_000)
@given(n_layer=st.integers(1, 6), n_head_kv=st.integers(1, 4), head_dim=st.sampled_from([32, 64, 96]),
       window=st.one_of(st.none(), st.integers(1, 300)), ring=st.booleans(), chunk=st.integers(1, 64),
       kv=st.sampled_from(["f32", "f16", "q8_0"]), seqs=st.integers(1, 4), budget=st.integers(10_000, 50_000_000))
def test_longest_context_is_the_boundary(n_layer, n_head_kv, head_dim, window, ring, chunk, kv, seqs, budget):
    windows = [window if L % 2 == 0 else None for L in range(n_layer)]
    spec = _spec(n_layer, n_head_kv, head_dim, windows, ring=ring, arena=FIXED_ARENA, overheads=(),
                 n_ctx_train=4096)
    b = mm.Budget("hand", budget, 0.0, "hand")
    p = mm.RunParams(100, seqs, kv, chunk)
    got = mm.longest_context(spec, p, b)["ctx"]
    fits = lambda c: b.fits(mm.evaluate(spec, mm.RunParams(c, seqs, kv, chunk)).total_bytes)  # noqa: E731
    if got is None:
        assert not fits(1)
    else:
        # n_ctx_train is the model's limit, not a search cap: an answer there is exact
        assert fits(got) and (got == 4096 or not fits(got + 1))
    ms = mm.most_sequences(spec, mm.RunParams(64, 1, kv, chunk), b)
    fits_s = lambda s: b.fits(mm.evaluate(spec, mm.RunParams(64, s, kv, chunk)).total_bytes)  # noqa: E731
    if ms["seqs"] is None:
        assert not fits_s(1) and not ms["capped"]
    elif ms["capped"]:
        # the search stopped at its cap: a lower bound, so only "the cap fits" is claimed
        assert ms["seqs"] == mm.SEQ_SEARCH_CAP and fits_s(ms["seqs"])
    else:
        assert fits_s(ms["seqs"]) and not fits_s(ms["seqs"] + 1)


def test_capped_searches_say_so_in_json_and_markdown():
    # 1 layer x 1 KV head of 32 f32 at C=1: K + V = 256 bytes per sequence; fixed part 1000 weights
    # + 5000 arena + 400 logits row. No n_ctx_train, so the context search ends at its cap too.
    spec = _spec(n_layer=1, n_head_kv=1, head_dim=32, arena=FIXED_ARENA, overheads=(), n_ctx_train=None)
    fixed, per_seq = 6400, 256
    p = mm.RunParams(1, 1, "f32", 1)
    roomy = mm.Budget("hand", 10**12, 0.0, "hand")
    ms = mm.most_sequences(spec, p, roomy)
    assert ms["capped"] is True and ms["seqs"] == mm.SEQ_SEARCH_CAP == 65536
    assert roomy.fits(mm.evaluate(spec, mm.RunParams(1, 65537, "f32", 1)).total_bytes)  # the cap is no boundary
    lc = mm.longest_context(spec, p, roomy)
    assert lc["capped"] is True and lc["ctx"] == mm.CTX_SEARCH_CAP and lc["upper_limit"].startswith("search cap")
    # one sequence short of the cap: the boundary is inside the searched range and exact
    below = mm.Budget("hand", fixed + 65535 * per_seq, 0.0, "hand")
    ms_below = mm.most_sequences(spec, p, below)
    assert ms_below["seqs"] == 65535 and ms_below["capped"] is False
    rep = mm.build_report(spec, p, roomy)  # schema-validated
    assert rep["queries"]["most_sequences"]["capped"] and rep["queries"]["longest_context"]["capped"]
    md = mm.render_markdown(rep)
    assert ">= 65536 (search cap)" in md and f">= {mm.CTX_SEARCH_CAP} (search cap)" in md
    exact = mm.render_markdown(mm.build_report(spec, p, below))
    row = next(line for line in exact.splitlines() if "most sequences at C=1" in line)
    assert "65535" in row and "search cap" not in row


def test_monotonicity_violation_is_reported():
    with pytest.raises(BringupError, match="not monotonic in context"):
        mm.check_monotonic(lambda x: 100 - x if x > 50 else x, range(1, 100), "context")
    assert mm.check_monotonic(lambda x: 2 * x, [3, 1, 2], "x") == {"points": 3, "range": [1, 3], "monotonic": True}


# ---------------------------------------------------------------------------------------------
# alternatives


def test_alternatives_ranked_with_exact_savings():
    spec = _spec(n_layer=4, windows=[64, None, 64, None], ring=False, arena=FIXED_ARENA,
                 overheads=(mm.Overhead("process", 4096, "hand"),), weights_bytes=400_000, n_ctx_train=100_000)
    p = mm.RunParams(1000, 2, "f32", 1)
    base = mm.evaluate(spec, p).total_bytes
    budget = mm.Budget("hand", base - 300_000, 0.0, "hand")
    alts = mm.alternatives(spec, p, budget)
    by = {a["name"]: a for a in alts}
    per_layer_pos = 1024  # K + V, 2 heads x 64 f32 each
    assert by["kv_f16"]["bytes_saved"] == 2 * 4 * 1000 * per_layer_pos // 2
    assert by["kv_q8_0"]["bytes_saved"] == 2 * 4 * 1000 * (per_layer_pos - 2 * 2 * 2 * 34)
    assert by["mapped_weights"]["bytes_saved"] == 400_000
    assert by["ring_buffer_window_layers"]["bytes_saved"] == 2 * 2 * (1000 - 64) * per_layer_pos
    assert by["fewer_sequences"]["change"] == "sequences 2 -> 1"
    assert by["shorter_context"]["fits"] is True
    # ranking: every fitting alternative before every non-fitting one, then most bytes saved first
    keys = [(not a["fits"], -a["bytes_saved"]) for a in alts]
    assert keys == sorted(keys)
    assert [a["rank"] for a in alts] == list(range(1, len(alts) + 1))
    assert all(a["total_bytes"] == base - a["bytes_saved"] for a in alts)


def test_requantize_alternative_exact_bytes():
    w = (mm.Weight("blk.0.ffn_up.weight", "Q8_0", (256, 4), 4 * 8 * 34, 0, "ffn_up"),
         mm.Weight("blk.0.attn_q.weight", "Q8_0", (96, 4), 4 * 3 * 34, 0, "attn_q"),
         mm.Weight("blk.0.attn_norm.weight", "F32", (256,), 1024, 0, "attn_norm"))
    spec = dataclasses.replace(_spec(), weights=w)
    s2, kept, changed = mm.requantized(spec, "Q4_K")
    # ffn_up: 4 rows of one 144-byte Q4_K block; attn_q row 96 is not a multiple of 256: kept
    assert [x.bytes for x in s2.weights] == [4 * 144, 4 * 3 * 34, 1024]
    assert (kept, changed) == (1, 1)


# ---------------------------------------------------------------------------------------------
# report, CLI, calibration


def test_report_is_schema_valid_and_markdown_readable(smol_header):
    spec = mm.spec_from_header(smol_header)
    rep = mm.build_report(spec, mm.RunParams(8192, 16, "f32", 64), mm.device_budget("phone-2gb"), per_node=True)
    assert rep["budget"]["verdict"] == "does_not_fit" and rep["alternatives"]
    assert len(rep["weights"]["tensors"]) == 272
    md = mm.render_markdown(rep)
    assert "| component" in md and "## Alternatives" in md and "INCOMPLETE: runtime_overheads" in md


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bringup", "plan", "memory", *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_cli_errors_are_clear_and_leave_nothing(smollm2_gguf, tmp_path):
    out = tmp_path / "m.json"
    base = ["--gguf", str(smollm2_gguf), "--ctx", "512", "--kv-dtype", "f32", "--chunk", "64", "--out", str(out),
            "--activations", "estimate"]
    for extra, msg in ((["--budget", "1GiB"], "--budget needs --headroom"),
                       (["--device", "toaster"], "unknown device 'toaster'"),
                       (["--budget", "lots", "--headroom", "0.1"], "not a byte size"),
                       (["--calibration", str(tmp_path / "nope.json")], "calibration not found")):
        with pytest.raises(BringupError, match=msg) as e:
            mm.cli_main(base + extra)
        assert e.value.exit_code == 2 and not out.exists()
    with pytest.raises(BringupError, match="does not fit") as e:
        mm.cli_main(base + ["--budget", "50MiB", "--headroom", "0.1", "--fail-if-not-fit"])
    assert e.value.exit_code == 6
    assert json.loads(out.read_text())["budget"]["verdict"] == "does_not_fit"  # the report is still written


def test_cli_entry_point_exit_code(tmp_path):
    r = _cli("--gguf", str(tmp_path / "missing.gguf"), "--ctx", "1", "--kv-dtype", "f32", "--chunk", "1")
    assert r.returncode == 2 and "GGUF file not found" in r.stderr


def test_cli_output_is_byte_identical(smollm2_gguf, tmp_path):
    outs = []
    for i in range(2):
        o, m = tmp_path / f"{i}.json", tmp_path / f"{i}.md"
        mm.cli_main(["--gguf", str(smollm2_gguf), "--ctx", "3000", "--seqs", "3", "--kv-dtype", "q8_0",
                     "--chunk", "16", "--device", "laptop-8gb", "--per-node", "--activations", "estimate",
                     "--out", str(o), "--md", str(m)])
        outs.append((o.read_bytes(), m.read_bytes()))
    assert outs[0] == outs[1]


def _calibrated(spec):
    m = [{"ctx": 128, "seqs": 1, "kv_dtype": "f32", "chunk": 64, "peak_rss_bytes": 0}]
    pred = mm.evaluate(spec, mm.RunParams(128, 1, "f32", 64)).total_bytes
    m[0]["peak_rss_bytes"] = pred + 12_345_678
    return mm.calibrate(spec, m, binary_sha256="a" * 64, library_sha256="b" * 64, command=["bringup-run"])


def test_calibration_round_trip(smol_header, tmp_path, smollm2_gguf):
    spec = mm.spec_from_header(smol_header)
    cal = _calibrated(spec)
    assert cal["overheads"][0]["bytes"] == round(12_345_678 / 4096) * 4096
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cal))
    out = tmp_path / "m.json"
    assert mm.cli_main(["--gguf", str(smollm2_gguf), "--ctx", "512", "--kv-dtype", "f32", "--chunk", "64",
                        "--activations", "estimate", "--calibration", str(path), "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert "runtime_overheads" not in rep["missing"]
    assert "calibration_sha256" in rep["inputs"]
    bad = dict(cal, model_header_sha256="c" * 64)
    path.write_text(json.dumps(bad))
    with pytest.raises(BringupError, match="measured on another model"):
        mm.cli_main(["--gguf", str(smollm2_gguf), "--ctx", "512", "--kv-dtype", "f32", "--chunk", "64",
                     "--calibration", str(path)])
    with pytest.raises(BringupError, match="not a runtime calibration record"):
        mm.validate_calibration({"kind": "something else"})


def test_calibrate_cli_runs_the_native_interface(smollm2_gguf, tmp_path):
    # a stand-in for bringup-run that checks its arguments and reports a fixed peak RSS
    fake = tmp_path / "bringup-run"
    fake.write_text("#!/bin/sh\n"
                    "case \"$*\" in *--ctx\\ 256*--timing*--json*) ;; *) echo \"bad args: $*\" >&2; exit 9;; esac\n"
                    "echo '{\"prompt_tokens\": [], \"generated_tokens\": [1], \"text\": \"\", "
                    "\"timing\": {\"peak_rss_kib\": 292968, \"major_page_faults\": 0}}'\n")
    fake.chmod(0o755)
    lib, weights = tmp_path / "libmodel.so", tmp_path / "weights.bump"
    lib.write_bytes(b"lib")
    weights.write_bytes(b"w")
    out = tmp_path / "cal.json"
    assert mm.cli_main(["--gguf", str(smollm2_gguf), "--ctx", "256", "--kv-dtype", "f32", "--chunk", "64",
                        "--activations", "plan", "--calibrate", str(out), "--bringup-run", str(fake),
                        "--libmodel", str(lib), "--weights", str(weights)]) == 0
    cal = json.loads(out.read_text())
    mm.validate_calibration(cal)
    pt = cal["points"][0]
    assert pt["peak_rss_bytes"] == 292968 * 1024 and pt["ctx"] == 256
    assert cal["overheads"][0]["bytes"] == round((292968 * 1024 - pt["predicted_bytes"]) / 4096) * 4096
    assert cal["command"][:3] == ["bringup-run", "libmodel.so", "weights.bump"]  # no machine paths
    with pytest.raises(BringupError, match="--calibrate needs --libmodel"):
        mm.cli_main(["--gguf", str(smollm2_gguf), "--ctx", "256", "--kv-dtype", "f32", "--chunk", "64",
                     "--calibrate", str(out), "--bringup-run", str(fake), "--weights", str(weights)])


# ---------------------------------------------------------------------------------------------
# The RSS proof: the native CLI on smollm2 against the prediction.
#
# Wiring: `snakemake results/smollm2/build/bringup-run` (convert, compile, plan, codegen, build)
# produces the binary; this test then runs it. It calibrates the runtime overhead at C=128 and
# checks the prediction at C=512 and C=2048 (contexts the calibration did not see). The runtime must
# touch (prefault) its arena and KV cache at open, or peak RSS measures only the pages a short
# prompt reached and the gate fails: the failure message says so.

RESULTS = ROOT / "results" / "smollm2"
RUN = RESULTS / "build" / "bringup-run"
LIB = RESULTS / "build" / "libmodel.so"
WEIGHTS = RESULTS / "convert" / "weights.bump"
PLAN = RESULTS / "plan" / "memory_plan.json"
IR_DECODE = RESULTS / "ir" / "ir_decode.json"
CHUNK_IR = RESULTS / "ir" / "ir_prefill.json"
PROMPT = list(range(100, 164))  # 64 token ids, all < n_vocab 49152
GATE = 0.10   # issue 7: +-10% now; the goal is +-3%

# The native program is built through the workflow by the session fixture smollm2_build: these
# tests never skip their subject.
needs_native = pytest.mark.usefixtures("smollm2_build")


def _native_spec(smollm2_gguf):
    spec = mm.spec_from_header(mm.read_model_header(smollm2_gguf))
    plan = json.loads(PLAN.read_text())
    spec = dataclasses.replace(spec, arena=mm.arena_from_plan(plan, "memory_plan.json"))
    state = json.loads(IR_DECODE.read_text())["state"]
    dtypes = {s["dtype"] for s in state}
    kv = {"F32": "f32", "F16": "f16", "Q8_0": "q8_0"}
    assert len(dtypes) == 1 and dtypes <= set(kv), f"IR state dtypes {dtypes}"
    chunk = json.loads(CHUNK_IR.read_text())["dims"]["n_tokens"]
    return spec, kv[dtypes.pop()], chunk


@needs_native
@pytest.mark.slow
def test_native_peak_rss_matches_prediction(smollm2_gguf):
    from bringup.core.hashing import sha256_file
    spec, kv_dtype, chunk = _native_spec(smollm2_gguf)
    cal_run = mm.run_native(RUN, LIB, WEIGHTS, ctx=128, prompt_tokens=PROMPT, max_tokens=4)
    cal = mm.calibrate(spec, [{"ctx": 128, "seqs": 1, "kv_dtype": kv_dtype, "chunk": chunk,
                               "peak_rss_bytes": cal_run["peak_rss_bytes"]}],
                       binary_sha256=sha256_file(RUN), library_sha256=sha256_file(LIB), command=cal_run["command"])
    ovs, src = mm.overheads_from_calibration(cal, "in-test calibration")
    spec = dataclasses.replace(spec, overheads=ovs, overheads_source=src)
    errors = {}
    for ctx in (512, 2048):
        pred = mm.evaluate(spec, mm.RunParams(ctx, 1, kv_dtype, chunk)).total_bytes
        got = mm.run_native(RUN, LIB, WEIGHTS, ctx=ctx, prompt_tokens=PROMPT, max_tokens=4)["peak_rss_bytes"]
        errors[ctx] = (pred, got, (got - pred) / pred)
        print(f"C={ctx}: predicted {pred}, measured {got}, error {(got - pred) / pred:+.2%}")
    bad = {c: e for c, e in errors.items() if abs(e[2]) > GATE}
    assert not bad, (f"peak RSS vs prediction beyond +-{GATE:.0%}: {bad} (does the runtime prefault its arena "
                     "and KV cache? untouched pages are not resident)")


@needs_native
@pytest.mark.slow
def test_native_rss_flat_and_no_major_faults_over_64_decode_steps():
    # warm-up = a run's prefill and first decode step (first-use allocations, page cache);
    # then 64 more decode steps may neither grow peak RSS nor take a major page fault
    # Every weight page in the page cache first: decode steps past the warm-up touch embedding rows
    # of new tokens, and on a loaded host with memory pressure those pages may have been evicted
    # (a major fault that says nothing about the program; seen once on a fresh clone at load 20).
    with open(WEIGHTS, "rb") as fh:
        while fh.read(1 << 24):
            pass
    mm.run_native(RUN, LIB, WEIGHTS, ctx=512, prompt_tokens=PROMPT, max_tokens=2)  # first-use work
    warm = mm.run_native(RUN, LIB, WEIGHTS, ctx=512, prompt_tokens=PROMPT, max_tokens=2, extra=["--no-stop"])
    many = mm.run_native(RUN, LIB, WEIGHTS, ctx=512, prompt_tokens=PROMPT, max_tokens=66, extra=["--no-stop"])
    assert len(many["generated_tokens"]) == 66, "64 decode steps after warm-up are needed"
    grow = many["peak_rss_bytes"] - warm["peak_rss_bytes"]
    new_pages = many["minor_page_faults"] - warm["minor_page_faults"]
    print(f"peak RSS after warm-up {warm['peak_rss_bytes']}, after 64 more decode steps {many['peak_rss_bytes']} "
          f"({grow:+d}); minor faults {new_pages:+d}; major faults {warm['major_page_faults']} -> "
          f"{many['major_page_faults']}")
    # New pages touched are counted exactly by minor faults; peak RSS of two processes differs by
    # up to ~0.25 MiB with no growth at all (ASLR, heap placement: measured), hence 1 MiB there.
    assert new_pages <= 16, (f"{new_pages} new pages touched over 64 decode steps (KV rows are touched lazily "
                             "unless the runtime prefaults its KV cache)")
    assert grow <= 2**20, f"peak RSS grew {grow} bytes over 64 decode steps"
    # Two processes: the longer run may take no more major faults than the shorter one (measured
    # once on a fresh clone: 2 in the warm run, 0 in the long one, the page cache filled between).
    assert many["major_page_faults"] <= warm["major_page_faults"], "major page faults after warm-up"


def test_moe_weights_every_expert_counted_and_the_active_share_stated(tmp_path, llama_vocab_dir):
    """A mixture-of-experts model: every expert is mapped and counted in ``weights`` (any token may
    select any expert); the source says how many bytes are experts and what one token reads."""
    from bringup.fetch import synth
    uri = ("synth://bringup-synth-v1/qwen3moe?vocab=qwen2&n_layer=1&n_embd=32&n_head=2&n_head_kv=1&n_ff=32"
           "&n_ctx=64&seed=1&wtype=F32&n_expert=8&n_expert_used=2")
    g = synth.generate(synth.parse(uri), llama_vocab_dir, tmp_path / "moe.gguf")
    spec = mm.spec_from_header(mm.read_model_header(g))
    comp = mm.evaluate(spec, mm.RunParams(ctx=64, seqs=1, kv_dtype="f32", chunk=8)).components[0]
    experts = 3 * 8 * 32 * 32 * 4
    assert comp["name"] == "weights" and comp["bytes"] == sum(w.bytes for w in spec.weights) > experts
    assert (f"of which {experts} bytes are routed experts (8 per layer, every one mapped and counted; "
            f"a decode token reads 2 of them per layer, {experts // 4} bytes)") in comp["source"]


def test_moe_report_says_what_is_mapped_resident_and_how_many_experts_fit(tmp_path, llama_vocab_dir):
    """memory_model.json's ``experts``: every expert mapped, what is resident (all after the default
    payload check; the selected ones with --no-verify), and how many experts per layer a budget
    holds resident beside everything else: the largest k whose footprint fits, k + 1 not."""
    from bringup.fetch import synth
    uri = ("synth://bringup-synth-v1/qwen3moe?vocab=qwen2&n_layer=2&n_embd=256&n_head=2&n_head_kv=1&n_ff=256"
           "&n_ctx=64&seed=1&wtype=Q4_K&n_expert=16&n_expert_used=4")
    g = synth.generate(synth.parse(uri), llama_vocab_dir, tmp_path / "moe.gguf")
    spec = mm.spec_from_header(mm.read_model_header(g))
    p = mm.RunParams(ctx=64, seqs=1, kv_dtype="f32", chunk=8)
    one = 3 * 256 * 256 // 256 * 144   # one expert's gate, up and down in Q4_K
    rest = mm.evaluate(spec, dataclasses.replace(p, weights_mapped=True)).total_bytes
    other = sum(w.bytes for w in spec.weights) - 2 * 16 * one
    for k in (0, 5, 16):
        budget = mm.Budget("hand", rest + other + k * 2 * one + one // 2, 0.0, "hand")
        ex = mm.build_report(spec, p, budget)["experts"]
        assert ex["experts_resident_per_layer"] == k and ex["expert_bytes"] == one
        assert ex["bytes"] == 2 * 16 * one and ex["decode_token_bytes"] == 2 * 4 * one
        assert "all 16 experts of each of the 2 layers" in ex["mapped"] and "--no-verify" in ex["resident"]
    assert "holds 5 of 16 experts per layer resident" in mm.render_markdown(
        mm.build_report(spec, p, mm.Budget("hand", rest + other + 5 * 2 * one, 0.0, "hand")))
    assert mm.build_report(spec, p, None)["experts"]["experts_resident_per_layer"] is None
    assert mm.build_report(_spec(), p, None)["experts"] is None   # a dense model has none
