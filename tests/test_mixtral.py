"""Mixtral: a llama-architecture GGUF with llama.expert_count, as llama.cpp loads it (src/models/llama.cpp:
n_expert > 0 -> ffn_gate_inp and stacked ffn_{gate,up,down}_exps, the MoE branch with softmax gating and
renormalized top-k). The circuit (llama_moe), the reference family and the synth layout are chosen by
that key, never guessed; metadata that contradicts the tensors is refused in one line (exit 3)."""
from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from bringup.convert import importer
from bringup.core.errors import IntegrityError
from bringup.fetch import synth
from bringup.ir import circuits
from bringup.ir import lower as ir_lower
from bringup.parity.oracles import families

BASE = ("synth://bringup-synth-v1/llama?vocab=tiny&n_layer=2&n_embd=32&n_head=2&n_head_kv=1&n_ff=64"
        "&n_ctx=64&seed=1&wtype=F32")
MIXTRAL = BASE + "&n_expert=4&n_expert_used=2"


def _make(tmp_path: Path, tiny_vocab: Path, uri: str, name: str, monkeypatch=None, extra=None) -> Path:
    """The GGUF ``uri`` names; ``extra(writer)`` adds metadata after the family's (a contradiction)."""
    if extra is not None:
        orig = synth._write_hparams

        def hparams(w, s, fam):
            orig(w, s, fam)
            extra(w)
        monkeypatch.setattr(synth, "_write_hparams", hparams)
    return synth.generate(synth.parse(uri), tiny_vocab, tmp_path / name)


def test_synth_llama_with_experts_is_mixtral_s_layout(tmp_path, tiny_vocab):
    """With n_expert / n_expert_used: llama.expert_count and expert_used_count, no
    expert_feed_forward_length (llama.cpp's llama reads none: experts are feed_forward_length wide),
    the F32 router and stacked experts instead of the dense FFN; without them, the dense layout."""
    r = gguf.GGUFReader(_make(tmp_path, tiny_vocab, MIXTRAL, "m.gguf"))
    keys = {k: r.fields[k].parts[-1].tolist() for k in r.fields if "expert" in k}
    assert keys == {"llama.expert_count": [4], "llama.expert_used_count": [2]}
    t = {x.name: (x.tensor_type.name, tuple(int(d) for d in x.shape)) for x in r.tensors}
    assert t["blk.1.ffn_gate_inp.weight"] == ("F32", (32, 4))
    assert t["blk.0.ffn_gate_exps.weight"][1] == t["blk.0.ffn_up_exps.weight"][1] == (32, 64, 4)
    assert t["blk.0.ffn_down_exps.weight"][1] == (64, 32, 4) and "blk.0.ffn_gate.weight" not in t
    dense = gguf.GGUFReader(_make(tmp_path, tiny_vocab, BASE, "d.gguf"))
    assert not [k for k in dense.fields if "expert" in k]
    assert "blk.0.ffn_gate.weight" in {x.name for x in dense.tensors}
    with pytest.raises(Exception, match=r"missing key\(s\) n_expert_used"):
        synth.parse(BASE + "&n_expert=4")


def test_convert_chooses_the_circuit_from_expert_count(tmp_path, tiny_vocab):
    """The same architecture, two circuits: llama_moe exactly when the GGUF has llama.expert_count.
    Its IR routes every layer's FFN through moe_ffn (softmax, renormalized, experts n_ff wide)."""
    for uri, circuit, moe_ops in ((MIXTRAL, "llama_moe", 2), (BASE, "llama", 0)):
        plan = importer.plan_conversion(_make(tmp_path, tiny_vocab, uri, f"{circuit}.gguf"))
        cfg = plan["config"]
        c = circuits.for_architecture("llama", hparams=cfg["hparams"])
        assert c.name == circuit
        ir = ir_lower.lower(c, cfg, plan["manifest"], "decode", 1, 8)
        moe = [op for op in ir["ops"] if op["op"] == "moe_ffn"]
        assert len(moe) == moe_ops
        assert not any(op["op"] == "swiglu" for op in ir["ops"]) if moe_ops else True
        for op in moe:
            assert op["dims"]["n_ff"] == 64 and op["dims"]["n_expert"] == 4 and op["dims"]["n_used"] == 2
            assert op["params"] == {"gating": 0, "norm": 1, "scale": 1.0}


def test_reference_family_follows_expert_count():
    """The float64 reference routes llama's FFN exactly when llama.expert_count is present."""
    got = {"llama.expert_count": 8}
    assert families.family_of("llama", lambda k, kind: got.get(k)).moe
    assert not families.family_of("llama", lambda k, kind: None).moe
    assert families.family_of("llama", lambda k, kind: got.get(k)).moe_norm   # Mixtral: norm_w true


def _rename(old: str, new: str):
    """A key renamed in place (same length), i.e. removed as far as a reader is concerned."""
    assert len(old) == len(new)

    def fix(path: Path) -> Path:
        data = bytearray(path.read_bytes())
        at = data.index(old.encode())
        data[at:at + len(old)] = new.encode()
        path.write_bytes(bytes(data))
        return path
    return fix


@pytest.mark.parametrize("case, says", [
    ("used-without-count", r"^llama.expert_used_count is 2 but llama.expert_count is absent \(a dense model has no "
                           r"experts to use\)$"),
    ("routed-without-metadata", r"^layer 0 has the routed ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps "
                                r"but llama.expert_count is absent \(without it the FFN is dense\)$"),
    ("count-on-dense", r"^llama.expert_count is 4 \(a routed FFN in every layer\), but layer 0 has the dense "
                       r"ffn_gate, ffn_up, ffn_down$"),
    ("expert-width-not-n_ff", r"^layer.0.w_gate_exps: shape \[32, 64, 4\] does not match the hyper-parameters "
                              r"\(expected \[32, 32, 4\]\)$"),
])
def test_inconsistent_expert_metadata_is_refused_in_one_line(tmp_path, tiny_vocab, monkeypatch, case, says):
    """Each contradiction between llama.* expert metadata and the tensors stops convert with one line,
    exit 3, before anything is written: no circuit is chosen from metadata the tensors deny."""
    if case == "used-without-count":
        path = _rename("llama.expert_count", "llama.expert_counX")(_make(tmp_path, tiny_vocab, MIXTRAL, "m.gguf"))
    elif case == "routed-without-metadata":
        path = _make(tmp_path, tiny_vocab, MIXTRAL, "m.gguf")
        for k in ("llama.expert_count", "llama.expert_used_count"):
            path = _rename(k, k[:-1] + "X")(path)
    elif case == "count-on-dense":
        path = _make(tmp_path, tiny_vocab, BASE, "d.gguf", monkeypatch,
                     lambda w: (w.add_expert_count(4), w.add_expert_used_count(2)))
    else:   # llama.cpp's llama sizes experts by feed_forward_length (64); this key says 32
        path = _make(tmp_path, tiny_vocab, MIXTRAL, "m.gguf", monkeypatch,
                     lambda w: w.add_expert_feed_forward_length(32))
    with pytest.raises(IntegrityError, match=says) as e:
        importer.plan_conversion(path)
    assert "\n" not in str(e.value) and e.value.exit_code == 3
