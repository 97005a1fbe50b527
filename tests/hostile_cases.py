"""The case table of tests/test_hostile_catalogue.py (docs/hostile_input.md lists it): each case
builds its hostile inputs inside a fresh folder ``w`` and returns the ``bringup`` argv to run,
or a callable for cases below the CLI (circuits, kernel maps, chat templates)."""
from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gguf

from bringup.certify import report as certify_report
from bringup.convert import importer
from bringup.core import canonjson, codedeps
from bringup.core.paths import CIRCUITS, KERNEL_MAPS
from bringup.fetch import synth
from bringup.formats import chat
from bringup.ir import lower as ir
from tests import hostile_gguf as H


@dataclass
class Base:
    """The tiny model, its bytes, and a good conversion of it (``good``)."""
    gguf: Path
    raw: bytes
    good: Path


# --- the case table -------------------------------------------------------------------------------

Build = Callable[[Path, Base], "list[str] | Callable[[], object]"]


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    rc: int
    pattern: str
    build: Build


def convert_of(make: Callable[[Path, Base], Path], prev: bool = True) -> Build:
    """Convert the GGUF ``make`` writes into w/out, which holds a good conversion when ``prev``."""
    def build(w: Path, b: Base):
        g = make(w, b)
        if prev:
            shutil.copytree(b.good, w / "out")
        return ["convert", str(g), "--out-dir", str(w / "out")]
    return build


def patch(fix) -> Build:
    return convert_of(lambda w, b: H.patched(b.raw, w / "m.gguf", fix))


def plan_memory(fix) -> Build:
    """``bringup plan memory`` (the header-only reader) on the patched tiny model."""
    def build(w: Path, b: Base):
        g = H.patched(b.raw, w / "m.gguf", fix)
        return ["plan", "memory", "--gguf", str(g), "--ctx", "64", "--kv-dtype", "f32", "--chunk", "8",
                "--out", str(w / "mm.json")]
    return build


def written(**kw) -> Build:
    return convert_of(lambda w, b: H.tiny(w / "m.gguf", **kw))


def special_input(kind: str) -> Build:
    def make(w: Path, b: Base) -> Path:
        p = w / "in.gguf"
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "dir":
            p.mkdir()
        elif kind == "loop":
            os.symlink(w / "loop_b", w / "loop_a")
            os.symlink(w / "loop_a", w / "loop_b")
            return w / "loop_a"
        elif kind == "devzero":
            return Path("/dev/zero")
        return p
    return convert_of(make)


def out_dir(kind: str) -> Build:
    def build(w: Path, b: Base):
        o = w / "out"
        if kind == "file":
            o.write_text("not a folder\n")
        elif kind == "loop":
            os.symlink(w / "o2", o)
            os.symlink(o, w / "o2")
        elif kind == "foreign":
            o.mkdir()
            (o / "notes.txt").write_text("mine\n")
        elif kind == "symlink":
            (w / "real").mkdir()
            os.symlink(w / "real", o)
        elif kind == "parent_file":
            (w / "f").write_text("x")
            o = w / "f" / "out"
        return ["convert", str(b.gguf), "--out-dir", str(o)]
    return build


def plan_only_onto(kind: str) -> Build:
    def build(w: Path, b: Base):
        (w / "out").mkdir()
        target = w / "out" / importer.PLAN_FILE
        if kind == "fifo":
            os.mkfifo(target)
        else:
            os.symlink("/dev/null", target)
        return ["convert", str(b.gguf), "--out-dir", str(w / "out"), "--plan-only"]
    return build


def registry(text: str | None, model: str = "tiny", out: str = "m.gguf", kind: str = "file") -> Build:
    """``bringup fetch model --registry w/reg.yaml --out w/<out>``; ``{gguf}``/``{sha}`` in ``text``
    are the tiny model's path and hash; ``kind`` "fifo" makes the registry a FIFO."""
    def build(w: Path, b: Base):
        reg = w / "reg.yaml"
        if kind == "fifo":
            os.mkfifo(reg)
        elif text is not None:
            sha = hashlib.sha256(b.raw).hexdigest()
            reg.write_text(text.format(gguf=b.gguf, sha=sha, fifo=w / "fifo.gguf", dir=w))
            if "{fifo}" in text:
                os.mkfifo(w / "fifo.gguf")
        if out == "symlink":
            os.symlink("/dev/null", w / "m.gguf")
            out_path = w / "m.gguf"
        elif out == "previous":      # a good file from an earlier fetch, which must survive
            shutil.copy(b.gguf, w / "m.gguf")
            out_path = w / "m.gguf"
        else:
            out_path = w / out
        return ["fetch", model, "--registry", str(reg), "--out", str(out_path)]
    return build


ENTRY = """models:
  tiny:
    description: the tiny hostile-catalogue model
    uri: {uri}
    sha256: "{sha}"
    architecture: llama
    context_length: 128
"""


def reg_entry(uri: str = "file://{gguf}", sha: str = "{sha}") -> str:
    """A registry text with one model "tiny"; ``registry`` fills in {gguf}, {sha}, {fifo}, {dir}."""
    return ENTRY.replace("{uri}", uri).replace("{sha}", sha)


def ir_case(mutate: Callable[[dict, dict], None] | None = None, argv: tuple[str, ...] = ("--ctx", "64"),
            config: str | None = None) -> Build:
    """``bringup ir`` on the good conversion's config and manifest (``mutate``d), or on a hostile
    --config file (``config``: "dir", "devzero", "notjson", "deep")."""
    def build(w: Path, b: Base):
        cfg, man = canonjson.read(b.good / "config.json", "c"), canonjson.read(b.good / "weights_manifest.json", "m")
        if mutate:
            mutate(cfg, man)
        cpath, mpath = w / "config.json", w / "weights_manifest.json"
        canonjson.write(cpath, cfg)
        canonjson.write(mpath, man)
        if config == "dir":
            cpath = w / "cfgdir"
            cpath.mkdir()
        elif config == "devzero":
            cpath = Path("/dev/zero")
        elif config == "notjson":
            cpath.write_text("{not json")
        elif config == "deep":
            cpath.write_text("[" * 100000 + "]" * 100000)
        return ["ir", "--config", str(cpath), "--manifest", str(mpath), "--out-dir", str(w / "ir"),
                "--chunk", "8", *argv]
    return build


def compile_with(circuit_edit=None, maps_edit=None) -> Build:
    """compile_ir with a copy of circuits/ or kernel_maps/ changed by the edit (a library call:
    the ir CLI has no option for these folders; the message is what the CLI would print)."""
    def build(w: Path, b: Base):
        cdir, mdir = None, None
        if circuit_edit:
            cdir = w / "circuits"
            shutil.copytree(CIRCUITS, cdir)
            circuit_edit(cdir)
        if maps_edit:
            mdir = w / "maps"
            shutil.copytree(KERNEL_MAPS, mdir)
            maps_edit(mdir)
        cfg, man = canonjson.read(b.good / "config.json", "c"), canonjson.read(b.good / "weights_manifest.json", "m")
        return lambda: ir.compile_ir(cfg, man, chunk=4, n_ctx=64, circuits_dir=cdir, maps_dir=mdir)
    return build


def edit_json(name: str, fn) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        p = d / name
        if fn is None:
            p.write_text("{ broken")
            return
        doc = canonjson.read(p, name)
        fn(doc)
        p.write_text(canonjson.dumps(doc))
    return edit


def remove_maps(op: str) -> Callable[[Path], None]:
    return lambda d: [p.unlink() for p in d.glob(f"{op}.*.json")]


def template(src: str) -> Build:
    return lambda w, b: (lambda: chat.render_template(src, [{"role": "user", "content": "hi"}], True))


def results_symlink(w: Path, b: Base):
    """A results folder whose parity.json is a symlink to another JSON file (certify's reader)."""
    (w / "parity").mkdir()
    (w / "other.json").write_text('{"prompts": []}\n')
    os.symlink(w / "other.json", w / "parity" / "parity.json")
    return lambda: canonjson.read_result(w / "parity" / "parity.json", "parity.json")


def dispatch_from(answer: str) -> Build:
    """The IR report's ``--build`` folder whose program answers ``answer`` on stdout (exit 0)."""
    def build(w: Path, b: Base):
        from bringup.plan import ir_report
        (w / "bringup-run").write_text("#!/bin/sh\ncat <<'EOF'\n" + answer + "\nEOF\n")
        (w / "bringup-run").chmod(0o755)
        return lambda: ir_report.dispatch_of(w)
    return build


def results_code_record(w: Path, b: Base):
    """A results folder whose code record of one rule was copied under another rule's name
    (certify's reader of results/<model>/code/<rule>.json)."""
    canonjson.write(w / "code" / "parity_model.json", {
        "schema_version": 1, "rule": "codegen_model", "stage": "codegen", "code": codedeps.code_record("codegen"),
        "outputs": {"c": "0" * 64}})
    return lambda: certify_report.code_records(w)


def devices_file(text: str) -> Build:
    """``bringup plan memory --devices`` given a file that is no device profile list."""
    def build(w: Path, b: Base):
        (w / "devices.yaml").write_text(text)
        return ["plan", "memory", "--gguf", str(b.gguf), "--ctx", "64", "--kv-dtype", "f32", "--chunk", "8",
                "--device", "x", "--devices", str(w / "devices.yaml"), "--out", str(w / "mm.json")]
    return build


def synth_top(w: Path, b: Base):
    """The top of every synth:// range, on the tiny model's vocabulary: refused before any tensor."""
    shutil.copy(b.gguf, w / "ggml-vocab-tiny.gguf")
    uri = ("synth://bringup-synth-v1/qwen2?vocab=tiny&n_layer=16&n_embd=4096&n_head=64&n_head_kv=64&n_ff=16384"
           "&n_ctx=131072&seed=1&wtype=F32")
    return lambda: synth.generate(synth.parse(uri), w, w / "out.gguf")


def moe(fix: Callable[[bytearray], None]) -> Build:
    """Convert a generated qwen3moe (8 experts, top-2, on the tiny model's vocabulary) with ``fix``
    applied to its bytes (onto a good conversion of the tiny model)."""
    def make(w: Path, b: Base) -> Path:
        shutil.copy(b.gguf, w / "ggml-vocab-tiny.gguf")
        uri = ("synth://bringup-synth-v1/qwen3moe?vocab=tiny&n_layer=1&n_embd=32&n_head=2&n_head_kv=1&n_ff=32"
               "&n_ctx=64&seed=1&wtype=F32&n_expert=8&n_expert_used=2")
        good = synth.generate(synth.parse(uri), w, w / "moe.gguf")
        return H.patched(good.read_bytes(), w / "m.gguf", fix)
    return convert_of(make)


def moe_kv(key: str, value: int) -> Callable[[bytearray], None]:
    """Set the UINT32 metadata value of ``key`` (type field, then the value)."""
    return lambda d: H.put(d, H.value_at(d, key) + 4, "<I", value)


def moe_swap_dims(name: str) -> Callable[[bytearray], None]:
    """Swap ne1 and ne2 of a 3-D tensor: the same bytes, the wrong shape (64 experts of 8 rows)."""
    def fix(d: bytearray) -> None:
        at = H.tensor_at(d, name)["dims"]
        ne1, ne2 = (int.from_bytes(d[at + 8 * i:at + 8 * i + 8], "little") for i in (1, 2))
        H.put(d, at + 8, "<Q", ne2)
        H.put(d, at + 16, "<Q", ne1)
    return fix


def _set(path: list, value) -> Callable[[dict], None]:
    def fn(doc: dict) -> None:
        for k in path[:-1]:
            doc = doc[k]
        doc[path[-1]] = value
    return fn



T = gguf.GGMLQuantizationType
VT = gguf.GGUFValueType
K = "blk.0.attn_k.weight"
Q = "blk.0.attn_q.weight"
TOKENS = "tokenizer.ggml.tokens"
_S = "{% set s = 'x' * 1000000 %}"
_L = "{% set l = ['x' * 1000] * 1000 %}"
NEST = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}"

CASES: list[Case] = [
    # -- file: the GGUF container ---------------------------------------------------------------
    Case("input-missing", "file", 2, r"GGUF file not found", convert_of(lambda w, b: w / "nope.gguf")),
    Case("input-directory", "file", 2, r"is a directory, not a regular file", special_input("dir")),
    Case("input-fifo", "file", 2, r"is a FIFO, not a regular file", special_input("fifo")),
    Case("input-dev-zero", "file", 2, r"/dev/zero is a character device", special_input("devzero")),
    Case("input-symlink-loop", "file", 2, r"(?i)too many levels of symbolic links", special_input("loop")),
    Case("empty-file", "file", 3, r"too short for a GGUF header", patch(H.truncate(0))),
    Case("bad-magic", "file", 3, r"not a GGUF file \(magic", patch(lambda d: d.__setitem__(slice(0, 4), b"GGUX"))),
    Case("version-99", "file", 4, r"GGUF version 99 is not supported", patch(H.set_version(99))),
    Case("version-1", "file", 4, r"GGUF version 1 is not supported", patch(H.set_version(1))),
    Case("big-endian", "file", 4, r"big-endian GGUF", patch(H.big_endian)),
    Case("cut-in-header", "file", 3, r"truncated or corrupt", patch(H.truncate(300))),
    Case("cut-in-data", "file", 3, r"past the end of the \d+-byte file \(truncated\)", patch(H.truncate(20000))),
    Case("array-2e40-items", "file", 3, r"item count of metadata 'tokenizer.ggml.tokens' is 1099511627776",
         patch(H.array_count(TOKENS, 2**40))),
    Case("kv-count-2e60", "file", 3, r"metadata KV count is 1152921504606846976", patch(H.set_count(16)(2**60))),
    Case("tensor-count-2e60", "file", 3, r"tensor count 1152921504606846976", patch(H.set_count(8)(2**60))),
    Case("key-length-2e62", "file", 3, r"metadata key #0 needs 4611686018427387904 bytes",
         patch(H.key_length("general.architecture", 2**62))),
    Case("unknown-value-type", "file", 3, r"unknown GGUF value type 77", patch(H.value_type("llama.block_count", 77))),
    Case("unknown-array-item-type", "file", 3, r"unknown GGUF item type 66", patch(H.array_item_type(TOKENS, 66))),
    Case("misaligned-tensor", "file", 3, r"offset \d+ is not a multiple of the alignment 32",
         patch(H.tensor_field(K, "offset", "<Q", lambda o: o + 4))),
    Case("overlapping-tensors", "file", 3, r"overlap in the data section", patch(H.same_offset(K, Q))),
    Case("offset-past-end", "file", 3, r"past the end", patch(H.tensor_field(K, "offset", "<Q", lambda o: o + 2**40))),
    Case("alignment-48", "file", 3, r"general.alignment must be a UINT32 power of two, got 48",
         convert_of(lambda w, b: H.tiny_with_alignment(w / "m.gguf", 48))),
    Case("alignment-0", "file", 3, r"general.alignment must be a UINT32 power of two, got 0",
         convert_of(lambda w, b: H.tiny_with_alignment(w / "m.gguf", 0))),
    Case("five-dimensions", "file", 3, r"has 5 dimensions", patch(H.tensor_field(K, "n_dims", "<I", lambda n: 5))),
    Case("unknown-ggml-type", "file", 4, r"GGML type id 200", patch(H.tensor_field(K, "type", "<I", lambda t: 200))),
    Case("row-not-whole-blocks", "file", 3, r"not a multiple of the 256-element blocks",
         patch(H.tensor_field(K, "type", "<I", lambda t: int(T.Q4_K)))),
    Case("duplicate-tensor-name", "file", 3, r"appears twice", patch(H.tensor_name_byte(K, 11, ord("q")))),
    Case("duplicate-metadata-key", "file", 3, r"metadata key 'tokenizer.ggml.bos_token_id' appears twice",
         patch(H.rename_key("tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id"))),
    Case("tensor-name-64-bytes", "file", 3, r"GGML names are shorter than 64", written(extra={"x" * 70: (4,)})),
    Case("token-not-utf8", "file", 3, r"'tokenizer.ggml.tokens'\[0\] is not valid UTF-8", patch(H.first_token_byte(0xFF))),
    Case("key-not-utf8", "file", 3, r"metadata key #\d+ is not valid UTF-8", patch(H.key_byte("llama.context_length", 3, 0xC3))),
    Case("tensor-name-not-utf8", "file", 3, r"name of tensor #\d+ is not valid UTF-8", patch(H.tensor_name_byte(K, 0, 0xFE))),
    Case("plan-memory-array-2e40", "file", 3, r"item count of metadata 'tokenizer.ggml.tokens' is 1099511627776",
         plan_memory(H.array_count(TOKENS, 2**40))),
    Case("plan-memory-version-99", "file", 4, r"GGUF version 99 is not supported", plan_memory(H.set_version(99))),
    # -- metadata: a well-formed file whose content is wrong ----------------------------------------
    Case("rope-base-nan", "metadata", 3, r"rope.freq_base is nan", written(rope_base=float("nan"))),
    Case("rope-base-inf", "metadata", 3, r"rope.freq_base is inf", written(rope_base=float("inf"))),
    Case("epsilon-inf", "metadata", 3, r"layer_norm_rms_epsilon is inf", written(eps=float("inf"))),
    Case("epsilon-negative", "metadata", 3, r"layer_norm_rms_epsilon is -1.0", written(eps=-1.0)),
    Case("no-architecture", "metadata", 3, r"no general.architecture",
         patch(H.rename_key("general.architecture", "general.architecturX"))),
    Case("no-block-count", "metadata", 3, r"llama.block_count is None",
         patch(H.rename_key("llama.block_count", "llama.block_counX"))),
    Case("unknown-architecture", "metadata", 4, r"unknown architecture 'mamba9'", written(arch="mamba9")),
    Case("per-layer-hparam-list", "metadata", 4, r"per-layer list", written(head_count_list=True)),
    Case("rope-scaling-yarn", "metadata", 4, r"RoPE scaling 'yarn'", written(rope_scaling="yarn")),
    Case("missing-required-tensor", "metadata", 3, r"layer.0.ffn_norm.*missing",
         written(drop=("blk.0.ffn_norm.weight",))),
    Case("tokenizer-model-bert", "metadata", 4, r"tokenizer model 'bert' is not supported: WordPiece, the tokenizer "
         r"of encoder models", written(tokenizer_model="bert")),
    Case("tokenizer-pre-unknown", "metadata", 4, r"pre-tokenizer 'chatglm-bpe' is not supported by the C tokenizer",
         written(tokenizer_pre="chatglm-bpe")),
    Case("tokens-shorter-than-vocab", "metadata", 3, r"inconsistent vocabulary sizes: .* lists 6 tokens",
         written(n_tokens=6, vocab_size=8)),
    Case("tokens-shorter-than-embedding", "metadata", 3, r"tok_embd: shape \[32, 8\] does not match",
         written(n_tokens=6)),
    Case("tensor-name-newline", "metadata", 3, r"blk.0.x\\nFAKE: ok \\x1b\[31m",
         written(extra={"blk.0.x\nFAKE: ok \x1b[31m": (4,)})),
    Case("unaccounted-tensor", "metadata", 3, r"neither mapped nor excluded.*blk.0.mystery",
         written(extra={"blk.0.mystery.weight": (4,)})),
    Case("absurd-layer-count", "metadata", 2, r"n_layer.*1000000", written(block_count=10**6)),
    Case("heads-not-multiple", "metadata", 3, r"n_head 2 is not a multiple of n_head_kv 3", written(n_head_kv=3)),
    Case("unsupported-quant-type", "metadata", 4, r"unsupported GGML quant type id 16 \(IQ2_XXS: the IQ formats "
         r"that need an importance matrix", written(wq_type=T.IQ2_XXS, wq_shape=(32, 66))),
    Case("unsupported-quant-type-other", "metadata", 4, r"unsupported GGML quant type id 39 \(MXFP4\); supported: F32",
         written(wq_type=T.MXFP4, wq_shape=(32, 17))),
    # a number stored with another GGUF type is refused, never converted (bringup.formats.gguf_types)
    Case("rope-base-string", "metadata", 2, r"llama.rope.freq_base is stored as STRING; it must be FLOAT32 or FLOAT64",
         written(kv={"llama.rope.freq_base": ("1e5", VT.STRING)})),
    Case("rope-base-padded-string", "metadata", 2, r"llama.rope.freq_base is stored as STRING",
         written(kv={"llama.rope.freq_base": (" 5e4 ", VT.STRING)})),
    Case("epsilon-string", "metadata", 2, r"layer_norm_rms_epsilon is stored as STRING",
         written(kv={"llama.attention.layer_norm_rms_epsilon": ("1e-5", VT.STRING)})),
    Case("rope-base-integer", "metadata", 2, r"llama.rope.freq_base is stored as UINT32",
         written(kv={"llama.rope.freq_base": (10000, VT.UINT32)})),
    Case("block-count-float", "metadata", 2, r"llama.block_count is stored as FLOAT32; it must be an integer type",
         written(kv={"llama.block_count": (1.0, VT.FLOAT32)})),
    Case("head-count-string", "metadata", 2, r"llama.attention.head_count is stored as STRING",
         written(kv={"llama.attention.head_count": ("2", VT.STRING)})),
    Case("bos-id-string", "metadata", 2, r"tokenizer.ggml.bos_token_id: expected an integer, got STRING",
         written(kv={"tokenizer.ggml.bos_token_id": ("0", VT.STRING)})),
    Case("add-bos-integer", "metadata", 2, r"tokenizer.ggml.add_bos_token: expected BOOL, got UINT8",
         written(kv={"tokenizer.ggml.add_bos_token": (1, VT.UINT8)})),
    Case("architecture-integer", "metadata", 4, r"general.architecture is stored as UINT32",
         written(kv={"general.architecture": (7, VT.UINT32)})),
    Case("architecture-string-array", "metadata", 4, r"general.architecture is stored as ARRAY of STRING",
         written(kv={"general.architecture": (["llama"], VT.ARRAY)})),
    Case("unknown-architecture-escaped", "metadata", 4, r"unknown architecture 'mamba\\x1b\[31m\\n'",
         written(arch="mamba\x1b[31m\n")),
    # every vocabulary token is checked to decode at convert (tokenizer_pack.undecodable)
    Case("token-outside-byte-map", "metadata", 3, r"token 2 cannot be decoded .* U\+0001 is not in GPT-2",
         written(tokens=["a", "b", "c\x01", "d", "e", "f", "g", "h"])),
    Case("token-empty", "metadata", 3, r"token 3 cannot be decoded by the C tokenizer: its text is empty",
         written(tokens=["a", "b", "c", "", "e", "f", "g", "h"])),
    Case("token-nul", "metadata", 3, r"token 4 cannot be decoded .* holds a NUL \(2 such tokens",
         written(tokens=["a", "b", "c", "d", "e\0", "f\0", "g", "h"])),
    Case("template-nested-loop", "metadata", 2, r"exceeded 250000 operations", template(NEST)),
    Case("template-huge-string", "metadata", 2, r"would build a string of 1 repeated 1000000000 times",
         template("{{ 'x' * 1000000000 }}")),
    Case("template-huge-width", "metadata", 2, r"passed 1000000000 to filter center",
         template("{{ 'x'|center(1000000000) }}")),
    Case("template-doubling-concat", "metadata", 2, r"would build a string with ~",
         template("{% set s = 'x' * 1000 %}" + "{% set s = s ~ s %}" * 20)),
    # templates: sizes computed from the arguments before anything is allocated (jinja_bounds)
    Case("template-list-repeat-join", "metadata", 2, r"would build a list of weight 1000001 repeated 1000 times",
         template("{{ (['x' * 1000000] * 1000)|join }}")),
    Case("template-join-separator", "metadata", 2, r"would build a value in filter join of 1000000000",
         template(_L + "{{ l|join(l|join) }}")),
    Case("template-str-join", "metadata", 2, r"would build a value in str.join of 1000000000",
         template(_L + "{{ (l|join).join(l) }}")),
    Case("template-indent", "metadata", 2, r"would build a value in filter indent of 1000002000000",
         template("{% set s = '\n' * 1000000 %}{{ s|indent(1000000) }}")),
    Case("template-replace-empty", "metadata", 2, r"would build a value in filter replace of 1000002000000",
         template(_S + "{{ s|replace('', s) }}")),
    Case("template-str-replace", "metadata", 2, r"would build a value in str.replace of 3000000",
         template(_S + "{{ s.replace('x', 'yy') }}")),
    Case("template-str-ljust", "metadata", 2, r"would build a string with ~ of 2000000",
         template(_S + "{{ s.ljust(1000000) ~ s }}")),
    Case("template-str-center", "metadata", 2, r"would build a string with ~ of 2000000",
         template("{{ 'x'.center(1000000) ~ 'x'.center(1000000) }}")),
    Case("template-str-zfill", "metadata", 2, r"would build a string of 1000000 repeated 2 times",
         template("{{ '1'.zfill(1000000) * 2 }}")),
    Case("template-str-format-map", "metadata", 2, r"would build a value in str.format_map of 10000",
         template(_S + "{{ ('{a}' * 10000).format_map({'a': s}) }}")),
    Case("template-tojson-nested", "metadata", 2, r"would build a list of weight 1001001 repeated 1000 times",
         template(_L + "{{ ([l] * 1000)|tojson }}")),
    Case("template-wordwrap", "metadata", 2, r"would build a value in filter wordwrap of 1000002000000",
         template(_S + "{{ s|wordwrap(1, true, s) }}")),
    Case("template-time-budget", "metadata", 2, r"ran longer than 2 s",
         template("{% set s = 'x' * 200000 %}{% for i in range(10000) %}{{ (s|list|sort)|length }}{% endfor %}")),
    Case("template-str-expandtabs", "metadata", 2, r"would build a value in str.expandtabs of 1000001000000",
         template("{% set s = '\t' * 1000000 %}{{ s.expandtabs(1000000) }}")),
    Case("template-format-widths", "metadata", 2, r"would build a value in filter format of 10000370000",
         template("{{ ('%999999s' * 10000)|format(*range(10000)) }}")),
    Case("template-str-format", "metadata", 2, r"would build a value in str.format of 10000380000",
         template("{{ ('{:999999}' * 10000).format(*range(10000)) }}")),
    Case("template-percent-format", "metadata", 2, r"would build a %-formatted string of 10000130000",
         template("{{ ('%999999s' * 10000) % ((1,) * 10000) }}")),
    Case("template-plus", "metadata", 2, r"would build the result of '\+' of 2000000", template(_S + "{{ s + s }}")),
    Case("template-range-huge", "metadata", 2, r"passed 1000000000 to a call",
         template("{% for i in range(10**9) %}{% endfor %}")),
    Case("template-set-block-loop", "metadata", 2, r"wrote more than 8388608 characters",
         template(_S + "{% set x %}{% for i in range(10000) %}{{ s }}{% endfor %}{% endset %}{{ x|length }}")),
    Case("template-macro-literal-loop", "metadata", 2, r"wrote more than 8388608 characters",
         template("{% macro m() %}{% for i in range(10000) %}" + "y" * 100000 + "{% endfor %}{% endmacro %}"
                  "{{ m()|length }}")),
    Case("template-str-translate", "metadata", 2, r"would build a value in str.translate of 1000000000000",
         template(_S + "{{ s.translate({120: s}) }}")),
    Case("template-str-translate-list", "metadata", 2, r"would build a value in str.translate of 1000000000000",
         template(_S + "{{ s.translate([" + "s, " * 121 + "]) }}")),
    Case("template-sum-lists", "metadata", 2, r"sums with a non-number start value",
         template("{{ ([[1]] * 100000)|sum(start=[]) }}")),
    Case("template-integer-growth", "metadata", 2, r"multiplies integers into more than 4096 bits",
         template("{% set n = 2**3000 %}{{ n * n }}")),
    Case("template-sandbox-escape", "metadata", 2, r"sandbox forbids", template("{{ ''.__class__.__mro__ }}")),
    # -- registry: bringup fetch --registry ---------------------------------------------------------
    Case("registry-missing", "registry", 2, r"model registry not found", registry(None)),
    Case("registry-fifo", "registry", 2, r"is a FIFO", registry(None, kind="fifo")),
    Case("registry-not-yaml", "registry", 2, r"cannot read model registry", registry("models: [unclosed\n")),
    Case("registry-alias-bomb", "registry", 2, r"YAML aliases are not allowed",
         registry("a: &a [x, x]\nb: &b [*a, *a]\nmodels:\n  x: 1\n")),
    Case("registry-deep-nesting", "registry", 2, r"nested too deeply", registry("models: " + "[" * 5000 + "]" * 5000)),
    Case("registry-schema", "registry", 2, r"does not match schema models",
         registry("models:\n  tiny:\n    uri: file://x\n")),
    Case("registry-bad-scheme", "registry", 2, r"uri: 'ftp://x/y' is not valid", registry(reg_entry(uri="ftp://x/y"))),
    Case("registry-path-escape", "registry", 2, r"must be relative and stay inside its root",
         registry(reg_entry(uri="pypi://dist==1.0/../../etc/passwd"))),
    Case("registry-unknown-model", "registry", 2, r"unknown model 'nosuch'", registry(reg_entry(), model="nosuch")),
    Case("registry-wrong-sha256", "registry", 3, r"the registry pins 0{64}", registry(reg_entry(sha="0" * 64))),
    Case("registry-wrong-sha256-keeps-file", "registry", 3, r"sha256 of the resolved file is [0-9a-f]{64}",
         registry(reg_entry(sha="f" * 64), out="previous")),
    Case("registry-file-is-fifo", "registry", 2, r"is a FIFO", registry(reg_entry(uri="file://{fifo}"))),
    Case("registry-file-missing", "registry", 2, r"no such file", registry(reg_entry(uri="file://{dir}/gone.gguf"))),
    Case("fetch-out-symlink", "registry", 2, r"is a symbolic link", registry(reg_entry(), out="symlink")),
    # -- circuit and kernel map data ----------------------------------------------------------------
    Case("circuit-not-json", "circuit", 2, r"llama.json", compile_with(circuit_edit=edit_json("llama.json", None))),
    Case("circuit-unknown-op", "circuit", 2, r"unknown op 'frobnicate'",
         compile_with(circuit_edit=edit_json("llama.json", lambda c: c["block"]["ops"][0].__setitem__("op", "frobnicate")))),
    Case("circuit-undefined-hparam", "circuit", 2, r"no_such_hparam",
         compile_with(circuit_edit=edit_json("llama.json",
                                             lambda c: c["block"]["ops"][0]["dims"].__setitem__("n", "no_such_hparam")))),
    Case("kernel-map-not-json", "kernel map", 2, r"rmsnorm",
         compile_with(maps_edit=lambda d: next(d.glob("rmsnorm.*.json")).write_text("{ broken"))),
    Case("kernel-map-schema", "kernel map", 2, r"schema",
         compile_with(maps_edit=lambda d: edit_json(next(d.glob("rmsnorm.*.json")).name,
                                                    _set(["priority"], "high"))(d))),
    Case("kernel-map-no-provider", "kernel map", 4, r"no provider", compile_with(maps_edit=remove_maps("rmsnorm"))),
    # -- command line -------------------------------------------------------------------------------
    Case("cli-unknown-command", "cli", 2, r"unknown command 'frobnicate'", lambda w, b: ["frobnicate"]),
    Case("cli-convert-no-out-dir", "cli", 2, r"required: --out-dir", lambda w, b: ["convert", str(b.gguf)]),
    Case("cli-ir-ctx-zero", "cli", 2, r"KV cache length \(--ctx\) = '0' = 0 is outside", ir_case(argv=("--ctx", "0"))),
    Case("cli-ir-ctx-above-training", "cli", 2, r"--ctx 4096 exceeds the model's training context 128",
         ir_case(argv=("--ctx", "4096"))),
    Case("cli-ir-chunk-above-ctx", "cli", 2, r"--chunk 8 exceeds --ctx 4", ir_case(argv=("--ctx", "4"))),
    Case("cli-ir-config-directory", "cli", 2, r"is a directory", ir_case(config="dir")),
    Case("cli-ir-config-dev-zero", "cli", 2, r"character device", ir_case(config="devzero")),
    Case("cli-ir-config-not-json", "cli", 2, r"cannot read config.json", ir_case(config="notjson")),
    Case("cli-ir-config-deep-json", "cli", 2, r"cannot read config.json", ir_case(config="deep")),
    Case("cli-ir-config-schema", "cli", 2, r"does not match schema config",
         ir_case(lambda c, m: c["hparams"].__setitem__("norm_eps", -1.0))),
    Case("cli-out-dir-is-file", "cli", 2, r"exists and is a regular file, not a folder", out_dir("file")),
    Case("cli-out-dir-symlink-loop", "cli", 2, r"exists and is a symbolic link", out_dir("loop")),
    Case("cli-out-dir-symlink", "cli", 2, r"exists and is a symbolic link", out_dir("symlink")),
    Case("cli-out-dir-foreign-files", "cli", 2, r"holds files this stage does not write \(notes.txt\)",
         out_dir("foreign")),
    Case("cli-out-dir-parent-is-file", "cli", 2, r"Not a directory", out_dir("parent_file")),
    Case("cli-plan-onto-fifo", "cli", 2, r"exists and is a FIFO", plan_only_onto("fifo")),
    Case("cli-plan-onto-dev-null-link", "cli", 2, r"exists and is a symbolic link", plan_only_onto("link")),
    # usage errors are exit 2 at parse time (bringup.core.argtypes.threads), in every CLI taking --threads
    Case("cli-parity-threads-zero", "cli", 2, r"argument --threads: 0 threads is outside 1..256",
         lambda w, b: ["parity", "--threads", "0"]),
    Case("cli-certify-threads-100000", "cli", 2, r"argument --threads: 100000 threads is outside 1..256",
         lambda w, b: ["certify", "--threads", "100000"]),
    Case("cli-xray-threads-word", "cli", 2, r"argument --threads: 'x' is not a whole number",
         lambda w, b: ["xray", "--threads", "x"]),
    # a results file that is not what it claims: exit 3
    Case("results-parity-json-symlink", "file", 3, r"parity.json .* is a symbolic link, not the file its stage wrote",
         results_symlink),
    Case("results-code-record-of-another-rule", "file", 3, r"code/parity_model.json records rule 'codegen_model', "
         r"not 'parity_model'", results_code_record),
    # a registry that is no registry: named, never quoted
    Case("registry-etc-passwd", "registry", 2, r"is not a YAML mapping with 'models' \(it parses as str\)$",
         registry("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")),
    Case("registry-yaml-error-no-content", "registry", 2,
         r"cannot read model registry .*: line 2, column 9: expected ',' or '\]', but got ':'$",
         registry("models: [unclosed\n  secret: hunter2\n")),
    Case("devices-passwd-like", "cli", 2, r"device profiles .* is not a YAML mapping with 'devices' \(it parses as str\)$",
         devices_file("root:x:0:0:root:/root:/bin/bash\nsecret:x:1:1::/:/bin/sh\n")),
    Case("devices-yaml-error-no-content", "cli", 2, r"cannot read device profiles .*: line 1, column 1: found character",
         devices_file("\tsecret: hunter2\n")),
    # mixture of experts: expert counts and the stacked expert tensors' shapes
    Case("moe-expert-count-0", "metadata", 3, r"qwen3moe.expert_count is 0; it must be in \[1, 512\]",
         moe(moe_kv("qwen3moe.expert_count", 0))),
    Case("moe-expert-count-huge", "metadata", 3, r"qwen3moe.expert_count is 4294967295; it must be in \[1, 512\]",
         moe(moe_kv("qwen3moe.expert_count", 2**32 - 1))),
    Case("moe-used-above-count", "metadata", 3,
         r"qwen3moe.expert_used_count is 9; it must be in \[1, expert_count 8\]",
         moe(moe_kv("qwen3moe.expert_used_count", 9))),
    Case("moe-no-expert-count", "metadata", 3,
         r"qwen3moe.expert_used_count is 2 but qwen3moe.expert_count is absent \(a dense model has no experts to use\)",
         moe(H.rename_key("qwen3moe.expert_count", "qwen3moe.expert_counX"))),
    Case("moe-no-expert-metadata", "metadata", 3,
         r"layer 0 has the routed ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps but qwen3moe.expert_count "
         r"is absent \(without it the FFN is dense\)",
         moe(lambda d: [H.rename_key(k, k[:-1] + "X")(d) for k in ("qwen3moe.expert_count",
                                                                   "qwen3moe.expert_used_count",
                                                                   "qwen3moe.expert_feed_forward_length")])),
    Case("moe-stacked-shape", "metadata", 3, r"layer.0.w_gate_exps: shape \[32, 8, 32\] does not match the "
         r"hyper-parameters \(expected \[32, 32, 8\]\)", moe(moe_swap_dims("blk.0.ffn_gate_exps.weight"))),
    # synth:// checked against the memory it needs before anything is made
    Case("synth-top-of-ranges", "registry", 2, r"needs about \d+ MiB of memory to generate; the limit is 6144 MiB",
         synth_top),
]


# --- issue 28: input that never ends or is too large to be a model's; names that must be escaped ----

def big_header(make: Callable[[Path], Path], command: str = "convert") -> Build:
    """``bringup <command>`` (convert, inspect, plan memory) on the GGUF ``make`` writes into w."""
    def build(w: Path, b: Base):
        g = make(w / "m.gguf")
        if command == "convert":
            shutil.copytree(b.good, w / "out")
            return ["convert", str(g), "--out-dir", str(w / "out")]
        if command == "inspect":
            return ["inspect", str(g)]
        return ["plan", "memory", "--gguf", str(g), "--ctx", "64", "--kv-dtype", "f32", "--chunk", "8"]
    return build


def header_bytes_past(limit: int) -> Build:
    """A 2 KiB string KV checked with MAX_HEADER_BYTES lowered to ``limit`` (the real bound, 128
    MiB, would need a file that large; the check is the same comparison)."""
    def build(w: Path, b: Base):
        g = H.long_string(w / "m.gguf", 2048)

        def run():
            from bringup.formats import gguf_check
            saved, gguf_check.MAX_HEADER_BYTES = gguf_check.MAX_HEADER_BYTES, limit
            try:
                return gguf_check.check(g)
            finally:
                gguf_check.MAX_HEADER_BYTES = saved
        return run
    return build


def calibrate_with(kind: str) -> Build:
    """``plan memory --calibrate`` whose program, library or weights (``kind``) is a FIFO: the
    native program would block on it (dlopen, read) before it could say anything."""
    def build(w: Path, b: Base):
        files = {}
        for name in ("bringup-run", "libmodel.so", "weights.bump"):
            files[name] = w / name
            if name == kind:
                os.mkfifo(files[name])
            else:
                files[name].write_bytes(b"\0")
        return ["plan", "memory", "--gguf", str(b.gguf), "--ctx", "64", "--kv-dtype", "f32", "--chunk", "8",
                "--calibrate", str(w / "cal.json"), "--bringup-run", str(files["bringup-run"]),
                "--libmodel", str(files["libmodel.so"]), "--weights", str(files["weights.bump"])]
    return build


def escaped_name(w: Path, b: Base) -> list[str]:
    """A FIFO whose name holds a newline, a forged line and terminal escapes."""
    p = w / "m\n[ok] ready\x1b[2J\x1b]0;title\x07.gguf"
    os.mkfifo(p)
    return ["convert", str(p), "--out-dir", str(w / "out")]


CASES += [
    Case("kv-count-1e6", "file", 3, r"metadata KV count is 1000000; bringup reads at most 4096",
         big_header(lambda p: H.many_kvs(p, 10**6))),
    Case("inspect-kv-count-1e6", "file", 3, r"metadata KV count is 1000000; bringup reads at most 4096",
         big_header(lambda p: H.many_kvs(p, 10**6), "inspect")),
    Case("plan-memory-kv-count-1e6", "file", 3, r"metadata KV count is 1000000; bringup reads at most 4096",
         big_header(lambda p: H.many_kvs(p, 10**6), "plan")),
    Case("array-3e6-items", "file", 3, r"item count of metadata 'tokenizer.ggml.scores' is 3000000; bringup reads at most",
         big_header(lambda p: H.long_array(p, 3 * 10**6))),
    Case("nested-arrays-1e5", "file", 3, r"arrays of arrays .* is 100000; bringup reads at most 4096",
         big_header(lambda p: H.nested_arrays(p, 10**5), "inspect")),
    Case("header-bytes-past-limit", "file", 3, r"the GGUF header is larger than", header_bytes_past(1024)),
    Case("file-name-escapes", "file", 2, r"m\\n\[ok\] ready\\x1b\[2J\\x1b\]0;title\\x07\.gguf is a FIFO", escaped_name),
    Case("calibrate-weights-fifo", "cli", 2, r"weights .*weights.bump is a FIFO, not a regular file",
         calibrate_with("weights.bump")),
    Case("calibrate-library-fifo", "cli", 2, r"model library .*libmodel.so is a FIFO, not a regular file",
         calibrate_with("libmodel.so")),
    Case("calibrate-program-fifo", "cli", 2, r"bringup-run .*bringup-run is a FIFO, not a regular file",
         calibrate_with("bringup-run")),
    Case("report-dispatch-not-json", "cli", 2, r"bringup-run --json did not print JSON",
         dispatch_from("<script>alert(1)</script>")),
    Case("report-dispatch-wrong-type", "cli", 2, r"--json has no isa_dispatch object",
         dispatch_from('{"isa_dispatch": {"classes": "<b>avx512</b>"}}')),
]
# -- export: bundles and archives handed to `bringup verify` (tests/hostile_bundles.py, issue 28) --
from tests.hostile_bundles import BUNDLE_CASES_SPEC  # noqa: E402  (after Case: it is a plain table)

CASES += [Case(cid, "export", rc, pattern, build) for cid, rc, pattern, build in BUNDLE_CASES_SPEC]
