"""X-ray: find the first layer and op where our program leaves the reference.

The reference is :class:`bringup.parity.oracles.reference.NumpyReference` (float64 over ``gguf.quants``-dequantized
weights). Our program writes the output of every prefill IR op with ``bringup-run ...
--dump-hidden DIR``, named by its IR op id (``header.embed``, ``layer.{L}.{circuit op id}``,
``footer.lm_head``); the reference names its checkpoints the same way
(``bringup.parity.oracles.reference.LAYER_CHECKPOINTS``).

Dump format (written by the runtime, read by :func:`load_dump`)::

    DIR/manifest.json  {"format": "bringup-hidden-dump", "version": 1, "n_tokens": T,
                        "tensors": [{"name": "layer.0.attn_norm", "file": "layer.0.attn_norm.f32",
                                     "shape": [T, 576]}, ...], "skipped": [...]}
    DIR/<file>         raw little-endian float32, row-major, the given shape (first dim = tokens,
                       all chunks concatenated; heads flattened: attn_q is [T, n_head * head_dim]).
                       A tensor with fewer rows than T is compared on its last rows.

Per-op (teacher-forced) comparison, :func:`xray_against_reference`: the reference runs each op on
OUR dumped inputs to that op (``NumpyReference.forward(feed=...)``) with the program's activation
numerics (``ggml-q8``), so each op's error is its own, not accumulated upstream. Divergence per
checkpoint: relative Frobenius error ``||ours - ref|| / ||ref||``; the first checkpoint in execution
order above ``rel_tol`` names the divergent layer and op. The end-to-end errors (the reference's
own pass) are kept beside them. Ops the reference has no checkpoint for (e.g. a copy) are
ignored; reference checkpoints the program did not dump are listed as ``missing``, and an op whose
inputs were not all dumped lists them in ``inputs_from_reference``. docs/parity.md has the table
of each op's inputs and the tolerance's derivation.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bringup.core import canonjson
from bringup.core.atomic import atomic_dir, write_bytes
from bringup.core.errors import BringupError
from bringup.core.native import NativeProgram
from bringup.ir import block
from bringup.ir.kernel_maps import load_maps
from bringup.ir.lower import kv_cache_dtype as ir_kv_cache_dtype

_NAME = re.compile(r"^(?:(header|footer)\.([a-z0-9_]+)|layer\.(\d+)\.([a-z0-9_]+))$")
_FILE = re.compile(r"^[A-Za-z0-9_.-]+$")


def split_name(name: str) -> tuple[int | None, str]:
    """IR op id -> (layer, circuit op id): ``layer.3.attn_norm`` -> (3, 'attn_norm'),
    ``header.embed`` -> (None, 'embed'). Raises BringupError for anything else."""
    m = _NAME.match(name) if isinstance(name, str) else None
    if not m:
        raise BringupError(f"not a checkpoint name (an IR op id): {name!r}")
    if m.group(1):
        return None, m.group(2)
    return int(m.group(3)), m.group(4)


def load_dump(d: str | Path) -> dict[str, np.ndarray]:
    """Read a ``--dump-hidden`` directory: name -> float32 [T, width].

    Raises BringupError for a missing/invalid manifest, a file name outside ``[A-Za-z0-9_.-]``
    (no path escapes), a listed file that cannot be read, or one whose size does not match its shape.
    """
    d = Path(d)
    man = canonjson.read(d / "manifest.json", "hidden-state dump manifest")
    if not isinstance(man, dict) or man.get("format") != "bringup-hidden-dump" or man.get("version") != 1:
        raise BringupError(f"{d}/manifest.json: not a bringup-hidden-dump version 1")
    out = {}
    for t in man.get("tensors", []):
        name, fname, shape = t.get("name"), t.get("file"), t.get("shape")
        split_name(name)
        if not isinstance(fname, str) or not _FILE.match(fname):
            raise BringupError(f"{d}/manifest.json: bad file name {fname!r}")
        if not (isinstance(shape, list) and shape and all(isinstance(s, int) and s > 0 for s in shape)):
            raise BringupError(f"{d}/manifest.json: bad shape for {name}: {shape!r}")
        try:
            raw = (d / fname).read_bytes()
        except OSError as e:
            raise BringupError(f"{d}/{fname}: cannot read ({e.strerror})") from None
        n = int(np.prod(shape))
        if len(raw) != 4 * n:
            raise BringupError(f"{d}/{fname}: {len(raw)} bytes, shape {shape} needs {4 * n}")
        out[name] = np.frombuffer(raw, dtype="<f4").reshape(shape[0], -1).copy()
    if not out:
        raise BringupError(f"{d}: the dump holds no tensors")
    return out


def write_dump(d: str | Path, tensors: dict[str, np.ndarray]) -> None:
    """Write tensors in the dump format (tests and the reference use it; the runtime writes its
    own) into folder ``d`` as one set (``atomic_dir``: an interrupted write leaves the previous
    dump whole). ``d`` may hold a previous dump (``*.f32``, ``manifest.json``), nothing else
    (BringupError, exit 2)."""
    d = Path(d)
    files = {f"{name}.f32": name for name in tensors}
    previous = {n for n in os.listdir(d) if n.endswith(".f32")} if d.is_dir() else set()
    with atomic_dir(d, {*files, *previous, "manifest.json"}, "hidden-state dump folder") as tmp:
        entries = []
        T = None
        for fname, name in files.items():
            split_name(name)
            a = tensors[name]
            a = np.ascontiguousarray(a, dtype="<f4").reshape(a.shape[0], -1)
            T = a.shape[0]
            write_bytes(tmp / fname, a.tobytes())
            entries.append({"name": name, "file": fname, "shape": list(a.shape)})
        canonjson.write(tmp / "manifest.json", {"format": "bringup-hidden-dump", "version": 1,
                                                "n_tokens": T, "tensors": entries})


def compare(ref: dict[str, np.ndarray], ours: dict[str, np.ndarray], order: Sequence[str],
            rel_tol: float) -> dict[str, Any]:
    """Checkpoint-by-checkpoint comparison in execution ``order``.

    Returns ``{"rel_tol", "checkpoints": [{name, layer, op, rel_err, growth}], "missing": [names
    the program did not dump], "first_divergent": {name, layer, op, rel_err, prev, prev_rel_err}
    | None}`` (``rel_err`` None = non-finite output). Raises BringupError if a shared checkpoint's
    width differs or nothing is shared.
    """
    rows, missing = [], []
    prev_err = None
    first = None
    for name in order:
        if name not in ref:
            continue
        if name not in ours:
            missing.append(name)
            continue
        r = ref[name].astype(np.float64).reshape(ref[name].shape[0], -1)
        o = ours[name].astype(np.float64).reshape(ours[name].shape[0], -1)
        if o.shape[1] != r.shape[1] or o.shape[0] > r.shape[0]:
            raise BringupError(f"x-ray: {name}: ours has shape {o.shape}, reference {r.shape}")
        r = r[r.shape[0] - o.shape[0]:]  # last-token-only footer ops
        if not np.isfinite(o).all():
            err = float("inf")
        else:
            den = np.linalg.norm(r)
            err = float(np.linalg.norm(o - r) / den) if den > 0 else float(np.linalg.norm(o))
        layer, op = split_name(name)
        growth = None
        if prev_err is not None and np.isfinite(err):
            growth = err / prev_err if prev_err > 0 else (float("inf") if err > 0 else 1.0)
        row = {"name": name, "layer": layer, "op": op, "rel_err": err if np.isfinite(err) else None,
               "growth": growth if (growth is None or np.isfinite(growth)) else None}
        rows.append(row)
        if first is None and not (err <= rel_tol):
            first = {"name": name, "layer": layer, "op": op, "rel_err": row["rel_err"],
                     "prev": rows[-2]["name"] if len(rows) > 1 else None,
                     "prev_rel_err": rows[-2]["rel_err"] if len(rows) > 1 else None}
        prev_err = err if np.isfinite(err) else prev_err
    if not rows:
        raise BringupError("x-ray: the program's dump shares no checkpoint with the reference")
    return {"rel_tol": rel_tol, "checkpoints": rows, "missing": missing, "first_divergent": first}


def describe(result: dict[str, Any]) -> str:
    """One line for humans: where the program leaves the reference."""
    f = result["first_divergent"]
    how = ""
    if result.get("method") == "per-op":
        acts = result.get("activations")
        if acts == "per-op":
            acts = "+".join(result.get("activation_dtypes", {}))
        how = f" per-op ({acts} activations)"
    if f is None:
        return f"x-ray: no checkpoint exceeds{how} relative error {result['rel_tol']:g}"
    where = f"layer {f['layer']}, op {f['op']}" if f["layer"] is not None else f"op {f['op']}"
    err = "non-finite" if f["rel_err"] is None else f"{f['rel_err']:.3g}"
    before = f" (after {f['prev']}: {f['prev_rel_err']:.3g})" if f["prev"] and f["prev_rel_err"] is not None else ""
    return f"x-ray: first divergence at {where} ({f['name']}):{how} relative error {err}{before}"


def activation_contract(ir_doc: dict, maps: dict | None = None) -> dict[str, str]:
    """The activation dtype each linear op of a program runs with: IR op id -> its provider's
    kernel-map ``quant.activation`` ("F32", "Q8_0", "Q8_1", "Q8_K"), for the ops of ``ir_doc`` (an
    IR document, e.g. ``ir/ir_prefill.json``) whose ``op`` is ``linear``. ``maps``: id -> kernel map
    (default ``bringup.ir.kernel_maps.load_maps()``). Raises BringupError for a provider without a map or
    without ``quant.activation``.
    """
    if maps is None:
        maps = load_maps()
    out = {}
    for op in block.expand(ir_doc):
        if op.get("op") != "linear":
            continue
        m = maps.get(op.get("provider"))
        act = ((m.raw if m is not None else {}).get("quant") or {}).get("activation")
        if act is None:
            raise BringupError(f"x-ray: {op.get('id')}: provider {op.get('provider')!r} declares no quant.activation")
        out[op["id"]] = act
    if not out:
        raise BringupError("x-ray: the IR has no linear op to take the activation contract from")
    return out


def kv_cache_dtype(ir_doc: dict) -> str:
    """The KV cache element type of a program: the one dtype of its IR's ``state`` tensors ("F32",
    or "F16" for ``bringup ir --kv-type f16``), which the reference must round K / V to
    (``NumpyReference.forward`` ``kv_dtype``). An IR without state (no attention) gives "F32".
    Raises BringupError when the state tensors differ in dtype."""
    return ir_kv_cache_dtype(ir_doc) or "F32"


def xray_against_reference(reference, tokens: Sequence[int], ours: dict[str, np.ndarray],
                           rel_tol: float, activations: str | dict[str, str] = "f32",
                           kv_dtype: str = "F32") -> dict[str, Any]:
    """Per-op (teacher-forced) and end-to-end comparison of ``ours`` with ``reference`` (a
    NumpyReference) on ``tokens``; the per-op comparison names the first divergent op.

    Per-op: the reference runs each op on OUR dumped inputs to that op
    (``reference.forward(feed=ours)``), so an op's error is that op's own, bounded by its numerics
    contract, and does not accumulate with depth. End-to-end: the reference's own forward pass;
    its errors grow with depth (where the program ends up overall) and are reported per checkpoint
    as ``e2e_rel_err``, never used to name the op.

    ``activations`` must be the program's contract for its linear ops: the IR's ``dims.numerics``
    ("f32" or "ggml-q8"), or better :func:`activation_contract` of its IR (per op, from the
    providers); a wrong one shows as per-op errors of 0.4-3 % at the projections. The default
    "f32" is the circuits' current ``contracts.numerics.linear_activation`` and is recorded in the
    result and its summary like any other value. ``kv_dtype``: the program's KV cache element type
    (:func:`kv_cache_dtype` of its IR), recorded as ``kv_cache``.

    Returns :func:`compare`'s dict for the per-op errors, plus ``method`` ("per-op"),
    ``activations`` (the reference's linear-op numerics: a contract name, or "per-op" with
    ``activation_dtypes`` {dtype: number of ops}),
    ``end_to_end`` ({"max_rel_err", "first_beyond_rel_tol"}), ``tokens``, ``summary``; each
    checkpoint row also has ``e2e_rel_err`` and ``inputs_from_reference`` (inputs of the op the
    dump lacks or holds for fewer than all tokens, read from the reference instead; [] when fully
    teacher-forced).
    """
    _, e2e_ref = reference.forward(tokens, capture=True, activations=activations, kv_dtype=kv_dtype)
    e2e = compare(e2e_ref, ours, reference.checkpoint_names, rel_tol)
    # only whole tensors can feed the next op (a last-token-only footer op cannot)
    feed = {n: a for n, a in ours.items() if a.shape[0] == len(tokens)}
    _, op_ref = reference.forward(tokens, capture=True, feed=feed, activations=activations, kv_dtype=kv_dtype)
    res = compare(op_ref, ours, reference.checkpoint_names, rel_tol)
    deps = reference.checkpoint_inputs()
    e2e_err = {r["name"]: r["rel_err"] for r in e2e["checkpoints"]}
    for row in res["checkpoints"]:
        row["e2e_rel_err"] = e2e_err.get(row["name"])
        row["inputs_from_reference"] = [n for n in deps.get(row["name"], []) if n not in feed]
    finite = [e for e in e2e_err.values() if e is not None]
    res["method"] = "per-op"
    res["kv_cache"] = kv_dtype
    if isinstance(activations, str):
        res["activations"] = activations
    else:
        res["activations"] = "per-op"
        res["activation_dtypes"] = {k: sum(1 for v in activations.values() if v == k)
                                    for k in sorted(set(activations.values()))}
    res["end_to_end"] = {"max_rel_err": max(finite) if len(finite) == len(e2e_err) else None,
                         "first_beyond_rel_tol": e2e["first_divergent"]}
    res["tokens"] = [int(t) for t in tokens]
    res["summary"] = describe(res)
    return res


def dump_from_cli(program: NativeProgram, tokens: Sequence[int], d: Path) -> dict[str, np.ndarray]:
    """Our program's hidden states on ``tokens`` (teacher-forced prefill, no generation): its
    ``--dump-hidden d`` output read by :func:`load_dump`, name -> float32 [T, width]. Raises
    BringupError when the CLI fails (e.g. ``d`` not empty) or the dump is invalid."""
    program.dump_hidden(tokens, d)
    return load_dump(d)
