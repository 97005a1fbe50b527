"""The native runtime (csrc/runtime) through ctypes, on a tiny BUMP written by bringup.formats.bump and a
stand-in model descriptor (a C fixture below, not generated code), so every check of bu_open and
every path of prefill/decode/reset is exercised without kernels.

The stand-in forward: each call stores its token ids in the state buffer (one int32 per context
position, like a KV cache), and the logits row of position p is -1 everywhere except +1 at
(sum of tokens at positions 0..p + p) mod n_vocab, plus tok_embd[v, 0]. A token id of n_vocab-1
makes the forward fail as a kernel would (op 0 returns -2). Expected values are computed here
independently, in Python.
"""
from __future__ import annotations

import ctypes as C
import hashlib
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

from bringup.build import compiler, sources
from bringup.build import program as build
from bringup.formats import bump
from bringup.formats import ggml
from bringup.core.paths import CONFIG, CSRC
from tests.helpers.runtime import Params

N_VOCAB, N_EMBD, N_CTX_TRAIN, CHUNK, MAX_CTX = 8, 4, 16, 3, 12
DIMS = {"n_layer": 1, "n_embd": N_EMBD, "n_head": 1, "n_head_kv": 1, "head_dim": 4, "head_dim_v": 4,
        "n_ff": 8, "n_vocab": N_VOCAB, "n_ctx_train": N_CTX_TRAIN}

FAKE_MODEL_C = r"""
#include <string.h>
#include "bu_model_abi.h"

static int fwd(bu_exec *x) {
    int32_t *st = (int32_t *)x->state[0];
    const float *emb = (const float *)x->weights[0];
    for (int64_t t = 0; t < x->n_tokens; t++) {
        if (x->tokens[t] == %(V)d - 1) { x->failed_op = 0; x->kernel_status = -2; return -2; }
        st[x->pos + t] = x->tokens[t];
    }
    int64_t first = x->n_tokens - x->n_logit_rows;
    for (int64_t r = first; r < x->n_tokens; r++) {
        int64_t p = x->pos + r, s = 0;
        for (int64_t j = 0; j <= p; j++) s += st[j];
        float *row = x->logits + (r - first) * %(V)d;
        for (int v = 0; v < %(V)d; v++) row[v] = (v == (s + p) %% %(V)d ? 1.0f : -1.0f) + emb[v * %(E)d];
    }
    return 0;
}

static const bu_weight_spec W[] = {{"tok_embd", 0, 2, {%(E)d, %(V)d, 1, 1}}};
static const bu_state_spec S[] = {{"layer.0.k_cache", 4}};
static const bu_op_info OPS[] = {{"bu_fake_kernel", "header/embed", -1}};

const bu_model_desc bu_model_descriptor = {
    BU_RT_ABI_VERSION, PAYLOAD_SHA256,
    {1, %(E)d, 1, 1, 4, 4, 8, %(V)d, %(T)d},
    1, W, 1, S, %(MAXCTX)d, 256,
    {%(CH)d, 1000, 100, 1, fwd, 1, OPS},
    {1, 500, 50, 0, fwd, 1, OPS},
    "F32",
};
""" % {"V": N_VOCAB, "E": N_EMBD, "T": N_CTX_TRAIN, "CH": CHUNK, "MAXCTX": MAX_CTX}


def _emb(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((N_VOCAB, N_EMBD)).astype(np.float32)


def write_bump(path, emb: np.ndarray, dims=DIMS, emb_dtype="F32") -> str:
    blob = np.frombuffer(b"tokenizer-bytes!", dtype=np.int8)
    shape = (N_EMBD, N_VOCAB) if emb_dtype == "F32" else (N_EMBD * N_VOCAB * 4,)
    info = bump.write(path, [bump.TensorSource("tok_embd", emb_dtype, shape, emb.tobytes()),
                             bump.TensorSource("tokenizer.blob", "I8", (16,), blob.tobytes())],
                      {"format": "bump", "version": 1, "config": {"name": "tiny"}}, dims)
    return info["payload_sha256"]


class Runtime:
    """ctypes view of libmodel's runtime API."""

    def __init__(self, so):
        self.lib = lib = C.CDLL(str(so))
        lib.bu_open.argtypes = [C.c_char_p, C.POINTER(Params), C.POINTER(C.c_void_p), C.c_char_p, C.c_size_t]
        lib.bu_prefill.argtypes = [C.c_void_p, C.POINTER(C.c_int32), C.c_int32]
        lib.bu_prefill_all_logits.argtypes = [C.c_void_p, C.POINTER(C.c_int32), C.c_int32,
                                              C.POINTER(C.c_float), C.c_size_t]
        lib.bu_decode.argtypes = [C.c_void_p, C.c_int32]
        lib.bu_logits.argtypes = [C.c_void_p]
        lib.bu_logits.restype = C.POINTER(C.c_float)
        for f in ("bu_reset", "bu_n_vocab", "bu_n_ctx", "bu_n_past", "bu_chunk", "bu_payload_verified"):
            getattr(lib, f).argtypes = [C.c_void_p]
        lib.bu_memory_bytes.argtypes = [C.c_void_p]
        lib.bu_memory_bytes.restype = C.c_size_t
        lib.bu_close.argtypes = [C.c_void_p]
        lib.bu_close.restype = None
        lib.bu_last_error.argtypes = [C.c_void_p]
        lib.bu_last_error.restype = C.c_char_p
        lib.bu_tensor.argtypes = [C.c_void_p, C.c_char_p, C.POINTER(C.c_size_t)]
        lib.bu_tensor.restype = C.c_void_p
        lib.bu_metadata.argtypes = [C.c_void_p, C.POINTER(C.c_size_t)]
        lib.bu_metadata.restype = C.c_void_p

    def open(self, path, n_ctx=0, verify=1, threads=1):
        h, err = C.c_void_p(), C.create_string_buffer(1024)
        rc = self.lib.bu_open(str(path).encode(), C.byref(Params(n_ctx, verify, threads)), C.byref(h), err, 1024)
        return rc, (Model(self.lib, h) if rc == 0 else None), err.value.decode()


class Model:
    def __init__(self, lib, h):
        self.lib, self.h = lib, h

    def prefill(self, toks):
        return self.lib.bu_prefill(self.h, (C.c_int32 * len(toks))(*toks), len(toks))

    def prefill_all(self, toks, cap=None):
        out = np.zeros(len(toks) * N_VOCAB, np.float32)
        rc = self.lib.bu_prefill_all_logits(self.h, (C.c_int32 * len(toks))(*toks), len(toks),
                                            out.ctypes.data_as(C.POINTER(C.c_float)),
                                            out.size if cap is None else cap)
        return rc, out.reshape(len(toks), N_VOCAB)

    def logits(self):
        p = self.lib.bu_logits(self.h)
        return None if not p else np.ctypeslib.as_array(p, (N_VOCAB,)).copy()

    def err(self):
        return self.lib.bu_last_error(self.h).decode()

    def __getattr__(self, name):
        f = getattr(self.lib, "bu_" + name)
        return lambda *a: f(self.h, *a)


def expected_logits(tokens, emb):
    """Rows for every position of `tokens` (the stand-in's contract, restated)."""
    rows = []
    for p in range(len(tokens)):
        row = np.full(N_VOCAB, -1.0, np.float32)
        row[(sum(tokens[: p + 1]) + p) % N_VOCAB] = 1.0
        rows.append(row + emb[:, 0])
    return np.array(rows)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("rt")
    emb = _emb(0)
    sha = write_bump(d / "a.bump", emb)
    (d / "fake_model.c").write_text(FAKE_MODEL_C)
    so = d / "libfake.so"
    # the runtime checks the kernels' load-time ISA choice (bu_isa_check, kernels/bu_cpu.c) at bu_open
    compiler.gcc([*sources.paths(sources.COMMON, sources.RUNTIME, sources.ALWAYS_LINKED), d / "fake_model.c"], so,
                 sources.include_dirs(), build.LIB_LDFLAGS, defines=[f'PAYLOAD_SHA256="{sha}"'])
    return Runtime(so), d, emb


def test_open_reports_model_shape(setup):
    rt, d, _ = setup
    rc, m, err = rt.open(d / "a.bump")
    assert rc == 0, err
    assert (m.n_vocab(), m.n_ctx(), m.n_past(), m.chunk(), m.payload_verified()) == (N_VOCAB, MAX_CTX, 0, CHUNK, 1)
    assert m.logits() is None  # nothing evaluated yet
    # one allocation: arena max(1000, 500) | ws max(100, 50) | state 16*4 | logits 8*4, 64-aligned each
    a = lambda n: (n + ggml.ALIGN - 1) // ggml.ALIGN * ggml.ALIGN
    assert m.memory_bytes() == a(1000) + a(100) + a(MAX_CTX * 4) + a(N_VOCAB * 4)
    n = C.c_size_t()
    p = m.tensor(b"tokenizer.blob", C.byref(n))
    assert C.string_at(p, n.value) == b"tokenizer-bytes!"
    assert m.tensor(b"nope", C.byref(n)) is None and n.value == 0
    p = m.metadata(C.byref(n))
    assert b'"name":"tiny"' in C.string_at(p, n.value)
    m.close()


def test_threads_add_per_thread_scratch(setup):
    rt, d, emb = setup
    rc, m, err = rt.open(d / "a.bump", threads=3)
    assert rc == 0, err
    a = lambda n: (n + ggml.ALIGN - 1) // ggml.ALIGN * ggml.ALIGN
    assert m.memory_bytes() == a(1000) + a(100) + 2 * a(256) + a(MAX_CTX * 4) + a(N_VOCAB * 4)
    assert m.prefill([1, 2, 3, 4]) == 0 and m.decode(5) == 0
    m.close()
    for bad in (-1, 257):   # 0 is valid: every CPU (tests/test_runtime_threads.py)
        rc, m, err = rt.open(d / "a.bump", threads=bad)
        assert rc == 1 and f"thread count {bad}" in err


def test_prefill_in_chunks_then_decode(setup):
    rt, d, emb = setup
    _, m, _ = rt.open(d / "a.bump")
    toks = [1, 2, 3, 4, 5]  # two chunks of the planned 3
    assert m.prefill(toks) == 0
    np.testing.assert_array_equal(m.logits(), expected_logits(toks, emb)[-1])
    assert m.decode(6) == 0
    np.testing.assert_array_equal(m.logits(), expected_logits(toks + [6], emb)[-1])
    assert m.n_past() == 6
    m.close()


def test_all_logits_every_position(setup):
    rt, d, emb = setup
    _, m, _ = rt.open(d / "a.bump")
    toks = [3, 1, 4, 1, 5, 2, 6]
    rc, out = m.prefill_all(toks)
    assert rc == 0, m.err()
    np.testing.assert_array_equal(out, expected_logits(toks, emb))
    np.testing.assert_array_equal(m.logits(), out[-1])
    rc, _ = m.prefill_all([1, 2], cap=2 * N_VOCAB - 1)
    assert rc == 1 and "buffer holds 15 floats" in m.err()
    m.close()


def test_context_overflow_is_an_error_not_a_truncation(setup):
    rt, d, _ = setup
    _, m, _ = rt.open(d / "a.bump", n_ctx=6)
    assert m.prefill(list(range(1, 8))) == 7
    assert "exceed the context length 6" in m.err() and m.n_past() == 0
    assert m.prefill([1] * 6) == 0
    assert m.decode(1) == 7 and "context is full" in m.err()
    assert m.reset() == 0 and m.n_past() == 0 and m.logits() is None
    assert m.prefill([2] * 6) == 0
    m.close()
    rc, m, err = rt.open(d / "a.bump", n_ctx=MAX_CTX + 1)
    assert rc == 1 and "exceeds the 12 positions this library was planned for" in err


def test_reset_then_same_prompt_same_logits(setup):
    rt, d, emb = setup
    _, m, _ = rt.open(d / "a.bump")
    m.prefill([1, 2, 3, 4])
    first = m.logits()
    m.reset()
    m.prefill([1, 2, 3, 4])
    np.testing.assert_array_equal(m.logits(), first)
    m.close()


def test_bad_tokens_and_kernel_failure(setup):
    rt, d, _ = setup
    _, m, _ = rt.open(d / "a.bump")
    assert m.prefill([1, N_VOCAB]) == 1 and "outside the vocabulary" in m.err()
    assert m.prefill([]) == 1
    assert m.decode(-1) == 1
    assert m.prefill([1, 2, N_VOCAB - 1]) == 8
    assert "op 0 (bu_fake_kernel, circuit op header/embed, layer -1) returned -2" in m.err()
    assert m.logits() is None
    m.close()


def test_two_models_are_independent(setup):
    rt, d, emb = setup
    _, a, _ = rt.open(d / "a.bump")
    _, b, _ = rt.open(d / "a.bump")
    a.prefill([1, 2])
    b.prefill([5])
    np.testing.assert_array_equal(a.logits(), expected_logits([1, 2], emb)[-1])
    np.testing.assert_array_equal(b.logits(), expected_logits([5], emb)[-1])
    a.close()
    b.close()


# ---- open-time checks: each failure has its own status and a clear message ----

def _corrupt(src, dst, offset, data):
    raw = bytearray(src.read_bytes())
    raw[offset:offset + len(data)] = data
    dst.write_bytes(bytes(raw))


def test_wrong_weights_are_refused(setup):
    rt, d, _ = setup
    other = write_bump(d / "b.bump", _emb(1))
    rc, m, err = rt.open(d / "b.bump")
    assert rc == 5 and m is None
    assert other in err and "this model library was generated for" in err


def test_same_payload_other_table_is_refused(setup):
    rt, d, emb = setup
    write_bump(d / "c.bump", emb, emb_dtype="I8")  # same bytes: same payload hash, other type
    rc, _, err = rt.open(d / "c.bump")
    assert rc == 5 and "tensor tok_embd is type 24" in err
    write_bump(d / "e.bump", emb, dims={**DIMS, "n_ff": 9})
    rc, _, err = rt.open(d / "e.bump")
    assert rc == 5 and "n_ff is 9, this model library expects 8" in err


@pytest.mark.parametrize("what,offset,data,code,msg", [
    ("magic", 0, b"BUMQ", 3, "bad magic"),
    ("version", 4, struct.pack("<I", 2), 3, "version 2 is not supported"),
    ("meta", 256, b"X", 4, "metadata+table SHA-256"),
    ("payload", -1, b"\x7f", 4, "payload SHA-256"),
    ("dims reserved", 128 + 4 * 12, b"\x01", 3, "reserved dim slot 12"),
])
def test_corrupt_files(setup, tmp_path, what, offset, data, code, msg):
    rt, d, _ = setup
    src = d / "a.bump"
    if offset < 0:
        offset = src.stat().st_size - 5
    _corrupt(src, tmp_path / "x.bump", offset, data)
    rc, m, err = rt.open(tmp_path / "x.bump")
    assert (rc, m) == (code, None) and msg in err, err


def test_payload_check_can_be_skipped_and_says_so(setup, tmp_path):
    rt, d, _ = setup
    src = d / "a.bump"
    _corrupt(src, tmp_path / "x.bump", src.stat().st_size - 5, b"\x7f")
    rc, m, err = rt.open(tmp_path / "x.bump", verify=0)
    assert rc == 0 and m.payload_verified() == 0
    m.close()


def test_truncated_missing_and_short_files(setup, tmp_path):
    rt, d, _ = setup
    raw = (d / "a.bump").read_bytes()
    (tmp_path / "t.bump").write_bytes(raw[:-1])
    rc, _, err = rt.open(tmp_path / "t.bump")
    assert rc == 4 and "truncated" in err
    (tmp_path / "s.bump").write_bytes(raw[:100])
    rc, _, err = rt.open(tmp_path / "s.bump")
    assert rc == 3 and "too short" in err
    rc, _, err = rt.open(tmp_path / "missing.bump")
    assert rc == 2 and "cannot open weights" in err
    rc, _, err = rt.open(tmp_path)
    assert rc == 1 and "not a regular file" in err   # BU_RT_ERR_ARG (bu_bump.h), exit 2 in bringup-run


def _table_entry_offset(raw):
    return struct.unpack_from("<Q", raw, 32)[0]


@pytest.mark.parametrize("field,rel,data,msg", [
    ("name", 0, b"tok-embd", "name is not"),
    ("type", 96, struct.pack("<I", 99), "unknown GGML type id 99"),
    ("ndims", 100, struct.pack("<I", 5), "n_dims 5"),
    ("size", 144, struct.pack("<Q", 12), "size 12, but its type and shape need 128"),
    ("offset", 136, struct.pack("<Q", 1 << 40), "outside the payload"),
    ("align", 136, struct.pack("<Q", 8), "not 64-aligned"),
])
def test_bad_table_entries(setup, tmp_path, field, rel, data, msg):
    """A table field is corrupted and the header hash recomputed, so the entry check itself fires."""
    rt, d, _ = setup
    raw = bytearray((d / "a.bump").read_bytes())
    toff = _table_entry_offset(raw)
    raw[toff + rel:toff + rel + len(data)] = data
    meta_off, payload_off = struct.unpack_from("<Q", raw, 16)[0], struct.unpack_from("<Q", raw, 48)[0]
    raw[96:128] = hashlib.sha256(raw[meta_off:payload_off]).digest()
    (tmp_path / "x.bump").write_bytes(bytes(raw))
    rc, _, err = rt.open(tmp_path / "x.bump")
    assert rc == 3 and msg in err, err


def test_api_table(setup):
    rt, _, _ = setup

    class Api(C.Structure):
        _fields_ = [("abi_version", C.c_int32), ("struct_size", C.c_int32)]

    rt.lib.bu_api_get.restype = C.POINTER(Api)
    api = rt.lib.bu_api_get().contents
    # ABI 3: + set_observer; 4: + n_threads; 5: + kv_dtype (and bu_model_desc.kv_dtype)
    assert api.abi_version == 5 and api.struct_size == 8 + 24 * 8


# ---- SHA-256: the runtime's own implementation against hashlib ----

@pytest.mark.parametrize("n", [0, 1, 55, 56, 63, 64, 65, 119, 128, 1000, 100_003])
def test_sha256_matches_hashlib(setup, n):
    rt, _, _ = setup
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    out = C.create_string_buffer(32)
    rt.lib.bu_sha256(data, C.c_size_t(n), out)
    assert out.raw == hashlib.sha256(data).digest()


def test_sha256_incremental_split_points(setup):
    rt, _, _ = setup

    class Ctx(C.Structure):
        _fields_ = [("h", C.c_uint32 * 8), ("n", C.c_uint64), ("buf", C.c_uint8 * 64), ("len", C.c_size_t)]

    data = bytes(range(256)) * 3
    for cut in (0, 1, 63, 64, 65, 200, 768):
        ctx, out = Ctx(), C.create_string_buffer(32)
        rt.lib.bu_sha256_init(C.byref(ctx))
        rt.lib.bu_sha256_update(C.byref(ctx), data[:cut], C.c_size_t(cut))
        rt.lib.bu_sha256_update(C.byref(ctx), data[cut:], C.c_size_t(len(data) - cut))
        rt.lib.bu_sha256_final(C.byref(ctx), out)
        assert out.raw == hashlib.sha256(data).digest()


def _cpu_has_sha_ni() -> bool:
    try:
        return any("sha_ni" in line.split() for line in open("/proc/cpuinfo") if line.startswith("flags"))
    except OSError:
        return False


def test_sha256_cpu_path_is_bitwise_the_portable_one(setup):
    """The weights check hashes whole blocks with the CPU's SHA extensions when cpuid has them
    (issue 33 section 3): the digest of both paths equals hashlib's for random data of many
    lengths, whole at once and split at odd points; on a host whose /proc/cpuinfo lists sha_ni the
    accelerated path must be the one chosen (no silent fallback)."""
    rt, _, _ = setup

    class Ctx(C.Structure):
        _fields_ = [("h", C.c_uint32 * 8), ("n", C.c_uint64), ("buf", C.c_uint8 * 64), ("len", C.c_size_t)]

    rt.lib.bu_sha256_impl.restype = C.c_char_p
    impl = rt.lib.bu_sha256_impl().decode()
    assert impl == ("sha-ni" if _cpu_has_sha_ni() else "portable"), impl
    rng = np.random.default_rng(33)
    lengths = [*range(0, 260), 511, 512, 513, 4095, 4096, 4097, 65_536 + 7, 1_000_003]
    for n in lengths:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        want = hashlib.sha256(data).digest()
        fast, slow = C.create_string_buffer(32), C.create_string_buffer(32)
        rt.lib.bu_sha256(data, C.c_size_t(n), fast)
        rt.lib.bu_sha256_portable(data, C.c_size_t(n), slow)
        assert fast.raw == slow.raw == want, n
        if n > 200:   # three updates: a partial block, then blocks from a misaligned address
            ctx, out = Ctx(), C.create_string_buffer(32)
            rt.lib.bu_sha256_init(C.byref(ctx))
            for a, b in ((0, 5), (5, n - 70), (n - 70, n)):
                rt.lib.bu_sha256_update(C.byref(ctx), data[a:b], C.c_size_t(b - a))
            rt.lib.bu_sha256_final(C.byref(ctx), out)
            assert out.raw == want, n


def test_sha256_portable_can_be_forced(setup):
    """BU_SHA256=portable (docs/runtime.md) picks the portable block function in a new process."""
    rt, _, _ = setup
    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); lib.bu_sha256_impl.restype = ctypes.c_char_p; "
            "print(lib.bu_sha256_impl().decode())")
    env = {**os.environ, "BU_SHA256": "portable"}
    r = subprocess.run([sys.executable, "-c", code, rt.lib._name], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "portable", r.stderr


def test_observer_is_installed_and_removed(setup):
    """bu_set_observer: NULL model refused; installing and removing leaves evaluation unchanged
    (the stand-in forward calls no observer; the generated code's calls are tested through
    bringup-run --dump-hidden in tests/test_cli.py)."""
    rt, d, emb = setup
    lib = rt.lib
    OBS = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p)
    lib.bu_set_observer.argtypes = [C.c_void_p, OBS, C.c_void_p]
    cb = OBS(lambda ctx, obs: 0)
    assert lib.bu_set_observer(None, cb, None) == 1
    _, m, _ = rt.open(d / "a.bump")
    assert lib.bu_set_observer(m.h, cb, None) == 0
    assert m.prefill([1, 2, 3, 4]) == 0
    np.testing.assert_array_equal(m.logits(), expected_logits([1, 2, 3, 4], emb)[-1])
    assert lib.bu_set_observer(m.h, OBS(), None) == 0
    m.close()


def test_alignment_is_the_format_tables():
    """C takes the alignment of every buffer and BUMP offset from bu_formats.h (BU_ALIGN), which is
    generated from config/ggml_formats.json; no C file states the number itself."""
    header = (CSRC / "include" / "bu_formats.h").read_text()
    assert int(re.search(r"#define BU_ALIGN (\d+)", header).group(1)) == \
        json.loads((CONFIG / "ggml_formats.json").read_text())["alignment"] == ggml.ALIGN
    own = [f"{p.relative_to(CSRC)}: {m.group(0)}" for p in sorted(CSRC.rglob("*.[ch]")) if p.name != "bu_formats.h"
           for m in re.finditer(r"#define\s+\w*ALIGN\w*\s+\S+", p.read_text())]
    assert not own, own
