"""Kernel maps (``kernel_maps/*.json``); the C kernel library they describe is compiled by
bringup.build.kernel_lib (``bringup kernels build``).

A kernel map is the machine-checked contract of one C provider of one operation: its ports with
dtypes and shapes, the source of every C argument (the call ABI of docs/architecture.md), scratch
size, aliasing rules, and the numerical contract. ``load_maps`` validates every map against
``config/schemas/kernel_map.schema.json`` and then cross-checks what a schema cannot: that every
call source names a declared port / dim / param / scratch, that the call list matches the C
declaration argument for argument, and that size expressions only use declared names. Any failure
is a ``BringupError`` naming the file. The per-format embed / linear maps are generated from
``bringup.ir.kernel_map_table`` (``bringup kernels generate [--check]``); the loader treats every
map alike.

``csrc/include/bu_formats.h`` is generated from the format table by
``bringup.formats.ggml.render_c_header`` (``bringup kernels gen-formats``).
"""
from __future__ import annotations

import ast
import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping

from bringup.core import c_defines, canonjson
from bringup.formats import ggml as formats
from bringup.core.errors import BringupError
from bringup.core.inputs import open_regular
from bringup.core.paths import KERNEL_MAPS
from bringup.core.schemas import validate

KERNELS_HEADER = c_defines.KERNELS_HEADER
# The kernel ABI this module's call conventions follow; must equal BU_KERNELS_ABI_VERSION in the header.
ABI_VERSION = 1

CALL_KINDS = ("activation", "weight", "output", "state", "dim", "param", "scratch", "scratch_cap", "runtime")
RUNTIME_NAMES = ("pos", "n_tokens")
# Call-only runtime values: the range of query heads a call of a head-split kernel computes
# (attention.f32.fast); a whole call passes [0, n_head), a thread its share (bringup.codegen.split).
RUNTIME_RANGE = ("head_begin", "head_end")
# C type each call kind must have (pointer kinds are checked for a '*').
_SCALAR_CTYPE = {"dim": {"int64_t"}, "runtime": {"int64_t"}, "scratch_cap": {"size_t"}}


# --------------------------------------------------------------------------- C declarations

_DECL_RE = re.compile(r"\bBU_KERNEL\s+(int\s+(\w+)\s*\(([^)]*)\))\s*;", re.S)


def normalize_decl(decl: str) -> str:
    """Canonical spelling of a C declaration: single spaces, ``*`` bound to the name, no ``;``."""
    d = " ".join(decl.replace("BU_KERNEL", " ").split()).rstrip(";").strip()
    d = re.sub(r"\s*\*\s*", " *", d)
    d = re.sub(r"\s*,\s*", ", ", d)
    d = re.sub(r"\s*\(\s*", "(", d)
    return re.sub(r"\s*\)", ")", d)


#: The format X-macros of the generated bu_formats.h and the rows they pass (the same table).
_FORMAT_ROWS = {"BU_DOT_FORMATS": lambda: formats.x_rows(formats.dot_formats()),
                "BU_Q8ACT_FORMATS": lambda: formats.x_rows(formats.q8act_formats())}


def _expand_format_declarations(text: str) -> str:
    """``text`` (comments removed) with each ``BU_DOT_FORMATS(BU_DECLARE_X)`` /
    ``BU_Q8ACT_FORMATS(BU_DECLARE_X)`` line replaced by the declarations the C preprocessor makes of
    it: ``BU_DECLARE_X``'s body once per row of the format table, parameters substituted, ``##``
    pasted, and the header's ``BU_*_ARGS`` object macros expanded. Only that much of the
    preprocessor: a per-format prototype is made from the table in C, and read the same way here."""
    text = re.sub(r"\\\n", " ", text)
    args = dict(re.findall(r"^[ \t]*#define\s+(BU_\w+_ARGS)\s+(.*)$", text, re.M))
    makers = {n: ([p.strip() for p in ps.split(",")], body) for n, ps, body in
              re.findall(r"^[ \t]*#define\s+(BU_DECLARE_\w+)\(([^)]*)\)\s+(.*)$", text, re.M)}
    text = re.sub(r"^[ \t]*#define\s+BU_(?:DECLARE_\w+\(|\w+_ARGS\s).*$", " ", text, flags=re.M)

    def expand(m: re.Match) -> str:
        if m.group(2) not in makers:
            raise BringupError(f"{KERNELS_HEADER.name}: {m.group(1)}({m.group(2)}) names no #define BU_DECLARE_")
        params, body = makers[m.group(2)]
        out = []
        for row in _FORMAT_ROWS[m.group(1)]():
            b = body
            for p, v in zip(params, row):
                b = re.sub(rf"(?<!\w){re.escape(p)}(?!\w)", v, b)
            out.append(re.sub(r"\s*##\s*", "", b))
        return " ".join(out)

    text = re.sub(r"\b(BU_DOT_FORMATS|BU_Q8ACT_FORMATS)\((\w+)\)", expand, text)
    for name, body in args.items():
        text = re.sub(rf"\b{name}\b", body, text)
    return text


def header_kernels(header: Path = KERNELS_HEADER) -> dict[str, str]:
    """Every ``BU_KERNEL`` declaration in ``header``, those made per format by the format X-macros
    expanded (:func:`_expand_format_declarations`): function name -> normalized declaration."""
    text = _expand_format_declarations(re.sub(r"/\*.*?\*/", " ", header.read_text(), flags=re.S))
    m = re.search(r"#define\s+BU_KERNELS_ABI_VERSION\s+(\d+)", text)
    if not m or int(m.group(1)) != ABI_VERSION:
        raise BringupError(f"{header}: BU_KERNELS_ABI_VERSION is {m.group(1) if m else 'missing'}; "
                           f"bringup.ir.kernel_maps follows ABI {ABI_VERSION}")
    out: dict[str, str] = {}
    for m in _DECL_RE.finditer(text):
        name = m.group(2)
        if name in out:
            raise BringupError(f"{header}: kernel {name} declared twice")
        out[name] = normalize_decl(m.group(1))
    return out


def parse_params(decl: str) -> list[tuple[str, str]]:
    """``[(ctype, name)]`` of a normalized declaration, e.g. ``("const float *", "x")``."""
    m = re.fullmatch(r"int (\w+)\((.*)\)", normalize_decl(decl))
    if not m:
        raise BringupError(f"not a kernel declaration (int name(args)): {decl!r}")
    out = []
    for arg in (a.strip() for a in m.group(2).split(",") if a.strip()):
        am = re.fullmatch(r"(.*?)(\w+)", arg)
        if not am or not am.group(1).strip():
            raise BringupError(f"cannot parse C parameter {arg!r} in {decl!r}")
        out.append((am.group(1).strip(), am.group(2)))
    return out


# --------------------------------------------------------------------------- size expressions

_ALLOWED_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)
_SIZE_FUNCS = {"min": min, "max": max}   # e.g. a workspace whose height is clamped (linear.*.fast "panel")


@lru_cache(maxsize=4096)
def _parse_size(expr: str) -> ast.Expression:
    # cached: resolving a model evaluates the same few expressions ~10^5 times
    return ast.parse(expr, mode="eval")


@lru_cache(maxsize=4096)
def _expr_names(expr: str) -> frozenset[str]:
    try:
        tree = _parse_size(expr)
    except SyntaxError as e:
        raise BringupError(f"bad size expression {expr!r}: {e.msg}") from None
    names, funcs = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _SIZE_FUNCS and len(node.args) >= 2
                    and not node.keywords):
                raise BringupError(f"size expression {expr!r}: only min(a, b, ...) and max(a, b, ...) calls allowed")
            funcs.add(id(node.func))
        elif isinstance(node, ast.Name):
            if id(node) not in funcs:
                names.add(node.id)
        elif isinstance(node, (ast.Expression, ast.BinOp, ast.Load, ast.Constant) + _ALLOWED_BINOPS):
            if isinstance(node, ast.Constant) and not (isinstance(node.value, int) and not isinstance(node.value, bool)):
                raise BringupError(f"size expression {expr!r}: only integer constants allowed")
        else:
            raise BringupError(f"size expression {expr!r}: {type(node).__name__} not allowed "
                               "(integers, names, + - * //, min(), max() and parentheses only)")
    return frozenset(names)


def eval_size(expr: str | int, values: Mapping[str, int]) -> int:
    """Value of a shape or size expression (``"n_in * 4"``) given dim values; integer arithmetic.

    Raises BringupError on a name without a value or a disallowed construct.
    """
    if isinstance(expr, int):
        return expr
    missing = _expr_names(expr) - set(values)
    if missing:
        raise BringupError(f"size expression {expr!r}: no value for {', '.join(sorted(missing))}")

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return int(node.value)
        if isinstance(node, ast.Name):
            return int(values[node.id])
        if isinstance(node, ast.Call):
            return _SIZE_FUNCS[node.func.id](ev(a) for a in node.args)
        assert isinstance(node, ast.BinOp)
        a, b = ev(node.left), ev(node.right)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if b == 0:
            raise BringupError(f"size expression {expr!r}: division by zero")
        return a // b

    return ev(_parse_size(expr))


# --------------------------------------------------------------------------- kernel maps

@dataclass(frozen=True)
class KernelMap:
    """One provider: a validated ``kernel_maps/<id>.json``. ``raw`` is the JSON object as loaded."""

    id: str
    op: str
    interface: str
    path: Path
    raw: dict = field(repr=False, compare=False)

    @property
    def function(self) -> str:
        return self.raw["impl"]["function"]

    @property
    def declaration(self) -> str:
        return self.raw["impl"]["declaration"]

    @property
    def call(self) -> list[str]:
        return list(self.raw["call"])

    @property
    def selection(self) -> dict:
        return self.raw["selection"]

    @property
    def weight_dtype(self) -> str | None:
        return self.raw["quant"]["weight"]

    def ports(self) -> dict[str, tuple[str, dict]]:
        """Every port: name -> (kind, spec) with kind in activation / weight / output / state."""
        out: dict[str, tuple[str, dict]] = {}
        for kind, sect in (("activation", "inputs"), ("weight", "weights"), ("output", "outputs"),
                           ("state", "state")):
            for name, spec in self.raw.get(sect, {}).items():
                out[name] = (kind, spec)
        return out

    def scratch_bytes(self, dims: Mapping[str, int]) -> dict[str, int]:
        """Bytes of each scratch buffer for concrete ``dims`` (dim and runtime values by name)."""
        return {name: eval_size(s["bytes"], dims) for name, s in self.raw.get("scratch", {}).items()}


def _check_map(m: dict, path: Path, header_decls: Mapping[str, str]) -> None:
    """Cross-checks the schema cannot express; raises BringupError naming ``path``."""
    where = f"kernel map {path.name}"

    def fail(msg: str) -> None:
        raise BringupError(f"{where}: {msg}")

    if path.stem != m["id"]:
        fail(f"file name must be the id ({m['id']}.json)")
    iface = m["interface"].partition("/")[0]
    if iface != m["op"] and not iface.startswith(m["op"] + "."):
        fail(f"interface {m['interface']!r} is not an interface of op {m['op']!r}")
    port_kinds = _check_ports(m, fail)
    if m["quant"]["weight"] is not None and m["quant"]["weight"] not in formats.table():
        fail(f"quant.weight {m['quant']['weight']!r} is not a known format")
    _check_call(m, port_kinds, header_decls, fail)


def _check_ports(m: dict, fail: Callable[[str], None]) -> dict[str, str]:
    """Ports (each declared once, shapes over declared names, dtypes of this ABI), scratch sizes
    and aliasing; returns port name -> kind (activation, weight, output, state)."""
    dims = set(m.get("dims", {}))
    params = m.get("params", {})
    if dims & set(RUNTIME_NAMES):
        fail(f"{sorted(dims & set(RUNTIME_NAMES))} are runtime values, not dims")
    known = dims | set(RUNTIME_NAMES) | {p for p, s in params.items() if s["ctype"] == "int64_t"}
    port_kinds = {}
    for kind, sect in (("activation", "inputs"), ("weight", "weights"), ("output", "outputs"), ("state", "state")):
        for name, spec in m.get(sect, {}).items():
            if name in port_kinds:
                fail(f"port {name!r} declared twice")
            port_kinds[name] = kind
            for d in spec["shape"]:
                if isinstance(d, str) and not _expr_names(d) <= known:
                    fail(f"port {name!r} shape uses undeclared {sorted(_expr_names(d) - known)}")
            if spec["dtype"] not in (("F32", "F16") if kind == "state" else ("F32", "I32")) and kind != "weight":
                fail(f"port {name!r}: activations and outputs are F32 or I32, state (KV cache) F32 or F16 in this ABI")
            if kind == "weight" and spec["dtype"] not in formats.table():
                fail(f"weight {name!r}: dtype {spec['dtype']!r} is not in config/ggml_formats.json")
    for name, s in m.get("scratch", {}).items():
        if not _expr_names(str(s["bytes"])) <= known:
            fail(f"scratch {name!r} size uses undeclared {sorted(_expr_names(str(s['bytes'])) - known)}")
    for a in m.get("aliasing", []):
        if port_kinds.get(a["output"]) != "output":
            fail(f"aliasing: {a['output']!r} is not an output port")
        if port_kinds.get(a["input"]) not in ("activation",):
            fail(f"aliasing: {a['input']!r} is not an activation input port")
    return port_kinds


def _check_call(m: dict, port_kinds: dict[str, str], header_decls: Mapping[str, str],
                fail: Callable[[str], None]) -> None:
    """The call list, against the ports and against the C declaration in the kernels header:
    one source per argument, of a declared name and a matching C type, every declaration passed."""
    dims, params, scratch = set(m.get("dims", {})), m.get("params", {}), m.get("scratch", {})
    fn = m["impl"]["function"]
    if fn not in header_decls:
        fail(f"impl.function {fn} is not a BU_KERNEL in {KERNELS_HEADER.name}")
    decl = normalize_decl(m["impl"]["declaration"])
    if decl != header_decls[fn]:
        fail(f"impl.declaration differs from {KERNELS_HEADER.name}:\n  map:    {decl}\n  header: {header_decls[fn]}")
    cparams = parse_params(decl)
    if len(cparams) != len(m["call"]):
        fail(f"call has {len(m['call'])} entries but {fn} takes {len(cparams)} arguments")
    used = set()
    for (ctype, cname), src in zip(cparams, m["call"]):
        kind, _, name = src.partition(":")
        if kind not in CALL_KINDS:
            fail(f"unknown call source kind in {src!r} (known: {', '.join(CALL_KINDS)})")
        ok = {
            "activation": port_kinds.get(name) == "activation",
            "weight": port_kinds.get(name) == "weight",
            "output": port_kinds.get(name) == "output",
            "state": port_kinds.get(name) == "state",
            "dim": name in dims,
            "param": name in params,
            "scratch": name in scratch,
            "scratch_cap": name in scratch,
            "runtime": name in RUNTIME_NAMES + RUNTIME_RANGE,
        }[kind]
        if not ok:
            fail(f"call source {src!r} (argument {cname}) names no declared {kind}")
        if kind in ("activation", "weight", "output", "state", "scratch"):
            if "*" not in ctype:
                fail(f"argument {cname} ({ctype}) gets pointer source {src!r}")
        elif kind == "param":
            if ctype != params[name]["ctype"]:
                fail(f"argument {cname} is {ctype} but param {name!r} is {params[name]['ctype']}")
        elif ctype not in _SCALAR_CTYPE[kind]:
            fail(f"argument {cname} is {ctype}; a {kind} source needs {'/'.join(_SCALAR_CTYPE[kind])}")
        used.add((kind, name))
    for kind, name in [(k, n) for n, k in port_kinds.items()] + [("dim", d) for d in dims] + \
            [("param", p) for p in params] + [("scratch", s) for s in scratch]:
        if (kind, name) not in used:
            fail(f"{kind} {name!r} is declared but never passed in call")


@lru_cache(maxsize=1)
def _load_all(maps_dir: str) -> dict[str, KernelMap]:
    d = Path(maps_dir)
    files = sorted(d.glob("*.json"))
    if not files:
        raise BringupError(f"no kernel maps in {d}")
    decls = header_kernels()
    out: dict[str, KernelMap] = {}
    functions: dict[str, str] = {}
    for p in files:
        try:
            m = _read_json(p)
        except json.JSONDecodeError as e:
            raise BringupError(f"kernel map {p.name}: invalid JSON: {e}") from None
        validate(m, "kernel_map", what=f"kernel map {p.name}")
        _check_map(m, p, decls)
        if m["impl"]["function"] in functions:
            raise BringupError(f"kernel maps {functions[m['impl']['function']]} and {p.name} "
                               f"both claim {m['impl']['function']}")
        functions[m["impl"]["function"]] = p.name
        out[m["id"]] = KernelMap(m["id"], m["op"], m["interface"], p, m)
    return out


def load_maps(maps_dir: Path | None = None) -> dict[str, KernelMap]:
    """Every kernel map by id, schema-validated and cross-checked against ``bu_kernels.h``.

    Raises BringupError on invalid JSON, a schema violation, an unknown call source or port, a C
    declaration that differs from the header, or two maps claiming one function.
    """
    # deep copy: a caller that edits a map's raw dict must not change what the next caller loads
    return copy.deepcopy(_load_all(str(Path(maps_dir or KERNEL_MAPS).resolve())))


def maps_for_op(op: str, maps_dir: Path | None = None) -> list[KernelMap]:
    """Providers of ``op``, best first: priority descending, then id (a total, stable order)."""
    ms = [m for m in load_maps(maps_dir).values() if m.op == op]
    return sorted(ms, key=lambda m: (-int(m.selection["priority"]), m.id))


def _read_json(path: Path):
    """The JSON in ``path``, a regular file (a FIFO named *.json in a maps folder is refused, not
    waited on: ``inputs.open_regular``). Raises json.JSONDecodeError for text that is not JSON."""
    with open_regular(path, "kernel map") as fh:
        return json.loads(fh.read().decode("utf-8"))


def map_content(path: Path) -> bytes:
    """What a map's hashes cover: its canonical JSON text (``canonjson.dumps``, ASCII) without the
    ``$comment`` annotation (the GENERATED marker of ``bringup.ir.kernel_map_table``), which
    selects nothing. For a canonical map file without annotation these are the file's bytes.
    Raises BringupError for a file that is not JSON."""
    try:
        m = _read_json(Path(path))
    except json.JSONDecodeError as e:
        raise BringupError(f"kernel map {Path(path).name}: invalid JSON: {e}") from None
    if isinstance(m, dict):
        m.pop("$comment", None)
    return canonjson.dumps(m).encode("ascii")


def map_sha256(path: Path) -> str:
    """SHA-256 (hex) of one map's :func:`map_content` (e.g. for a provider's provenance)."""
    return hashlib.sha256(map_content(path)).hexdigest()


def maps_sha256(maps_dir: Path | None = None) -> str:
    """SHA-256 (hex) over every map, for provenance and caching: per file, sorted by name, its name,
    NUL, its :func:`map_content`, NUL. The GENERATED marker changes no hash; any other change does."""
    h = hashlib.sha256()
    for p in sorted(Path(maps_dir or KERNEL_MAPS).glob("*.json")):
        h.update(p.name.encode() + b"\0" + map_content(p) + b"\0")
    return h.hexdigest()


# --------------------------------------------------------------------------- CLI
