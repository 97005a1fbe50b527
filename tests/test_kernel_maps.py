"""Kernel maps, the kernel header and the generated formats header, checked against each other and
against independent sources (gguf.GGML_QUANT_SIZES, the compiled library's exported symbols)."""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess

import gguf
import pytest

from bringup.core import canonjson
from bringup.formats import ggml as formats
from bringup.ir import kernel_map_table
from bringup.ir import kernel_maps as kernels
from bringup.ir.kernel_map_table import Q8ACT_FORMATS
from bringup.core.errors import BringupError
from bringup.core.hashing import sha256_file
from bringup.build import kernels_cli
from bringup.build import sources as c_sources
from bringup.core.paths import CONFIG, CSRC, KERNEL_MAPS, ROOT

HELPERS = {"bu_kernels_abi_version", "bu_row_bytes", "bu_dequantize_row", "bu_isa_name", "bu_isa_check",
           "bu_isa_report", "bu_isa_set_team"}
KERNEL_FORMATS = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                  "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0"}


def test_all_maps_load():
    maps = kernels.load_maps()
    assert len(maps) >= 38
    ops = {m.op for m in maps.values()}
    assert ops == {"embed", "rmsnorm", "rmsnorm_heads", "linear", "rope", "attention", "swiglu", "geglu",
                   "add", "scale", "argmax", "softcap", "copy", "moe_route", "moe_ffn"}
    # every supported weight format has a linear and an embed provider
    for op in ("linear", "embed"):
        assert {m.weight_dtype for m in kernels.maps_for_op(op)} == KERNEL_FORMATS
    assert {m.interface for m in kernels.maps_for_op("rope")} == {"rope.normal/1", "rope.neox/1"}


def test_block_multiples_match_formats():
    """A weight's row-length dim must be a multiple of its format's block (the kernels reject others)."""
    for m in kernels.load_maps().values():
        for port, spec in m.raw["weights"].items():
            if spec["layout"] != "ggml_blocks":
                continue
            row_dim = spec["shape"][-1]
            be = formats.by_name(spec["dtype"]).block_elems
            assert m.raw["dims"][row_dim].get("multiple_of", 1) == be, (m.id, port)
            assert m.weight_dtype == spec["dtype"], m.id


def test_maps_are_canonical_json():
    """Maps are written canonically so a map's hash depends only on its content."""
    for p in sorted(KERNEL_MAPS.glob("*.json")):
        assert p.read_text() == canonjson.dumps(json.loads(p.read_text())), p.name


def test_header_declarations_match_maps():
    """Every BU_KERNEL in bu_kernels.h has exactly one map, and each map's declaration is the header's."""
    decls = kernels.header_kernels()
    maps = kernels.load_maps()
    by_fn = {}
    for m in maps.values():
        assert m.function not in by_fn, f"{m.function} claimed by {by_fn.get(m.function)} and {m.id}"
        by_fn[m.function] = m.id
        assert kernels.normalize_decl(m.declaration) == decls[m.function]
    assert set(by_fn) == set(decls), set(decls) ^ set(by_fn)


def test_exported_symbols_are_kernels_or_helpers(build):
    """The compiled library (the session's, tests/helpers/kernels.py) exports exactly the declared
    kernels and helpers, nothing else."""
    rec = build
    nm = shutil.which("nm")
    assert nm, "binutils nm is needed to list the library's symbols"
    out = subprocess.run([nm, "-D", "--defined-only", str(rec.library)], capture_output=True, text=True, check=True).stdout
    syms = {line.split()[-1] for line in out.splitlines() if re.search(r" T ", line)}
    assert syms == set(kernels.header_kernels()) | HELPERS


def test_no_allocation_in_kernel_sources():
    """Kernels never allocate: no malloc/calloc/realloc/free/alloca/VLA-style helpers in csrc/kernels."""
    pat = re.compile(r"\b(malloc|calloc|realloc|free|alloca|aligned_alloc|posix_memalign|strdup)\s*\(")
    files = c_sources.kernel_sources() + sorted((CSRC / "kernels").glob("*.h"))
    assert files
    for p in files:
        code = re.sub(r"/\*.*?\*/", " ", p.read_text(), flags=re.S)
        assert not pat.search(code), f"{p.name}: {pat.search(code).group(0)}"


def test_formats_header_is_current():
    assert formats.C_HEADER.read_text() == formats.render_c_header(), "run `bringup kernels gen-formats`"
    assert kernels_cli.cli_main(["gen-formats", "--check"]) == 0


def test_formats_header_values_against_gguf():
    """The generated C macros carry the table, and the table agrees with gguf.GGML_QUANT_SIZES."""
    text = formats.C_HEADER.read_text()
    macros = dict(re.findall(r"#define (BU_\w+) (\d+)", text))
    for f in formats.table().values():
        qt = gguf.GGMLQuantizationType[f.name]
        assert (f.block_elems, f.block_bytes) == tuple(gguf.GGML_QUANT_SIZES[qt]), f.name
        assert int(qt) == f.ggml_type
        assert int(macros[f"BU_TYPE_{f.name}"]) == f.ggml_type
        assert int(macros[f"BU_{f.name}_BLOCK_ELEMS"]) == f.block_elems
        assert int(macros[f"BU_{f.name}_BLOCK_BYTES"]) == f.block_bytes
    raw = json.loads((CONFIG / "ggml_formats.json").read_text())
    assert int(macros["BU_FORMATS_COUNT"]) == len(raw["formats"])
    assert int(macros["BU_ALIGN"]) == formats.ALIGN == raw["alignment"]


def test_scratch_size_expressions():
    m = kernels.load_maps()["linear.q4_k.scalar"]
    assert m.scratch_bytes({"n_in": 640, "n_out": 1024, "n_tokens": 1}) == {"row": 2560}
    a = kernels.load_maps()["attention.f32.scalar"]
    assert a.scratch_bytes({"n_ctx": 4096}) == {"scores": 16384}
    assert kernels.eval_size("(a + 1) * 4 // 2 - b", {"a": 3, "b": 1}) == 7
    assert kernels.eval_size("max(16, min(64, 4096 // max(a, 1)))", {"a": 0}) == 64
    assert kernels.eval_size("max(16, min(64, 4096 // max(a, 1)))", {"a": 128}) == 32
    f = kernels.load_maps()["linear.q4_k.fast"]   # the panel: 64 rows at 640 inputs, 16 at 2048
    assert [f.scratch_bytes({"n_in": n, "n_out": 8, "n_tokens": 2})["panel"] for n in (640, 2048)] == [163840, 131072]
    for bad in ("__import__('os')", "a ** 2", "a.b", "f(a)", "1.5 * a", "min(a)", "max(a, b=1)", "abs(a, a)",
                "min(a, 1.5)"):
        with pytest.raises(BringupError):
            kernels.eval_size(bad, {"a": 1})
    with pytest.raises(BringupError, match="no value"):
        kernels.eval_size("n_in * 4", {})


def test_maps_for_op_order_is_total():
    ms = kernels.maps_for_op("linear")
    keys = [(-m.selection["priority"], m.id) for m in ms]
    assert keys == sorted(keys)
    assert kernels.maps_for_op("no_such_op") == []


def test_maps_sha256_stable_and_sensitive(tmp_path):
    d = tmp_path / "maps"
    shutil.copytree(KERNEL_MAPS, d)
    assert kernels.maps_sha256(d) == kernels.maps_sha256()
    p = d / "add.f32.scalar.json"
    p.write_text(p.read_text().replace("Residual add", "Residual  add"))
    assert kernels.maps_sha256(d) != kernels.maps_sha256()


def test_maps_sha256_ignores_the_generated_marker(tmp_path):
    """The ``$comment`` annotation selects nothing, so it changes no hash (the IR records the hash):
    a map with a different or no marker hashes like the generated one; a content change does not."""
    d = tmp_path / "maps"
    shutil.copytree(KERNEL_MAPS, d)
    p = d / "linear.q4_0.scalar.json"
    one = kernels.map_sha256(p)
    m = json.loads(p.read_text())
    m["$comment"] = "edited by hand"
    p.write_text(canonjson.dumps(m))
    assert kernels.maps_sha256(d) == kernels.maps_sha256() and kernels.map_sha256(p) == one
    del m["$comment"]
    p.write_text(canonjson.dumps(m))
    assert kernels.maps_sha256(d) == kernels.maps_sha256() and kernels.map_sha256(p) == one
    assert one == sha256_file(p)        # a canonical map without annotation: the file's own hash
    m["dims"]["n_in"]["multiple_of"] = 64
    p.write_text(canonjson.dumps(m))
    assert kernels.maps_sha256(d) != kernels.maps_sha256() and kernels.map_sha256(p) != one


# ----------------------------------------------------------------- generated maps

def test_generated_maps_are_current():
    stale = kernel_map_table.stale(KERNEL_MAPS)
    assert not stale, f"stale generated kernel maps {stale}: run `bringup kernels generate`"
    assert kernels_cli.cli_main(["generate", "--check"]) == 0


def test_generated_maps_say_so_and_hand_written_ones_do_not():
    generated = kernel_map_table.render()
    for p in sorted(KERNEL_MAPS.glob("*.json")):
        m = json.loads(p.read_text())
        assert (m.get("$comment") == kernel_map_table.GENERATED) == (p.name in generated), p.name
        assert kernel_map_table.is_generated(p.read_text()) == (p.name in generated), p.name
    # the table covers every per-format provider: embed and linear of each weight format
    assert {n.split(".")[0] for n in generated} == {"embed", "linear"}
    assert all(n.split(".")[1] in {f.lower() for f in KERNEL_FORMATS} for n in generated)


def test_stale_generated_maps_are_found_and_rewritten(tmp_path, monkeypatch, capsys):
    """A hand edit of a generated map, a missing one, and a generated map the table no longer
    produces are all stale; `generate --check` fails naming them and `generate` repairs exactly
    those, leaving hand-written maps alone."""
    d = tmp_path / "maps"
    shutil.copytree(KERNEL_MAPS, d)
    edited = d / "linear.q5_k.q8act.scalar.json"
    edited.write_text(edited.read_text().replace('"priority": 10', '"priority": 11'))
    (d / "embed.bf16.scalar.json").unlink()
    leftover = d / "linear.q4_0.avx2.json"
    leftover.write_text((d / "linear.q4_1.scalar.json").read_text())   # a name the table does not make
    hand = (d / "add.f32.scalar.json").read_text()
    want = ["embed.bf16.scalar.json", "linear.q4_0.avx2.json", "linear.q5_k.q8act.scalar.json"]
    assert kernel_map_table.stale(d) == want
    monkeypatch.setattr(kernels_cli, "KERNEL_MAPS", d)
    with pytest.raises(BringupError, match=r"3 generated kernel map\(s\) not current .*run `bringup kernels generate`"):
        kernels_cli.cli_main(["generate", "--check"])
    assert kernels_cli.cli_main(["generate"]) == 0
    assert f"3 of {len(kernel_map_table.render())} generated kernel maps rewritten" in capsys.readouterr().out
    assert kernel_map_table.stale(d) == [] and not leftover.exists()
    assert (d / "add.f32.scalar.json").read_text() == hand
    assert kernels.maps_sha256(d) == kernels.maps_sha256()


def test_q8act_maps_follow_the_format_table():
    """The ggml-q8 providers take exactly the format table's vec_dot_type as activation, and a
    provider exists for every weight format of Q8ACT_FORMATS; the formats whose vec_dot_type is a
    Q8 block format but that have none yet are exactly IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0."""
    maps = kernels.load_maps()
    q8 = {m.weight_dtype: m.raw["quant"]["activation"] for m in maps.values()
          if m.op == "linear" and m.raw["quant"]["activation"] != "F32"}
    assert q8 == {f: a for f, a in formats.vec_dot_types().items() if f in Q8ACT_FORMATS}
    assert {f for f, a in formats.vec_dot_types().items() if a.startswith("Q8_")} - set(Q8ACT_FORMATS) == \
        {"IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0"}


def _broken(tmp_path, map_id, mutate):
    d = tmp_path / "maps"
    shutil.copytree(KERNEL_MAPS, d)
    p = d / f"{map_id}.json"
    m = json.loads(p.read_text())
    mutate(m)
    p.write_text(json.dumps(m))
    return d


@pytest.mark.parametrize("mutate,message", [
    (lambda m: m["call"].__setitem__(0, "bogus:x"), "does not match schema"),          # unknown kind (schema)
    (lambda m: m["call"].__setitem__(0, "activation:nope"), "names no declared activation"),
    (lambda m: m["call"].__setitem__(5, "dim:n_out"), "names no declared dim|never passed|gets pointer"),
    (lambda m: m["call"].pop(), "entries but"),
    (lambda m: m["call"].__setitem__(1, "activation:x"), "names no declared activation|never passed"),
    (lambda m: m["weights"]["w"].__setitem__("shape", ["n_out", "n_nope"]), "undeclared"),
    (lambda m: m["impl"].__setitem__("declaration", m["impl"]["declaration"].replace("int64_t n_out", "int n_out")), "differs"),
    (lambda m: m["impl"].__setitem__("function", "bu_linear_q9_9_scalar"), "not a BU_KERNEL"),
    (lambda m: m.__setitem__("interface", "embed/1"), "not an interface of op"),
    (lambda m: m["scratch"]["row"].__setitem__("bytes", "n_in * n_bogus"), "undeclared"),
    (lambda m: m["weights"]["w"].__setitem__("dtype", "Q9_9"), "not in config/ggml_formats.json"),
    (lambda m: m.__setitem__("extra_field", 1), "does not match schema"),
    (lambda m: m["dims"].__setitem__("unused", {"description": "x", "min": 0}), "never passed"),
    (lambda m: m["aliasing"].append({"output": "y", "input": "w", "kind": "exact"}), "not an activation input"),
])
def test_bad_map_is_hard_error(tmp_path, mutate, message):
    d = _broken(tmp_path, "linear.q4_1.scalar", mutate)
    with pytest.raises(BringupError, match=message):
        kernels.load_maps(d)


def test_duplicate_function_and_wrong_file_name(tmp_path):
    d = tmp_path / "maps"
    shutil.copytree(KERNEL_MAPS, d)
    m = json.loads((d / "add.f32.scalar.json").read_text())
    m2 = copy.deepcopy(m)
    m2["id"] = "add.f32.copy_of"
    (d / "add.f32.copy_of.json").write_text(json.dumps(m2))
    with pytest.raises(BringupError, match="both claim"):
        kernels.load_maps(d)
    (d / "add.f32.copy_of.json").unlink()
    (d / "add.f32.scalar.json").rename(d / "add.json")
    with pytest.raises(BringupError, match="file name must be the id"):
        kernels.load_maps(d)
    (d / "add.json").write_text("{not json")
    with pytest.raises(BringupError, match="invalid JSON"):
        kernels.load_maps(d)


def test_map_tests_exist():
    """Every test a map names exists (file and function), so a map's `tests` is not a dead claim."""
    root = ROOT
    for m in kernels.load_maps().values():
        for ref in m.raw["tests"]["files"]:
            path, _, func = ref.partition("::")
            text = (root / path).read_text()
            assert not func or re.search(rf"^def {func}\(", text, re.M), f"{m.id}: {ref} not found"
        for src in m.raw["impl"]["sources"]:
            assert (root / src).is_file(), f"{m.id}: source {src} missing"


def test_header_abi_version_checked(tmp_path, monkeypatch):
    h = tmp_path / "bu_kernels.h"
    h.write_text(kernels.KERNELS_HEADER.read_text().replace("#define BU_KERNELS_ABI_VERSION 1", "#define BU_KERNELS_ABI_VERSION 2"))
    with pytest.raises(BringupError, match="ABI"):
        kernels.header_kernels(h)


def test_cli_list(capsys):
    assert kernels_cli.cli_main(["list", "--op", "rope"]) == 0
    out = capsys.readouterr().out
    assert "rope.neox.f32.scalar" in out and "rope.normal.f32.scalar" in out
