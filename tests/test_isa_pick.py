"""The measured choice between ISA levels of one contract (csrc/kernels/bu_cpu.c, "the level of
each linear op class"): with avx2 and avx512 both present and BU_ISA unset, each class of
dispatched linear call (format, activations, n_in, decode / prefill) times both levels on its first
calls and keeps the faster. Checked with a test build whose hook makes one level 2 ms slower per
call (kernel_lib.TEST_HOOK_FLAGS, BU_TEST_SLOW_LEVEL): the slowed level is never chosen, every call
- calibrating or not - gives the bits of the forced level, and bu_isa_report says what was chosen
and why. On an AVX2 host without AVX-512 the avx512 level is SIMDe's (as in test_kernels_fast.py),
so the mechanism is tested on every host; BU_ISA still forces one level, unmeasured.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil

import numpy as np
import pytest

from bringup.build import kernel_lib
from tests.helpers.kernels import AVX512_EMULATED, host_levels

P, I64 = ctypes.c_void_p, ctypes.c_int64
N_IN, N_OUT = 256, 96  # a multiple of 256: the K-quant / Q8_K activations too
CALLS = 40              # more than a decode class's 2 x 16 timed calls


@pytest.fixture(scope="module")
def hook_build(tmp_path_factory):
    if "avx2" not in host_levels():
        pytest.fail("this test needs an AVX2 host (the project's hosts all have it)")
    base = kernel_lib.AVX512_EMULATION_FLAGS if AVX512_EMULATED else kernel_lib.DEFAULT_FLAGS
    return kernel_lib.build_kernel_library(tmp_path_factory.mktemp("isa_pick"),
                                           flags=(*base, *kernel_lib.TEST_HOOK_FLAGS)).library


def load(lib_path, tmp_path, name, env):
    """The library from its own copy, loaded with `env` set (read once, at load); its ISA cache
    folder is tmp_path/cache unless env names another XDG_CACHE_HOME."""
    path = tmp_path / f"{name}.so"
    assert not path.exists(), "a copy is loaded once: dlopen of the same path would not read env again"
    shutil.copy(lib_path, path)
    saved = {k: os.environ.pop(k, None) for k in ("BU_ISA", "BU_TEST_SLOW_LEVEL", "BU_ISA_CACHE", "XDG_CACHE_HOME")}
    try:
        os.environ.update({"XDG_CACHE_HOME": str(tmp_path / "cache"), **env})
        lib = ctypes.CDLL(str(path))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
    lib.bu_isa_report.restype = ctypes.c_size_t
    lib.bu_isa_report.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib


def q4_1_rows(rng):
    """N_OUT random Q4_1 rows (20-byte blocks) with a finite fp16 scale and minimum"""
    w = rng.integers(0, 256, size=(N_OUT * N_IN // 32, 20), dtype=np.uint8)
    w[:, 0:2] = np.full((len(w), 1), 0.01, np.float16).view(np.uint8)
    w[:, 2:4] = np.full((len(w), 1), -0.05, np.float16).view(np.uint8)
    return w.reshape(-1)


def run(lib, fn_name, w, x, n_tokens):
    fn = getattr(lib, fn_name)
    fn.argtypes = [P, P, P, P, I64, I64, I64, P, ctypes.c_size_t]
    ws = np.zeros(1 << 20, np.uint8)
    y = np.zeros(n_tokens * N_OUT, np.float32)
    assert fn(x.ctypes.data, w.ctypes.data, None, y.ctypes.data, n_tokens, N_IN, N_OUT, ws.ctypes.data, ws.nbytes) == 0
    return y


def report(lib) -> dict:
    n = lib.bu_isa_report(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    assert lib.bu_isa_report(buf, n + 1) == n
    return json.loads(buf.value)


FNS = ("bu_linear_q4_1_fast", "bu_linear_q4_1_q8_1_fast")


def calls(lib, rng_seed=0):
    """CALLS decode and CALLS 8-token calls of each FNS function: their outputs, all the same bits"""
    rng = np.random.default_rng(rng_seed)
    w = q4_1_rows(rng)
    out = {}
    for fn in FNS:
        for n_tokens in (1, 8):
            x = rng.standard_normal(n_tokens * N_IN).astype(np.float32)
            ys = [run(lib, fn, w, x, n_tokens) for _ in range(CALLS)]
            for y in ys[1:]:
                assert np.array_equal(ys[0].view(np.uint32), y.view(np.uint32)), (fn, n_tokens)
            out[fn, n_tokens] = ys[0]
    return out


@pytest.mark.parametrize("slow", ["avx2", "avx512"])
def test_slow_level_avoided_same_bits(hook_build, tmp_path, slow):
    lib = load(hook_build, tmp_path, f"slow_{slow}", {"BU_TEST_SLOW_LEVEL": slow})
    forced = load(hook_build, tmp_path, "forced_avx2", {"BU_ISA": "avx2"})
    got, want = calls(lib), calls(forced)
    for k in want:
        assert np.array_equal(got[k].view(np.uint32), want[k].view(np.uint32)), k
    rep = report(lib)
    assert rep["how"].startswith("measured"), rep
    classes = rep["classes"]
    assert {(c["activations"], c["phase"]) for c in classes} == {(a, p) for a in ("f32", "q8")
                                                                   for p in ("decode", "prefill")}, classes
    other = "avx512" if slow == "avx2" else "avx2"
    for c in classes:
        assert c["format"] == "Q4_1" and c["n_in"] == N_IN, c
        assert c["level"] == other, c
        assert c["ns_per_row"][slow] > c["ns_per_row"][other], c


def test_forced_level_is_not_measured(hook_build, tmp_path):
    lib = load(hook_build, tmp_path, "forced_avx512", {"BU_ISA": "avx512", "BU_TEST_SLOW_LEVEL": "avx512"})
    calls(lib)
    rep = report(lib)
    assert rep["how"] == "forced by BU_ISA" and rep["default"] == "avx512" and rep["classes"] == [], rep


def test_report_sized_like_snprintf(hook_build, tmp_path):
    lib = load(hook_build, tmp_path, "sizing", {})
    calls(lib)
    n = lib.bu_isa_report(None, 0)
    small = ctypes.create_string_buffer(b"x" * 16, 16)
    assert lib.bu_isa_report(small, 16) == n > 16
    assert small.raw[15] == 0 and len(small.value) == 15   # cut, NUL-terminated, never overrun


# ---- the dispatch cache (csrc/kernels/bu_isa_cache.c): per host and library, untrusted ----

def measured(lib, slow: str, want: dict, source: str = "measured") -> dict:
    """Runs calls(lib); checks every class was decided for the level other than `slow`, from
    `source`, and every output has the bits of `want` (the forced avx2 level's); the report."""
    before = report(lib)["classes"]   # nothing called yet: only what the cache gave
    assert len(before) == (4 if source == "cache" else 0), before
    got = calls(lib)
    rep = report(lib)
    assert len(rep["classes"]) == 4, rep
    other = "avx512" if slow == "avx2" else "avx2"
    for c in rep["classes"]:
        assert (c["level"], c["source"]) == (other, source), c
    for k, y in got.items():   # the choice never changes a result
        assert np.array_equal(y.view(np.uint32), want[k].view(np.uint32)), k
    return rep


@pytest.fixture(scope="module")
def isa_cache_want(hook_build, tmp_path_factory):
    """the outputs of calls() at the forced avx2 level"""
    return calls(load(hook_build, tmp_path_factory.mktemp("isa_cache_forced"), "forced", {"BU_ISA": "avx2"}))


def cache_path(tmp_path, rep):
    return tmp_path / "cache" / "bringup" / rep["cache"]["file"]


def test_cache_hit_serves_the_earlier_choice(hook_build, isa_cache_want, tmp_path, capfd):
    first = measured(load(hook_build, tmp_path, "first", {"BU_TEST_SLOW_LEVEL": "avx512"}), "avx512", isa_cache_want)
    assert first["cache"]["state"] == "miss" and first["cache"]["writes"] >= 1, first
    assert cache_path(tmp_path, first).is_file()
    # a later process of the same library on the same host, where avx2 is now the slow level: it
    # takes every class from the file, unmeasured, so it keeps avx2
    second = measured(load(hook_build, tmp_path, "second", {"BU_TEST_SLOW_LEVEL": "avx2"}), "avx512",
                      isa_cache_want, "cache")
    assert second["cache"]["state"] == "hit" and second["cache"]["writes"] == 0, second
    assert capfd.readouterr().err == ""


def test_cache_invalidated_by_library_change(hook_build, isa_cache_want, tmp_path):
    first = measured(load(hook_build, tmp_path, "first", {"BU_TEST_SLOW_LEVEL": "avx512"}), "avx512", isa_cache_want)
    lines = cache_path(tmp_path, first).read_text().splitlines()
    build_id = bytes.fromhex(lines[2].removeprefix("library "))
    data = open(hook_build, "rb").read()
    assert data.count(build_id) == 1
    changed = tmp_path / "rebuilt"
    changed.write_bytes(data.replace(build_id, bytes([build_id[0] ^ 1]) + build_id[1:]))
    second = measured(load(changed, tmp_path, "second", {"BU_TEST_SLOW_LEVEL": "avx2"}), "avx2", isa_cache_want)
    assert second["cache"]["state"] == "miss" and second["cache"]["file"] != first["cache"]["file"], second
    assert cache_path(tmp_path, first).read_text().splitlines() == lines   # the old library's file is its own


def test_team_size_is_part_of_the_class(hook_build, isa_cache_want, tmp_path):
    """A choice made by a team of 1 never serves a team of 2 (decode shares the memory bus): the
    same calls on a thread that says it belongs to a team of 2 are new classes, measured, cached."""
    lib = load(hook_build, tmp_path, "first", {"BU_TEST_SLOW_LEVEL": "avx512"})
    one = measured(lib, "avx512", isa_cache_want)
    assert {c["threads"] for c in one["classes"]} == {1}, one
    lib.bu_isa_set_team.argtypes = [ctypes.c_int]
    lib.bu_isa_set_team(2)
    calls(lib)
    rep = report(lib)
    by_team = {t: [c for c in rep["classes"] if c["threads"] == t] for t in (1, 2)}
    assert len(by_team[1]) == len(by_team[2]) == 4, rep
    assert all((c["level"], c["source"]) == ("avx2", "measured") for c in by_team[2]), rep
    lib.bu_isa_set_team(0)   # out of range: clamped to a team of 1, the classes measured already
    calls(lib)
    assert len(report(lib)["classes"]) == 8
    # a later process: both teams' classes come from the file
    second = load(hook_build, tmp_path, "second", {"BU_TEST_SLOW_LEVEL": "avx2"})
    second.bu_isa_set_team.argtypes = [ctypes.c_int]
    second.bu_isa_set_team(2)
    assert {(c["threads"], c["source"]) for c in report(second)["classes"]} == {(1, "cache"), (2, "cache")}
    calls(second)
    assert all(c["level"] == "avx2" for c in report(second)["classes"] if c["threads"] == 2)


def _edit(fn):
    def make(p, outside):
        p.write_text(fn(p.read_text()))
    return make


def _replace_file(make_other):
    def make(p, outside):
        p.unlink()
        make_other(p, outside)
    return make


HOSTILE_CACHE = {
    "junk": (_edit(lambda t: "junk\n"), "not a bringup ISA cache file"),
    "other host": (_edit(lambda t: t.replace(t.splitlines()[1], "host 0000000000000000")),
                   "written for another host or library"),
    "level not its quartiles": (_edit(lambda t: t.replace(" avx2 ", " avx512 ", 1) if " avx2 " in t
                                    else t.replace(" avx512 ", " avx2 ", 1)), "not the one with the lower quartile"),
    "nan quartile": (_edit(lambda t: t[:t.rindex(" ")] + " nan\n"), "not a time"),
    "negative quartile": (_edit(lambda t: t[:t.rindex(" ")] + " -1\n"), "not a time"),
    "class twice": (_edit(lambda t: t + t.splitlines()[-1] + "\n"), "appears twice"),
    "sample count 65": (_edit(lambda t: t.replace(" 16 16 ", " 65 16 ", 1)), "sample count"),
    "extra field": (_edit(lambda t: t[:-1] + " 7\n"), "is not 'class KEY"),
    "not ascii": (_edit(lambda t: t + "class \u00e9\n"), "not printable ASCII"),
    "no final newline": (_edit(lambda t: t[:-1]), "no end"),
    "too large": (_edit(lambda t: t + "x" * 17000 + "\n"), "larger than 16384 bytes"),
    "symlink outside": (_replace_file(lambda p, o: p.symlink_to(o)), "symbolic link"),
    "fifo": (_replace_file(lambda p, o: os.mkfifo(p)), "not a regular file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_CACHE))
def test_hostile_cache_file_ignored_and_remeasured(hook_build, isa_cache_want, tmp_path, capfd, case):
    make, why = HOSTILE_CACHE[case]
    first = measured(load(hook_build, tmp_path, "first", {"BU_TEST_SLOW_LEVEL": "avx512"}), "avx512", isa_cache_want)
    p = cache_path(tmp_path, first)
    outside = tmp_path / "outside.txt"
    outside.write_text(p.read_text())   # a valid file, but not in the folder
    outside_text = outside.read_text()
    make(p, outside)
    capfd.readouterr()
    second = measured(load(hook_build, tmp_path, "second", {"BU_TEST_SLOW_LEVEL": "avx2"}), "avx2", isa_cache_want)
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and "ignored" in err[0] and why in err[0], err
    assert second["cache"]["state"].startswith("ignored: ") and why in second["cache"]["state"], second
    assert p.is_file() and not p.is_symlink()   # rewritten with the new choices, atomically
    assert [ln.split()[2] for ln in p.read_text().splitlines()[3:]] == ["avx512"] * 4
    assert outside.read_text() == outside_text   # never followed, never written through


def test_cache_folder_not_private_unused(hook_build, isa_cache_want, tmp_path, capfd):
    folder = tmp_path / "cache" / "bringup"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    rep = measured(load(hook_build, tmp_path, "lib", {"BU_TEST_SLOW_LEVEL": "avx512"}), "avx512", isa_cache_want)
    assert rep["cache"]["state"].startswith("off (") and "not private" in rep["cache"]["state"], rep
    assert list(folder.iterdir()) == []
    assert len(capfd.readouterr().err.splitlines()) == 1


def test_cache_off_and_bad_setting(hook_build, isa_cache_want, tmp_path):
    rep = measured(load(hook_build, tmp_path, "off", {"BU_TEST_SLOW_LEVEL": "avx512", "BU_ISA_CACHE": "off"}),
                   "avx512", isa_cache_want)
    assert rep["cache"]["state"] == "off (BU_ISA_CACHE=off)" and not (tmp_path / "cache").exists(), rep
    bad = load(hook_build, tmp_path, "bad", {"BU_ISA_CACHE": "maybe"})
    err = ctypes.create_string_buffer(200)
    assert bad.bu_isa_check(err, 200) != 0 and b"BU_ISA_CACHE=maybe" in err.value, err.value
    assert report(bad)["default"] == "invalid"
