"""GGUF -> BUMP import adapter on the real smollm2 and gemma3 files, and its failure paths."""
import json
import subprocess
import sys

import gguf
import pytest

from bringup.formats import bump
from bringup.formats import gguf_file
from bringup.convert import importer as convert
from bringup.convert import manifest as weights_manifest
from bringup.core.errors import IntegrityError, UnsupportedError
from bringup.core.paths import ROOT
from tests.synth import write_tiny_llama


@pytest.fixture(scope="module")
def smollm2_converted(smollm2_gguf, tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2")
    return out, convert.convert(smollm2_gguf, out)


def test_smollm2_all_tensors_accounted_and_verified(smollm2_gguf, smollm2_converted):
    out, man = smollm2_converted
    assert man["counts"] == {"gguf": 272, "mapped": 272, "excluded": 0, "unaccounted": 0}
    assert man["tied"] == {"output": "tok_embd"}
    with bump.BumpFile(out / "weights.bump") as bf:
        assert "output" not in bf.tensors          # tied: recorded, not duplicated
        assert bf.tensors["layer.0.wq"].dtype == "Q4_1"   # quantized bytes kept as they are
        assert bf.tensors["tok_embd"].dtype == "Q8_0"
        assert bf.dims["n_layer"] == 30 and bf.dims["n_vocab"] == 49152
    v = convert.verify(smollm2_gguf, out / "weights.bump")
    assert v["tensors_checked"] == 272 and set(v["dequantized"]) == {"F32", "Q4_1", "Q8_0"}
    cfg = json.loads((out / "config.json").read_text())
    hp = cfg["hparams"]
    assert (hp["n_layer"], hp["n_embd"], hp["n_head"], hp["n_head_kv"], hp["head_dim"], hp["n_ff"]) == (30, 576, 9, 3, 64, 1536)
    assert cfg["sources"]["n_head_kv"] == "llama.attention.head_count_kv"
    assert cfg["sources"]["head_dim"] == "derived: n_embd / n_head"
    tok = json.loads((out / "tokenizer.json").read_text())
    assert tok["model"] == "gpt2" and tok["pre"] == "smollm" and len(tok["tokens"]) == 49152


def test_convert_twice_is_byte_identical(smollm2_gguf, smollm2_converted, tmp_path):
    out, _ = smollm2_converted
    convert.convert(smollm2_gguf, tmp_path)
    for f in ("weights.bump", "weights_manifest.json", "config.json", "tokenizer.json"):
        assert (tmp_path / f).read_bytes() == (out / f).read_bytes(), f


def test_header_only_file_gives_convert_manifest_and_config(smollm2_gguf, smollm2_converted, tmp_path):
    # plan memory builds the manifest from a file cut after the header; it must be convert's own
    out, man = smollm2_converted
    cut = tmp_path / "header_only.gguf"
    with open(smollm2_gguf, "rb") as src:
        cut.write_bytes(src.read(gguf_file.read_header(smollm2_gguf).data_offset))
    head = gguf_file.read_header(cut)
    assert head.sha256 == gguf_file.read_header(smollm2_gguf).sha256
    cfg_written = json.loads((out / "config.json").read_text())
    cfg = convert.extract_config(head.reader, cfg_written["gguf_sha256"])
    assert cfg == cfg_written
    got = weights_manifest.weights_manifest(cfg, weights_manifest.map_weights(cfg, head.tensors),
                                            gguf_sha256=man["gguf_sha256"], extra=man["extra"])
    assert got == {k: v for k, v in man.items() if k != "bump"}


def test_gemma3_all_tensors_accounted_and_verified(gemma3_gguf, tmp_path):
    man = convert.convert(gemma3_gguf, tmp_path)
    assert man["counts"] == {"gguf": 236, "mapped": 236, "excluded": 0, "unaccounted": 0}
    v = convert.verify(gemma3_gguf, tmp_path / "weights.bump")
    assert set(v["dequantized"]) == {"F32", "Q5_0", "Q8_0", "Q4_K", "Q6_K"}
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architecture"] == "gemma3" and cfg["hparams"]["sliding_window"] == 512
    assert cfg["hparams"]["head_dim"] == 256 and cfg["sources"]["head_dim"] == "gemma3.attention.key_length"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bringup", "convert", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_plan_only_writes_no_weights(smollm2_gguf, tmp_path):
    r = _cli(smollm2_gguf, "--out-dir", tmp_path, "--plan-only")
    assert r.returncode == 0, r.stderr
    assert "blk.0.attn_q.weight" in r.stdout and "layer.0.wq" in r.stdout
    assert "mapped 272 / excluded 0 / unaccounted 0" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conversion_plan.json"]


def test_truncated_gguf_is_a_clear_error_and_leaves_nothing(smollm2_gguf, tmp_path):
    bad = tmp_path / "trunc.gguf"
    with open(smollm2_gguf, "rb") as fh:
        bad.write_bytes(fh.read(40_000_000))
    out = tmp_path / "out"
    r = _cli(bad, "--out-dir", out)
    assert r.returncode == 3, r.stderr
    assert "truncated" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() or list(out.iterdir()) == []
    bad.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    r = _cli(bad, "--out-dir", out)
    assert r.returncode == 3 and "truncated or corrupt" in r.stderr


def test_unknown_architecture(tmp_path):
    p = write_tiny_llama(tmp_path / "m.gguf", arch="mamba9")
    with pytest.raises(UnsupportedError, match="unknown architecture 'mamba9'.*supported: .*gemma3.*llama"):
        convert.plan_conversion(p)
    r = _cli(p, "--out-dir", tmp_path / "out")
    assert r.returncode == 4 and not (tmp_path / "out").exists()


def test_unsupported_quant_type(tmp_path):
    """An importance-matrix IQ format is refused in one line naming it (exit 4), nothing written."""
    p = write_tiny_llama(tmp_path / "m.gguf", n_embd=256, weight_type=gguf.GGMLQuantizationType.IQ2_XXS)
    r = _cli(p, "--out-dir", tmp_path / "out")
    assert r.returncode == 4, r.stderr
    assert "unsupported GGML quant type id 16 (IQ2_XXS: the IQ formats that need an importance matrix" in r.stderr
    assert [ln for ln in r.stderr.splitlines() if "error" in ln] == [r.stderr.splitlines()[-1]]
    assert not (tmp_path / "out").exists()


def test_unaccounted_tensor_fails(tmp_path):
    p = write_tiny_llama(tmp_path / "m.gguf", extra_tensor="blk.0.mystery.weight")
    with pytest.raises(IntegrityError, match="neither mapped nor excluded.*blk.0.mystery.weight"):
        convert.plan_conversion(p)


def test_absurd_dimensions_are_rejected(tmp_path):
    p = write_tiny_llama(tmp_path / "m.gguf", n_layer=1)
    r = gguf.GGUFReader(p)
    cfg = convert.extract_config(r, "0" * 64)
    cfg["hparams"]["n_layer"] = 10**9
    from bringup.core import schemas
    from bringup.core.errors import BringupError
    with pytest.raises(BringupError, match="n_layer"):
        schemas.validate(cfg, "config")


# -- fused tensors split by row ranges (phi3) and the generated families -------------------------
def _synth(arch: str, vocab: str, wtype: str, vocab_dir, out):
    from bringup.fetch import synth
    uri = (f"synth://bringup-synth-v1/{arch}?vocab={vocab}&n_layer=2&n_embd=64&n_head=4&n_head_kv=2&n_ff=128"
           f"&n_ctx=2048&seed=1&wtype={wtype}")
    return synth.generate(synth.parse(uri), vocab_dir, out)


@pytest.mark.parametrize("wtype", ["Q8_0", "F16"])
def test_phi3_fused_tensors_split_by_row_ranges(llama_vocab_dir, tmp_path, wtype):
    """tensor_maps/phi3.json splits attn_qkv into wq/wk/wv and ffn_up into w_gate/w_up by rows; each
    part's BUMP bytes are the separate tensor a mistral3 of the same seed and shape holds (the
    generator names each weight's random stream by its unfused GGUF name)."""
    phi = _synth("phi3", "phi-3", wtype, llama_vocab_dir, tmp_path / "phi3.gguf")
    mis = _synth("mistral3", "llama-spm", wtype, llama_vocab_dir, tmp_path / "mistral3.gguf")
    m = convert.convert(phi, tmp_path / "out")
    rows = {r["name"]: r for r in m["tensors"]}
    assert {n: (rows[n]["gguf_name"], rows[n]["rows"], rows[n]["shape"]) for n in
            ("layer.1.wq", "layer.1.wk", "layer.1.wv", "layer.1.w_gate", "layer.1.w_up")} == {
        "layer.1.wq": ("blk.1.attn_qkv.weight", [0, 64], [64, 64]),
        "layer.1.wk": ("blk.1.attn_qkv.weight", [64, 96], [64, 32]),
        "layer.1.wv": ("blk.1.attn_qkv.weight", [96, 128], [64, 32]),
        "layer.1.w_gate": ("blk.1.ffn_up.weight", [0, 128], [64, 128]),
        "layer.1.w_up": ("blk.1.ffn_up.weight", [128, 256], [64, 128])}
    assert m["counts"] == {"gguf": 15, "mapped": 15, "excluded": 0, "unaccounted": 0}
    separate = {t.name: bytes(t.data.view("uint8").reshape(-1)) for t in gguf.GGUFReader(mis).tensors}
    with bump.BumpFile(tmp_path / "out" / "weights.bump") as bf:
        for L in range(2):
            for ours, theirs in (("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"), ("w_gate", "ffn_gate"),
                                 ("w_up", "ffn_up")):
                assert bytes(bf.tensor_bytes(f"layer.{L}.{ours}")) == separate[f"blk.{L}.{theirs}.weight"]
    v = convert.verify(phi, tmp_path / "out" / "weights.bump")
    assert v["tensors_checked"] == 21 and f"{wtype} (split part)" in v["dequantized"]


def test_gemma2_converts_with_its_softcaps_and_tied_head(llama_vocab_dir, tmp_path):
    g = _synth("gemma2", "llama-spm", "F16", llama_vocab_dir, tmp_path / "gemma2.gguf")
    m = convert.convert(g, tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert m["tied"] == {"output": "tok_embd"} and m["counts"]["unaccounted"] == 0
    assert (cfg["hparams"]["attn_logit_softcap"], cfg["hparams"]["final_logit_softcap"],
            cfg["hparams"]["sliding_window"]) == (50.0, 30.0, 32)
    assert {"layer.0.post_attn_norm", "layer.1.post_ffn_norm"} <= {r["name"] for r in m["tensors"]}


def test_a_split_that_does_not_add_up_is_refused():
    parts = [["layer.0.wq", "n_head * head_dim"], ["layer.0.wk", "n_head_kv * head_dim"]]
    hp = {"n_head": 4, "n_head_kv": 2, "head_dim": 16}
    assert weights_manifest.split_rows("t", parts, (64, 96), hp) == [("layer.0.wq", 0, 64), ("layer.0.wk", 64, 96)]
    with pytest.raises(IntegrityError, match="t: its 128 rows do not split into layer.0.wq 64 \\+ layer.0.wk 32 = 96"):
        weights_manifest.split_rows("t", parts, (64, 128), hp)
    with pytest.raises(IntegrityError, match="needs a 2-D tensor"):
        weights_manifest.split_rows("t", parts, (96,), hp)
    from bringup.core.errors import BringupError
    with pytest.raises(BringupError, match="rows of layer.0.wq .* is not a positive integer"):
        weights_manifest.split_rows("t", [["layer.0.wq", "head_dim / 3"]], (64, 96), hp)
