"""The F16 KV cache (``bringup ir --kv-type f16``): the attention providers over it
(``attention.f16.scalar`` / ``attention.f16.fast``, csrc/kernels/bu_attention_f16*.c), their
selection, the planner and memory model, and a tiny model built with it end to end.

Kernels, against an independent expression of the contract: numpy float64 masked softmax attention
(``tests.helpers.attention.attn_ref``) over K / V rounded with ``astype(np.float16)`` (the call's own rows
included, as llama.cpp reads them back from its F16 cache); the cache bits against numpy's
float16 cast (round to nearest even); the fast provider at every ISA level this host has against
the scalar one (bitwise at level scalar, the map's declared bound at avx2 / avx512), any partition
into head ranges against the whole call. The IR: f16 providers only under ``kv_type="f16"``, the
default IR unchanged by the new maps. End to end: the tiny model of tests/test_build.py built with
an F16 cache against the float64 reference with F16-rounded K / V.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from bringup.ir.block import expand
from bringup.core.errors import BringupError, UnsupportedError
from bringup.convert import importer as convert
from bringup.core import canonjson
from bringup.ir import kernel_maps as kernels
from bringup.ir import lower as ir
from bringup.parity import xray
from bringup.parity.oracles import reference
from bringup.plan import ir_report, planner
from bringup.plan.memory.arena import check_kv_dtype
from tests.helpers.attention import CASES, KV, attn_bound, attn_ref, check_head_ranges
from tests.helpers.attention import inputs as attn_inputs
from tests.helpers.kernels import BU_ERR_ARG, BU_ERR_NULL, BU_ERR_WS, BU_OK, P, Guarded, host_levels, load
from tests.helpers.pipeline import CHUNK, N_CTX, run_pipeline, tiny_pipeline, write_tiny_gguf

TILE = 4                 # score rows of the fast provider's scratch (bu_attention.h BU_ATTN_TILE)
SENTINEL16 = 0xFFFF      # a NaN half: cache rows no call may touch


def f16(a) -> np.ndarray:
    """The contract's rounding: IEEE binary16, nearest even (numpy's cast), widened exactly."""
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float64)


class KV16:
    """An F16 KV cache ([n_ctx, n_head_kv, head_dim] uint16): rows [0, pos) the halves of an fp32
    cache's (tests.helpers.attention.KV), rows >= pos set to SENTINEL16."""

    def __init__(self, kv: KV, pos: int):
        self.k = np.full(kv.k.shape, SENTINEL16, np.uint16)
        self.v = np.full(kv.v.shape, SENTINEL16, np.uint16)
        self.k[:pos] = kv.k[:pos].astype(np.float16).view(np.uint16)
        self.v[:pos] = kv.v[:pos].astype(np.float16).view(np.uint16)

    def copy(self) -> "KV16":
        c = object.__new__(KV16)
        c.k, c.v = self.k.copy(), self.v.copy()
        return c

    def widened(self, T: int, pos: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows [0, pos + T) as float64 (the values every query sees)."""
        return (self.k[:pos + T].view(np.float16).astype(np.float64),
                self.v[:pos + T].view(np.float16).astype(np.float64))


def inputs(case, seed):
    """test_kernels_attention's inputs for ``case``, with the cache's old rows as F16."""
    q, k, v, kv = attn_inputs(case, seed)
    return q, k, v, KV16(kv, case[6])


def ws_fast(T, D, Dv, n_ctx) -> int:
    """attention.f16.fast's scratch bytes (its map: n_ctx * 16 + n_tokens * (head_dim + head_dim_v) * 2)."""
    return n_ctx * 16 + T * (D + Dv) * 2


def scalar(lib, q, k, v, kv, pos, scale, window, softcap):
    T, H, D = q.shape
    n_ctx, Hkv, Dv = kv.v.shape
    out = Guarded((T, H, Dv))
    ws = np.zeros(n_ctx, np.float32)
    st = lib.bu_attention_f16_scalar(P(q), P(k), P(v), P(kv.k), P(kv.v), out.p, T, H, Hkv, D, Dv, n_ctx, pos, window,
                                     scale, softcap, P(ws), n_ctx * 4)
    return st, out


def fast(lib, q, k, v, kv, pos, scale, window, softcap, ranges=None, ws_cap=None):
    T, H, D = q.shape
    n_ctx, Hkv, Dv = kv.v.shape
    out = Guarded((T, H, Dv))
    need = ws_fast(T, D, Dv, n_ctx)
    ws = np.zeros(need, np.uint8)
    for b, e in ranges or [(0, H)]:
        st = lib.bu_attention_f16_fast(P(q), P(k), P(v), P(kv.k), P(kv.v), out.p, T, H, Hkv, D, Dv, n_ctx, pos, b, e,
                                       window, scale, softcap, P(ws), need if ws_cap is None else ws_cap)
        if st != BU_OK:
            return st, out
    return BU_OK, out


def check_cache(kv, before, k, v, pos):
    """Rows pos..pos+T-1 are numpy's float16 cast of k / v, bit for bit; every other row as before."""
    T = k.shape[0]
    np.testing.assert_array_equal(kv.k[pos:pos + T], k.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(kv.v[pos:pos + T], v.astype(np.float16).view(np.uint16))
    for new, old in ((kv.k, before.k), (kv.v, before.v)):
        np.testing.assert_array_equal(new[:pos], old[:pos])
        np.testing.assert_array_equal(new[pos + T:], old[pos + T:])


@pytest.fixture(scope="module")
def fmap():
    return kernels.load_maps()["attention.f16.fast"].raw


@pytest.mark.parametrize("case", CASES, ids=[f"T{c[0]}H{c[1]}kv{c[2]}D{c[3]}Dv{c[4]}w{c[7]}s{int(c[8])}" for c in CASES])
def test_scalar_against_numpy_with_f16_rounded_kv(build, tmp_path_factory, case):
    lib = load(build, tmp_path_factory, None)
    T, H, Hkv, D, Dv, n_ctx, pos, window, softcap = case
    q, k, v, kv = inputs(case, 11 * T + pos)
    before = kv.copy()
    scale = 1.0 / math.sqrt(D)
    st, out = scalar(lib, q, k, v, kv, pos, scale, window, softcap)
    assert st == BU_OK and out.guards_intact()
    check_cache(kv, before, k, v, pos)
    kc, vc = before.widened(0, pos)
    kc, vc = np.concatenate([kc, f16(k)]), np.concatenate([vc, f16(v)])   # the call's own rows: rounded too
    np.testing.assert_allclose(out.arr, attn_ref(q, kc, vc, pos, scale, window, softcap), atol=2e-5 * Dv, rtol=0)


@pytest.mark.parametrize("level", host_levels())
@pytest.mark.parametrize("case", CASES, ids=[f"T{c[0]}H{c[1]}kv{c[2]}D{c[3]}Dv{c[4]}w{c[7]}s{int(c[8])}" for c in CASES])
def test_fast_against_numpy_and_scalar(build, tmp_path_factory, fmap, level, case):
    lib = load(build, tmp_path_factory, level)
    T, H, Hkv, D, Dv, n_ctx, pos, window, softcap = case
    q, k, v, kv = inputs(case, 13 * T + pos)
    before, kv_ref = kv.copy(), kv.copy()
    scale = 1.0 / math.sqrt(D)
    st, out = fast(lib, q, k, v, kv, pos, scale, window, softcap)
    assert st == BU_OK and out.guards_intact()
    check_cache(kv, before, k, v, pos)
    kc, vc = kv.widened(T, pos)
    np.testing.assert_allclose(out.arr, attn_ref(q, kc, vc, pos, scale, window, softcap), atol=2e-5 * Dv, rtol=0)
    st, ref = scalar(lib, q, k, v, kv_ref, pos, scale, window, softcap)
    assert st == BU_OK
    np.testing.assert_array_equal(kv_ref.k, kv.k)
    rel = {x["level"]: x for x in fmap["variants"]}[level]["versus_reference"]
    assert rel["reference"] == "attention.f16.scalar"
    if rel["relation"] == "bitwise":
        np.testing.assert_array_equal(out.arr.view(np.uint32), ref.arr.view(np.uint32))
    else:   # the fp32 provider's bound, with k_j, v_j the F16 values the kernel reads
        diff = np.abs(out.arr.astype(np.float64) - ref.arr)
        bound = attn_bound(rel["bound_coefficients"], q, kc.astype(np.float32), vc.astype(np.float32), pos, scale,
                           window)
        assert (diff <= bound).all(), (level, diff.max(), bound[diff > bound].min())


@pytest.mark.parametrize("level", host_levels())
def test_head_ranges_and_prefill_then_decode(build, tmp_path_factory, level):
    """Disjoint head ranges (what the runtime's threads call) = the whole call, outputs and cache,
    bit for bit; then a prefill chunk followed by decode steps, each call against numpy over the
    F16 cache the earlier calls left (GQA, sliding window, soft-cap)."""
    lib = load(build, tmp_path_factory, level)
    for case in (CASES[3], CASES[5], CASES[7]):
        check_head_ranges(fast, lib, case, inputs, 5)
    rng = np.random.default_rng(9)
    H, Hkv, D, Dv, n_ctx, window, softcap = 6, 2, 40, 24, 48, 7, 30.0
    kv = KV16(KV(rng, n_ctx, Hkv, D, Dv, 0), 0)
    pos = 0
    for T in (9, 1, 1, 1, 5, 1):          # a prefill chunk, decode steps, another chunk, a decode step
        q = rng.standard_normal((T, H, D)).astype(np.float32)
        k = rng.standard_normal((T, Hkv, D)).astype(np.float32)
        v = rng.standard_normal((T, Hkv, Dv)).astype(np.float32)
        st, out = fast(lib, q, k, v, kv, pos, 0.3, window, softcap, [(0, 3), (3, H)])
        assert st == BU_OK
        kc, vc = kv.widened(T, pos)
        np.testing.assert_allclose(out.arr, attn_ref(q, kc, vc, pos, 0.3, window, softcap), atol=2e-5 * Dv, rtol=0)
        pos += T


def test_store_rounds_to_nearest_even_like_numpy(build, tmp_path_factory):
    """Ties, the overflow threshold, subnormals and signed zero: the cache holds numpy's float16
    cast of every K / V element (both providers)."""
    special = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65504.0, 65519.99, 65520.0, -1e9, 2**-24, 2**-25,
                        3 * 2**-26, 6e-8, -0.0, 0.0, 1e-3, -2.5e-5, 3.14159, 1 / 3], np.float32)
    k = special.reshape(1, 2, 8)
    v = special[::-1].copy().reshape(1, 2, 8)
    q = np.zeros((1, 2, 8), np.float32)
    for level in (None, "scalar"):
        lib = load(build, tmp_path_factory, level)
        for call in (scalar, fast):
            kv = KV16(KV(np.random.default_rng(0), 3, 2, 8, 8, 1), 1)
            before = kv.copy()
            with np.errstate(all="ignore"):   # 1e9 and 65520 overflow to inf, as the contract says
                st, _ = call(lib, q, k, v, kv, 1, 0.5, 0, 0.0)
                assert st == BU_OK
                check_cache(kv, before, k, v, 1)


def test_fast_status_codes(build, tmp_path_factory):
    """The scratch includes the call's F16 rows; the caches' overlap checks use 2 bytes per element."""
    lib = load(build, tmp_path_factory, None)
    case = (3, 4, 2, 8, 12, 10, 2, 0, 0.0)
    T, H, Hkv, D, Dv, n_ctx, pos, _, _ = case
    q, k, v, kv = inputs(case, 1)
    before = kv.copy()
    st, out = fast(lib, q, k, v, kv, pos, 0.3, 0, 0.0, ws_cap=ws_fast(T, D, Dv, n_ctx) - 1)
    assert st == BU_ERR_WS and out.untouched()
    np.testing.assert_array_equal(kv.k, before.k)
    ws = np.zeros(ws_fast(T, D, Dv, n_ctx), np.uint8)
    o = Guarded((T, H, Dv))
    assert lib.bu_attention_f16_fast(P(q), P(k), P(v), None, P(kv.v), o.p, T, H, Hkv, D, Dv, n_ctx, pos, 0, H, 0, 0.3,
                                     0.0, P(ws), ws.size) == BU_ERR_NULL
    # k_cache, v_cache and out packed back to back: F16 sizes do not overlap (fp32 sizes would)
    kb, vb = n_ctx * Hkv * D * 2, n_ctx * Hkv * Dv * 2
    buf = np.zeros(kb + vb + T * H * Dv * 4, np.uint8)
    base = buf.ctypes.data
    for fn, extra in ((lib.bu_attention_f16_fast, (0, H)), (lib.bu_attention_f16_scalar, ())):
        assert fn(P(q), P(k), P(v), base, base + kb, base + kb + vb, T, H, Hkv, D, Dv, n_ctx, pos, *extra, 0, 0.3, 0.0,
                  P(ws), ws.size) == BU_OK
        assert fn(P(q), P(k), P(v), base, base + kb - 2, base + kb + vb, T, H, Hkv, D, Dv, n_ctx, pos, *extra, 0, 0.3,
                  0.0, P(ws), ws.size) == BU_ERR_ARG
    assert o.untouched()
    assert lib.bu_attention_f16_fast(P(q), P(k), P(v), P(kv.k), P(kv.v), o.p, T, H, Hkv, D, Dv, n_ctx, 8, 0, H, 0, 0.3,
                                     0.0, P(ws), ws.size) == BU_ERR_ARG    # pos + T > n_ctx


# ---- the IR, the plan, the memory model ----

@pytest.fixture(scope="module")
def tiny():
    root = Path(tempfile.mkdtemp(prefix="bu_kvf16_"))
    gguf_path = write_tiny_gguf(root / "tiny.gguf", 3)
    convert.convert(gguf_path, root / "convert")
    cfg = json.loads((root / "convert" / "config.json").read_text())
    man = json.loads((root / "convert" / "weights_manifest.json").read_text())
    return {"root": root, "gguf": gguf_path, "cfg": cfg, "man": man}


def test_ir_selects_f16_providers_only_with_kv_type_f16(tiny):
    d32 = ir.compile_ir(tiny["cfg"], tiny["man"], chunk=CHUNK, n_ctx=N_CTX)
    d16 = ir.compile_ir(tiny["cfg"], tiny["man"], chunk=CHUNK, n_ctx=N_CTX, kv_type="f16")
    for phase in ir.PHASES:
        a, b = d32[phase], d16[phase]
        assert {op["provider"] for op in expand(a) if op["op"] == "attention"} == {"attention.f32.fast"}
        assert {op["provider"] for op in expand(b) if op["op"] == "attention"} == {"attention.f16.fast"}
        assert "kv_type" not in a["dims"] and b["dims"]["kv_type"] == "f16"
        assert b["values_source"]["kv_type"].startswith("flag: --kv-type f16")
        assert {s["dtype"] for s in a["state"]} == {"F32"} and {s["dtype"] for s in b["state"]} == {"F16"}
        for sa, sb in zip(a["state"], b["state"]):
            assert 2 * sb["bytes"] == sa["bytes"] and 2 * sb["bytes_per_position"] == sa["bytes_per_position"]
            assert b["tensors"][sb["name"]]["dtype"] == "F16"
        rejected = {c["id"]: c["reasons"] for op in expand(a) if op["op"] == "attention"
                    for c in op["selection"]["candidates"] if not c["accepted"]}
        assert any("takes F16" in r for r in rejected["attention.f16.fast"])
    with pytest.raises(BringupError, match="--kv-type 'q8_0'"):
        ir.compile_ir(tiny["cfg"], tiny["man"], chunk=CHUNK, n_ctx=N_CTX, kv_type="q8_0")


def _maps_without(tmp: Path, prefix: str) -> Path:
    d = tmp / f"maps_without_{prefix}"
    d.mkdir()
    for p in sorted(kernels.KERNEL_MAPS.glob("*.json")):
        if not p.name.startswith(prefix):
            shutil.copy(p, d / p.name)
    return d


def test_default_ir_unchanged_by_the_f16_maps(tiny, tmp_path):
    """Without the attention.f16.* maps the default IR is the same, but for the maps' hash and the
    rejected f16 candidates in the attention ops' selection traces."""
    old = ir.compile_ir(tiny["cfg"], tiny["man"], chunk=CHUNK, n_ctx=N_CTX,
                        maps_dir=_maps_without(tmp_path, "attention.f16."))
    new = ir.compile_ir(tiny["cfg"], tiny["man"], chunk=CHUNK, n_ctx=N_CTX)
    for phase in ir.PHASES:
        doc = json.loads(canonjson.dumps(new[phase]))
        doc["inputs_sha256"]["kernel_maps"] = old[phase]["inputs_sha256"]["kernel_maps"]
        for sel in _selections(doc):    # header, block and footer ops, and per-layer resolutions
            cands = sel["candidates"]
            assert all(not c["accepted"] for c in cands if c["id"].startswith("attention.f16."))
            sel["candidates"] = [c for c in cands if not c["id"].startswith("attention.f16.")]
        assert canonjson.dumps(doc) == canonjson.dumps(old[phase])


def _selections(node):
    """Every op selection trace (a dict with ``candidates``) under ``node``, wherever the IR keeps it."""
    if isinstance(node, dict):
        if isinstance(node.get("selection"), dict) and "candidates" in node["selection"]:
            yield node["selection"]
        for v in node.values():
            yield from _selections(v)
    elif isinstance(node, list):
        for v in node:
            yield from _selections(v)


def test_no_f16_provider_is_a_compile_error_listing_the_candidates(tiny, tmp_path):
    with pytest.raises(UnsupportedError, match=r"no provider for op layer\.0\.attn") as e:
        ir.compile_ir(tiny["cfg"], tiny["man"], chunk=CHUNK, n_ctx=N_CTX, kv_type="f16",
                      maps_dir=_maps_without(tmp_path, "attention.f16."))
    assert "attention.f32.fast: " in str(e.value) and "takes F32; layer.0.k_cache is F16" in str(e.value)


def test_plan_report_and_memory_model_use_the_irs_kv_dtype(tiny):
    irs = ir.compile_ir(tiny["cfg"], tiny["man"], chunk=CHUNK, n_ctx=N_CTX, kv_type="f16")
    plan = planner.plan_irs(irs)
    assert {b["dtype"] for b in plan["state"]["buffers"]} == {"F16"}
    shown = ir_report.report_data(irs, plan)
    assert ["kv_type", "f16"] == shown["values"][[v[0] for v in shown["values"]].index("kv_type")][:2]
    for b in shown["state"]["buffers"]:   # the conversion on store is visible in the KV cache view
        assert b["dtype"] == "F16" and b["store"].startswith("conversion fp32 -> F16, round to nearest even")
    check_kv_dtype("f16", [b["dtype"] for b in plan["state"]["buffers"]], "plan")
    with pytest.raises(BringupError, match="--kv-dtype f32 but plan stores the KV cache as f16"):
        check_kv_dtype("f32", [b["dtype"] for b in plan["state"]["buffers"]], "plan")
    check_kv_dtype("q8_0", [], "an older plan")   # no dtypes recorded: nothing to check


# ---- end to end: a tiny model built with an F16 cache ----

@pytest.fixture(scope="module")
def builds():
    """The session's tiny model (tests/test_build.py, f32 cache) and the same GGUF built with F16."""
    p32 = tiny_pipeline()
    return {"f32": p32, "f16": run_pipeline(Path(tempfile.mkdtemp(prefix="bu_kvf16_build_")), p32["gguf"],
                                            kv_type="f16")}


def _all_logits(p, toks, path):
    r = subprocess.run([str(p["cli"]), str(p["lib"]), str(p["bump"]), "--prompt-tokens", ",".join(map(str, toks)),
                        "--all-logits", str(path), "--max-tokens", "0", "--json", "-v"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return np.fromfile(path, dtype="<f4").reshape(len(toks), -1), json.loads(r.stdout), r.stderr


@pytest.mark.slow   # builds another whole (tiny) model: the fast lane builds one per session
def test_tiny_model_with_f16_cache_against_the_f16_reference(builds, tmp_path, monkeypatch):
    """10 tokens in prefill chunks of 4, 4, 2 (later chunks read the earlier ones from the cache).
    The F16 build is held against the float64 reference run with the IR's KV cache dtype
    (``forward(kv_dtype=...)``, what parity and X-ray do), within test_cli's tolerance for the f32
    build against the plain reference; it must be closer to that reference than to the plain one
    (the rounding is really applied). The reference's F16 path itself equals an independent
    expression of the contract: its attention fed K / V rounded with astype(np.float16)."""
    toks = [104, 101, 108, 108, 111, 32, 119, 111, 114, 108]
    got = {}
    for kv_type, p in builds.items():
        got[kv_type], doc, err = _all_logits(p, toks, tmp_path / f"{kv_type}.f32")
        assert doc["kv_dtype"] == kv_type.upper()
        assert f"KV cache {kv_type.upper()}" in err
    ir16 = json.loads((Path(builds["f16"]["ir"]) / "ir_prefill.json").read_text())
    assert xray.kv_cache_dtype(ir16) == "F16"
    ref = reference.NumpyReference(builds["f16"]["gguf"])
    want32 = ref.logits_all(toks)
    want16 = ref.forward(toks, kv_dtype=xray.kv_cache_dtype(ir16))[0]
    plain = reference.causal_attention

    def rounded_kv(q, k, v, *args, **kw):
        return plain(q, f16(k), f16(v), *args, **kw)

    monkeypatch.setattr(reference, "causal_attention", rounded_kv)
    assert np.array_equal(ref.logits_all(toks), want16)
    monkeypatch.undo()
    scale = np.abs(want16).max()
    err16 = np.abs(got["f16"] - want16).max()
    err16_plain = np.abs(got["f16"] - want32).max()
    err32 = np.abs(got["f32"] - want32).max()
    between = np.abs(got["f16"] - got["f32"]).max()
    print(f"max |logit| {scale:.3g}: f16 build vs f16-K/V reference {err16:.3g}, vs plain reference "
          f"{err16_plain:.3g}; f32 build vs plain reference {err32:.3g}; f16 vs f32 build {between:.3g}")
    assert err16 <= 1e-4 * scale, err16
    assert err16 < err16_plain, (err16, err16_plain)
    with pytest.raises(BringupError, match="KV cache dtype 'Q8_0'"):
        ref.forward(toks, kv_dtype="Q8_0")


def test_kv_cache_dtype_is_one_type_per_model():
    """The one place that reads an IR's KV cache type (codegen, parity and X-ray all ask it)."""
    assert ir.kv_cache_dtype({"state": [{"dtype": "F16"}, {"dtype": "F16"}]}) == "F16"
    assert ir.kv_cache_dtype({"state": []}) is None and xray.kv_cache_dtype({"state": []}) == "F32"
    with pytest.raises(BringupError, match="several dtypes"):
        ir.kv_cache_dtype({"state": [{"dtype": "F16"}, {"dtype": "F32"}]})


def test_verify_results_derives_the_ir_with_the_configs_kv_dtype(tiny, tmp_path):
    """`bringup verify-results` compiles the IR again as rule ir_model does, --kv-type included:
    results of an f16 config match under that config, and not under an f32 one."""
    import io
    import shutil
    from bringup.certify import evidence
    res = tmp_path / "results"
    shutil.copytree(tiny["root"] / "convert", res / "convert")
    (res / "ir").mkdir()
    for ph, doc in ir.compile_ir(tiny["cfg"], tiny["man"], chunk=CHUNK, n_ctx=N_CTX, kv_type="f16").items():
        (res / "ir" / f"ir_{ph}.json").write_text(json.dumps(doc))
    name = "ir: both phases from config, manifest, circuits, kernel maps"
    for kv, want in (("f16", True), ("f32", False)):
        cfg = {"prefill_chunk": CHUNK, "ctx": N_CTX, "memory": {"kv_dtype": kv, "seqs": 1, "device": "laptop-8gb"}}
        c = evidence.Checks(out=io.StringIO())
        try:
            evidence.check_derived(c, {}, res, tiny["gguf"], cfg, "tiny")
        except Exception:   # the later checks need files this test does not make; the IR row is made first
            pass
        assert [ok for n, ok, _ in c.rows if n == name] == [want], c.rows
