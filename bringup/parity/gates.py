"""Parity gates: exact gates against the float64 reference, statistical gates against llama.cpp
calibrated on the oracle's own floor (docs/parity.md, "Gates").

A profile gate (schema ``parity_profile``) names what it compares ``against`` (``reference`` or
``llama.cpp``), a ``metric`` of that comparison and ``cmp``, and then either a fixed
``threshold`` (exact gates) or an expression of the floor (statistical gates):
``floor_minus: m`` gives threshold = floor - m, ``floor_times: f`` gives threshold = floor x f.

The floor of a metric is the disagreement between two legitimate implementations of the same
model, measured in the same run on the same prompts, in two parts:

- ``llama_cpp_kv_cache``: llama.cpp's default (F16 KV cache) against llama.cpp with an F32 KV cache;
- ``reference_activations``: the float64 reference with llama.cpp's activation quantization
  (``ggml-q8``) against the reference with our program's activation numerics.

A higher-is-better metric (``cmp`` ``>=``, e.g. top-1 agreement) takes the lower of the two parts
(the worst agreement a legitimate pair reaches); a lower-is-better one (``<=``, e.g. mean KL)
takes the higher. Every evaluated gate records its measured value, threshold, floor (with both
parts) and margin (how far the measured value is on the passing side of the threshold, in the
metric's units; negative means it fails).

A program whose activation contract quantizes the input of a linear op (the ggml-q8 build) cannot
meet the exact gates end to end: a float32 difference that moves an activation across a rounding
boundary of its 8-bit quantization changes that activation by a whole step, and the model
amplifies it like any other small perturbation. For such a program :func:`select_gates` replaces
the profile's gates against the reference by its ``quantized_activations`` gates: X-ray's per-op
comparison (``against: reference_ops``, each op on the program's own inputs, where no flip
accumulates), exact; the end-to-end comparison with the reference, statistical on the same floor.
"""
from __future__ import annotations

from typing import Any

from bringup.core.errors import BringupError

#: The two parts of the floor, in the order they are reported.
FLOOR_PARTS = ("llama_cpp_kv_cache", "reference_activations")


#: Activation dtypes of a linear op that are not quantized (kernel map ``quant.activation``).
FLOAT_ACTIVATIONS = ("F32",)


def quantized_ops(contract: dict[str, str] | None) -> dict[str, int]:
    """Linear ops per quantized activation dtype in ``contract`` (op id -> ``quant.activation``,
    :func:`bringup.parity.xray.activation_contract`); {} for a float program or no contract."""
    out: dict[str, int] = {}
    for dt in (contract or {}).values():
        if dt not in FLOAT_ACTIVATIONS:
            out[dt] = out.get(dt, 0) + 1
    return dict(sorted(out.items()))


def select_gates(profile: dict, contract: dict[str, str] | None) -> tuple[list[dict], str]:
    """The gates a program with activation ``contract`` must pass, and a sentence saying which set.

    Float activations (or no contract: the reference was skipped): the profile's ``gates``.
    Quantized activations (:func:`quantized_ops` not empty): the profile's gates that are not
    against the reference (llama.cpp's; ``reference_distribution``'s, a property of the model), plus
    its ``quantized_activations.gates``. Raises BringupError when the
    profile has no such section (never a silent fall back to gates the program cannot meet)."""
    q = quantized_ops(contract)
    if not q:
        return list(profile["gates"]), "float activations: the profile's gates"
    section = profile.get("quantized_activations")
    if section is None:
        raise BringupError(f"the program quantizes the activations of {sum(q.values())} linear op(s) "
                           f"({', '.join(q)}) and parity profile {profile['model']!r} has no "
                           "'quantized_activations' gates for such a program")
    gates = list(section["gates"]) + [g for g in profile["gates"] if g["against"] != "reference"]
    used = ", ".join(f"{n} {dt}" for dt, n in q.items())
    return gates, (f"quantized activations ({used} linear ops): the profile's quantized_activations gates "
                   "against the reference, its llama.cpp and reference-distribution gates unchanged")


def floor_of(cmp: str, parts: dict[str, float]) -> float:
    """The floor of one metric from its two measured parts (``FLOOR_PARTS`` -> value): the minimum
    for a higher-is-better metric (``cmp`` ``>=``), the maximum for a lower-is-better one (``<=``).
    Raises BringupError if a part is missing."""
    missing = [p for p in FLOOR_PARTS if p not in parts]
    if missing:
        raise BringupError(f"floor: part(s) {', '.join(missing)} not measured")
    vals = [float(parts[p]) for p in FLOOR_PARTS]
    return min(vals) if cmp == ">=" else max(vals)


def threshold_of(gate: dict, floor: float | None) -> float:
    """A gate's threshold: its fixed ``threshold``, or ``floor - floor_minus`` / ``floor x
    floor_times`` for a statistical gate (``floor`` then required; BringupError without it)."""
    if "threshold" in gate:
        return float(gate["threshold"])
    if floor is None:
        raise BringupError(f"gate {gate['id']}: its threshold is an expression of the floor, which was not measured")
    if "floor_minus" in gate:
        return floor - float(gate["floor_minus"])
    return floor * float(gate["floor_times"])


def evaluate_gates(profile: dict, measured: dict[str, dict[str, float] | None],
                   floors: dict[str, dict[str, float]] | None = None) -> list[dict[str, Any]]:
    """Each gate of ``profile["gates"]`` (for a program with quantized activations, the profile
    with :func:`select_gates`' gates) with its measured value, threshold, floor and margin.

    ``measured``: comparison name (a gate's ``against``: ``reference``, ``reference_ops``, ``llama.cpp``) -> metric
    -> value, or None when that comparison was skipped; ``floors``: metric -> {part: value} for the
    metrics the statistical gates use (:data:`FLOOR_PARTS`), or None when not measured.

    A gate whose comparison was skipped, or whose floor was not measured, fails with ``measured``
    or ``floor`` null and a ``note`` saying why (never a silent pass). Raises BringupError if a gate
    names a metric its comparison does not produce (a profile error).
    """
    out = []
    for g in profile["gates"]:
        src = measured.get(g["against"])
        r: dict[str, Any] = {"id": g["id"], "kind": "exact" if "threshold" in g else "statistical",
                             "against": g["against"], "metric": g["metric"], "cmp": g["cmp"],
                             "description": g.get("description", ""), "reason": g["reason"]}
        if src is not None and g["metric"] not in src:
            raise BringupError(f"gate {g['id']}: metric {g['metric']!r} was not measured against {g['against']}")
        floor = None
        if "threshold" not in g:
            parts = (floors or {}).get(g["metric"])
            rule = (f"floor - {g['floor_minus']}" if "floor_minus" in g else f"floor x {g['floor_times']}")
            r["floor_rule"] = rule
            if parts is not None:
                floor = floor_of(g["cmp"], parts)
                r["floor"] = floor
                r["floor_parts"] = {p: float(parts[p]) for p in FLOOR_PARTS}
            else:
                r["floor"] = None
        if src is None or ("threshold" not in g and floor is None):
            what = g["against"] if src is None else "the floor"
            r.update(threshold=float(g["threshold"]) if "threshold" in g else None, measured=None,
                     margin=None, passed=False, note=f"not measured: {what} was skipped in this run")
            out.append(r)
            continue
        thr = threshold_of(g, floor)
        v = float(src[g["metric"]])
        margin = v - thr if g["cmp"] == ">=" else thr - v
        r.update(threshold=thr, measured=v, margin=margin, passed=bool(margin >= 0))
        out.append(r)
    return out
