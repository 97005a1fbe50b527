"""Quantized-activation linear providers (contract "ggml-q8", csrc/kernels/bu_linear_q8act.c).

Expected values come from an independent numpy expression of the kernel maps' contract, never
from a transliteration of the C:
- the activation quantization is written vectorised in float32 numpy (``np.rint`` is the
  round-half-to-even the contract names; float16 casts are numpy's);
- the integer weights, sub-block scales and mins are obtained from ``gguf.quants.dequantize``
  of the same blocks with their fp16 block scale set to 1 and their fp16 min to 0 (dequantization
  then yields the integers ``sc * q``), and with scale 0 / min 1 (yielding ``-m`` per element);
- integer dot products per block are an int64 einsum; block terms are summed in float32.
The C output must equal this bit for bit. Outputs are surrounded by guard elements.
"""
from __future__ import annotations

import ctypes

import gguf
import numpy as np
import pytest

from bringup.ir.block import expand
from bringup.formats import ggml as formats
from bringup.ir import kernel_maps as kernels
from bringup.core.errors import BringupError
from bringup.core.paths import CSRC
from tests.helpers.kernels import BU_ERR_ARG, BU_ERR_NULL, BU_ERR_WS, BU_OK, Guarded, bind_kernels
from tests.helpers.q8act import (ACT, ACT_BLOCK, FMTS, XQ_BYTES, activations, quantize_act, random_rows,
                                 reference, weight_integers)


def fn_name(fmt: str) -> str:
    return f"bu_linear_{fmt.lower()}_{ACT[fmt].lower()}_scalar"


def map_id(fmt: str) -> str:
    return f"linear.{fmt.lower()}.q8act.scalar"


@pytest.fixture(scope="session")
def lib(build):
    return bind_kernels(ctypes.CDLL(str(build.library)))


def scratch_bytes(fmt: str, n_tokens: int, n_in: int) -> int:
    """The map's scratch expression, evaluated by bringup.ir.kernel_maps (the size the planner allots)."""
    m = kernels.load_maps()[map_id(fmt)]
    return m.scratch_bytes({"n_tokens": n_tokens, "n_in": n_in, "n_out": 1})["row"]


def call(lib, fmt, x, rows, bias=None, ws_cap=None, ws=None):
    """Run the provider; returns (status, Guarded y, scratch bytes)."""
    T, n_in = x.shape
    n_out = rows.shape[0]
    need = scratch_bytes(fmt, T, n_in)
    if ws is None:
        ws = np.zeros(max(need, 1), dtype=np.uint8)
    y = Guarded((T, n_out))
    st = getattr(lib, fn_name(fmt))(x.ctypes.data, rows.ctypes.data, None if bias is None else bias.ctypes.data,
                                    y.p, T, n_in, n_out, ws.ctypes.data, need if ws_cap is None else ws_cap)
    return st, y, ws


# ----------------------------------------------------------------------------- the contract in numpy


def parse_scratch(act: str, ws: np.ndarray, T: int, n: int):
    """The scratch layout the maps declare: per row, blocks of f32 dx [| f32 sx] [| i16 bsums[16]] | i8 q."""
    nb = n // ACT_BLOCK[act]
    blk = ws[:T * nb * XQ_BYTES[act]].reshape(T, nb, XQ_BYTES[act])
    dx = blk[..., 0:4].copy().view(np.float32)[..., 0]
    if act == "Q8_0":
        return dx, blk[..., 4:].copy().view(np.int8).astype(np.int64), None, None
    if act == "Q8_1":
        return dx, blk[..., 8:].copy().view(np.int8).astype(np.int64), blk[..., 4:8].copy().view(np.float32)[..., 0], None
    return dx, blk[..., 36:].copy().view(np.int8).astype(np.int64), None, blk[..., 4:36].copy().view(np.int16).astype(np.int64)


# ----------------------------------------------------------------------------- data


# ----------------------------------------------------------------------------- tests

def test_maps_declare_the_contract():
    maps = kernels.load_maps()
    for fmt, act in ACT.items():
        m = maps[map_id(fmt)].raw
        assert m["quant"] == {"weight": fmt, "activation": act, "output": "F32"}
        assert m["impl"]["function"] == fn_name(fmt)
        assert m["dims"]["n_in"]["multiple_of"] == formats.by_name(fmt).block_elems == ACT_BLOCK[act]
        assert m["selection"]["equivalence"] != maps[f"linear.{fmt.lower()}.scalar"].selection["equivalence"]
        assert scratch_bytes(fmt, 3, 2 * ACT_BLOCK[act]) == 8 * 2 * XQ_BYTES[act]      # 8 rows


@pytest.mark.parametrize("fmt", FMTS)
def test_q8act_matches_numpy_contract(lib, fmt):
    """Bit-exact against the numpy contract: several token counts, odd n_out, with and without bias."""
    rng = np.random.default_rng(abs(hash(fmt)) % 2**32)
    be = formats.by_name(fmt).block_elems
    for T, nblk, n_out, with_bias in ((1, 1, 1, False), (3, 3, 7, True), (10, 2, 4, False)):
        n = be * nblk
        x = activations(rng, T, n)
        rows = random_rows(fmt, n_out, n, rng)
        bias = rng.standard_normal(n_out).astype(np.float32) if with_bias else None
        st, y, ws = call(lib, fmt, x, rows, bias)
        assert st == BU_OK and y.guards_intact()
        ref = reference(fmt, x, rows, bias)
        np.testing.assert_array_equal(y.arr.view(np.uint32), ref.view(np.uint32), err_msg=f"{fmt} T={T} n={n}")


@pytest.mark.parametrize("act", ["Q8_0", "Q8_1", "Q8_K"])
def test_scratch_holds_the_quantized_activations(lib, act):
    """The scratch after a call holds every token's dx / sx / bsums / q (rows 0..T-1 of its 8 rows,
    T <= 8) exactly as the contract quantizes x."""
    fmt = {"Q8_0": "Q8_0", "Q8_1": "Q4_1", "Q8_K": "Q4_K"}[act]
    rng = np.random.default_rng(11)
    be = ACT_BLOCK[act]
    T, n = 3, be * 3
    x = activations(rng, T, n)
    st, _, ws = call(lib, fmt, x, random_rows(fmt, 2, n, rng))
    assert st == BU_OK
    dx, q, sx, bs = parse_scratch(act, ws, T, n)
    rdx, rq, rsx, rbs = quantize_act(x, act)
    np.testing.assert_array_equal(dx.view(np.uint32), rdx.view(np.uint32))
    np.testing.assert_array_equal(q, rq)
    if act == "Q8_1":
        np.testing.assert_array_equal(sx.view(np.uint32), rsx.view(np.uint32))
    if act == "Q8_K":
        np.testing.assert_array_equal(bs, rbs)
    assert np.abs(q).max() <= 127


def test_rounding_hand_checked(lib):
    """Ties round half to even (x86 _mm256_round_ps / nearest_int), not away from zero (roundf); the
    Q8_0 scale is fp16-rounded; Q8_K's d = 1/iscale stays fp32."""
    x = np.zeros((1, 32), np.float32)
    x[0, :6] = [127.0, 2.5, -3.5, 0.5, -0.5, 1.5]        # amax 127 -> id = 1 exactly
    st, _, ws = call(lib, "Q8_0", x, random_rows("Q8_0", 1, 32, np.random.default_rng(0)))
    assert st == BU_OK
    dx, q, _, _ = parse_scratch("Q8_0", ws, 1, 32)
    assert q[0, 0, :6].tolist() == [127, 2, -4, 0, 0, 2]
    assert dx[0, 0] == 1.0                                  # 127/127 in fp16
    x = np.full((1, 32), 1.0, np.float32)                   # d = 1/127 -> fp16 0.007873535
    _, _, ws = call(lib, "Q8_0", x, random_rows("Q8_0", 1, 32, np.random.default_rng(0)))
    dx, q, _, _ = parse_scratch("Q8_0", ws, 1, 32)
    assert dx[0, 0] == np.float32(0.007873535) and (q == 127).all()
    xk = np.zeros((1, 256), np.float32)
    xk[0, :4] = [-127.0, 2.5, 3.5, 127.0]                  # first largest |x| is -127: iscale = 1
    _, _, ws = call(lib, "Q4_K", xk, random_rows("Q4_K", 1, 256, np.random.default_rng(0)))
    dx, q, _, bs = parse_scratch("Q8_K", ws, 1, 256)
    assert q[0, 0, :4].tolist() == [-127, 2, 4, 127] and dx[0, 0] == 1.0 and bs[0, 0, 0] == 6


def test_hand_checked_q8_0(lib):
    """All-ones x and a Q8_0 row with d = 0.5, q = 1..32: y = (0.5 * fp16(1/127)) * 127 * 528."""
    row = np.zeros(34, np.uint8)
    row[0:2] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)
    row[2:] = np.arange(1, 33, dtype=np.int8).view(np.uint8)
    x = np.ones((1, 32), np.float32)
    st, y, _ = call(lib, "Q8_0", x, row.reshape(1, 34))
    assert st == BU_OK
    expect = np.float32(np.float32(0.5) * np.float32(np.float16(1 / 127))) * np.float32(127 * 528)
    assert y.arr[0, 0] == expect


@pytest.mark.parametrize("fmt", FMTS)
def test_close_to_fp32_provider(lib, fmt):
    """|y_q8 - y_f32| stays within the activation quantization error: per block, each |x - dx*q|
    is at most amax/254 (half a step) + amax * 2^-10 (fp16 rounding of d), and Q4_1/Q5_1's s term
    adds |m| * 32 * amax * 2^-10."""
    rng = np.random.default_rng(7)
    be = formats.by_name(fmt).block_elems
    T, n, n_out = 3, 4 * be, 6
    x = activations(rng, T, n)
    rows = random_rows(fmt, n_out, n, rng)
    st, y, _ = call(lib, fmt, x, rows)
    assert st == BU_OK
    w = gguf.quants.dequantize(rows, gguf.GGMLQuantizationType[fmt]).astype(np.float64)
    fp32 = Guarded((T, n_out))
    wsf = np.zeros(n * 4, np.uint8)
    assert getattr(lib, f"bu_linear_{fmt.lower()}_scalar")(x.ctypes.data, rows.ctypes.data, None, fp32.p, T, n,
                                                           n_out, wsf.ctypes.data, n * 4) == BU_OK
    ab = ACT_BLOCK[ACT[fmt]]
    amax = np.abs(x.astype(np.float64)).reshape(T, n // ab, ab).max(axis=2)
    step = np.repeat(amax * (0.5 / 127 + 2.0 ** -10), ab, axis=1)            # [T, n]
    bound = step @ np.abs(w).T + 1e-5 * (np.abs(x) @ np.abs(w).T) + 1e-30
    if fmt in ("Q4_1", "Q5_1"):
        _, _, _, mw = weight_integers(fmt, rows)
        bound += (amax * 32 * 2.0 ** -10) @ np.abs(mw.astype(np.float64)).T
    diff = np.abs(y.arr.astype(np.float64) - fp32.arr)
    assert (diff <= bound).all(), (fmt, float((diff / bound).max()))
    assert diff.max() > 0, "quantized activations must differ from fp32 somewhere"


def test_real_blocks(lib, q8_real_rows):
    """Real rows from smollm2 (Q4_1, Q8_0) and gemma3 (Q5_0, Q8_0, Q4_K, Q6_K): bit-exact vs numpy."""
    rng = np.random.default_rng(3)
    for fmt, (rows, n) in q8_real_rows.items():
        x = activations(rng, 2, n)
        st, y, _ = call(lib, fmt, x, rows)
        assert st == BU_OK and y.guards_intact()
        np.testing.assert_array_equal(y.arr.view(np.uint32), reference(fmt, x, rows).view(np.uint32), err_msg=fmt)


@pytest.mark.parametrize("fmt", ["Q4_1", "Q8_0", "Q6_K"])
def test_prefill_row_equals_decode(lib, fmt):
    """Each token's row is quantized on its own: a prefill row is bit-identical to that token alone."""
    rng = np.random.default_rng(5)
    n = 2 * formats.by_name(fmt).block_elems
    x = activations(rng, 11, n)              # 11 tokens: one full pass of 8 and a partial one
    rows = random_rows(fmt, 5, n, rng)
    _, y, _ = call(lib, fmt, x, rows)
    for t in range(11):
        _, y1, _ = call(lib, fmt, np.ascontiguousarray(x[t:t + 1]), rows)
        np.testing.assert_array_equal(y1.arr[0].view(np.uint32), y.arr[t].view(np.uint32))


@pytest.mark.parametrize("fmt", ["Q4_0", "Q4_1", "Q4_K"])
def test_status_codes(lib, fmt):
    rng = np.random.default_rng(2)
    be = formats.by_name(fmt).block_elems
    n, n_out, T = 2 * be, 3, 2
    x = activations(rng, T, n)
    rows = random_rows(fmt, n_out, n, rng)
    f = getattr(lib, fn_name(fmt))
    need = scratch_bytes(fmt, T, n)
    ws = np.zeros(need, np.uint8)

    def run(x_=x.ctypes.data, w_=rows.ctypes.data, y=None, T_=T, n_=n, o_=n_out, ws_=ws.ctypes.data, cap=need):
        y = y or Guarded((max(T_, 1), max(o_, 1)))
        return f(x_, w_, None, y.p, T_, n_, o_, ws_, cap), y

    st, y = run(cap=need - 1)
    assert st == BU_ERR_WS and y.untouched()                   # scratch too small: nothing written
    st, y = run(ws_=None)
    assert st == BU_ERR_NULL and y.untouched()
    st, y = run(x_=None)
    assert st == BU_ERR_NULL and y.untouched()
    st, y = run(w_=None)
    assert st == BU_ERR_NULL and y.untouched()
    for bad in ({"n_": n + be // 2}, {"n_": -be}, {"T_": -1}, {"o_": -1}, {"n_": 2**31 * be}):
        st, y = run(**bad)
        assert st == BU_ERR_ARG and y.untouched(), bad
    st, y = run(T_=0)
    assert st == BU_OK and y.untouched()                        # nothing to do: nothing written
    st, y = run(o_=0, w_=None)
    assert st == BU_OK and y.untouched()
    # forbidden overlaps: y over x, scratch over x or y
    big = np.zeros(T * n + T * n_out + 64, np.float32)
    big[:T * n] = x.ravel()
    assert f(big.ctypes.data, rows.ctypes.data, None, big.ctypes.data + 4 * (T * n - 1), T, n, n_out,
             ws.ctypes.data, need) == BU_ERR_ARG
    wsx = np.zeros(need + T * n * 4, np.uint8)
    xin = wsx[:T * n * 4].view(np.float32)
    xin[:] = x.ravel()
    y = Guarded((T, n_out))
    assert f(xin.ctypes.data, rows.ctypes.data, None, y.p, T, n, n_out, wsx.ctypes.data + 8, need) == BU_ERR_ARG
    assert y.untouched()
    st, y = run(ws_=None, cap=0)
    assert st == BU_ERR_NULL and y.untouched()
    # then a normal call writes exactly the output
    st, y = run()
    assert st == BU_OK and y.guards_intact()


def test_no_allocation_in_source():
    src = (CSRC / "kernels" / "bu_linear_q8act.c").read_text()
    for word in ("malloc(", "calloc(", "realloc(", "free(", "alloca("):
        assert word not in src


def test_fp16_scale_rounding_every_magnitude(lib):
    """The fp16 rounding of dx and sx over every exponent (fp16 subnormals, normals, overflow to
    inf) equals numpy's float16 cast: blocks scaled from 2^-40 to 2^24."""
    rng = np.random.default_rng(13)
    exps = np.arange(-40, 25)
    x = (rng.standard_normal((1, 32 * len(exps))).reshape(len(exps), 32) * (2.0 ** exps)[:, None])
    x = x.astype(np.float32).reshape(1, -1)
    st, _, ws = call(lib, "Q4_1", x, random_rows("Q4_1", 1, x.shape[1], rng))
    assert st == BU_OK
    dx, q, sx, _ = parse_scratch("Q8_1", ws, 1, x.shape[1])
    rdx, rq, rsx, _ = quantize_act(x, "Q8_1")
    np.testing.assert_array_equal(dx.view(np.uint32), rdx.view(np.uint32))
    np.testing.assert_array_equal(sx.view(np.uint32), rsx.view(np.uint32))
    np.testing.assert_array_equal(q, rq)
    assert np.isinf(dx).any() and (dx[np.isfinite(dx)] < 2.0 ** -14).any()   # both ends exercised


# ----------------------------------------------------------------------------- selection (numerics contract)

def _linear_op(w_dtype: str, n_in: int = 256, n_out: int = 8, n_tokens: int = 4):
    tensors = {"x": {"kind": "activation", "dtype": "F32", "shape": [n_tokens, n_in]},
               "w": {"kind": "weight", "dtype": w_dtype, "shape": [n_out, n_in]},
               "y": {"kind": "activation", "dtype": "F32", "shape": [n_tokens, n_out]}}
    op = {"id": "layer.0.attn_q", "op": "linear", "inputs": {"x": "x"}, "weights": {"w": "w"},
          "outputs": {"y": "y"}, "state": {}, "dims": {"n_tokens": n_tokens, "n_in": n_in, "n_out": n_out},
          "params": {}, "variant": None}
    return op, tensors


def test_numerics_contract_selects_the_provider():
    """ggml-q8 picks the (dispatched) quantized-activation provider of each format, f32 the fp32 one; the
    rejected candidate's reason names the contract. F32 weights keep fp32 activations under
    both (ggml's vec_dot_type of F32 is F32)."""
    from bringup.ir import resolve
    linear = [m for m in kernels.load_maps().values() if m.op == "linear"]
    for fmt in FMTS:
        op, t = _linear_op(fmt)
        q8 = resolve.resolve_op(op, t, linear, "decode", numerics="ggml-q8")
        assert q8["chosen"] == f"linear.{fmt.lower()}.q8act.fast"   # dispatched; its scalar level is map_id(fmt)
        why = {c["id"]: c["reasons"] for c in q8["candidates"]}[f"linear.{fmt.lower()}.scalar"]
        assert why == [f"numerics contract 'ggml-q8' needs {ACT[fmt]} activations for {fmt} weights; "
                       "this provider computes with F32"]
        f32 = resolve.resolve_op(op, t, linear, "decode", numerics="f32")
        assert f32["chosen"] == f"linear.{fmt.lower()}.fast"   # the dispatched fp32 provider (ISA chosen at load)
        why = {c["id"]: c["reasons"] for c in f32["candidates"]}[map_id(fmt)]
        assert why == [f"numerics contract 'f32' needs F32 activations for {fmt} weights; "
                       f"this provider computes with {ACT[fmt]}"]
    op, t = _linear_op("F32")
    assert resolve.resolve_op(op, t, linear, "decode", numerics="ggml-q8")["chosen"] == "linear.f32.fast"


def test_numerics_without_a_provider_is_a_clear_error():
    """F16 weights: ggml computes with F16 activations, which no provider implements: ggml-q8 fails
    naming the contract instead of silently falling back to fp32 activations."""
    from bringup.ir import resolve
    from bringup.core.errors import BringupError, UnsupportedError
    linear = [m for m in kernels.load_maps().values() if m.op == "linear"]
    op, t = _linear_op("F16")
    with pytest.raises(UnsupportedError, match=r"numerics contract 'ggml-q8' needs F16 activations for F16 weights"):
        resolve.resolve_op(op, t, linear, "decode", numerics="ggml-q8")
    assert resolve.resolve_op(op, t, linear, "decode", numerics="f32")["chosen"] == "linear.f16.fast"
    with pytest.raises(BringupError, match="unknown numerics contract 'int4'"):
        resolve.resolve_op(op, t, linear, "decode", numerics="int4")


def test_ir_records_numerics_and_the_override(smollm2_gguf):
    """The circuit's contract is recorded in the IR with its source; --numerics overrides it, and
    the override is recorded as a flag; each contract selects its own linear providers."""
    from bringup.ir import circuits
    from bringup.convert import importer as convert
    from bringup.convert.manifest import load_tensor_map, map_tensors
    from bringup.formats import gguf_file as gguf_read
    from bringup.ir import lower as ir
    r = gguf_read.open_gguf(smollm2_gguf)
    cfg = convert.extract_config(r, "0" * 64)
    tmap = load_tensor_map(cfg["architecture"])
    mapped, excluded, _ = map_tensors([t.name for t in r.tensors], tmap, cfg["hparams"]["n_layer"])
    rows = [{"gguf_name": t.name, "name": mapped[t.name], "dtype": formats.by_ggml_type(int(t.tensor_type)).name,
             "shape": [int(d) for d in t.shape], "bytes": int(t.n_bytes)} for t in r.tensors if t.name in mapped]
    manifest = {"schema_version": 1, "architecture": cfg["architecture"], "gguf_sha256": "0" * 64,
                "tensor_map": {"file": f"tensor_maps/{cfg['architecture']}.json", "sha256": "0" * 64},
                "tensors": rows, "excluded": [{"gguf_name": n, "reason": e} for n, e in sorted(excluded.items())],
                "unaccounted": [], "tied": {"output": "tok_embd"} if cfg["tied_embeddings"] else {},
                "extra": [{"name": "tokenizer.blob", "dtype": "I8", "bytes": 16, "reason": "packed tokenizer"}],
                "counts": {"gguf": len(rows), "mapped": len(rows), "excluded": len(excluded), "unaccounted": 0},
                "weight_bytes": sum(x["bytes"] for x in rows)}
    declared = circuits.for_architecture("llama", hparams={}).data["contracts"]["numerics"]["linear_activation"]
    providers = {"ggml-q8": {"linear.q4_1.q8act.fast", "linear.q8_0.q8act.fast"},
                 "f32": {"linear.q4_1.fast", "linear.q8_0.fast"}}
    other = "f32" if declared == "ggml-q8" else "ggml-q8"
    default = ir.compile_ir(cfg, manifest, chunk=8, n_ctx=64)
    forced = ir.compile_ir(cfg, manifest, chunk=8, n_ctx=64, numerics=other)
    for phase in ("prefill", "decode"):
        d, f = default[phase], forced[phase]
        assert d["dims"]["numerics"] == declared and d["values_source"]["numerics"].startswith("circuit:")
        assert f["dims"]["numerics"] == other and f["values_source"]["numerics"].startswith("flag: --numerics")
        assert {o["provider"] for o in expand(d) if o["op"] == "linear"} == providers[declared]
        assert {o["provider"] for o in expand(f) if o["op"] == "linear"} == providers[other]
    with pytest.raises(BringupError, match="--numerics 'fast'"):
        ir.compile_ir(cfg, manifest, chunk=8, n_ctx=64, numerics="fast")


# ----------------------------------------------------------------------------- against ggml itself

@pytest.fixture(scope="module")
def ggml_cpu():
    """llama.cpp's own CPU kernels (libggml-cpu from the pinned llama-cpp-python, the parity oracle):
    an implementation of the same contract we did not write. Only this cross-check needs the
    oracle extra; the contract itself is checked above against numpy."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from pathlib import Path
    g = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so"))
    g.ggml_cpu_init()   # fills the fp16 tables the kernels read
    return g


def test_vec_dot_types_are_ggml_cpus(ggml_cpu):
    """The format table's vec_dot_type (config/ggml_formats.json) is libggml-cpu's own
    ``type_traits_cpu[type].vec_dot_type`` for every format with a dot product, and a format
    without one (``vec_dot`` NULL: I8, I32) claims none."""
    class Traits(ctypes.Structure):     # ggml-cpu.h struct ggml_type_traits_cpu
        _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                    ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]
    ggml_cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(Traits)
    ggml_cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    for f in formats.table().values():
        t = ggml_cpu.ggml_get_type_traits_cpu(f.ggml_type).contents
        want = gguf.GGMLQuantizationType(t.vec_dot_type).name if t.vec_dot else None
        assert f.vec_dot_type == want, f.name
    assert set(ACT) == {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}


@pytest.mark.parametrize("fmt", FMTS)
def test_matches_ggml_cpu_library(ggml_cpu, lib, fmt, q8_real_rows):
    """ggml's quantize_row_q8_* (the from_float of the weight's vec_dot_type) gives the same
    activation blocks as our scratch, and ggml_vec_dot_<fmt>_<act> the same dot products up to the
    fp32 order of the block sums (ggml: SIMD lanes and FMA; ours: sequential)."""
    act = ACT[fmt]
    n = 4 * formats.by_name(fmt).block_elems
    rng = np.random.default_rng(31)
    rows = q8_real_rows[fmt][0][:, :formats.by_name(fmt).row_bytes(n)].copy() if fmt in q8_real_rows else random_rows(fmt, 6, n, rng)
    rows = np.ascontiguousarray(rows)
    x = activations(rng, 1, n)
    x[0, 40] = -30.0
    quant = getattr(ggml_cpu, f"quantize_row_{act.lower().replace('q8_k', 'q8_K')}")
    quant.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    gbytes = {"Q8_0": 34, "Q8_1": 36, "Q8_K": 292}[act]
    gq = np.zeros(n // ACT_BLOCK[act] * gbytes, np.uint8)
    quant(x.ctypes.data, gq.ctypes.data, n)
    st, y, ws = call(lib, fmt, x, rows)
    assert st == BU_OK
    dx, q, sx, bs = parse_scratch(act, ws, 1, n)
    blk = gq.reshape(-1, gbytes)
    if act == "Q8_K":      # block_q8_K: f32 d | i8 qs[256] | i16 bsums[16]
        np.testing.assert_array_equal(blk[:, :4].copy().view(np.float32)[:, 0], dx[0])
        np.testing.assert_array_equal(blk[:, 4:260].view(np.int8), q[0])
        np.testing.assert_array_equal(blk[:, 260:].copy().view(np.int16), bs[0])
    else:                  # block_q8_0: f16 d | i8 qs[32]; block_q8_1: f16 d | f16 s | i8 qs[32]
        np.testing.assert_array_equal(blk[:, :2].copy().view(np.float16)[:, 0].astype(np.float32), dx[0])
        off = 2
        if act == "Q8_1":
            np.testing.assert_array_equal(blk[:, 2:4].copy().view(np.float16)[:, 0].astype(np.float32), sx[0])
            off = 4
        np.testing.assert_array_equal(blk[:, off:].view(np.int8), q[0])
    dot = getattr(ggml_cpu, f"ggml_vec_dot_{fmt.lower().replace('_k', '_K')}_{act.lower().replace('q8_k', 'q8_K')}")
    dot.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    s = np.zeros(1, np.float32)
    w = gguf.quants.dequantize(rows, gguf.GGMLQuantizationType[fmt]).astype(np.float64)
    scale = np.abs(w) @ np.abs(x[0].astype(np.float64))
    for r in range(rows.shape[0]):
        dot(n, s.ctypes.data, 0, rows[r].ctypes.data, 0, gq.ctypes.data, 0, 1)
        assert abs(float(s[0]) - float(y.arr[0, r])) <= 1e-5 * scale[r] + 1e-30, (fmt, r)
