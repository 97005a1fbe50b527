"""Circuits: a model family's composition as data (``circuits/{name}.json``).

A circuit declares contracts (tokenizer, chat format, attention, block, logits), constants that
GGUF does not carry (each with its source), per-layer values, and the ordered op sequences of the
header, the repeated block and the footer, with weights bound by canonical role. Its JSON shape is
``config/schemas/circuit.schema.json``; this module adds the checks a schema cannot express (known
op names, ports and dims of each op, tensors defined before use) and the small expression language
the dims and params are written in. Semantics: docs/ir_format.md.
"""
from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from bringup.core import canonjson
from bringup.core import schemas
from bringup.core.errors import BringupError, UnsupportedError
from bringup.core.paths import CIRCUITS
from bringup.formats import chat

# The IR's op vocabulary: per op, its ports with shapes written in the op's own dims, and the dims
# and params an op must carry. The shapes are the C contract of csrc/include/bu_kernels.h
# (outermost first). "dtype": "weight" means any GGML type the providers accept.
OPS: dict[str, dict[str, Any]] = {
    "embed": {
        "inputs": {"tokens": (["n_tokens"], "I32")},
        "weights": {"table": (["n_vocab", "n_embd"], "weight")},
        "outputs": {"out": (["n_tokens", "n_embd"], "F32")},
        "dims": ["n_tokens", "n_embd", "n_vocab"], "params": ["scale"]},
    "rmsnorm": {
        "inputs": {"x": (["n_tokens", "n"], "F32")},
        "weights": {"w": (["n"], "F32")},
        "outputs": {"y": (["n_tokens", "n"], "F32")},
        "dims": ["n_tokens", "n"], "params": ["eps"]},
    "rmsnorm_heads": {
        "inputs": {"x": (["n_tokens", "n_heads", "head_dim"], "F32")},
        "weights": {"w": (["head_dim"], "F32")},
        "outputs": {"y": (["n_tokens", "n_heads", "head_dim"], "F32")},
        "dims": ["n_tokens", "n_heads", "head_dim"], "params": ["eps"]},
    "linear": {
        "inputs": {"x": (["n_tokens", "n_in"], "F32")},
        "weights": {"w": (["n_out", "n_in"], "weight")},
        "optional_weights": {"bias": (["n_out"], "F32")},
        "outputs": {"y": (["n_tokens", "n_out"], "F32")},
        "dims": ["n_tokens", "n_in", "n_out"], "params": []},
    "rope": {
        "inputs": {"x": (["n_tokens", "n_heads", "head_dim"], "F32")},
        "outputs": {"y": (["n_tokens", "n_heads", "head_dim"], "F32")},
        "dims": ["n_tokens", "n_heads", "head_dim", "rope_dim"], "params": ["theta", "freq_scale", "layout"]},
    "attention": {
        "inputs": {"q": (["n_tokens", "n_head", "head_dim"], "F32"),
                   "k": (["n_tokens", "n_head_kv", "head_dim"], "F32"),
                   "v": (["n_tokens", "n_head_kv", "head_dim_v"], "F32")},
        "state": {"k_cache": (["n_ctx", "n_head_kv", "head_dim"], "F32"),
                  "v_cache": (["n_ctx", "n_head_kv", "head_dim_v"], "F32")},
        "outputs": {"out": (["n_tokens", "n_head", "head_dim_v"], "F32")},
        "dims": ["n_tokens", "n_head", "n_head_kv", "head_dim", "head_dim_v", "n_ctx"],
        "params": ["scale", "window", "softcap"]},
    "swiglu": {
        "inputs": {"gate": (["n_tokens", "n"], "F32"), "up": (["n_tokens", "n"], "F32")},
        "outputs": {"y": (["n_tokens", "n"], "F32")}, "dims": ["n_tokens", "n"], "params": []},
    "geglu": {
        "inputs": {"gate": (["n_tokens", "n"], "F32"), "up": (["n_tokens", "n"], "F32")},
        "outputs": {"y": (["n_tokens", "n"], "F32")}, "dims": ["n_tokens", "n"], "params": []},
    "add": {
        "inputs": {"a": (["n_tokens", "n"], "F32"), "b": (["n_tokens", "n"], "F32")},
        "outputs": {"y": (["n_tokens", "n"], "F32")}, "dims": ["n_tokens", "n"], "params": []},
    "scale": {
        "inputs": {"x": (["n_tokens", "n"], "F32")},
        "outputs": {"y": (["n_tokens", "n"], "F32")}, "dims": ["n_tokens", "n"], "params": ["s"]},
    "softcap": {
        "inputs": {"x": (["n_tokens", "n"], "F32")},
        "outputs": {"y": (["n_tokens", "n"], "F32")}, "dims": ["n_tokens", "n"], "params": ["cap"]},
    "copy": {
        "inputs": {"x": (["n_tokens", "n"], "F32")},
        "outputs": {"y": (["n_tokens", "n"], "F32")}, "dims": ["n_tokens", "n"], "params": []},
    "argmax": {
        "inputs": {"x": (["n_tokens", "n"], "F32")},
        "outputs": {"idx": (["n_tokens"], "I32")}, "dims": ["n_tokens", "n"], "params": []},
    # mixture of experts (llama.cpp build_moe_ffn): router logits -> selected experts and weights,
    # then the selected experts' SwiGLU FFNs from the stacked tensors, weighted and summed
    "moe_route": {
        "inputs": {"logits": (["n_tokens", "n_expert"], "F32")},
        "outputs": {"ids": (["n_tokens", "n_used"], "I32"), "wts": (["n_tokens", "n_used"], "F32")},
        "dims": ["n_tokens", "n_expert", "n_used"], "params": ["gating", "norm", "scale"]},
    # moe_ffn routes its logits itself (moe_route's contract), so an op has one observable output
    "moe_ffn": {
        "inputs": {"x": (["n_tokens", "n_embd"], "F32"), "logits": (["n_tokens", "n_expert"], "F32")},
        "weights": {"w_gate": (["n_expert", "n_ff", "n_embd"], "weight"),
                    "w_up": (["n_expert", "n_ff", "n_embd"], "weight"),
                    "w_down": (["n_expert", "n_embd", "n_ff"], "weight")},
        "outputs": {"y": (["n_tokens", "n_embd"], "F32")},
        "dims": ["n_tokens", "n_embd", "n_ff", "n_expert", "n_used"], "params": ["gating", "norm", "scale"]},
}

SECTIONS = ("header", "block", "footer")
# Tensor references with a meaning fixed by the IR, not by the circuit.
SPECIAL_REFS = {"$tokens", "$in", "$in_logits"}


# ---------------------------------------------------------------- expressions

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_FUNCS = {"sqrt": math.sqrt}


class ExprError(BringupError):
    """An expression in a circuit is malformed or refers to something undefined or null."""


def names_in(expr: str) -> set[str]:
    """Names an expression refers to (functions excluded)."""
    tree = _parse(expr)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in _FUNCS}


_ALLOWED_NODES = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.USub, ast.Not,
                  ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.IfExp, ast.Call, *_BINOPS, *_CMPOPS)


@lru_cache(maxsize=4096)
def _parse(expr: str) -> ast.Expression:
    """Parse and check the whole tree up front, so an untaken branch cannot hide a forbidden construct."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {expr!r}: {e.msg}") from None
    for node in ast.walk(tree):
        bad = not isinstance(node, _ALLOWED_NODES)
        bad = bad or (isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in _FUNCS and len(node.args) == 1 and not node.keywords))
        bad = bad or (isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool, type(None))))
        if bad:
            raise ExprError(f"expression {expr!r}: construct {type(node).__name__} is not allowed "
                            "(allowed: literals, names, arithmetic, comparisons, if-else, sqrt)")
    return tree


def evaluate(expr: str, ns: dict[str, Any]) -> Any:
    """Evaluate a circuit expression over ``ns`` (names -> int/float/str/bool/None).

    The language: int/float/str/bool/None literals, names, ``+ - * / // % **``, unary minus,
    comparisons including ``is``/``is not None``, ``and``/``or``/``not``, ``a if c else b`` and
    ``sqrt(x)``. Anything else (attribute access, calls to other functions, subscripts) is
    rejected, so a circuit file can never run code. Arithmetic on a null (absent) value raises
    ExprError naming it.
    """
    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in ns:
                raise ExprError(f"expression {expr!r}: unknown name {node.id!r}")
            return ns[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            a, b = ev(node.left), ev(node.right)
            if a is None or b is None:
                raise ExprError(f"expression {expr!r}: arithmetic on a null value "
                                f"(names {sorted(n for n in names_in(expr) if ns.get(n) is None)} are null)")
            try:
                return _BINOPS[type(node.op)](a, b)
            except (ZeroDivisionError, OverflowError, TypeError) as e:
                raise ExprError(f"expression {expr!r}: {e}") from None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            v = ev(node.operand)
            if isinstance(node.op, ast.Not):
                return not v
            if v is None:
                raise ExprError(f"expression {expr!r}: negation of a null value")
            return -v
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                if left is None or right is None:
                    if type(op) not in (ast.Is, ast.IsNot, ast.Eq, ast.NotEq):
                        raise ExprError(f"expression {expr!r}: ordering comparison with a null value")
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                and len(node.args) == 1 and not node.keywords):
            v = ev(node.args[0])
            if v is None:
                raise ExprError(f"expression {expr!r}: {node.func.id}() of a null value")
            try:
                return _FUNCS[node.func.id](v)
            except ValueError as e:
                raise ExprError(f"expression {expr!r}: {e}") from None
        raise ExprError(f"expression {expr!r}: construct {type(node).__name__} is not allowed "
                        "(allowed: literals, names, arithmetic, comparisons, if-else, sqrt)")
    return ev(_parse(expr))


# ---------------------------------------------------------------- circuits

@dataclass(frozen=True)
class Circuit:
    """A loaded, checked circuit. ``data`` is the JSON document; ``sha256`` its canonical hash
    (which identifies ``data``, so equality and repr need only the hash)."""
    name: str
    path: Path
    sha256: str
    data: dict = field(repr=False, compare=False)


def check(data: dict, where: str = "circuit") -> None:
    """Schema-validate a circuit and check what the schema cannot: every op is in OPS, its ports,
    dims and params are exactly the catalogue's, ids are unique, every tensor it reads is defined
    earlier in its section (or is ``$in``/``$tokens``/``$in_logits``), outputs are written once.

    Raises BringupError (exit 2) naming the section, op id and problem; an unknown op name lists
    the known ones.
    """
    schemas.validate(data, "circuit", where)
    for section in SECTIONS:
        sec = data[section]
        defined: set[str] = set()
        seen_ids: set[str] = set()
        for i, op in enumerate(sec["ops"]):
            loc = f"{where}: {section} op #{i} ({op['id']!r})"
            if op["id"] in seen_ids:
                raise BringupError(f"{loc}: duplicate op id")
            seen_ids.add(op["id"])
            spec = OPS.get(op["op"])
            if spec is None:
                raise BringupError(f"{loc}: unknown op {op['op']!r}; known ops: {', '.join(sorted(OPS))}")
            _check_ports(loc, "inputs", set(op["inputs"]), set(spec["inputs"]), set())
            _check_ports(loc, "weights", set(op.get("weights", {})), set(spec.get("weights", {})),
                         set(spec.get("optional_weights", {})))
            _check_ports(loc, "state", set(op.get("state", {})), set(spec.get("state", {})), set())
            _check_ports(loc, "outputs", set(op["outputs"]), set(spec["outputs"]), set())
            _check_ports(loc, "dims", set(op["dims"]), set(spec["dims"]), set())
            _check_ports(loc, "params", set(op.get("params", {})), set(spec["params"]), set())
            for port, ref in op["inputs"].items():
                if ref in SPECIAL_REFS:
                    if (ref == "$in" and section == "header") or (ref == "$in_logits" and section != "footer"):
                        raise BringupError(f"{loc}: input {port} = {ref} is not available in the {section}")
                elif ref not in defined:
                    raise BringupError(f"{loc}: input {port} reads {ref!r}, which no earlier op of the "
                                       f"{section} writes")
            for expr in [*op["dims"].values(), *op.get("params", {}).values(), *([op["when"]] if "when" in op else [])]:
                _parse(expr)
            for port, out in op["outputs"].items():
                if out in defined:
                    raise BringupError(f"{loc}: output {port} writes {out!r}, already written earlier "
                                       "(tensors are written once; in-place reuse is the planner's decision)")
                defined.add(out)
        if sec["output"] != "$last" and sec["output"] not in defined:
            raise BringupError(f"{where}: {section} output {sec['output']!r} is written by no op")
    for key, v in {**data["constants"], **data["layer_values"]}.items():
        if "expr" in v:
            _parse(v["expr"])
    _check_chat(data["contracts"]["chat"], where)


def _check_chat(chat_contract: dict, where: str) -> None:
    """Each chat format's ``render`` object against ``bringup.formats.chat.CHAT_FORMAT_SCHEMA``; the flat
    fields, when present, must say the same thing; at most one format may serve a GGUF without
    a chat template; names are unique."""
    names = [f["name"] for f in chat_contract["formats"]]
    if len(names) != len(set(names)):
        raise BringupError(f"{where}: chat format names repeat: {names}")
    if sum(1 for f in chat_contract["formats"] if f.get("absent_template")) > 1:
        raise BringupError(f"{where}: more than one chat format is marked absent_template")
    for f in chat_contract["formats"]:
        loc = f"{where}: chat format {f['name']!r}"
        try:
            chat.validate_chat_format(f["render"])
        except BringupError as e:
            raise BringupError(f"{loc}: render: {e}") from None
        if "turn_prefix" not in f:
            continue
        r = f["render"]
        if set(f["roles"]) != set(r["roles"]):
            raise BringupError(f"{loc}: roles {sorted(f['roles'])} differ from render roles {sorted(r['roles'])}")
        for role, role_name in f["roles"].items():
            want = {"prefix": f["turn_prefix"].replace("{role}", role_name), "suffix": f["turn_suffix"]}
            if r["roles"][role] != want:
                raise BringupError(f"{loc}: role {role}: render turn {r['roles'][role]} differs from the flat "
                                   f"fields {want}")
        if f["generation_prefix"] != r["generation_prompt"]:
            raise BringupError(f"{loc}: generation_prefix differs from render.generation_prompt")


def choose_chat_format(circuit: "Circuit", chat_template: str | None) -> tuple[dict, str]:
    """The chat format for a model: the first of ``contracts.chat.formats`` whose ``detect``
    string occurs in the GGUF's ``chat_template`` (tokenizer.json); when the GGUF has no template,
    the format marked ``absent_template``. Returns ``(format, why)``. Raises UnsupportedError
    naming the formats tried when none applies. The template text is only searched, never run.
    """
    fmts = circuit.data["contracts"]["chat"]["formats"]
    if chat_template is None:
        for f in fmts:
            if f.get("absent_template"):
                return f, f"the GGUF has no chat_template; circuit {circuit.name} declares {f['name']!r} for that case"
        raise UnsupportedError(f"the GGUF has no chat_template and circuit {circuit.name} declares no format for "
                               "that case (absent_template)")
    for f in fmts:
        if f["detect"] in chat_template:
            return f, f"chat_template contains {f['detect']!r}"
    raise UnsupportedError(f"no chat format of circuit {circuit.name} matches the GGUF's chat_template; tried "
                           + ", ".join(f"{f['name']} (detect {f['detect']!r})" for f in fmts))


def _check_ports(loc: str, what: str, got: set[str], required: set[str], optional: set[str]) -> None:
    missing = required - got
    unknown = got - required - optional
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {sorted(missing)}")
        if unknown:
            parts.append(f"unknown {sorted(unknown)}")
        raise BringupError(f"{loc}: {what}: {'; '.join(parts)} (the op takes {sorted(required)}"
                           + (f", optionally {sorted(optional)}" if optional else "") + ")")


def load(path: str | Path) -> Circuit:
    """Load and check one circuit file. Raises BringupError on unreadable JSON or a failed check."""
    path = Path(path)
    data = canonjson.read(path, "circuit")
    check(data, str(path))
    return Circuit(data["name"], path, canonjson.sha256(data), data)


def all_circuits(directory: str | Path = CIRCUITS) -> dict[str, Circuit]:
    """Every circuit in ``directory`` by name. An architecture is claimed by at most one circuit
    without ``when`` (its base) and by variants with ``when`` naming distinct hparams (chosen from
    the GGUF by :func:`for_architecture`); anything else is an error."""
    out: dict[str, Circuit] = {}
    claimed: dict[tuple[str, str | None], str] = {}
    for path in sorted(Path(directory).glob("*.json")):
        c = load(path)
        if c.name != path.stem:
            raise BringupError(f"circuit {path} is named {c.name!r}; the file must be {c.name}.json")
        when = c.data.get("when", {}).get("hparam")
        for arch in c.data["architectures"]:
            if (arch, when) in claimed:
                how = f" with when.hparam {when!r}" if when else ""
                raise BringupError(f"architecture {arch!r} is claimed{how} by circuits {claimed[(arch, when)]!r} "
                                   f"and {c.name!r}")
            claimed[(arch, when)] = c.name
        out[c.name] = c
    return out


def for_architecture(arch: str, directory: str | Path = CIRCUITS, hparams: Mapping[str, Any] | None = None) -> Circuit:
    """The circuit of ``arch`` (the GGUF general.architecture) for a model with config hparams
    ``hparams`` (config.json's, read from the GGUF by convert): the variant whose ``when.hparam``
    the model has (not None), else the circuit of ``arch`` without ``when``. Llama with
    ``llama.expert_count`` (Mixtral) is circuit llama_moe, without it llama.

    Raises UnsupportedError (exit 4) listing the supported architectures when no circuit claims
    ``arch``; BringupError when ``arch`` has variants and ``hparams`` is None (the choice is the
    model's, never a default), when the model has the hparams of two variants, or when no circuit
    fits (variants only, none matching).
    """
    circuits = all_circuits(directory)
    mine = [c for c in circuits.values() if arch in c.data["architectures"]]
    if not mine:
        supported = sorted({a for c in circuits.values() for a in c.data["architectures"]})
        raise UnsupportedError(f"no circuit for architecture {arch!r}; supported: {', '.join(supported)}")
    variants = [c for c in mine if "when" in c.data]
    base = [c for c in mine if "when" not in c.data]
    if not variants:
        return base[0]
    if hparams is None:
        raise BringupError(f"architecture {arch!r} has circuit variants ({', '.join(c.name for c in mine)}); "
                           "the model's hparams choose one and none were given")
    hit = [c for c in variants if hparams.get(c.data["when"]["hparam"]) is not None]
    if len(hit) > 1:
        raise BringupError(f"the model has the hparams of circuit variants {', '.join(c.name for c in hit)} "
                           f"of architecture {arch!r}; at most one may apply")
    if hit:
        return hit[0]
    if not base:
        raise BringupError(f"no circuit of architecture {arch!r} fits: its variants need "
                           + ", ".join(repr(c.data["when"]["hparam"]) for c in variants))
    return base[0]

