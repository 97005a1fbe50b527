"""`bringup inspect`: a GGUF's inventory against what bringup has, from the header alone."""
from __future__ import annotations

import json

import pytest

from bringup.core.cli import main
from bringup.inspect.inventory import inspect_gguf


def test_smollm2_is_ready(smollm2_gguf, capsys):
    assert main(["inspect", str(smollm2_gguf), "--check"]) == 0
    out = capsys.readouterr().out
    assert "architecture 'llama'" in out and "layers 0-29:" in out
    assert "attn_q.weight                Q4_1 x30" in out
    assert "linear [Q4_1]        linear.q4_1." in out
    assert "tokenizer: model gpt2, pre-tokenizer smollm, 49152 tokens" in out
    assert "MISSING" not in out and out.rstrip().endswith("next")


def test_gemma3_names_its_mixed_formats_and_the_borrowed_chat_format(gemma3_gguf):
    inv = inspect_gguf(gemma3_gguf)
    assert inv.tensors_by_role["ffn_down.weight"] == {"Q4_K": 9, "Q6_K": 9}
    assert [r["layers"] for r in inv.layers] == ["0-17"]
    assert not inv.missing
    assert inv.chat["template_present"] is False and inv.chat["own_template"] is False
    assert {"linear [Q4_K]", "linear [Q6_K]", "linear [Q5_0]", "linear [Q8_0]"} <= set(inv.providers)


def test_unsupported_family_lists_every_missing_piece(llama_vocab_dir, capsys):
    rc = main(["inspect", str(llama_vocab_dir / "ggml-vocab-bert-bge.gguf"), "--check", "--json"])
    assert rc == 4
    inv = json.loads(capsys.readouterr().out)
    missing = {p["name"] for p in inv["pieces"] if not p["ok"]}
    assert {"circuit", "tokenizer", "reference oracle", "weights"} <= missing
    assert inv["ready"] is False and inv["architecture"] == "bert"
    assert all(p["fix"] for p in inv["pieces"] if not p["ok"])


@pytest.mark.parametrize("vocab,says", [("gemma-4", "gemma4 / pre-tokenizer gemma4"),
                                        ("gpt-neox", "gpt2 / pre-tokenizer default"),
                                        ("deepseek-llm", "gpt2 / pre-tokenizer deepseek-llm")])
def test_issue32_vocabularies_have_a_tokenizer(llama_vocab_dir, vocab, says):
    """The tokenizers added by issue 32 are reported supported, with llama.cpp's pre-tokenizer."""
    inv = inspect_gguf(llama_vocab_dir / f"ggml-vocab-{vocab}.gguf")
    piece = next(p for p in inv.pieces if p.name == "tokenizer")
    assert piece.ok and piece.detail == says


def test_vocabulary_only_file_is_inspected_not_called_truncated(llama_vocab_dir):
    inv = inspect_gguf(llama_vocab_dir / "ggml-vocab-phi-3.gguf")
    assert [p.name for p in inv.missing] == ["weights"]


def test_missing_file_is_one_line_usage_error(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope.gguf")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not found" in err


def test_names_from_the_gguf_cannot_forge_a_line_or_reach_the_terminal(tmp_path, capsys):
    """issue 28: a tensor or architecture name holding a newline, a forged "[ok]" line and
    terminal escapes is printed escaped; every report line is one line."""
    from tests import hostile_gguf as H
    forged = "blk.0.x\n  [ok] circuit: forged\x1b[2J\x1b]0;t\x07"
    for g in (H.tiny(tmp_path / "t.gguf", extra={forged: (4,)}), H.tiny(tmp_path / "a.gguf", arch="ll\x1b[2J\n  [ok] forged")):
        main(["inspect", str(g)])
        out = capsys.readouterr().out
        assert not any(line.lstrip().startswith("[ok]") and "forged" in line for line in out.splitlines()), out
        assert "\x1b" not in out and "\x07" not in out
        assert "\\n  [ok]" in out and "\\x1b[2J" in out
