"""The runtime's sampler (csrc/runtime/bu_sampler.c) through ctypes, against numpy expressions of
its documented contract (bu_sampler.h): the repeat penalty on the distinct ids of the window; greedy
= argmax with the lowest id on ties; otherwise softmax(logits / T) restricted to the top_k, then to
the smallest prefix reaching top_p mass, then to the ids with at least min_p times the best
probability."""
from __future__ import annotations

import ctypes as C

import numpy as np
import pytest

from bringup.build import compiler, sources
from bringup.core.paths import CSRC


class Params(C.Structure):
    _fields_ = [("temperature", C.c_float), ("top_k", C.c_int32), ("top_p", C.c_float), ("min_p", C.c_float),
                ("repeat_penalty", C.c_float), ("repeat_last_n", C.c_int32), ("seed", C.c_uint64)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = tmp_path_factory.mktemp("smp") / "libsampler.so"
    compiler.gcc([*sources.paths(sources.COMMON), CSRC / "runtime" / "bu_sampler.c"], so, sources.include_dirs(),
                 ("-shared", "-lm"))
    lib = C.CDLL(str(so))
    lib.bu_sampler_new.argtypes = [C.POINTER(Params), C.c_size_t, C.c_char_p, C.c_size_t]
    lib.bu_sampler_new.restype = C.c_void_p
    lib.bu_sampler_free.argtypes = [C.c_void_p]
    lib.bu_sampler_sample.argtypes = [C.c_void_p, C.POINTER(C.c_float), C.c_char_p, C.c_size_t]
    lib.bu_sampler_uniform.argtypes = [C.c_void_p]
    lib.bu_sampler_uniform.restype = C.c_double
    lib.bu_argmax.argtypes = [C.POINTER(C.c_float), C.c_size_t]
    lib.bu_sampler_accept.argtypes = [C.c_void_p, C.c_int32]
    lib.bu_sampler_reset.argtypes = [C.c_void_p]
    lib.bu_sampler_reset.restype = None
    assert lib.bu_sampler_abi_version() == 2
    return lib


def sampler(lib, n, temperature=0.0, top_k=0, top_p=1.0, seed=0, min_p=0.0, repeat_penalty=1.0, repeat_last_n=0):
    err = C.create_string_buffer(256)
    params = Params(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
    h = lib.bu_sampler_new(C.byref(params), n, err, 256)
    return h, err.value.decode()


def fptr(x):
    return np.ascontiguousarray(x, np.float32).ctypes.data_as(C.POINTER(C.c_float))


def draw(lib, h, logits, n):
    x = np.ascontiguousarray(logits, np.float32)
    p = x.ctypes.data_as(C.POINTER(C.c_float))
    return np.array([lib.bu_sampler_sample(h, p, None, 0) for _ in range(n)])


def test_greedy_is_argmax_lowest_id_on_ties(lib):
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(-3, 3, 50).astype(np.float32)   # many ties
        h, _ = sampler(lib, 50)
        x32 = np.ascontiguousarray(x)
        assert lib.bu_sampler_sample(h, fptr(x32), None, 0) == int(np.argmax(x)) == lib.bu_argmax(fptr(x32), 50)
        lib.bu_sampler_free(h)


def test_nan_is_an_error(lib):
    h, _ = sampler(lib, 4, temperature=1.0)
    err = C.create_string_buffer(128)
    x = np.array([0, np.nan, 1, 2], np.float32)
    assert lib.bu_sampler_sample(h, fptr(x), err, 128) == -1 and b"NaN" in err.value
    x = np.array([0, np.inf, 1, 2], np.float32)
    assert lib.bu_sampler_sample(h, fptr(x), err, 128) == -1 and b"+inf" in err.value
    x = np.array([0, -np.inf, 1, 2], np.float32)   # -inf is a masked token: probability 0
    assert set(draw(lib, h, x, 200)) <= {0, 2, 3}
    lib.bu_sampler_free(h)


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("kw,name", [
    (dict(temperature=NAN), "temperature"), (dict(temperature=-1.0), "temperature"),
    (dict(temperature=INF), "temperature"), (dict(top_k=-1), "top_k"), (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"), (dict(top_p=NAN), "top_p"), (dict(min_p=-0.1), "min_p"), (dict(min_p=1.01), "min_p"),
    (dict(min_p=NAN), "min_p"), (dict(repeat_penalty=0.0), "repeat_penalty"), (dict(repeat_penalty=-1.0), "repeat_penalty"),
    (dict(repeat_penalty=INF), "repeat_penalty"), (dict(repeat_penalty=NAN), "repeat_penalty"),
    (dict(repeat_last_n=-1), "repeat_last_n")])
def test_bad_parameters_refused(lib, kw, name):
    h, err = sampler(lib, 4, **{"temperature": 1.0, **kw})
    assert h is None and err.startswith(f"sampler: {name} ")


def penalised(logits, window, penalty):
    """The repeat penalty in numpy: each distinct id of the window once, divided if > 0 else multiplied."""
    out = logits.astype(np.float32).copy()
    ids = np.unique(np.asarray(window, np.int64))
    if len(ids):
        out[ids] = np.where(out[ids] > 0, out[ids] / np.float32(penalty), out[ids] * np.float32(penalty))
    return out


def expected_probs(logits, T, top_k, top_p, min_p=0.0):
    """The contract in numpy: sort (logit desc, id asc), cut top_k, softmax, cut the nucleus, cut
    below min_p times the best probability."""
    order = np.lexsort((np.arange(len(logits)), -logits))
    keep = order[: top_k or len(order)]
    z = logits[keep].astype(np.float64) / T
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1.0:
        c = np.cumsum(p)
        n = int(np.searchsorted(c, top_p) + 1)
        keep, p = keep[:n], p[:n] / p[:n].sum()
    mask = p >= min_p * p.max()
    keep, p = keep[mask], p[mask] / p[mask].sum()
    out = np.zeros(len(logits))
    out[keep] = p
    return out


@pytest.mark.parametrize("T,top_k,top_p,min_p", [(1.0, 0, 1.0, 0.0), (0.7, 3, 1.0, 0.0), (1.3, 0, 0.8, 0.0),
                                                 (2.0, 4, 0.9, 0.0), (1.0, 0, 1.0, 0.3), (1.5, 5, 0.95, 0.5),
                                                 (0.8, 0, 1.0, 1.0)])
def test_distribution_matches_contract(lib, T, top_k, top_p, min_p):
    logits = np.array([1.0, 2.5, 0.3, 2.4, -1.0, 1.9], np.float32)
    want = expected_probs(logits, T, top_k, top_p, min_p)
    h, _ = sampler(lib, len(logits), T, top_k, top_p, seed=123, min_p=min_p)
    n = 20000
    freq = np.bincount(draw(lib, h, logits, n), minlength=len(logits)) / n
    lib.bu_sampler_free(h)
    assert np.all(freq[want == 0] == 0)
    sigma = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(freq - want) <= 5 * sigma + 1e-12), (freq, want)


def test_top_k_1_and_tiny_top_p_are_greedy(lib):
    logits = np.array([0.1, 3.0, 2.9, -2.0], np.float32)
    for kw in (dict(top_k=1), dict(top_p=1e-6)):
        h, _ = sampler(lib, 4, temperature=1.0, seed=5, **kw)
        assert set(draw(lib, h, logits, 200)) == {1}
        lib.bu_sampler_free(h)


def test_seeded_and_splitmix64(lib):
    """The RNG is SplitMix64 (Steele, Lea, Flood 2014): state += golden gamma, then the mix."""
    M = (1 << 64) - 1

    def splitmix(seed, k):
        s, out = seed, []
        for _ in range(k):
            s = (s + 0x9E3779B97F4A7C15) & M
            z = s
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
            out.append((z ^ (z >> 31)) >> 11)
        return [v / 2**53 for v in out]

    h, _ = sampler(lib, 4, temperature=1.0, seed=42)
    assert [lib.bu_sampler_uniform(h) for _ in range(5)] == splitmix(42, 5)
    lib.bu_sampler_free(h)
    logits = np.linspace(0, 1, 64).astype(np.float32)
    a, b, c = (sampler(lib, 64, 1.0, seed=s)[0] for s in (1, 1, 2))
    da, db, dc = (draw(lib, x, logits, 50) for x in (a, b, c))
    assert (da == db).all() and not (da == dc).all()


@pytest.mark.parametrize("T,penalty,last_n", [(1.0, 1.3, 3), (0.9, 0.7, 8), (1.2, 2.0, 2)])
def test_repeat_penalty_distribution(lib, T, penalty, last_n):
    """Accepted ids (with repeats, more than the window holds) penalise the last last_n distinct ids."""
    logits = np.array([1.0, 2.5, -0.3, 2.4, -1.0, 1.9, 0.0, 0.5], np.float32)
    accepted = [3, 1, 1, 6, 2, 1, 4, 3]
    h, _ = sampler(lib, len(logits), T, seed=9, repeat_penalty=penalty, repeat_last_n=last_n)
    for i in accepted:
        assert lib.bu_sampler_accept(h, i) == 0
    want = expected_probs(penalised(logits, accepted[-last_n:], penalty), T, 0, 1.0)
    n = 20000
    freq = np.bincount(draw(lib, h, logits, n), minlength=len(logits)) / n
    lib.bu_sampler_free(h)
    sigma = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(freq - want) <= 5 * sigma + 1e-12), (freq, want)


def test_repeat_penalty_greedy_and_reset(lib):
    logits = np.array([0.5, 3.0, 2.9, -2.0, 2.0], np.float32)
    h, _ = sampler(lib, 5, 0.0, repeat_penalty=1.1, repeat_last_n=4)
    assert draw(lib, h, logits, 1)[0] == 1                       # empty window: plain argmax
    assert lib.bu_sampler_accept(h, 1) == 0
    want = int(np.argmax(penalised(logits, [1], 1.1)))
    assert want == 2 and draw(lib, h, logits, 1)[0] == want      # 3.0 / 1.1 < 2.9
    for i in (0, 0, 0, 0):                                       # the window forgets id 1
        lib.bu_sampler_accept(h, i)
    assert draw(lib, h, logits, 1)[0] == 1
    lib.bu_sampler_accept(h, 1)
    lib.bu_sampler_reset(h)
    assert draw(lib, h, logits, 1)[0] == 1
    assert lib.bu_sampler_accept(h, 5) == -1 and lib.bu_sampler_accept(h, -1) == -1
    lib.bu_sampler_free(h)
    # negative logits are multiplied: a penalised id moves further down, as numpy says
    x = np.array([-1.0, -1.05, -3.0], np.float32)
    h, _ = sampler(lib, 3, 0.0, repeat_penalty=1.2, repeat_last_n=1)
    lib.bu_sampler_accept(h, 0)
    assert draw(lib, h, x, 1)[0] == int(np.argmax(penalised(x, [0], 1.2))) == 1
    lib.bu_sampler_free(h)


def test_tiny_temperature_is_greedy_not_nan(lib):
    """(l - l_max) / T is formed in double: T = 1e-30 overflows no logit."""
    logits = np.array([0.1, 3.0, 2.9, -2.0], np.float32)
    h, _ = sampler(lib, 4, temperature=1e-30, seed=1)
    assert set(draw(lib, h, logits, 100)) == {1}
    lib.bu_sampler_free(h)
    h, _ = sampler(lib, 4, temperature=1.0)
    err = C.create_string_buffer(128)
    x = np.full(4, -np.inf, np.float32)
    assert lib.bu_sampler_sample(h, fptr(x), err, 128) == -1 and b"every logit is -inf" in err.value
    lib.bu_sampler_free(h)
