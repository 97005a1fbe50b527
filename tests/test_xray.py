"""X-ray and fault injection.

Faults are injected into a test-only variant of the numpy reference program (wrong RoPE theta,
wrong RMSNorm epsilon, swapped strides in a projection at one layer). Each must make parity
against llama.cpp fail, make certification fail, and X-ray must name the injected layer and op,
both from in-memory hidden states and through the runtime's --dump-hidden file format.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from bringup.certify import report as certify
from bringup.core.errors import BringupError
from bringup.core.paths import ROOT
from bringup.parity import metrics
from bringup.parity import run as parity
from bringup.parity.reference_checks import ReferenceProgram
from bringup.parity import xray
from bringup.parity import xray_cli
from bringup.parity.oracles import LlamaCppOracle, NumpyReference
from bringup.parity.oracles.q8 import q8_activation
from bringup.parity.oracles.reference import Fault


# -- compare on synthetic checkpoints -----------------------------------------------------------

ORDER = ["header.embed", "layer.0.attn_norm", "layer.0.attn_q", "layer.1.attn_norm", "layer.1.attn_q",
         "footer.output_norm", "footer.lm_head"]


def _ckpts(seed=0, T=4, W=8):
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=(T, W)).astype(np.float32) for n in ORDER}


def test_first_divergent_checkpoint_is_named():
    ref = _ckpts()
    ours = {k: v * (1 + 1e-6) for k, v in ref.items()}
    ours["layer.1.attn_norm"] = ours["layer.1.attn_norm"] + 0.5
    for later in ORDER[4:]:
        ours[later] = ours[later] + 1.0  # the error propagates downstream
    res = xray.compare(ref, ours, ORDER, rel_tol=1e-3)
    f = res["first_divergent"]
    assert (f["name"], f["layer"], f["op"]) == ("layer.1.attn_norm", 1, "attn_norm")
    assert f["prev"] == "layer.0.attn_q" and f["prev_rel_err"] < 1e-5
    assert "layer 1, op attn_norm" in xray.describe(res)


def test_no_divergence_and_missing_checkpoints():
    ref = _ckpts()
    ours = {k: v.copy() for k, v in ref.items() if k != "layer.0.attn_q"}
    res = xray.compare(ref, ours, ORDER, rel_tol=1e-6)
    assert res["first_divergent"] is None and res["missing"] == ["layer.0.attn_q"]
    assert "no checkpoint exceeds" in xray.describe(res)


def test_non_finite_output_diverges():
    ref = _ckpts()
    ours = {k: v.copy() for k, v in ref.items()}
    ours["layer.0.attn_q"][1, 1] = np.nan
    f = xray.compare(ref, ours, ORDER, 1e-3)["first_divergent"]
    assert f["name"] == "layer.0.attn_q" and f["rel_err"] is None


def test_last_token_footer_and_width_mismatch():
    ref = _ckpts()
    ours = {k: v.copy() for k, v in ref.items()}
    ours["footer.lm_head"] = ref["footer.lm_head"][-1:].copy()   # logits for the last token only
    assert xray.compare(ref, ours, ORDER, 1e-6)["first_divergent"] is None
    ours["footer.lm_head"] = np.zeros((4, 9), dtype=np.float32)
    with pytest.raises(BringupError, match="footer.lm_head"):
        xray.compare(ref, ours, ORDER, 1e-6)


def test_nothing_shared_is_an_error():
    with pytest.raises(BringupError, match="shares no checkpoint"):
        xray.compare(_ckpts(), {}, ORDER, 1e-3)


def test_checkpoint_names_are_ir_op_ids():
    assert xray.split_name("layer.12.ffn_down") == (12, "ffn_down")
    assert xray.split_name("header.embed") == (None, "embed")
    for bad in ("embd", "layer.x.q", "../etc/passwd", "layer.1.Attn", None):
        with pytest.raises(BringupError):
            xray.split_name(bad)


# -- dump format -------------------------------------------------------------------------------

def test_dump_round_trip(tmp_path):
    t = _ckpts()
    xray.write_dump(tmp_path / "d", t)
    back = xray.load_dump(tmp_path / "d")
    assert set(back) == set(t) and all(np.array_equal(back[k], t[k]) for k in t)


@pytest.mark.parametrize("mutate,msg", [
    (lambda m: m["tensors"][0].update(file="../escape.f32"), "bad file name"),
    (lambda m: m["tensors"][0].update(shape=[4, 9]), "bytes, shape"),
    (lambda m: m["tensors"][0].update(name="weights"), "not a checkpoint name"),
    (lambda m: m.update(format="other"), "not a bringup-hidden-dump"),
    (lambda m: m["tensors"][0].update(shape=[0]), "bad shape"),
    (lambda m: m["tensors"][0].update(file="absent.f32"), "absent.f32: cannot read"),
])
def test_bad_dumps_are_refused(tmp_path, mutate, msg):
    xray.write_dump(tmp_path, _ckpts())
    man = json.loads((tmp_path / "manifest.json").read_text())
    mutate(man)
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(BringupError, match=msg):
        xray.load_dump(tmp_path)


def test_empty_or_absent_dump_is_refused(tmp_path):
    with pytest.raises(BringupError, match="manifest"):
        xray.load_dump(tmp_path)
    xray.write_dump(tmp_path, {})
    with pytest.raises(BringupError, match="no tensors"):
        xray.load_dump(tmp_path)


# -- the real model: reference vs llama.cpp, and fault injection --------------------------------------

@pytest.fixture(scope="module")
def reference(smollm2_gguf):
    return NumpyReference(smollm2_gguf)


@pytest.fixture(scope="module")
def oracle(smollm2_gguf):
    with LlamaCppOracle(smollm2_gguf, n_ctx=512, n_threads=1) as o:
        yield o


@pytest.fixture(scope="module")
def prompts(oracle):
    # One short prompt keeps the float64 reference cheap (each greedy step is a full forward).
    p = next(p for p in json.loads((ROOT / "config/prompts/default.json").read_text())["prompts"]
             if p["id"] == "prose-lighthouse")
    return [{"id": p["id"], "kind": p["kind"], "text": "",
             "tokens": oracle.tokenize(p["text"], add_special=oracle.add_bos())[:32]}]


def _small_profile():
    """smollm2's gates and thresholds, sized down to one 32-token prompt and 3 greedy tokens."""
    prof = json.loads((ROOT / "config/parity_profiles/smollm2.json").read_text())
    prof.update(min_prompts=1, min_positions=32, greedy={"max_tokens": 3, "min_prefix": 3})
    for g in prof["gates"]:
        if g["id"] == "greedy_prefix":
            g["threshold"] = 1
    return prof


def test_reference_agrees_with_llama_cpp(reference, oracle):
    toks = oracle.tokenize("The capital of France is Paris. The capital of Germany is", add_special=oracle.add_bos())
    s = metrics.summarize(metrics.position_metrics(oracle.logits_all(toks), reference.logits_all(toks), 5))
    assert s["top1_agreement"] == 1.0
    # llama.cpp quantizes activations to Q8_1 for the Q4_1 dot products and keeps an F16 KV
    # cache; the reference is float64 throughout: close, not equal.
    assert s["kl_mean"] < 1e-2 and s["cosine_min"] > 0.99
    assert oracle.detokenize(oracle.greedy(toks, 2)).strip().startswith("Berlin")


@pytest.fixture(scope="module")
def comparisons(reference, smollm2_gguf):
    """What parity compares "ours" (here the float-activation reference, or a faulted copy) with
    besides llama.cpp: the reference under the same float activations, and the floor's two pairs."""
    with LlamaCppOracle(smollm2_gguf, n_ctx=512, n_threads=1, kv_type="f32") as f32:
        yield {"reference": ReferenceProgram(reference, "f32"),
               "reference_llama_act": ReferenceProgram(reference, "ggml-q8"), "oracle_kv_f32": f32}


@pytest.mark.slow   # parity on the real smollm2
def test_unfaulted_reference_passes_the_gates(reference, oracle, prompts, comparisons):
    doc, _ = parity.run_parity(model="smollm2", oracle=oracle, ours=reference, prompts=prompts,
                               profile=_small_profile(), oracle_info={"name": "llama.cpp"},
                               program_info={}, inputs={}, **comparisons)
    assert doc["verdict"] == "pass", [(g["id"], g["measured"]) for g in doc["gates"]]


FAULTS = [
    (Fault("rope_theta", layer=5, value=10.0), 5, "rope_q"),
    (Fault("norm_eps", layer=3, value=100.0), 3, "attn_norm"),
    (Fault("swap_stride", layer=7), 7, "attn_out"),
]


@pytest.mark.slow   # parity on the real smollm2, once per fault
@pytest.mark.parametrize("fault,layer,op", FAULTS, ids=[f[0].kind for f in FAULTS])
def test_fault_fails_certification_and_xray_finds_it(reference, oracle, prompts, comparisons, tmp_path, fault, layer, op):
    broken = reference.with_faults([fault])
    doc, _ = parity.run_parity(model="smollm2", oracle=oracle, ours=broken, prompts=prompts,
                               profile=_small_profile(), oracle_info={"name": "llama.cpp"},
                               program_info={}, inputs={}, **comparisons)
    assert doc["verdict"] == "fail"
    # certification turns the failed parity gates into a failed verdict
    prov = {"model": {"sha256": "x", "sha256_matches_pin": True}, "build": {"artifacts_sha256": {}, "artifacts_match": True},
            "bump": {"payload_sha256": None}}
    evidence = {"ldd": {"bringup-run": {"ok": True}}, "run": {"ok": True}}
    doc["inputs"] = {"gguf": {"sha256": "x"}}
    doc["program"] = {"weights": {"payload_sha256": None}}
    gates = certify.certification_gates(doc, prov, evidence)
    failed = {g["id"] for g in gates if not g["passed"]}
    assert failed and failed <= {g["id"] for g in doc["gates"]}
    # X-ray names the layer and op, from the program's dump files. The broken "program" is the
    # float-activation reference, so X-ray runs with that contract: clean ops agree to rounding.
    toks = prompts[0]["tokens"][:12]
    _, hidden = broken.forward(toks, capture=True)
    xray.write_dump(tmp_path / "dump", hidden)
    res = xray.xray_against_reference(reference, toks, xray.load_dump(tmp_path / "dump"), rel_tol=1e-5,
                                      activations="f32")
    f = res["first_divergent"]
    assert (f["layer"], f["op"]) == (layer, op), res["summary"]
    assert f"layer {layer}, op {op}" in res["summary"] and "per-op" in res["summary"]
    assert f["rel_err"] > 0.1 and f["prev_rel_err"] < 1e-5
    # per-op: every op outside the faulted layer (before and after it) is exact to float32
    # storage (inside it, rope_theta also breaks rope_k)
    others = [c["rel_err"] for c in res["checkpoints"] if c["layer"] != layer]
    assert max(others) < 1e-5, max(others)
    # end to end, the error after the fault carries on to the logits
    assert res["end_to_end"]["first_beyond_rel_tol"]["name"] == f["name"]
    assert res["end_to_end"]["max_rel_err"] > 0.1


def test_teacher_forcing_reads_the_dump_and_reports_what_it_lacks(reference, prompts):
    toks = prompts[0]["tokens"][:6]
    _, own = reference.forward(toks, capture=True, activations="ggml-q8")
    ours = {k: v.copy() for k, v in own.items()}
    ours["layer.2.attn_q"] *= 2.0               # an op of ours that doubles its output ...
    ours["layer.2.rope_q"] *= 2.0               # ... which the (linear) RoPE after it carries on
    del ours["layer.4.attn_v"]                  # an op the program did not dump
    res = xray.xray_against_reference(reference, toks, ours, rel_tol=1e-4, activations="ggml-q8")
    f = res["first_divergent"]
    assert f["name"] == "layer.2.attn_q" and abs(f["rel_err"] - 1.0) < 1e-6
    row = {c["name"]: c for c in res["checkpoints"]}
    assert row["layer.2.rope_q"]["rel_err"] < 1e-6            # rope on our doubled q: correct per op
    assert row["layer.2.rope_q"]["e2e_rel_err"] > 0.5          # but far from the reference's own q
    assert row["layer.4.attn"]["inputs_from_reference"] == ["layer.4.attn_v"]
    assert res["missing"] == ["layer.4.attn_v"]
    assert all(c["inputs_from_reference"] == [] for c in res["checkpoints"] if c["name"] != "layer.4.attn")
    # a last-token-only footer op (older dumps) is compared on its row, and cannot feed the head
    ours["footer.output_norm"] = ours["footer.output_norm"][-1:]
    res = xray.xray_against_reference(reference, toks, ours, rel_tol=1e-4, activations="ggml-q8")
    row = {c["name"]: c for c in res["checkpoints"]}
    assert row["footer.output_norm"]["rel_err"] < 1e-6
    assert row["footer.lm_head"]["inputs_from_reference"] == ["footer.output_norm"]


def test_checkpoint_inputs_are_earlier_checkpoints(reference):
    deps = reference.checkpoint_inputs()
    order = reference.checkpoint_names
    assert set(deps) == set(order)
    at = {n: i for i, n in enumerate(order)}
    assert all(at[i] < at[n] for n, ins in deps.items() for i in ins)
    assert deps["layer.0.attn"] == ["layer.0.rope_q", "layer.0.rope_k", "layer.0.attn_v"]
    assert deps["layer.1.attn_norm"] == ["layer.0.ffn_residual"]


def test_feed_is_refused_when_it_cannot_be_teacher_forced(reference):
    toks = [1, 2, 3]
    with pytest.raises(BringupError, match="shape"):
        reference.forward(toks, feed={"layer.0.attn_norm": np.zeros((2, 576), np.float32)})
    with pytest.raises(BringupError, match="whole prefill"):
        reference.forward(toks, feed={}, cache={})
    with pytest.raises(BringupError, match="activations"):
        reference.forward(toks, activations="q4")


def test_q8_activation_matches_gguf_q8_0():
    """Our Q8_0 activation rounding against gguf-py's Q8_0 (quantize, then dequantize): the same
    values except where x * 127 / amax sits on a rounding tie (gguf rounds half away from zero, the
    contract half to even) or within one float32 step of it (gguf multiplies by 1 / d)."""
    from gguf.constants import GGMLQuantizationType as Q  # noqa: PLC0415
    from gguf.quants import dequantize, quantize  # noqa: PLC0415

    rng = np.random.default_rng(3)
    x = (rng.standard_t(3, size=(64, 512)) * rng.uniform(0.01, 10, size=(64, 1))).astype(np.float32)
    x[0, :32] = 0.0                                         # an all-zero block
    ours = q8_activation(x, "Q8_0")
    theirs = dequantize(quantize(x, Q.Q8_0), Q.Q8_0).astype(np.float64)
    d = np.abs(x).reshape(-1, 32).max(1).astype(np.float64) / 127
    diff = np.abs(ours - theirs).reshape(-1, 32)
    assert (diff <= d[:, None] * 1.01).all()
    assert (diff > 0).mean() < 1e-3
    assert (ours[0, :32] == 0).all()
    # Q8_K: 256-value blocks, float32 scale (not float16)
    k = q8_activation(x, "Q8_K").reshape(-1, 256)
    dk = (np.abs(x).reshape(-1, 256).max(1) / np.float32(127)).astype(np.float64)
    assert np.allclose(k / np.where(dk > 0, dk, 1)[:, None], np.rint(k / np.where(dk > 0, dk, 1)[:, None]), atol=1e-6)
    with pytest.raises(BringupError, match="multiple"):
        q8_activation(x[:, :48], "Q8_0")
    with pytest.raises(BringupError, match="unknown"):
        q8_activation(x, "Q4_0")


def test_xray_cli_argument_errors(tmp_path):
    with pytest.raises(BringupError, match="comma-separated"):
        xray_cli.cli_main(["--gguf", "g", "--tokens", "1,x", "--out", str(tmp_path / "x.json")])
    with pytest.raises(BringupError, match="needs --dump DIR"):
        xray_cli.cli_main(["--gguf", "g", "--tokens", "1,2", "--out", str(tmp_path / "x.json")])
    with pytest.raises(BringupError, match="exactly one of --rel-tol"):
        xray_cli.cli_main(["--gguf", "g", "--tokens", "1,2", "--dump", str(tmp_path), "--out", str(tmp_path / "x.json")])
    with pytest.raises(BringupError, match="exactly one of --rel-tol"):
        xray_cli.cli_main(["--gguf", "g", "--tokens", "1,2", "--dump", str(tmp_path), "--rel-tol", "1e-3",
                       "--profile", "p.json", "--out", str(tmp_path / "x.json")])
    with pytest.raises(BringupError, match="positive"):
        xray_cli.cli_main(["--gguf", "g", "--tokens", "1,2", "--dump", str(tmp_path), "--rel-tol", "0",
                       "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


def test_xray_cli_on_a_dump(reference, smollm2_gguf, tmp_path, capsys):
    toks = [1, 504, 3458, 24773]
    _, own = reference.forward(toks, capture=True, activations="ggml-q8")
    xray.write_dump(tmp_path / "dump", own)
    rc = xray_cli.cli_main(["--gguf", str(smollm2_gguf), "--tokens", ",".join(map(str, toks)), "--dump",
                        str(tmp_path / "dump"), "--rel-tol", "1e-6", "--activations", "ggml-q8",
                        "--out", str(tmp_path / "x.json"), "--strict"])
    doc = json.loads((tmp_path / "x.json").read_text())
    assert rc == 0 and doc["first_divergent"] is None and doc["activations"] == "ggml-q8"
    assert doc["method"] == "per-op" and "no checkpoint exceeds per-op" in capsys.readouterr().out
    with pytest.raises(BringupError, match="exactly one of --ir"):
        xray_cli.cli_main(["--gguf", str(smollm2_gguf), "--tokens", "1,2", "--dump", str(tmp_path / "dump"),
                       "--rel-tol", "1e-3", "--out", str(tmp_path / "y.json")])


def test_activation_contract_comes_from_the_providers(reference):
    def doc(*ops):   # the ops as the header alone (bringup.ir.block)
        return {"header": [dict(op, index=i) for i, op in enumerate(ops)], "block": {"n_layer": 0, "ops": [], "layers": []},
                "footer": []}

    ops = [{"id": "layer.0.attn_norm", "op": "rmsnorm", "provider": "rmsnorm.f32.scalar"},
           {"id": "layer.0.attn_q", "op": "linear", "provider": "linear.q4_1.q8act.scalar"},
           {"id": "footer.lm_head", "op": "linear", "provider": "linear.q8_0.scalar"}]
    ir_doc = doc(*ops)
    assert xray.activation_contract(ir_doc) == {"layer.0.attn_q": "Q8_1", "footer.lm_head": "F32"}
    with pytest.raises(BringupError, match="quant.activation"):
        xray.activation_contract(doc({"id": "layer.0.attn_q", "op": "linear", "provider": "nope"}))
    with pytest.raises(BringupError, match="no linear op"):
        xray.activation_contract(doc(*ops[:1]))
    # a per-op mapping must cover every linear op the reference runs
    with pytest.raises(BringupError, match="no activation dtype"):
        reference.forward([1, 2], activations={"layer.0.attn_q": "Q8_1"})
    # the mapping that names ggml-q8's formats op by op gives the ggml-q8 numbers
    names = [n for n, d in reference.checkpoint_inputs().items() if n.split(".")[-1] in
             ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down", "lm_head")]
    per_op = {n: ("Q8_0" if n == "footer.lm_head" else "Q8_1") for n in names}
    a = reference.forward([1, 2, 3], activations=per_op)[0]
    b = reference.forward([1, 2, 3], activations="ggml-q8")[0]
    assert np.array_equal(a, b)


def test_the_reference_comparison_separates_bugs_from_contracts(reference, prompts):
    """The exact gates' measure: the reference against itself is exact (KL 0 at every position);
    against a program with a real bug (RoPE theta) it is far from the 1e-5 gate."""
    tokens = prompts[0]["tokens"][:12]
    clean = reference.logits_all(tokens)
    same = metrics.summarize(metrics.position_metrics(clean, reference.with_faults([]).logits_all(tokens), 5))
    assert same["kl_mean"] == 0.0 and same["top1_agreement"] == 1.0
    bug = reference.with_faults([Fault("rope_theta", 5, 10.0)]).logits_all(tokens)
    assert metrics.summarize(metrics.position_metrics(clean, bug, 5))["kl_mean"] > 1e-3
