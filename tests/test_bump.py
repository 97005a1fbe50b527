"""BUMP writer/reader: round trip, alignment, determinism, and every corruption a clear error."""
import struct

import numpy as np
import pytest

from bringup.formats import bump
from bringup.core.errors import BringupError, IntegrityError


def _sources():
    rng = np.random.default_rng(1)
    return [
        bump.TensorSource("tok_embd", "F32", (8, 3), rng.standard_normal(24).astype(np.float32)),
        bump.TensorSource("layer.0.wq", "Q4_1", (64, 2), rng.integers(0, 255, 80, dtype=np.uint8)),
        bump.TensorSource("blob", "I8", (5,), np.arange(5, dtype=np.uint8)),
    ]


def _write(path):
    return bump.write(path, _sources(), {"config": {"a": 1}}, {"n_layer": 1, "n_embd": 8})


def test_round_trip_alignment_and_dims(tmp_path):
    info = _write(tmp_path / "w.bump")
    with bump.BumpFile(tmp_path / "w.bump") as bf:
        assert bf.payload_sha256 == info["payload_sha256"]
        assert bf.metadata == {"config": {"a": 1}}
        assert bf.dims["n_layer"] == 1 and bf.dims["n_embd"] == 8 and bf.dims["n_vocab"] == 0
        assert list(bf.tensors) == ["tok_embd", "layer.0.wq", "blob"]
        for src in _sources():
            e = bf.tensors[src.name]
            assert (bf.payload_offset + e.offset) % 64 == 0
            assert bytes(bf.tensor_bytes(src.name)) == memoryview(src.data).cast("B").tobytes()
        assert bf.tensors["layer.0.wq"].shape == (64, 2) and bf.tensors["layer.0.wq"].dtype == "Q4_1"


def test_same_input_gives_identical_bytes(tmp_path):
    _write(tmp_path / "a.bump")
    _write(tmp_path / "b.bump")
    assert (tmp_path / "a.bump").read_bytes() == (tmp_path / "b.bump").read_bytes()


def _corrupt(path, offset, value=None):
    data = bytearray(path.read_bytes())
    data[offset] = (data[offset] ^ 0xFF) if value is None else value
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where,match", [
    (lambda bf: bf.payload_offset + 70, "payload SHA-256"),   # one weight byte
    (lambda bf: 256 + 2, "metadata/tensor-table SHA-256"),     # metadata byte
    (lambda bf: 0, "magic"),
    (lambda bf: 4, "version"),
])
def test_flipped_byte_is_a_clear_error(tmp_path, where, match):
    p = tmp_path / "w.bump"
    _write(p)
    with bump.BumpFile(p) as bf:
        off = where(bf)
    _corrupt(p, off)
    with pytest.raises(IntegrityError, match=match):
        bump.BumpFile(p)


def test_truncated_file_is_a_clear_error(tmp_path):
    p = tmp_path / "w.bump"
    _write(p)
    data = p.read_bytes()
    for n in (0, 100, 300, len(data) - 1):
        p.write_bytes(data[:n])
        with pytest.raises(IntegrityError, match="truncated|shorter"):
            bump.BumpFile(p)


def test_overlapping_entries_are_rejected_even_with_a_matching_header_hash(tmp_path):
    import hashlib
    p = tmp_path / "w.bump"
    _write(p)
    data = bytearray(p.read_bytes())
    hdr = bump._HEADER.unpack_from(data, 0)
    table_off, pay_off = hdr[5], hdr[7]
    # point the second tensor's offset at the first tensor's bytes
    struct.pack_into("<Q", data, table_off + bump.ENTRY_BYTES + 136, 0)
    struct.pack_into("<32s", data, 96, hashlib.sha256(bytes(data[256:pay_off])).digest())
    p.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="layer.0.wq"):
        bump.BumpFile(p)


def test_writer_rejects_bad_input_and_leaves_nothing(tmp_path):
    p = tmp_path / "w.bump"
    bad_size = [bump.TensorSource("x", "Q4_1", (64, 2), np.zeros(79, np.uint8))]
    with pytest.raises(BringupError, match="needs 80"):
        bump.write(p, bad_size, {}, {})
    with pytest.raises(BringupError, match="does not match"):
        bump.write(p, [bump.TensorSource("x;rm -rf", "F32", (1,), np.zeros(1, np.float32))], {}, {})
    with pytest.raises(BringupError, match="unsupported quant type"):
        bump.write(p, [bump.TensorSource("x", "IQ9_Z", (1,), np.zeros(1, np.uint8))], {}, {})
    assert list(tmp_path.iterdir()) == []


def test_atomic_writes_get_ordinary_permissions(tmp_path):
    import os
    from bringup.core.atomic import write_text
    write_text(tmp_path / "a.json", "{}")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~mask
