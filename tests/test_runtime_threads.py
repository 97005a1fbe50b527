"""Threads in the native runtime (csrc/runtime/bu_threadpool.c, bu_team.c, the generated forward
pass; docs/runtime.md "Threads").

- The smollm2 program, generated and built from the workflow's IR and plan into a temporary
  folder, gives bit-identical logits (every prompt position, then greedy decode steps) with 1, 2
  and 3 threads: a thread's share of an op is computed by the same kernel code in the same order
  as one whole call, so no reduction order depends on the thread count. 3 threads on a 2-core
  machine also exercises the barrier's sleeping path.
- n_threads = 0 means every CPU the process may run on (os.sched_getaffinity).
- The pool itself, under a C driver written here: many tiny jobs with barriers, start/stop
  cycles, a pool larger than the machine; nothing deadlocks (a timeout would fail the test) and
  every barrier orders memory (each thread checks what the others wrote before it).
"""
from __future__ import annotations

import ctypes as C
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from bringup.build import compiler, sources
from bringup.build import program as build
from bringup.codegen import emit as codegen
from bringup.core.paths import CSRC, ROOT
from tests.helpers.kernels import host_levels
from tests.helpers.runtime import Params

SMOLLM2 = ROOT / "results" / "smollm2"


@pytest.fixture(scope="module")
def smollm2_threads(smollm2_build, tmp_path_factory) -> dict:
    """libmodel.so for smollm2 built from this checkout's runtime and codegen into a temporary
    folder, from the workflow's IR, plan and weights (brought up to date by the workflow)."""
    out = tmp_path_factory.mktemp("smollm2_threads")
    codegen.write(SMOLLM2 / "ir", SMOLLM2 / "plan" / "memory_plan.json", out / "codegen",
                  SMOLLM2 / "convert" / "weights_manifest.json")
    build.build(out / "codegen", out / "build")
    return {"lib": out / "build" / "libmodel.so", "weights": SMOLLM2 / "convert" / "weights.bump"}


class Lib:
    def __init__(self, path):
        self.lib = lib = C.CDLL(str(path))
        lib.bu_open.argtypes = [C.c_char_p, C.POINTER(Params), C.POINTER(C.c_void_p), C.c_char_p, C.c_size_t]
        lib.bu_prefill_all_logits.argtypes = [C.c_void_p, C.POINTER(C.c_int32), C.c_int32, C.POINTER(C.c_float),
                                              C.c_size_t]
        lib.bu_decode.argtypes = [C.c_void_p, C.c_int32]
        lib.bu_logits.argtypes = [C.c_void_p]
        lib.bu_logits.restype = C.POINTER(C.c_float)
        for f in ("bu_n_vocab", "bu_n_threads", "bu_reset"):
            getattr(lib, f).argtypes = [C.c_void_p]
        lib.bu_close.argtypes = [C.c_void_p]
        lib.bu_close.restype = None
        lib.bu_last_error.argtypes = [C.c_void_p]
        lib.bu_last_error.restype = C.c_char_p

    def open(self, weights, threads):
        h, err = C.c_void_p(), C.create_string_buffer(1024)
        rc = self.lib.bu_open(str(weights).encode(), C.byref(Params(0, 0, threads)), C.byref(h), err, 1024)
        assert rc == 0, err.value.decode()
        return h


def _run(lib: Lib, weights, threads: int, prompt: list[int], n_decode: int) -> tuple[bytes, list[int], bytes]:
    """Every prompt position's logits, then n_decode greedy steps: (prompt logits, tokens, their logits)."""
    h = lib.open(weights, threads)
    try:
        n_vocab = lib.lib.bu_n_vocab(h)
        out = np.zeros(len(prompt) * n_vocab, np.float32)
        rc = lib.lib.bu_prefill_all_logits(h, (C.c_int32 * len(prompt))(*prompt), len(prompt),
                                           out.ctypes.data_as(C.POINTER(C.c_float)), out.size)
        assert rc == 0, lib.lib.bu_last_error(h)
        toks, dec = [], []
        for _ in range(n_decode):
            row = np.ctypeslib.as_array(lib.lib.bu_logits(h), (n_vocab,)).copy()
            toks.append(int(row.argmax()))
            assert lib.lib.bu_decode(h, toks[-1]) == 0, lib.lib.bu_last_error(h)
            dec.append(row.tobytes())
        dec.append(np.ctypeslib.as_array(lib.lib.bu_logits(h), (n_vocab,)).tobytes())
        return out.tobytes(), toks, b"".join(dec)
    finally:
        lib.lib.bu_close(h)


def test_logits_bit_identical_for_1_2_3_threads(smollm2_threads):
    lib = Lib(smollm2_threads["lib"])
    # 70 tokens: one full prefill chunk of 64, then a chunk of 6 (fewer tokens than some splits)
    prompt = [(100 + 37 * i) % 3000 for i in range(70)]
    runs = {n: _run(lib, smollm2_threads["weights"], n, prompt, 6) for n in (1, 2, 3)}
    assert runs[1][1] == runs[2][1] == runs[3][1]
    for n in (2, 3):
        assert runs[n][0] == runs[1][0], f"prompt logits differ with {n} threads"
        assert runs[n][2] == runs[1][2], f"decode logits differ with {n} threads"


def _lib_with_env(src, dst, env: dict) -> Lib:
    """A fresh copy of libmodel.so loaded with `env` (its ISA level and cache are set at load)."""
    shutil.copy(src, dst)
    keys = ("BU_ISA", "BU_ISA_CACHE", "XDG_CACHE_HOME")
    saved = {k: os.environ.pop(k, None) for k in keys}
    try:
        os.environ.update(env)
        return Lib(dst)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def _inverted_cache(folder) -> None:
    """Every class of the one cache file in `folder` given the other level (its quartiles swapped,
    so the file stays consistent): the next load serves the level the measurement did not pick."""
    (path,) = folder.glob("isa-*.txt")
    lines = path.read_text().splitlines()
    swap = {"avx2": "avx512", "avx512": "avx2"}
    for i, ln in enumerate(lines[3:], 3):
        f = ln.split()
        lines[i] = " ".join([*f[:2], swap[f[2]], f[4], f[3], f[6], f[5]])
    path.write_text("\n".join(lines) + "\n")


def test_logits_bit_identical_whatever_isa_is_chosen(smollm2_threads, tmp_path):
    """The ISA level of each linear class - forced, measured, from the dispatch cache, or the
    cache inverted so that every class runs the level its measurement did not pick - never
    changes the logits (one contract, the same bits; docs/kernels.md "Dispatch by measurement")."""
    prompt = [(100 + 37 * i) % 3000 for i in range(70)]
    cache = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    envs = {"avx2": {"BU_ISA": "avx2"}, "measured": cache, "cached": cache}
    if "avx512" in host_levels():
        envs |= {"avx512": {"BU_ISA": "avx512"}, "inverted": cache}
    runs, chosen = {}, {}
    for name, env in envs.items():
        if name == "inverted":
            _inverted_cache(tmp_path / "xdg" / "bringup")
        lib = _lib_with_env(smollm2_threads["lib"], tmp_path / f"{name}.so", env)
        runs[name] = _run(lib, smollm2_threads["weights"], 2, prompt, 6)
        lib.lib.bu_isa_report.restype = C.c_size_t
        buf = C.create_string_buffer(1 << 16)
        assert lib.lib.bu_isa_report(buf, len(buf)) < len(buf)
        rep = json.loads(buf.value)
        chosen[name] = {(c["format"], c["n_in"], c["phase"]): (c["level"], c["source"]) for c in rep["classes"]}
    if "avx512" in envs:   # the cache served every class, and the inverted one the other level
        assert chosen["measured"] and {s for _, s in chosen["measured"].values()} == {"measured"}, chosen
        assert chosen["cached"] == {k: (lv, "cache") for k, (lv, _) in chosen["measured"].items()}, chosen
        other = {"avx2": "avx512", "avx512": "avx2"}
        assert chosen["inverted"] == {k: (other[lv], "cache") for k, (lv, _) in chosen["measured"].items()}, chosen
    for name, r in runs.items():
        assert r == runs["avx2"], f"logits differ when the ISA choice is {name}"


def test_zero_threads_means_every_cpu(smollm2_threads):
    lib = Lib(smollm2_threads["lib"])
    h = lib.open(smollm2_threads["weights"], 0)
    try:
        assert lib.lib.bu_n_threads(h) == min(len(os.sched_getaffinity(0)), 256)
    finally:
        lib.lib.bu_close(h)


POOL_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "bu_threadpool.h"

#define MAXT 8
typedef struct { bu_pool *p; int rounds; long counts[MAXT]; int bad; } job;

/* Each round: every thread writes its slot, barrier, checks every other slot, barrier. */
static void work(void *a, int ith, int nth) {
    job *j = a;
    for (int r = 0; r < j->rounds; r++) {
        j->counts[ith]++;
        bu_pool_barrier(j->p);
        for (int t = 0; t < nth; t++)
            if (j->counts[t] != j->counts[ith]) j->bad = 1;
        bu_pool_barrier(j->p);
    }
}

int main(int argc, char **argv) {
    int jobs = argc > 1 ? atoi(argv[1]) : 500;
    for (int cycle = 0; cycle < 14; cycle++) {
        int n = 2 + cycle % (MAXT - 1);
        bu_pool *p;
        if (bu_pool_start(n, &p) != 0) { fprintf(stderr, "start %d failed\n", n); return 2; }
        job j = {p, 1 + cycle % 3, {0}, 0};
        for (int k = 0; k < jobs; k++) bu_pool_run(p, work, &j);   /* many tiny dispatches */
        for (int t = 0; t < n; t++)
            if (j.counts[t] != (long)jobs * j.rounds) { fprintf(stderr, "thread %d ran %ld\n", t, j.counts[t]); return 3; }
        if (j.bad) { fprintf(stderr, "a barrier did not order memory (%d threads)\n", n); return 4; }
        bu_pool_stop(p);
    }
    bu_pool *p;
    if (bu_pool_start(1, &p) == 0 || bu_pool_start(257, &p) == 0) { fprintf(stderr, "bad size accepted\n"); return 5; }
    if (bu_cpu_count() < 1) return 6;
    puts("ok");
    return 0;
}
"""


@pytest.mark.parametrize("sanitize", [False, True], ids=["O2", "tsan"])
def test_pool_many_tiny_jobs_no_deadlock(tmp_path, sanitize):
    (tmp_path / "pool_check.c").write_text(POOL_DRIVER)
    flags = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"]
    if sanitize:
        flags = ["-std=c11", "-O1", "-g", "-fsanitize=thread", "-Wall", "-Wextra", "-Werror", "-pthread"]
    exe = tmp_path / "pool_check"
    compiler.gcc([tmp_path / "pool_check.c", CSRC / "runtime" / "bu_threadpool.c"], exe,
                 sources.include_dirs(), ["-pthread"], cflags=flags)
    # pools of 2..8 threads on (here) 2 cores: most barriers end in the futex sleep, not the spin
    r = subprocess.run([str(exe), "100" if sanitize else "200"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
