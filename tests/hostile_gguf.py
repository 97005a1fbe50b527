"""Small hostile GGUF files for tests/test_hostile_catalogue.py: a tiny llama written with
gguf.GGUFWriter (every option a way to make its metadata wrong), and byte patches of its header
located by searching for the key or tensor name (GGUF v3 layout, ggml/docs/gguf.md)."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable

import gguf
import numpy as np

E, F, V = 32, 64, 8      # n_embd, n_ff, n_vocab of the tiny model


def tiny(path: Path, *, arch: str = "llama", drop: tuple[str, ...] = (), n_tokens: int = V,
         vocab_size: int | None = None, rope_base: float = 10000.0, eps: float = 1e-5,
         extra: dict[str, tuple] | None = None, n_head: int = 2, n_head_kv: int = 2, block_count: int = 1,
         head_count_list: bool = False, rope_scaling: str | None = None, n_embd: int = E, n_ff: int = F,
         wq_type: gguf.GGMLQuantizationType | None = None, wq_shape: tuple[int, int] | None = None,
         tokenizer_model: str = "gpt2", tokenizer_pre: str = "gpt-2",
         kv: dict[str, tuple] | None = None, tokens: list[str] | None = None) -> Path:
    """A 1-layer llama GGUF (F32 weights, byte-level BPE vocabulary) with the given defects:
    ``drop`` leaves tensors out, ``extra`` adds name -> shape tensors, ``n_tokens`` /
    ``vocab_size`` disagree with the embedding, ``wq_type`` stores attn_q as raw bytes of that type,
    ``kv`` sets key -> (value, GGUFValueType) after every other key (a key stored with the wrong
    type), ``tokens`` replaces the vocabulary's texts."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(block_count)
    w.add_embedding_length(n_embd)
    if head_count_list:
        w.add_key_value(f"{arch}.attention.head_count", [n_head] * block_count, gguf.GGUFValueType.ARRAY)
    else:
        w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_feed_forward_length(n_ff)
    w.add_context_length(128)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(eps)
    if rope_scaling:
        w.add_rope_scaling_type(gguf.RopeScalingType(rope_scaling))
    if vocab_size is not None:
        w.add_vocab_size(vocab_size)
    w.add_tokenizer_model(tokenizer_model)
    w.add_tokenizer_pre(tokenizer_pre)
    w.add_token_list(tokens if tokens is not None else [chr(ord("a") + i) for i in range(n_tokens)])
    w.add_token_types([1] * n_tokens)
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    for key, (value, vtype) in (kv or {}).items():
        w.add_key_value(key, value, vtype)

    def t(name: str, *shape: int) -> None:
        if name not in drop:
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))

    t("token_embd.weight", V, n_embd)
    t("output_norm.weight", n_embd)
    p = "blk.0."
    t(p + "attn_norm.weight", n_embd)
    if wq_type is not None:
        raw = rng.integers(0, 255, size=wq_shape, dtype=np.uint8)
        w.add_tensor(p + "attn_q.weight", raw, raw_shape=wq_shape, raw_dtype=wq_type)
    else:
        t(p + "attn_q.weight", n_embd, n_embd)
    for n in ("attn_k", "attn_v", "attn_output"):
        t(p + n + ".weight", n_embd, n_embd)
    t(p + "ffn_norm.weight", n_embd)
    t(p + "ffn_gate.weight", n_ff, n_embd)
    t(p + "ffn_up.weight", n_ff, n_embd)
    t(p + "ffn_down.weight", n_embd, n_ff)
    for name, shape in (extra or {}).items():
        t(name, *shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def key_at(data: bytes | bytearray, key: str) -> int:
    """Offset of metadata ``key``'s length prefix."""
    k = key.encode()
    return data.index(struct.pack("<Q", len(k)) + k)


def value_at(data: bytes | bytearray, key: str) -> int:
    """Offset of the value-type field that follows metadata ``key``."""
    return key_at(data, key) + 8 + len(key.encode())


def tensor_at(data: bytes | bytearray, name: str) -> dict[str, int]:
    """Offsets of the fields of tensor ``name``'s info: name, n_dims, dims, type, offset."""
    n = name.encode()
    at = data.rindex(struct.pack("<Q", len(n)) + n)
    nd = at + 8 + len(n)
    n_dims = struct.unpack_from("<I", data, nd)[0]
    typ = nd + 4 + 8 * n_dims
    return {"name": at, "n_dims": nd, "dims": nd + 4, "type": typ, "offset": typ + 4}


def put(data: bytearray, at: int, fmt: str, value) -> None:
    struct.pack_into(fmt, data, at, value)


Patch = Callable[[bytearray], None]


def patched(base: bytes, out: Path, fix: Patch) -> Path:
    """``base`` with ``fix`` applied, written to ``out``."""
    data = bytearray(base)
    fix(data)
    out.write_bytes(bytes(data))
    return out


# --- the patches -----------------------------------------------------------------------------

def set_version(v: int) -> Patch:
    return lambda d: put(d, 4, "<I", v)


def big_endian(d: bytearray) -> None:
    d[4:8] = struct.pack(">I", 3)


def set_count(field_at: int) -> Callable[[int], Patch]:
    """Patch the u64 at header offset ``field_at`` (8: tensor count, 16: KV count)."""
    return lambda n: (lambda d: put(d, field_at, "<Q", n))


def array_count(key: str, n: int) -> Patch:
    return lambda d: put(d, value_at(d, key) + 8, "<Q", n)


def value_type(key: str, t: int) -> Patch:
    return lambda d: put(d, value_at(d, key), "<I", t)


def array_item_type(key: str, t: int) -> Patch:
    return lambda d: put(d, value_at(d, key) + 4, "<I", t)


def key_length(key: str, n: int) -> Patch:
    return lambda d: put(d, key_at(d, key), "<Q", n)


def rename_key(old: str, new: str) -> Patch:
    assert len(old) == len(new)

    def fix(d: bytearray) -> None:
        at = key_at(d, old) + 8
        d[at:at + len(old)] = new.encode()
    return fix


def key_byte(key: str, index: int, byte: int) -> Patch:
    def fix(d: bytearray) -> None:
        d[key_at(d, key) + 8 + index] = byte
    return fix


def first_token_byte(byte: int) -> Patch:
    # tokens array: type u32, item type u32, count u64, then (u64 len, bytes) per token
    return lambda d: d.__setitem__(value_at(d, "tokenizer.ggml.tokens") + 16 + 8, byte)


def tensor_field(name: str, field: str, fmt: str, value_of: Callable[[int], int]) -> Patch:
    def fix(d: bytearray) -> None:
        at = tensor_at(d, name)[field]
        put(d, at, fmt, value_of(struct.unpack_from(fmt, d, at)[0]))
    return fix


def tensor_name_byte(name: str, index: int, byte: int) -> Patch:
    def fix(d: bytearray) -> None:
        d[tensor_at(d, name)["name"] + 8 + index] = byte
    return fix


def same_offset(name: str, as_name: str) -> Patch:
    def fix(d: bytearray) -> None:
        src = tensor_at(d, as_name)["offset"]
        put(d, tensor_at(d, name)["offset"], "<Q", struct.unpack_from("<Q", d, src)[0])
    return fix


def tiny_with_alignment(path: Path, alignment: int) -> Path:
    """The tiny model with a ``general.alignment`` KV of ``alignment`` (UINT32), added by the writer
    and patched afterwards (GGUFWriter itself only writes powers of two that it then honours)."""
    tmp = path.with_suffix(".a.gguf")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_custom_alignment(64)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((V, E), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = bytearray(tmp.read_bytes())
    tmp.unlink()
    put(data, value_at(data, "general.alignment") + 4, "<I", alignment)
    path.write_bytes(bytes(data))
    return path


def truncate(n: int) -> Patch:
    def fix(d: bytearray) -> None:
        del d[n:]
    return fix


# --- headers too large to be a model's (issue 28: bounded before gguf's reader parses them) ------

def header_only(path: Path, n_kv: int, kvs: bytes, n_tensors: int = 0) -> Path:
    """A GGUF v3 of ``n_kv`` KVs encoded in ``kvs`` and no tensors (the count may claim more)."""
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kvs)
    return path


def many_kvs(path: Path, n: int) -> Path:
    """``n`` distinct one-byte UINT8 KVs ("k0000000" = 1, ...): 21 bytes each, all well-formed."""
    rec = np.zeros(n, dtype=np.dtype([("len", "<u8"), ("key", "S8"), ("type", "<u4"), ("val", "u1")]))
    rec["len"], rec["key"], rec["type"], rec["val"] = 8, [b"k%07d" % i for i in range(n)], 0, 1
    return header_only(path, n, rec.tobytes())


def long_array(path: Path, n: int) -> Path:
    """One UINT8 array KV of ``n`` items (a 'vocabulary' of scores far past any model's)."""
    key = b"tokenizer.ggml.scores"
    return header_only(path, 1, struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 0, n) + bytes(n))


def nested_arrays(path: Path, n: int) -> Path:
    """One KV: an array of ``n`` empty UINT8 arrays (gguf's reader builds objects per item)."""
    key = b"x.nested"
    return header_only(path, 1, struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 9, n)
                       + struct.pack("<IQ", 0, 0) * n)


def long_string(path: Path, n: int) -> Path:
    """One STRING KV of ``n`` bytes."""
    key = b"general.name"
    return header_only(path, 1, struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, n) + b"a" * n)
