"""A GGUF's tokenizer.json (``bringup.formats.tokenizer_json.from_gguf``) read fast: the key/value
part of the file parsed directly instead of through gguf.GGUFReader (seconds per vocabulary)."""
from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np

from bringup.formats import tokenizer_json

class _MetaField:
    def __init__(self, types, value):
        self.types, self._value = types, value

    def contents(self):
        return self._value

class FastGGUFMeta:
    """The key/value part of a GGUF file (spec: ggml/docs/gguf.md), as ``.fields[key].types`` and
    ``.contents()`` like gguf.GGUFReader, in well under a second: GGUFReader takes ~8 s per 50k-token
    vocabulary, which would make these tests minutes long. test_fast_meta_equals_gguf_reader checks
    that from_gguf gives the same dict through both."""

    _NUM = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8",
            11: "<i8", 12: "<f8"}

    def __init__(self, path: Path):
        data = Path(path).read_bytes()
        assert data[:4] == b"GGUF", path
        version, _n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
        assert version in (2, 3), version
        off = 24
        self.fields = {}

        def rd_str(o):
            (n,) = struct.unpack_from("<Q", data, o)
            return data[o + 8:o + 8 + n].decode("utf-8"), o + 8 + n

        def rd_scalar(t, o):
            if t == 8:
                return rd_str(o)
            dt = np.dtype(self._NUM[t])
            v = np.frombuffer(data, dt, 1, o)[0].item()
            return (bool(v) if t == 7 else v), o + dt.itemsize

        for _ in range(n_kv):
            key, off = rd_str(off)
            (t,) = struct.unpack_from("<I", data, off)
            off += 4
            if t == 9:
                at, n = struct.unpack_from("<IQ", data, off)
                off += 12
                if at == 8:
                    vals = []
                    for _ in range(n):
                        v, off = rd_str(off)
                        vals.append(v)
                else:
                    dt = np.dtype(self._NUM[at])
                    vals = np.frombuffer(data, dt, n, off).tolist()
                    off += dt.itemsize * n
                self.fields[key] = _MetaField([gguf.GGUFValueType(9), gguf.GGUFValueType(at)], vals)
            else:
                v, off = rd_scalar(t, off)
                self.fields[key] = _MetaField([gguf.GGUFValueType(t)], v)

_TOK_CACHE: dict[str, dict] = {}

def gguf_tokenizer_json(path: Path) -> dict:
    key = str(path)
    if key not in _TOK_CACHE:
        _TOK_CACHE[key] = tokenizer_json.from_gguf(FastGGUFMeta(path))
    return _TOK_CACHE[key]
