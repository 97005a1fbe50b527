"""The arena planner: the independent checker, greedy-by-size best fit on random graphs (hypothesis)
and on handmade graphs with a known optimum, in-place aliasing rules, views, the one-arena decision,
and `bringup plan` on real IR."""
from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bringup.ir.block import expand
from bringup.core import canonjson
from bringup.ir import lower as ir
from bringup.plan import cli as plan_cli
from bringup.plan import planner
from bringup.core import schemas
from bringup.core.errors import BringupError
from bringup.plan.planner import ALIGN, Buffer
from tests.helpers.ir import TINY_HP, synth_inputs

U = ALIGN  # one alignment unit


def brute_force_optimum(buffers: list[Buffer]) -> int:
    """Exact minimum arena for a few buffers: try every order, each buffer at the lowest offset that
    is free of the already placed buffers it overlaps in time. (Sorting an optimal packing by
    offset and replaying it this way never places a buffer higher, so the minimum over all orders
    is the optimum.)"""
    best = None
    for order in itertools.permutations(buffers):
        placed: list[tuple[int, Buffer]] = []
        for b in order:
            live = [(o, p) for o, p in placed if p.first <= b.last and b.first <= p.last]
            cands = [0] + [o + p.asize for o, p in live]
            off = min(c for c in cands if all(c + b.asize <= o or o + p.asize <= c for o, p in live))
            placed.append((off, b))
        arena = max(o + b.asize for o, b in placed)
        best = arena if best is None else min(best, arena)
    return best


def plan(buffers):
    offs = planner.place_greedy_by_size(buffers)
    arena = max(offs[b.id] + b.asize for b in buffers)
    return offs, arena


# ------------------------------------------------------------------ checker

def test_checker_finds_each_kind_of_violation():
    a, b = Buffer("a", 100, 0, 2), Buffer("b", 64, 2, 3)
    assert planner.check_plan([a, b], {"a": 0, "b": 128}, 192) == []
    assert any("overlaps" in e for e in planner.check_plan([a, b], {"a": 0, "b": 64}, 192))
    assert any("not a non-negative multiple of 64" in e for e in planner.check_plan([a, b], {"a": 0, "b": 130}, 256))
    assert any("exceeds the arena" in e for e in planner.check_plan([a, b], {"a": 0, "b": 128}, 150))
    assert any("no offset" in e for e in planner.check_plan([a, b], {"a": 0}, 256))
    # disjoint lifetimes may share bytes
    c = Buffer("c", 100, 3, 4)
    assert planner.check_plan([a, c], {"a": 0, "c": 0}, 128) == []


# ------------------------------------------------------------------ handmade graphs

def test_handmade_chain_reaches_the_known_optimum():
    # a residual stream R live throughout, and a chain of temporaries each read by the next op:
    # at most two temporaries are live at once (t_i ends where t_{i+1} starts), so the optimum is
    # R + 2 slots of the largest temporary pair = 4U + 3U + 3U = 10U, which is also the lower bound.
    bufs = [Buffer("R", 4 * U, 0, 5)] + [Buffer(f"t{i}", 3 * U, i, i + 1) for i in range(5)]
    offs, arena = plan(bufs)
    assert planner.check_plan(bufs, offs, arena) == []
    assert planner.lower_bound(bufs) == 10 * U
    assert arena == 10 * U == brute_force_optimum(bufs)


def test_handmade_graph_where_greedy_is_above_the_optimum():
    # Worked by hand: live sets t0 {A,B}=6U, t1 {A,B,C}=8U, t2 {A,C,D}=7U, t3 {A,D,E}=8U, t4 {E}=3U,
    # so the lower bound is 8U; A@0, B@4U, C@6U, D@4U, E@5U packs into 8U: the optimum is 8U.
    # Greedy by size places A@0, E@4U, B@4U, C@6U, then D overlaps A, E and C and lands at 8U: 9U.
    bufs = [Buffer("A", 4 * U, 0, 3), Buffer("B", 2 * U, 0, 1), Buffer("C", 2 * U, 1, 2),
            Buffer("D", 1 * U, 2, 3), Buffer("E", 3 * U, 3, 4)]
    hand = {"A": 0, "B": 4 * U, "C": 6 * U, "D": 4 * U, "E": 5 * U}
    assert planner.check_plan(bufs, hand, 8 * U) == []
    assert planner.lower_bound(bufs) == 8 * U == brute_force_optimum(bufs)
    offs, arena = plan(bufs)
    assert planner.check_plan(bufs, offs, arena) == []
    assert offs == {"A": 0, "E": 4 * U, "B": 4 * U, "C": 6 * U, "D": 8 * U}
    assert arena == 9 * U


def test_alignment_rounds_sizes():
    bufs = [Buffer("a", 1, 0, 1), Buffer("b", 65, 1, 2), Buffer("c", 3, 1, 1)]
    offs, arena = plan(bufs)
    assert all(o % ALIGN == 0 for o in offs.values())
    assert planner.check_plan(bufs, offs, arena) == []
    assert arena == 4 * U   # a (1U) dies at op 1, where b (2U) and c (1U) are born: all three live there


# ------------------------------------------------------------------ random graphs

buffer_lists = st.lists(
    st.tuples(st.integers(1, 5 * U), st.integers(0, 30), st.integers(0, 8)), min_size=1, max_size=40,
).map(lambda xs: [Buffer(f"b{i}", size, first, first + span) for i, (size, first, span) in enumerate(xs)])


@settings(max_examples=300, deadline=None)
@given(buffer_lists)
def test_random_graphs_plan_is_valid_and_deterministic(bufs):
    offs, arena = plan(bufs)
    assert planner.check_plan(bufs, offs, arena) == []
    assert arena >= planner.lower_bound(bufs)
    shuffled = list(bufs)
    random.Random(len(bufs)).shuffle(shuffled)
    assert planner.place_greedy_by_size(shuffled) == offs   # input order does not matter
    # never worse than giving every buffer its own range
    assert arena <= sum(b.asize for b in bufs)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=6))
def test_random_small_graphs_against_the_exact_optimum(xs):
    bufs = [Buffer(f"b{i}", s * U, f, f + d) for i, (s, f, d) in enumerate(xs)]
    offs, arena = plan(bufs)
    opt = brute_force_optimum(bufs)
    assert planner.lower_bound(bufs) <= opt <= arena


@settings(max_examples=100, deadline=None)
@given(buffer_lists, st.data())
def test_checker_catches_an_injected_collision(bufs, data):
    offs, arena = plan(bufs)
    pairs = [(a, b) for a, b in itertools.combinations(bufs, 2) if a.first <= b.last and b.first <= a.last]
    if not pairs:
        return
    a, b = data.draw(st.sampled_from(pairs))
    bad = dict(offs, **{b.id: offs[a.id]})
    assert any("overlaps" in e for e in planner.check_plan(bufs, bad, arena + b.asize))


@st.composite
def random_ir(draw):
    """A random op graph in IR form: op i reads one or two earlier tensors, writes one new tensor,
    may declare in-place aliasing for its first input and may need scratch."""
    n_ops = draw(st.integers(1, 25))
    tensors = {"tokens": {"kind": "io", "dtype": "I32", "shape": [1], "bytes": 4, "producer": None, "consumers": [0]}}
    ops = []
    for i in range(n_ops):
        avail = [n for n, t in tensors.items() if t["kind"] == "activation"]
        if i == 0 or not avail:
            ins = {"x": "tokens"}
        else:
            k = draw(st.integers(1, min(2, len(avail))))
            picks = draw(st.lists(st.sampled_from(avail), min_size=k, max_size=k, unique=True))
            ins = {f"in{j}": n for j, n in enumerate(picks)}
        for n in ins.values():
            if i not in tensors[n]["consumers"]:
                tensors[n]["consumers"].append(i)
        size = draw(st.sampled_from([64, 100, 256, 640, 1000]))
        out = f"t{i}"
        tensors[out] = {"kind": "activation", "dtype": "F32", "shape": [1, size // 4], "bytes": size,
                        "producer": i, "consumers": []}
        inplace = {"y": [next(iter(ins))]} if draw(st.booleans()) else {}
        scratch = {"ws": draw(st.sampled_from([0, 10, 300]))}
        ops.append({"index": i, "id": f"op{i}", "op": "add", "inputs": ins, "outputs": {"y": out},
                    "inplace": inplace, "scratch": scratch, "state": {}})
    # the last tensor is read by a final consumer so nothing is dead at the end
    tensors["sink"] = {"kind": "io", "dtype": "F32", "shape": [1, 1], "bytes": 4, "producer": n_ops, "consumers": []}
    tensors[f"t{n_ops - 1}"]["consumers"].append(n_ops)
    ops.append({"index": n_ops, "id": "sink", "op": "copy", "inputs": {"x": f"t{n_ops - 1}"}, "outputs": {"y": "sink"},
                "inplace": {}, "scratch": {}, "state": {}})
    return {"phase": "prefill", "header": ops, "block": {"n_layer": 0, "ops": [], "layers": []}, "footer": [],
            "tensors": tensors, "io": {"tokens": "tokens", "logits": "sink"}}


@settings(max_examples=200, deadline=None)
@given(random_ir())
def test_random_ir_graphs(irx):
    bufs, where, aliases = planner.buffers_from_ir(irx)
    offs, arena = plan(bufs)
    assert planner.check_plan(bufs, offs, arena) == []
    by = {b.id: b for b in bufs}
    # liveness, checked against the graph directly: a tensor's buffer covers producer..last reader
    for name, t in irx["tensors"].items():
        if t["kind"] != "activation":
            assert name not in where
            continue
        b = by[where[name]]
        assert b.first <= t["producer"] and b.last >= max(t["consumers"] or [t["producer"]])
        assert b.size >= t["bytes"]
    # in place only where declared, the input dies at that op, and sizes match
    for a in aliases:
        op = expand(irx)[a["index"]]
        src = irx["tensors"][a["input"]]
        assert a["input"] in [op["inputs"][p] for p in op["inplace"]["y"]]
        assert max(src["consumers"]) == a["index"] and src["bytes"] == irx["tensors"][a["output"]]["bytes"]
    # two tensors in one buffer never live at the same time except across their aliasing op
    for b in bufs:
        spans = sorted((irx["tensors"][n]["producer"], max(irx["tensors"][n]["consumers"] or [irx["tensors"][n]["producer"]]))
                       for n in b.tensors if n in irx["tensors"])
        for (f0, l0), (f1, l1) in zip(spans, spans[1:]):
            assert l0 <= f1
    # scratch: one op, its bytes
    for op in expand(irx):
        for sname, nbytes in op["scratch"].items():
            sid = f"{op['id']}.scratch.{sname}"
            assert (sid in by) == (nbytes > 0)
            if nbytes:
                assert (by[sid].first, by[sid].last, by[sid].size) == (op["index"], op["index"], nbytes)


# ------------------------------------------------------------------ from IR: liveness, in place, views

def tiny_ir(inplace_ok=True, x_read_later=False):
    """embed -> x; rmsnorm x -> h (in place allowed); add x + h -> y (io logits when last)."""
    t = lambda kind, b, prod, cons: {"kind": kind, "dtype": "F32", "shape": [1, b // 4], "bytes": b,
                                     "producer": prod, "consumers": cons}
    tensors = {"tokens": t("io", 4, None, [0]), "x": t("activation", 256, 0, [1, 2] if x_read_later else [1]),
               "h": t("activation", 256, 1, [2]), "logits": t("io", 256, 2, [])}
    ops = [
        {"index": 0, "id": "embed", "op": "embed", "inputs": {"tokens": "tokens"}, "outputs": {"out": "x"},
         "inplace": {}, "scratch": {"none": 0}, "state": {}},
        {"index": 1, "id": "norm", "op": "rmsnorm", "inputs": {"x": "x"}, "outputs": {"y": "h"},
         "inplace": {"y": ["x"]} if inplace_ok else {}, "scratch": {"ws": 100}, "state": {}},
        {"index": 2, "id": "add", "op": "add", "inputs": {"a": "h", "b": "x" if x_read_later else "h"},
         "outputs": {"y": "logits"}, "inplace": {"y": ["a", "b"]}, "scratch": {}, "state": {}},
    ]
    return {"phase": "decode", "header": ops, "block": {"n_layer": 0, "ops": [], "layers": []}, "footer": [],
            "tensors": tensors, "io": {"tokens": "tokens", "logits": "logits"}}


def test_inplace_only_when_declared_and_input_dies():
    bufs, where, aliases = planner.buffers_from_ir(tiny_ir())
    assert where["h"] == where["x"] == "x" and aliases == [{"op": "norm", "index": 1, "output": "h", "input": "x"}]
    bufs, where, aliases = planner.buffers_from_ir(tiny_ir(inplace_ok=False))
    assert where["h"] == "h" and not aliases
    bufs, where, aliases = planner.buffers_from_ir(tiny_ir(x_read_later=True))
    assert where["h"] == "h" and not aliases             # x is still read by op 2
    by = {b.id: b for b in bufs}
    assert (by["x"].first, by["x"].last) == (0, 2) and (by["h"].first, by["h"].last) == (1, 2)
    assert (by["norm.scratch.ws"].first, by["norm.scratch.ws"].last, by["norm.scratch.ws"].size) == (1, 1, 100)
    assert "tokens" not in where and "logits" not in where   # io is the caller's


def test_view_extends_its_base():
    irx = tiny_ir()
    irx["tensors"]["v"] = {"kind": "view", "dtype": "F32", "shape": [1, 64], "bytes": 256, "producer": None,
                           "consumers": [2], "view": {"base": "x", "row": "last", "rows": 1, "row_bytes": 256}}
    irx["header"][1]["inplace"] = {}
    last = planner.tensor_last_use(irx)
    assert last["x"] == 2


# ------------------------------------------------------------------ whole plans

@pytest.fixture(scope="module")
def gemma_like_irs():
    cfg, man = synth_inputs("gemma3", dict(TINY_HP, sliding_window=8))
    return ir.compile_ir(cfg, man, chunk=16, n_ctx=64)


def test_plan_irs_one_arena_fits_both(gemma_like_irs):
    p = planner.plan_irs(gemma_like_irs)
    schemas.validate(p, "memory_plan")
    assert p["arena"]["decision"] == "one"
    assert p["arena"]["bytes"] == max(ph["arena_bytes"] for ph in p["phases"].values())
    assert p["arena"]["fits"] == {"prefill": True, "decode": True}
    for name, ph in p["phases"].items():
        bufs = [Buffer(b["id"], b["size"], b["first"], b["last"]) for b in ph["buffers"]]
        offs = {b["id"]: b["offset"] for b in ph["buffers"]}
        assert planner.check_plan(bufs, offs, p["arena"]["bytes"]) == []
        assert ph["lower_bound_bytes"] <= ph["arena_bytes"]
        assert ph["copy_ops"] == 0
        assert ph["kv_handoffs"] == 2 * 2             # K and V rows appended by attention, 2 layers
        # every arena tensor of the IR has an offset, and io / weights / state do not
        kinds = {n: t["kind"] for n, t in gemma_like_irs[name]["tensors"].items()}
        assert {n for n in ph["tensors"] if not n.startswith(tuple(o["id"] + ".scratch" for o in expand(gemma_like_irs[name])))} \
            == {n for n, k in kinds.items() if k == "activation"}
    # state: K and V per layer, n_ctx x n_head_kv x head_dim fp32
    assert p["state"]["bytes"] == 2 * 2 * 64 * 2 * 16 * 4


def test_plan_is_byte_identical(gemma_like_irs):
    assert canonjson.dumps(planner.plan_irs(gemma_like_irs)) == canonjson.dumps(planner.plan_irs(gemma_like_irs))


def test_plan_cli(tmp_path, gemma_like_irs, capsys):
    for p, irx in gemma_like_irs.items():
        canonjson.write(tmp_path / "ir" / f"ir_{p}.json", irx)
    assert plan_cli.arena_main(["--ir-dir", str(tmp_path / "ir"), "--out", str(tmp_path / "plan" / "memory_plan.json"),
                             "--report", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "[plan] prefill: arena " in out and "lower bound" in out and "[plan] decode: arena " in out
    doc = json.loads((tmp_path / "plan" / "memory_plan.json").read_text())
    schemas.validate(doc, "memory_plan")
    assert 'id="ir-data"' in (tmp_path / "r.html").read_text()


def test_plan_cli_missing_ir(tmp_path):
    with pytest.raises(BringupError, match="IR not found.*run `bringup ir` first"):
        plan_cli.arena_main(["--ir-dir", str(tmp_path), "--out", str(tmp_path / "p.json")])
    assert not (tmp_path / "p.json").exists()


# ------------------------------------------------------------------ IR report

def test_report_is_deterministic_and_escapes_model_strings(gemma_like_irs):
    from bringup.plan import ir_report
    p = planner.plan_irs(gemma_like_irs)
    evil = "<script>alert(1)</script></script><!--"
    a = ir_report.render(gemma_like_irs, p, model_name=evil)
    assert a == ir_report.render(gemma_like_irs, p, model_name=evil)
    # the name reaches the page escaped in HTML and \u003c-escaped inside the JSON data block
    assert "<script>alert" not in a and "&lt;script&gt;" in a and "\\u003cscript\\u003ealert" in a
    data = ir_report.report_data(gemma_like_irs, p, evil)
    assert json.loads(a.split('id="ir-data">', 1)[1].split("</script>", 1)[0]) == json.loads(json.dumps(data))
    # every phase's ops with provider and why, buffers with scratch marked, rejected lists interned
    for phase in ("prefill", "decode"):
        ops = data["phases"][phase]["ops"]
        assert len(ops) == len(expand(gemma_like_irs[phase]))
        assert all(op["provider"] in data["providers"] for op in ops)
        assert any(b["scratch"] and "layer.1.attn.scratch.scores" in b["tensors"] for b in data["phases"][phase]["buffers"])
    n_rejecting = sum(op["rej"] is not None for ph in data["phases"].values() for op in ph["ops"])
    assert 0 < len(data["rejsets"]) < n_rejecting  # each distinct rejection list stored once
    assert "copy ops" in a and "KV hand-offs" in a


def test_report_names_the_model_and_what_each_provider_runs_on_this_host(gemma_like_irs, tmp_path):
    from bringup.plan import ir_report
    p = planner.plan_irs(gemma_like_irs)
    avx512 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl"}
    html = ir_report.render(gemma_like_irs, p, model_name="tiny", host=avx512)
    arch = gemma_like_irs["prefill"]["architecture"]
    assert f"<title>IR report: tiny ({arch})</title>" in html and "portable scalar" not in html
    for host, fast in ((avx512, "avx512"), ({"avx2", "fma", "f16c"}, "avx2"), (set(), "scalar")):
        data = ir_report.report_data(gemma_like_irs, p, "gemma3", host=host)
        prov = data["providers"]
        linear = [c for pid, c in prov.items() if pid.startswith("linear.") and c["levels"]]
        other = [c for pid, c in prov.items() if not pid.startswith("linear.") and c["levels"]]
        assert linear and other and data["host"]["levels"][-1] == fast
        want = "avx2 or avx512, measured per class of call (same bits)" if fast == "avx512" else fast
        assert {c["here"] for c in linear} == {want} and {c["here"] for c in other} == {fast}
        assert all(c["here"] == "its one C version (no ISA levels)" for c in prov.values() if not c["levels"])
    unknown = ir_report.report_data(gemma_like_irs, p, "gemma3", host=None)
    assert unknown["host"] == {"flags_read": False, "levels": []} and unknown["dispatch"] is None
    # a built program's own account is only an addition to a report
    with pytest.raises(BringupError, match="--build only adds to the report"):
        plan_cli.arena_main(["--ir-dir", str(tmp_path), "--out", str(tmp_path / "p.json"), "--build", str(tmp_path)])


def test_plan_rejects_irs_from_different_compiles(gemma_like_irs):
    other = dict(gemma_like_irs["decode"], inputs_sha256=dict(gemma_like_irs["decode"]["inputs_sha256"], config="1" * 64))
    with pytest.raises(BringupError, match="differ in inputs_sha256"):
        planner.plan_irs({"prefill": gemma_like_irs["prefill"], "decode": other})
