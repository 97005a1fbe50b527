"""Provider resolution on small fixture kernel maps: each filter, the equivalence rule, and the
compile errors for zero or several survivors (each listing every candidate and why)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from bringup.ir import kernel_maps as kernels
from bringup.ir import resolve
from bringup.core.errors import UnsupportedError


def kmap(id_, weight="Q4_1", *, interface="linear/1", op="linear", priority=10, equivalence=None,
         phases=("prefill", "decode"), isa=(), status="reference", multiple_of=32, aliasing=(),
         params=None, bias=True):
    """A linear-shaped fixture map (only the fields resolution reads need to be realistic)."""
    weights = {"w": {"dtype": weight, "shape": ["n_out", "n_in"], "layout": "ggml_blocks", "access": "read"}}
    if bias:
        weights["bias"] = {"dtype": "F32", "shape": ["n_out"], "layout": "row_major", "access": "read", "optional": True}
    raw = {
        "id": id_, "op": op, "interface": interface,
        "selection": {"status": status, "priority": priority, "phases": list(phases), "isa": list(isa),
                      "equivalence": equivalence or f"{op}.{weight.lower()}"},
        "quant": {"weight": weight, "activation": "F32", "output": "F32"},
        "inputs": {"x": {"dtype": "F32", "shape": ["n_tokens", "n_in"], "layout": "row_major", "access": "read"}},
        "weights": weights,
        "outputs": {"y": {"dtype": "F32", "shape": ["n_tokens", "n_out"], "layout": "row_major", "access": "write"}},
        "state": {},
        "aliasing": [dict(a) for a in aliasing],
        "scratch": {"row": {"bytes": "n_in * 4", "lifetime": "call", "description": "row"}},
        "dims": {"n_in": {"description": "", "min": 0, "multiple_of": multiple_of}, "n_out": {"description": "", "min": 0}},
        "params": params or {},
    }
    return kernels.KernelMap(id_, op, interface, Path(f"{id_}.json"), raw)


def linear_op(w_dtype="Q4_1", n_in=64, n_out=32, n_tokens=4, bias=False):
    tensors = {
        "x": {"kind": "activation", "dtype": "F32", "shape": [n_tokens, n_in]},
        "w": {"kind": "weight", "dtype": w_dtype, "shape": [n_out, n_in]},
        "y": {"kind": "activation", "dtype": "F32", "shape": [n_tokens, n_out]},
    }
    op = {"id": "layer.0.attn_q", "op": "linear", "inputs": {"x": "x"}, "weights": {"w": "w"},
          "outputs": {"y": "y"}, "state": {}, "dims": {"n_tokens": n_tokens, "n_in": n_in, "n_out": n_out},
          "params": {}, "variant": None}
    if bias:
        tensors["b"] = {"kind": "weight", "dtype": "F32", "shape": [n_out]}
        op["weights"]["bias"] = "b"
    return op, tensors


def test_single_survivor_by_weight_dtype_with_full_trace():
    op, t = linear_op("Q8_0")
    maps = [kmap("linear.q4_1.scalar", "Q4_1"), kmap("linear.q8_0.scalar", "Q8_0"), kmap("linear.f32.scalar", "F32")]
    sel = resolve.resolve_op(op, t, maps, "prefill")
    assert sel["chosen"] == "linear.q8_0.scalar"
    assert sorted(c["id"] for c in sel["candidates"]) == sorted(m.id for m in maps)
    rej = {c["id"]: c["reasons"] for c in sel["candidates"] if not c["accepted"]}
    assert rej["linear.q4_1.scalar"] == ["weights port 'w' takes Q4_1; w is Q8_0"]
    assert rej["linear.f32.scalar"] == ["weights port 'w' takes F32; w is Q8_0"]
    assert "only candidate" in sel["rule"]


def test_no_provider_lists_every_candidate_and_why():
    op, t = linear_op("Q6_K", n_in=64)
    maps = [kmap("linear.q4_1.scalar", "Q4_1"), kmap("linear.q6_k.scalar", "Q6_K", multiple_of=256)]
    with pytest.raises(UnsupportedError) as e:
        resolve.resolve_op(op, t, maps, "decode")
    msg = str(e.value)
    assert e.value.exit_code == 4
    assert "no provider for op layer.0.attn_q (linear, phase decode)" in msg
    assert "linear.q4_1.scalar: weights port 'w' takes Q4_1; w is Q6_K" in msg
    assert "linear.q6_k.scalar: dim n_in=64 is not a multiple of 256" in msg


def test_no_map_at_all_for_the_op():
    op, t = linear_op()
    with pytest.raises(UnsupportedError, match="no kernel map implements this op"):
        resolve.resolve_op(op, t, [], "decode")


def test_two_survivors_not_declared_equivalent_is_an_error():
    op, t = linear_op()
    maps = [kmap("a.q4_1", equivalence="group_a"), kmap("b.q4_1", equivalence="group_b", priority=20)]
    with pytest.raises(UnsupportedError, match=r"2 providers for .* different equivalence groups \['group_a', 'group_b'\]") as e:
        resolve.resolve_op(op, t, maps, "prefill")
    assert "a.q4_1: ACCEPTED" in str(e.value) and "b.q4_1: ACCEPTED" in str(e.value)


def test_equivalent_survivors_highest_priority_wins():
    op, t = linear_op()
    maps = [kmap("ref.q4_1", priority=10, equivalence="g"), kmap("fast.q4_1", priority=50, equivalence="g")]
    sel = resolve.resolve_op(op, t, maps, "prefill")
    assert sel["chosen"] == "fast.q4_1"
    assert "highest priority (50) of 2 survivors of equivalence group 'g'" == sel["rule"]


def test_equivalent_survivors_tied_priority_is_an_error():
    op, t = linear_op()
    maps = [kmap("x.q4_1", priority=10, equivalence="g"), kmap("y.q4_1", priority=10, equivalence="g")]
    with pytest.raises(UnsupportedError, match="tie at priority 10"):
        resolve.resolve_op(op, t, maps, "prefill")


def test_isa_filter():
    op, t = linear_op()
    maps = [kmap("ref.q4_1", priority=10, equivalence="g"), kmap("avx2.q4_1", priority=50, equivalence="g", isa=("avx2", "fma"))]
    sel = resolve.resolve_op(op, t, maps, "prefill", isa=())
    assert sel["chosen"] == "ref.q4_1"
    assert [c["reasons"] for c in sel["candidates"] if c["id"] == "avx2.q4_1"] == \
        [["needs ISA ['avx2', 'fma']; build target has none"]]
    assert resolve.resolve_op(op, t, maps, "prefill", isa=("avx2", "fma"))["chosen"] == "avx2.q4_1"


def test_phase_filter():
    op, t = linear_op()
    maps = [kmap("gemv.q4_1", phases=("decode",), equivalence="g", priority=50), kmap("ref.q4_1", equivalence="g")]
    assert resolve.resolve_op(op, t, maps, "prefill")["chosen"] == "ref.q4_1"
    assert resolve.resolve_op(op, t, maps, "decode")["chosen"] == "gemv.q4_1"


def test_status_filter():
    op, t = linear_op()
    maps = [kmap("exp.q4_1", status="experimental", priority=50, equivalence="g"),
            kmap("off.q4_1", status="disabled", priority=90, equivalence="g"), kmap("ref.q4_1", equivalence="g")]
    assert resolve.resolve_op(op, t, maps, "prefill")["chosen"] == "ref.q4_1"
    assert resolve.resolve_op(op, t, maps, "prefill", allow_experimental=True)["chosen"] == "exp.q4_1"


def test_variant_filter_rope_layout():
    tensors = {"x": {"kind": "activation", "dtype": "F32", "shape": [2, 4, 16]},
               "y": {"kind": "activation", "dtype": "F32", "shape": [2, 4, 16]}}
    op = {"id": "rope_q", "op": "rope", "inputs": {"x": "x"}, "weights": {}, "outputs": {"y": "y"}, "state": {},
          "dims": {"n_tokens": 2, "n_heads": 4, "head_dim": 16, "rope_dim": 16},
          "params": {"theta": 1e4, "freq_scale": 1.0}, "variant": "neox"}

    def rope_map(v):
        m = kmap(f"rope.{v}.f32", "F32", op="rope", interface=f"rope.{v}/1", equivalence=f"rope.{v}", bias=False)
        raw = copy.deepcopy(m.raw)
        raw["weights"] = {}
        raw["inputs"] = {"x": {"dtype": "F32", "shape": ["n_tokens", "n_heads", "head_dim"]}}
        raw["outputs"] = {"y": {"dtype": "F32", "shape": ["n_tokens", "n_heads", "head_dim"]}}
        raw["dims"] = {d: {"description": "", "min": 1} for d in ("n_heads", "head_dim", "rope_dim")}
        raw["params"] = {"theta": {"ctype": "float", "description": ""}, "freq_scale": {"ctype": "float", "description": ""}}
        raw["scratch"] = {}
        return kernels.KernelMap(m.id, "rope", f"rope.{v}/1", m.path, raw)

    sel = resolve.resolve_op(op, tensors, [rope_map("normal"), rope_map("neox")], "prefill")
    assert sel["chosen"] == "rope.neox.f32"
    assert any("variant 'normal'; the op needs 'neox'" in r for c in sel["candidates"] for r in c["reasons"])


def test_optional_bias_port():
    op, t = linear_op(bias=True)
    assert resolve.resolve_op(op, t, [kmap("with_bias.q4_1")], "prefill")["chosen"] == "with_bias.q4_1"
    with pytest.raises(UnsupportedError, match="binds weights port 'bias', which the provider does not have"):
        resolve.resolve_op(op, t, [kmap("no_bias.q4_1", bias=False)], "prefill")


def test_param_mismatch_rejected():
    op, t = linear_op()
    m = kmap("needs_alpha.q4_1", params={"alpha": {"ctype": "float", "description": ""}})
    with pytest.raises(UnsupportedError, match="takes param 'alpha', which the op does not carry"):
        resolve.resolve_op(op, t, [m], "prefill")
    op["params"] = {"beta": 1.0}
    with pytest.raises(UnsupportedError, match="op carries param 'beta', which the provider does not take"):
        resolve.resolve_op(op, t, [kmap("plain.q4_1")], "prefill")


def test_shape_mismatch_rejected():
    op, t = linear_op()
    t["w"]["shape"] = [16, 64]    # weight rows disagree with the op's n_out
    with pytest.raises(UnsupportedError, match=r"port 'w' has shape \[32, 64\] at the op's dims; w is \[16, 64\]"):
        resolve.resolve_op(op, t, [kmap("l.q4_1")], "prefill")


def test_resolve_all_sets_inplace_and_scratch():
    op, t = linear_op()
    op["index"] = 0
    irx = {"phase": "prefill", "ops": [op], "tensors": t}
    maps = {"l.q4_1": kmap("l.q4_1", aliasing=[{"output": "y", "input": "x", "kind": "exact"}])}
    resolve.resolve_all(irx, maps)
    assert op["provider"] == "l.q4_1"
    assert op["inplace"] == {"y": ["x"]}
    assert op["scratch"] == {"row": 64 * 4}


def test_every_op_of_the_real_maps_has_a_provider_for_common_formats():
    """With the project's kernel maps, each op the circuits use resolves for F32 activations."""
    maps = kernels.load_maps()
    ops = {m.op for m in maps.values()}
    for needed in ("embed", "rmsnorm", "rmsnorm_heads", "linear", "rope", "attention", "swiglu", "geglu", "add"):
        assert needed in ops
    for fmt in ("Q4_1", "Q8_0", "Q5_0", "Q4_K", "Q6_K", "F32"):
        op, t = linear_op(fmt, n_in=256)
        assert resolve.resolve_op(op, t, [m for m in maps.values() if m.op == "linear"], "decode")["chosen"] == \
            f"linear.{fmt.lower()}.fast"   # the dispatched provider (ISA level chosen at load)
