"""csrc/common (what the tokenizer, runtime and CLI share) through ctypes: strict UTF-8 decoding
against Python's codec, growable byte strings, and bu_errf's truncation and return value."""
from __future__ import annotations

import ctypes as C
import itertools

import pytest

from bringup.build import compiler, sources
from bringup.core.paths import CSRC


class Str(C.Structure):
    _fields_ = [("p", C.c_void_p), ("n", C.c_size_t), ("cap", C.c_size_t)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = tmp_path_factory.mktemp("common") / "libcommon.so"
    # BU_INTERNAL= : export the helpers (hidden in the real binaries) so ctypes can call them
    compiler.gcc(sources.paths(sources.COMMON), so, [CSRC / "common"], ("-shared",), defines=["BU_INTERNAL="])
    lib = C.CDLL(str(so))
    lib.bu_utf8_decode.argtypes = [C.c_char_p, C.c_size_t, C.POINTER(C.c_uint32)]
    lib.bu_utf8_decode.restype = C.c_size_t
    lib.bu_str_add.argtypes = [C.POINTER(Str), C.c_char_p, C.c_size_t]
    lib.bu_errf.restype = C.c_int
    return lib


def _python_first_char(b: bytes) -> tuple[int, int]:
    """(length, code point) of the valid UTF-8 character b starts with, by Python's strict codec
    (RFC 3629), or (0, 0)."""
    for k in range(1, min(4, len(b)) + 1):
        try:
            s = b[:k].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return k, ord(s)
    return 0, 0


def _cases():
    tails = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF]
    yield from (bytes([a, b]) for a, b in itertools.product(range(256), repeat=2))
    yield from (bytes([a, b, c]) for a in range(0xE0, 0x100) for b in range(256) for c in tails)
    yield from (bytes([a, b, c, d]) for a in range(0xF0, 0x100) for b in range(0x80, 0xC0, 3)
                for c, d in itertools.product(tails, repeat=2))
    yield from (bytes([a]) for a in range(256))   # a lone byte: truncated sequences


def test_utf8_decode_is_pythons_strict_codec(lib):
    cp = C.c_uint32()
    bad = []
    for b in _cases():
        cp.value = 0
        got = lib.bu_utf8_decode(b, len(b), C.byref(cp))
        want = _python_first_char(b)
        if (got, cp.value if got else 0) != want:
            bad.append((b.hex(), got, cp.value, want))
    assert not bad, bad[:10]


def test_str_add_grows_and_keeps_a_nul(lib):
    s = Str()
    want = b""
    for i in range(300):
        chunk = bytes([i % 251 + 1]) * (i % 7) + (b"\0" if i % 50 == 0 else b"")
        assert lib.bu_str_add(C.byref(s), chunk, len(chunk)) == 0
        want += chunk
        assert s.n == len(want) and s.cap > s.n
    assert C.string_at(s.p, s.n + 1) == want + b"\0"
    empty = Str()
    assert lib.bu_str_add(C.byref(empty), b"", 0) == 0 and empty.n == 0 and C.string_at(empty.p, 1) == b"\0"


def test_errf_truncates_and_returns_the_code(lib):
    buf = C.create_string_buffer(b"\xAA" * 16)
    assert lib.bu_errf(buf, 8, -7, b"%s=%d", b"status", 1234) == -7
    assert buf.raw[:8] == b"status=\0" and buf.raw[8:16] == b"\xAA" * 8   # NUL inside cap, nothing after
    assert lib.bu_errf(None, 0, 3, b"no buffer %d", 1) == 3
