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
    p = write_tiny_llama(tmp_path / "m.gguf", weight_type=gguf.GGMLQuantizationType.IQ4_NL)
    r = _cli(p, "--out-dir", tmp_path / "out")
    assert r.returncode == 4, r.stderr
    assert "unsupported GGML quant type id 20" in r.stderr
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
