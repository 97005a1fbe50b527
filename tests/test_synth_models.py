"""Generated models (bringup.fetch.synth): strict synth:// URIs, byte-identical regeneration
against the registry's pins, llama.cpp-loadable layouts with peaked next-token distributions,
and one family end to end against llama.cpp."""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import subprocess
import zlib
from pathlib import Path

import gguf
import numpy as np
import pytest
import yaml

from bringup.core.errors import BringupError, IntegrityError
from bringup.core.hashing import sha256_file
from bringup.core.paths import CONFIG
from bringup.fetch import registry, sources, synth, synth_draw
from tests.helpers.pipeline import run_pipeline, teacher_forced_logits

GOOD = ("synth://bringup-synth-v1/mistral3?vocab=llama-spm&n_layer=2&n_embd=64&n_head=4"
        "&n_head_kv=2&n_ff=128&n_ctx=2048&seed=1&wtype=F16")
PROMPTS = ["The quick brown fox", "Once upon a time, in a land far away,", "def main():\n    print(", "1 2 3 4 5"]


def _uri(arch: str = "mistral3", **changes) -> str:
    """GOOD for ``arch`` with keys replaced (value None drops the key)."""
    keys = dict(vocab="llama-spm", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_ctx=2048,
                seed=1, wtype="F16")
    if arch in synth.FAMILIES and synth.FAMILIES[arch].moe:   # mixture of experts: 8 experts, 2 per token
        keys.update(n_expert=8, n_expert_used=2)
    if arch == "olmoe":   # its K norm spans n_embd: no grouped KV heads
        keys.update(n_head_kv=4)
    keys.update(changes)
    return f"synth://bringup-synth-v1/{arch}?" + "&".join(f"{k}={v}" for k, v in keys.items() if v is not None)


# phi3 on its registry entry's vocabulary (phi-3's special tokens); the others on the smallest
# real SentencePiece vocabulary (llama-spm, 32000 tokens).
FAMILY_VOCAB = {"phi3": "phi-3"}


@pytest.fixture(scope="module")
def vocab_dir(llama_vocab_dir) -> Path:
    return llama_vocab_dir


def test_the_reference_uri_parses_into_its_fields():
    s = registry.parse_uri(GOOD).synth
    assert (s.generator, s.arch, s.vocab, s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.n_ff, s.n_ctx,
            s.seed, s.wtype) == ("bringup-synth-v1", "mistral3", "llama-spm", 2, 64, 4, 2, 128, 2048, 1, "F16")
    assert s.head_dim == 16 and registry.parse_uri(GOOD).path == "mistral3"
    query = GOOD.split("?")[1].split("&")
    reordered = synth.parse(GOOD.split("?")[0] + "?" + "&".join(reversed(query)))
    assert reordered == synth.parse(GOOD)  # key order is free
    assert synth.parse(_uri(seed=2**32 - 1, n_embd=96, n_head=6)).seed == 2**32 - 1


@pytest.mark.parametrize("uri, says", [
    (GOOD.replace("-v1/", "-v2/"), "generator 'bringup-synth-v2' is not this one"),
    (_uri("falcon"), "architecture 'falcon' is not generated"),
    (_uri(seed=None), "missing key(s) seed"),
    (_uri(n_layer=None, wtype=None), "missing key(s) n_layer, wtype"),
    (_uri(rope_theta=5), "unknown key 'rope_theta'"),
    (GOOD + "&seed=2", "key 'seed' given twice"),
    (GOOD + "&", "'' is not key=value"),
    (_uri(n_layer=0), "n_layer='0' is not an integer in [1, 16]"),
    (_uri(n_layer=17), "n_layer='17' is not an integer in [1, 16]"),
    (_uri(seed=2**32), "seed='4294967296' is not an integer"),
    (_uri(n_embd="064"), "n_embd='064' is not an integer"),
    (_uri(n_embd="6.4e1"), "n_embd='6.4e1' is not an integer"),
    (_uri(n_head="-4"), "n_head='-4' is not an integer"),
    (_uri(wtype="Q5_K"), "wtype 'Q5_K' is not one of F32, F16, BF16, Q4_0"),
    (_uri(wtype="Q4_K"), "n_embd 64 must be a multiple of the Q4_K block size 256"),
    (_uri(vocab="../x"), "vocab '../x' is not a vocabulary name"),
    (_uri(n_head=3), "n_embd 64 / n_head 3 must be an even head_dim"),
    (_uri(n_embd=96, n_head=32, n_head_kv=1), "must be an even head_dim"),  # head_dim 3
    (_uri(n_head_kv=3), "n_head 4 must be a multiple of n_head_kv 3"),
    (_uri(n_ff=100, wtype="Q8_0"), "n_ff 100 must be a multiple of the Q8_0 block size 32"),
    ("synth://bringup-synth-v1/mistral3", "expected synth://bringup-synth-v1/<arch>?key=value"),
    (_uri("qwen3moe", n_expert_used=None), "missing key(s) n_expert_used"),
    (_uri("qwen3moe", n_expert=0), "n_expert='0' is not an integer in [1, 256]"),
    (_uri("qwen3moe", n_expert=4, n_expert_used=5), "n_expert_used 5 exceeds n_expert 4"),
    (_uri(n_expert=8), "unknown key 'n_expert'"),   # a dense family takes no expert keys
    (_uri("olmoe", n_head_kv=2), "n_head_kv 2 must equal n_head 4 (olmoe: K norm weight of n_embd)"),
])
def test_bad_synth_uris_are_one_line_errors(uri, says):
    with pytest.raises(BringupError) as e:
        registry.parse_uri(uri)
    assert says in str(e.value) and "\n" not in str(e.value) and e.value.exit_code == 2


def _registry_with(tmp_path, name: str, **entry) -> Path:
    data = yaml.safe_load((CONFIG / "models.yaml").read_text())
    data["models"][name] = {"description": "x", "sha256": "0" * 64, "architecture": "mistral3",
                            "context_length": 2048, **entry}
    p = tmp_path / "models.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.mark.parametrize("entry, says", [
    ({"uri": GOOD, "architecture": "llama"}, "generates architecture 'mistral3' with n_ctx 2048, the entry says 'llama'"),
    ({"uri": GOOD, "context_length": 4096}, "the entry says 'mistral3' and context_length 4096"),
    ({"parts": [GOOD, GOOD]}, "does not match schema models"),  # generated models are one file
    ({"uri": GOOD, "requires": [GOOD]}, "does not match schema models"),
])
def test_registry_refuses_inconsistent_synth_entries(tmp_path, entry, says):
    with pytest.raises(BringupError, match=says.replace("(", r"\(").replace(")", r"\)")):
        registry.load(_registry_with(tmp_path, "x", **entry))


SYNTH_MODELS = [n for n, e in registry.load().models.items() if e.sources[0].scheme == "synth"]
#: the "large" night's models (config regression.large): generating one takes many minutes (slow)
LARGE = yaml.safe_load((CONFIG / "config.yaml").read_text())["regression"]["large"]


def test_the_registry_generates_the_issue_families():
    archs = {registry.load().model(n).architecture for n in SYNTH_MODELS}
    assert {"qwen2", "qwen3", "mistral3", "phi3", "gemma2", "qwen3moe"} <= archs
    assert registry.load().model("qwen2").sources[0].scheme == "hf"  # the hub entry is unchanged


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LARGE else n for n in SYNTH_MODELS])
def test_registry_pins_are_what_the_generator_writes(tmp_path, name):
    out = sources.fetch_model(name, dest=tmp_path / "m.gguf")
    assert sha256_file(out) == registry.load().model(name).sha256
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]  # the scratch folder is gone


def test_same_uri_same_bytes_and_any_change_is_a_new_file(tmp_path, vocab_dir):
    spec = synth.parse(GOOD)
    a = synth.generate(spec, vocab_dir, tmp_path / "a.gguf").read_bytes()
    assert synth.generate(spec, vocab_dir, tmp_path / "b.gguf").read_bytes() == a
    assert synth.generate(synth.parse(_uri(seed=2)), vocab_dir, tmp_path / "c.gguf").read_bytes() != a
    assert len(synth.generate(synth.parse(_uri(wtype="Q8_0")), vocab_dir, tmp_path / "d.gguf").read_bytes()) < len(a)
    assert hashlib.sha256(a).hexdigest() == registry.load().model("mistral3_synth").sha256


def test_a_wrong_pin_writes_nothing(tmp_path):
    reg = registry.load(_registry_with(tmp_path, "x", uri=GOOD))
    dest = tmp_path / "out" / "x.gguf"
    with pytest.raises(IntegrityError, match="registry pins 0000"):
        sources.fetch_model("x", reg, dest=dest)
    assert list(dest.parent.iterdir()) == []


def test_missing_vocabulary_names_the_available_ones(tmp_path, vocab_dir):
    with pytest.raises(BringupError, match=r"no ggml-vocab-nope.gguf .*\(have: .*llama-spm.*qwen2"):
        synth.generate(synth.parse(_uri(vocab="nope")), vocab_dir, tmp_path / "x.gguf")


def _fields(path: Path) -> dict:
    r = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in r.fields.items() if k.startswith("tokenizer.")}


def test_tokenizer_keys_are_the_vocabulary_s_and_a_family_template_only_fills_a_gap(tmp_path, vocab_dir):
    got = _fields(synth.generate(synth.parse(GOOD), vocab_dir, tmp_path / "m.gguf"))
    want = _fields(vocab_dir / "ggml-vocab-llama-spm.gguf")
    assert "tokenizer.chat_template" not in want  # llama-spm has none: mistral3 brings its own
    assert got.pop("tokenizer.chat_template") == synth.MISTRAL_V7_TEKKEN
    assert got == want
    # phi-3's vocabulary has a template: it is kept, and phi3 adds none
    phi = synth.generate(synth.parse(_uri("phi3", vocab="phi-3")), vocab_dir, tmp_path / "p.gguf")
    assert synth.tokenizer_kvs(phi) == synth.tokenizer_kvs(vocab_dir / "ggml-vocab-phi-3.gguf")


def _tensors(path: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    return {t.name: (t.tensor_type.name, tuple(int(d) for d in t.shape), bytes(t.data))
            for t in gguf.GGUFReader(path).tensors}


def test_each_family_has_llama_cpp_s_tensor_layout(tmp_path, tiny_vocab):
    shapes = {}
    for arch in synth.FAMILIES:
        uri = _uri(arch, vocab="tiny", wtype="Q8_0")
        t = _tensors(synth.generate(synth.parse(uri), tiny_vocab, tmp_path / f"{arch}.gguf"))
        shapes[arch] = {n: s for n, (_, s, _) in t.items()}
        # weights in the file's type, routers F32 as llama.cpp's quantizer leaves them
        assert {ty for n, (ty, s, _) in t.items() if len(s) >= 2 and "gate_inp" not in n} == {"Q8_0"}
        assert {ty for n, (ty, s, _) in t.items() if "gate_inp" in n} <= {"F32"}
        assert {ty for n, (ty, s, _) in t.items() if len(s) == 1} == {"F32"}
    E, kv, ff, V = 64, 2 * 16, 128, 300
    assert shapes["qwen2"]["blk.1.attn_k.bias"] == (kv,) and "output.weight" not in shapes["qwen2"]
    assert shapes["qwen3"]["blk.0.attn_q_norm.weight"] == (16,) and "blk.0.attn_q.bias" not in shapes["qwen3"]
    assert shapes["mistral3"]["output.weight"] == (E, V)
    assert shapes["phi3"]["blk.0.attn_qkv.weight"] == (E, E + 2 * kv) and "blk.0.attn_q.weight" not in shapes["phi3"]
    assert shapes["phi3"]["blk.0.ffn_up.weight"] == (E, 2 * ff) and "blk.0.ffn_gate.weight" not in shapes["phi3"]
    assert shapes["gemma2"]["blk.1.post_ffw_norm.weight"] == (E,) and "output.weight" not in shapes["gemma2"]
    moe = shapes["qwen3moe"]   # llama.cpp qwen3moe.cpp: {n_embd, n_ff_exp, n_expert}, router {n_embd, n_expert}
    assert moe["blk.0.ffn_gate_exps.weight"] == moe["blk.0.ffn_up_exps.weight"] == (E, ff, 8)
    assert moe["blk.1.ffn_down_exps.weight"] == (ff, E, 8) and moe["blk.1.ffn_gate_inp.weight"] == (E, 8)
    assert "blk.0.ffn_gate.weight" not in moe and moe["blk.0.attn_q_norm.weight"] == (16,)
    ol = shapes["olmoe"]   # llama.cpp olmoe.cpp: Q/K norms of n_embd, untied head
    assert ol["blk.0.attn_k_norm.weight"] == (E,) and ol["output.weight"] == (E, V) and ol["blk.1.ffn_gate_inp.weight"] == (E, 8)


def test_fused_tensors_are_row_slices_of_the_separate_ones(tmp_path, tiny_vocab):
    """What convert's split of phi3's fused tensors will rely on: every block format quantizes
    rows independently, so the fused tensor's bytes are the separate tensors' bytes back to back
    (same seed and shape: mistral3 writes the parts separately from the same random streams)."""
    for wtype in ("Q8_0", "Q4_1", "BF16"):
        fused = _tensors(synth.generate(synth.parse(_uri("phi3", vocab="tiny", wtype=wtype)), tiny_vocab,
                                        tmp_path / "p.gguf"))
        split = _tensors(synth.generate(synth.parse(_uri("mistral3", vocab="tiny", wtype=wtype)), tiny_vocab,
                                        tmp_path / "m.gguf"))
        for L in range(2):
            qkv = b"".join(split[f"blk.{L}.attn_{r}.weight"][2] for r in "qkv")
            assert fused[f"blk.{L}.attn_qkv.weight"][2] == qkv
            assert fused[f"blk.{L}.ffn_up.weight"][2] == split[f"blk.{L}.ffn_gate.weight"][2] + split[f"blk.{L}.ffn_up.weight"][2]


def _llama(path: Path):
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=str(path), logits_all=True, verbose=False, n_ctx=256, n_threads=2)


def _greedy(llm, toks: list[int], n: int) -> list[int]:
    llm.reset()
    return list(itertools.islice(llm.generate(toks, temp=0.0, top_k=1), n))


@pytest.mark.slow   # generates a whole model per family, each run in llama.cpp
@pytest.mark.parametrize("arch", sorted(synth.FAMILIES))
def test_llama_cpp_loads_every_family_and_its_next_token_is_peaked(tmp_path, vocab_dir, arch):
    uri = _uri(arch, vocab=FAMILY_VOCAB.get(arch, "llama-spm"))
    llm = _llama(synth.generate(synth.parse(uri), vocab_dir, tmp_path / "m.gguf"))
    n_vocab = llm.n_vocab()
    for prompt in PROMPTS:
        toks = llm.tokenize(prompt.encode(), add_bos=True)
        llm.reset()
        llm.eval(toks)
        logits = np.array(llm.scores[:len(toks)], dtype=np.float64)
        p = np.exp(logits - logits.max(1, keepdims=True))
        top1 = (p / p.sum(1, keepdims=True)).max(1)
        assert top1.min() > 100 / n_vocab, (prompt, top1)
        gen = _greedy(llm, toks, 24)
        longest_run = max(len(list(g)) for _, g in itertools.groupby(gen))
        assert len(set(gen)) >= 8 and longest_run <= 12, (prompt, gen)


@pytest.mark.slow   # six generated models through every stage, each against llama.cpp
@pytest.mark.parametrize("name", ["mistral3_synth", "phi3_synth", "gemma2_synth", "qwen3moe_synth", "olmoe_synth",
                                  "mixtral_synth"])
def test_synth_end_to_end_agrees_with_llama_cpp(tmp_path, name):
    """fetch -> convert -> ir -> plan -> codegen -> build, then our program and llama.cpp on the
    same GGUF: same prompt tokens, same teacher-forced top-1 at every position, same greedy start.
    phi3: the fused attn_qkv / ffn_up split at conversion; gemma2: soft-capped attention and
    logits, every row's logits through the footer (--all-logits); qwen3moe, olmoe: routed experts."""
    gguf_path = sources.fetch_model(name, dest=tmp_path / "m.gguf")
    p = run_pipeline(tmp_path, gguf_path)
    llm = _llama(gguf_path)
    prompt = "Once upon a time, in a land far away,"
    r = subprocess.run([p["cli"], p["lib"], p["bump"], "--prompt", prompt, "--max-tokens", "8",
                        "--temperature", "0", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ours = json.loads(r.stdout)
    toks = llm.tokenize(prompt.encode(), add_bos=True)
    assert ours["prompt_tokens"] == toks
    logits = teacher_forced_logits(p, toks, llm.n_vocab(), tmp_path / "l.f32")
    llm.reset()
    llm.eval(toks)
    ref = np.array(llm.scores[:len(toks)])
    assert (logits.argmax(1) == ref.argmax(1)).all()
    assert ours["generated_tokens"][:4] == _greedy(llm, toks, 4)
    assert len(set(ours["generated_tokens"])) > 1


def test_the_large_entry_is_shaped_like_llama_3_2_1b():
    """llama1b_synth: Llama-3.2-1B's shape (16 layers, 2048 wide, 32 query / 8 KV heads, FFN 8192, tied
    head, llama-bpe's 128k vocabulary) in Q4_K_M made by llama.cpp's quantizer; the generator's
    memory bound admits it, and the fetch job requests that bound."""
    e = registry.load().model("llama1b_synth")
    s = e.sources[0].synth
    assert e.architecture == "llama" and synth.FAMILIES["llama"].tied
    assert (s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.head_dim, s.n_ff, s.vocab, s.wtype) == (
        16, 2048, 32, 8, 64, 8192, "llama-bpe", "Q4_K_M")
    need = synth.memory_bytes(s, 128256)
    assert 4 << 30 < need < synth.MAX_MEMORY_BYTES
    # a K-quant file type needs rows of whole 256-wide super-blocks
    with pytest.raises(BringupError, match="n_ff 288 must be a multiple of the Q4_K_M block size 256"):
        synth.parse(_uri("llama", vocab="llama-bpe", n_embd=256, n_ff=288, wtype="Q4_K_M"))
    with pytest.raises(BringupError, match="wtype 'Q4_K_S' is not one of .*Q4_K_M"):
        synth.parse(_uri("llama", vocab="llama-bpe", wtype="Q4_K_S"))


def test_a_llama_cpp_file_type_is_quantized_by_llama_cpp(tmp_path, vocab_dir):
    """A small Q4_K_M model: llama.cpp's choice of K-quant types, the same bytes twice, no base file left."""
    uri = _uri("llama", n_embd=256, n_head=4, n_head_kv=2, n_ff=512, wtype="Q4_K_M")
    a = synth.generate(synth.parse(uri), vocab_dir, tmp_path / "a.gguf")
    b = synth.generate(synth.parse(uri), vocab_dir, tmp_path / "b.gguf")
    assert a.read_bytes() == b.read_bytes()
    types = {t.tensor_type.name for t in gguf.GGUFReader(a).tensors}
    assert {"Q4_K", "Q6_K", "F32"} <= types and "F16" not in types
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "b.gguf"]


def test_q4_k_blocks_dequantize_to_the_drawn_values(tmp_path):
    """wtype=Q4_K draws blocks: gguf's own Q4_K dequantization of them gives d * sc * q - dmin * m
    with the quants, scales, minima and d factor read from the stream as documented (so the 6-bit
    packing is ggml's), mean 0 and the requested RMS."""
    s = synth.parse(_uri("qwen3moe", vocab="tiny", wtype="Q4_K", n_embd=256, n_head=2, n_head_kv=1, n_ff=256))
    blocks = synth_draw.q4_k_blocks(s.seed, "blk.0.ffn_up_exps", (3, 40, 512), 0.03)
    got = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K).reshape(-1, 256)
    bits = np.random.PCG64(np.random.SeedSequence([s.seed, zlib.crc32(b"blk.0.ffn_up_exps")]))
    r = bits.random_raw(19 * got.shape[0]).view(np.uint8).reshape(-1, 152)
    q = np.stack([r[:, :128] & 15, r[:, :128] >> 4], axis=1)             # [sb, lo/hi, 128]
    q = q.reshape(-1, 2, 4, 32).transpose(0, 2, 1, 3).reshape(-1, 8, 32)  # sub-block j: 32 values
    sc, m = 32 + (r[:, 128:136] & 31), 32 + (r[:, 136:144] & 31)
    f = 0.75 + r[:, 144:146].copy().view("<u2")[:, 0] / 2.0**17
    d = (0.03 / math.sqrt(synth_draw.Q4_K_MS) * f).astype(np.float16).astype(np.float64)
    dmin = (7.5 * d).astype(np.float16).astype(np.float64)
    want = d[:, None, None] * sc[:, :, None] * q - dmin[:, None, None] * m[:, :, None]
    np.testing.assert_allclose(got, want.reshape(-1, 256), rtol=1e-6, atol=1e-9)
    assert abs(got.mean()) < 1e-3 and abs(np.sqrt((got ** 2).mean()) / 0.03 - 1) < 0.02


def test_a_q4_k_model_is_written_as_it_is_drawn(tmp_path, tiny_vocab):
    """Every 2-D weight in Q4_K but the F32 routers, same bytes every time, and a memory bound of
    one tensor (the writer streams), not of the model."""
    uri = _uri("qwen3moe", vocab="tiny", wtype="Q4_K", n_embd=256, n_head=2, n_head_kv=1, n_ff=256)
    a = synth.generate(synth.parse(uri), tiny_vocab, tmp_path / "a.gguf")
    t = _tensors(a)
    assert {ty for n, (ty, sh, _) in t.items() if len(sh) >= 2 and "gate_inp" not in n} == {"Q4_K"}
    assert {ty for n, (ty, sh, _) in t.items() if "gate_inp" in n or len(sh) == 1} == {"F32"}
    assert t["blk.1.ffn_down_exps.weight"][1] == (256, 256, 8)
    assert synth.generate(synth.parse(uri), tiny_vocab, tmp_path / "b.gguf").read_bytes() == a.read_bytes()
    big = registry.load().model("qwen3moe_big_synth").sources[0].synth
    need = synth.memory_bytes(big, 151936)
    assert need < 1 << 30, need   # the 3.9 GB model: its largest tensor (the 152k x 2048 embedding)
    # a format name that is neither gguf-py's nor llama.cpp's nor drawn is still refused
    with pytest.raises(BringupError, match="wtype 'Q5_K' is not one of .*Q4_K_M, Q4_K"):
        synth.parse(_uri(wtype="Q5_K"))
