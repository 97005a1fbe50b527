"""Parity: our native program against the float64 reference and the llama.cpp oracle, on the same
GGUF and the same token ids.

Teacher-forced metrics (:mod:`bringup.parity.metrics`) compare the logits at every position of
every prompt of a prompt set (``config/prompts/*.json``); greedy generation compares
continuations token by token. Gates (:mod:`bringup.parity.gates`) come from a parity profile
(``config/parity_profiles/{model}.json``, else ``default.json``): exact gates against the
reference run with our program's activation numerics, and statistical gates against llama.cpp,
calibrated on the floor measured in the same run (llama.cpp F16 against F32 KV cache; the
reference under llama.cpp's activation quantization against the reference under ours).
Output: ``parity.json`` (schema ``parity``) and its per-position KL plot, one folder written as a set.
docs/parity.md has the whole procedure.
"""
from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from bringup.convert.importer import MOE_HPARAM_KEYS
from bringup.core import atomic, canonjson
from bringup.core.atomic import atomic_dir
from bringup.core.cli import main
from bringup.core.errors import BringupError
from bringup.core.inputs import open_regular
from bringup.core.native import NativeProgram
from bringup.core.progress import Progress
from bringup.formats.chat import render_chat_format, render_template
from bringup.ir.circuits import choose_chat_format, for_architecture
from bringup.parity.gates import FLOOR_PARTS, evaluate_gates
from bringup.parity.metrics import (comparison_overall, greedy_by_teacher_forcing, greedy_compare,
                                    pooled_summary, position_metrics, summarize)
from bringup.parity.oracles import NumpyReference
from bringup.parity.reference_checks import entropies, entropy_summary
from bringup.parity.xray import activation_contract, dump_from_cli, kv_cache_dtype, xray_against_reference


class Program(Protocol):
    """What parity needs from a program under test (ours) or an oracle."""

    def logits_all(self, tokens: Sequence[int]) -> np.ndarray: ...

    def greedy(self, tokens: Sequence[int], n: int) -> list[int]: ...


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------

def _chat_renderer(oracle, architecture: str):
    """How chat prompts become text: the GGUF's own chat template (jinja2 sandbox; its text holds
    any BOS), or, when the GGUF has none, the circuit's chat format for that case
    (``bringup.ir.circuits.choose_chat_format``; BOS added by the tokenizer if the GGUF asks).
    Returns (render(messages) -> str, add_special, description)."""
    tmpl = oracle.meta("tokenizer.chat_template")
    if tmpl is not None:
        sp = oracle.special_tokens()
        text = lambda t: oracle.token_text(t) if t >= 0 else ""  # noqa: E731
        bos, eos = text(sp["bos"]), text(sp["eos"])
        return ((lambda msgs: render_template(tmpl, msgs, True, bos, eos)), False,
                "GGUF tokenizer.chat_template (jinja2 sandbox)")
    # the circuit variant as convert chooses it: by the expert keys the GGUF has (config hparams)
    hparams = {k: oracle.meta(f"{architecture}.{key}") for k, key in MOE_HPARAM_KEYS.items()}
    fmt, why = choose_chat_format(for_architecture(architecture, hparams=hparams), None)
    return (lambda msgs: render_chat_format(fmt["render"], msgs, True)), oracle.add_bos(), \
        f"circuit chat format {fmt['name']!r}: {why}"


def tokenize_prompts(prompt_set: dict, oracle) -> tuple[list[dict], str | None]:
    """Token ids for every prompt, by llama.cpp's tokenizer (the ids both programs are fed), and
    how chat prompts were rendered (None if the set has none). Plain text gets BOS if the GGUF
    asks for it; chat text is rendered by :func:`_chat_renderer`."""
    renderer = None
    out = []
    for p in prompt_set["prompts"]:
        if "messages" in p:
            if renderer is None:
                renderer = _chat_renderer(oracle, oracle.meta("general.architecture") or "")
            text = renderer[0](p["messages"])
            toks = oracle.tokenize(text, add_special=renderer[1], parse_special=True)
        else:
            text = p["text"]
            toks = oracle.tokenize(text, add_special=oracle.add_bos(), parse_special=False)
        if len(toks) < 2:
            raise BringupError(f"prompt {p['id']}: {len(toks)} tokens; need at least 2")
        out.append({"id": p["id"], "kind": p["kind"], "text": text, "tokens": toks})
    return out, (renderer[2] if renderer else None)


def bump_identity(weights: Path) -> dict[str, str]:
    """The BUMP's own hashes from its fixed header (docs/bump_format.md: bytes 64-96 the payload
    SHA-256, 96-128 the metadata+table SHA-256), as hex. Raises BringupError for a file that does
    not start with a BUMP header."""
    with open_regular(weights, "weights") as fh:   # a FIFO would block the read
        head = fh.read(128)
    if len(head) < 128 or head[:4] != b"BUMP":
        raise BringupError(f"{weights}: not a BUMP file")
    return {"payload_sha256": head[64:96].hex(), "header_sha256": head[96:128].hex()}


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------

#: The files of one parity run (``--out-dir``): they appear together or not at all.
PARITY, PLOT = "parity.json", "parity_kl.png"
#: What each part of the floor compares (docs/parity.md, "Gates").
FLOOR_PAIRS = {
    "llama_cpp_kv_cache": "llama.cpp's default (F16 KV cache) against llama.cpp with an F32 KV cache",
    "reference_activations": "the float64 reference under llama.cpp's activation quantization (ggml-q8) "
                             "against the reference under our program's activation numerics",
}

#: Passed as ``reference_llama_act`` when our program's activation numerics are llama.cpp's
#: (``NumpyReference.activation_dtypes`` equal for both, op by op): the reference under ggml-q8 is
#: then the very computation of the reference under ours, so its logits are reused, not recomputed.
SAME_AS_REFERENCE = "same-as-reference"
#: Recorded in that case in ``floor.parts.reference_activations.identical``.
IDENTICAL_NUMERICS = ("our program's activation dtype equals llama.cpp's (ggml-q8) for every linear op, so the "
                      "reference under ggml-q8 is the same computation as the reference under ours: its logits "
                      "were reused, not recomputed (this part of the floor is 0 by construction)")

#: How the reference's greedy continuation is found (metrics.greedy_by_teacher_forcing).
REFERENCE_GREEDY_METHOD = ("teacher forcing along our continuation: the reference runs once over prompt + our tokens; "
                           "its greedy continuation equals ours while its argmax after each prefix is our next token, "
                           "and its token where they part is recorded")


def run_parity(*, model: str, oracle, ours: Program, prompts: list[dict], profile: dict,
               oracle_info: dict, program_info: dict, inputs: dict, reference=None,
               reference_llama_act=None, oracle_kv_f32=None, eog: Sequence[int] = ()) -> tuple[dict, dict]:
    """Teacher-forced and greedy parity over tokenized ``prompts`` ([{id, kind, text, tokens}]), and
    the gates of ``profile`` (its ``top_k``, ``greedy``, ``min_prompts``/``min_positions``, gates).

    Programs (:class:`Program`): ``ours``; ``oracle`` (llama.cpp, default settings); ``reference``
    (float64 reference under our activation numerics, logits only: its greedy continuation is found
    by teacher forcing, :func:`bringup.parity.metrics.greedy_by_teacher_forcing`, stopping after a
    token in ``eog``); the floor's second programs ``oracle_kv_f32`` (llama.cpp, F32 KV cache) and
    ``reference_llama_act`` (the reference under llama.cpp's activation quantization), logits only,
    or :data:`SAME_AS_REFERENCE` when that is provably the ``reference`` computation (its logits are reused).
    A program passed as None is recorded as skipped and the gates that need it fail as not measured.
    The ``*_info`` and ``inputs`` dicts go into the document as they are. The profile's gates are
    evaluated (for a quantized-activation program, those of :func:`bringup.parity.gates.select_gates`);
    those against X-ray (``reference_ops``) fail as not measured until :func:`apply_gates` runs
    again with it.

    Returns (parity document (schema ``parity``), :func:`position_metrics` arrays by prompt id for
    plotting, ours against llama.cpp). Raises BringupError if the prompt set is smaller than the
    profile demands, or from the metrics and gates.
    """
    k = profile["top_k"]
    gmax, gmin = profile["greedy"]["max_tokens"], profile["greedy"]["min_prefix"]
    n_pos = sum(len(p["tokens"]) for p in prompts)
    if len(prompts) < profile["min_prompts"] or n_pos < profile["min_positions"]:
        raise BringupError(f"prompt set too small for profile {model}: {len(prompts)} prompts / {n_pos} "
                           f"positions; the profile needs {profile['min_prompts']} / {profile['min_positions']}")
    per_prompt, arrays = [], {}
    pms: dict[str, list] = {"llama.cpp": [], "reference": [], "llama_cpp_kv_cache": [], "reference_activations": []}
    greedy: dict[str, list] = {"llama.cpp": [], "reference": []}
    entropy: list[np.ndarray] = []   # the reference's next-token entropy at each prompt position
    n_programs = 2 + (oracle_kv_f32 is not None) + (reference is not None) + (
        reference_llama_act not in (None, SAME_AS_REFERENCE))
    prog = Progress("parity", "prompt x program", len(prompts) * n_programs, unit="run")
    for p in prompts:
        toks, T = list(p["tokens"]), len(p["tokens"])
        where = f"prompt {p['id']} ({T} tokens)"
        b = ours.logits_all(toks)
        ours_g = ours.greedy(toks, gmax)
        prog.step(f"{where}: ours")
        a = oracle.logits_all(toks)
        oracle_g = oracle.greedy(toks, gmax)
        prog.step(f"{where}: llama.cpp")
        pm = arrays[p["id"]] = position_metrics(a, b, k)
        g = greedy_compare(oracle_g, ours_g, gmax)
        entry = {"id": p["id"], "kind": p["kind"], "n_tokens": T, "tokens": toks, "teacher_forced": summarize(pm),
                 "first_generated_top1_match": bool(pm["top1_match"][-1]),
                 "kl_per_position": [float(x) for x in pm["kl"]], "greedy": g}
        pms["llama.cpp"].append(pm)
        greedy["llama.cpp"].append(g)
        floor_here = {}
        if oracle_kv_f32 is not None:
            floor_here["llama_cpp_kv_cache"] = position_metrics(a, oracle_kv_f32.logits_all(toks), k)
            prog.step(f"{where}: llama.cpp F32 KV cache")
        if reference is not None:
            r = reference.logits_all(toks + list(ours_g))
            prog.step(f"{where}: float64 reference")
            pm_r = position_metrics(r[:T], b, k)
            entropy.append(entropies(r[:T]))
            vocab = r.shape[1]
            g_r = greedy_compare(greedy_by_teacher_forcing(r, T, ours_g, gmax, eog), ours_g, gmax)
            entry["reference"] = {"teacher_forced": summarize(pm_r),
                                  "first_generated_top1_match": bool(pm_r["top1_match"][-1]), "greedy": g_r}
            pms["reference"].append(pm_r)
            greedy["reference"].append(g_r)
            if reference_llama_act == SAME_AS_REFERENCE:
                floor_here["reference_activations"] = position_metrics(r[:T], r[:T], k)
            elif reference_llama_act is not None:
                floor_here["reference_activations"] = position_metrics(reference_llama_act.logits_all(toks), r[:T], k)
                prog.step(f"{where}: float64 reference under ggml-q8")
            del r
        for part, fpm in floor_here.items():
            pms[part].append(fpm)
        if floor_here:
            entry["floor"] = {part: summarize(fpm) for part, fpm in floor_here.items()}
        per_prompt.append(entry)
    prog.close()
    overall = comparison_overall(pms["llama.cpp"], greedy["llama.cpp"], gmin)
    ref_doc: dict[str, Any] = {"status": "skipped", "reason": "no reference in this run"}
    ref_overall = None
    if reference is not None:
        ref_overall = comparison_overall(pms["reference"], greedy["reference"], gmin)
        ref_doc = {"status": "ran", "greedy_method": REFERENCE_GREEDY_METHOD, "overall": ref_overall,
                   "distribution": entropy_summary(entropy, vocab)}
    floor_doc: dict[str, Any] = {"status": "skipped", "reason": "a floor part was not measured in this run",
                                 "parts": {}}
    parts = {part: pooled_summary(pms[part]) for part in FLOOR_PARTS if pms[part]}
    for part, summ in parts.items():
        floor_doc["parts"][part] = {"pair": FLOOR_PAIRS[part], "overall": summ}
    if parts.get("reference_activations") and reference_llama_act == SAME_AS_REFERENCE:
        floor_doc["parts"]["reference_activations"]["identical"] = IDENTICAL_NUMERICS
    if len(parts) == len(FLOOR_PARTS):
        floor_doc = {"status": "ran", "parts": floor_doc["parts"]}
    doc = {"schema_version": 1, "model": model, "inputs": inputs, "oracle": oracle_info,
           "program": program_info,
           "settings": {"top_k": k, "greedy_max_tokens": gmax, "greedy_min_prefix": gmin},
           "prompts": per_prompt, "overall": overall, "reference": ref_doc, "floor": floor_doc}
    apply_gates(doc, profile)
    return doc, arrays


def xray_measured(xray: dict | None) -> dict[str, float] | None:
    """The ``reference_ops`` comparison of an X-ray result (:func:`run_xray_for`) for the gates:
    ``ops_beyond_rel_tol`` = checkpoints whose per-op relative error exceeds its ``rel_tol`` or is
    not finite, plus reference checkpoints the program did not dump (unverified is not passed).
    None when X-ray did not run or compared no op (the gate then fails as not measured)."""
    if not xray or xray.get("status") != "ran" or not xray.get("checkpoints"):
        return None
    tol = xray["rel_tol"]
    beyond = sum(1 for r in xray["checkpoints"] if r["rel_err"] is None or r["rel_err"] > tol)
    return {"ops_beyond_rel_tol": float(beyond + len(xray.get("missing") or []))}


def apply_gates(doc: dict, profile: dict) -> None:
    """(Re)evaluate the profile's gates on what ``doc`` measured: its llama.cpp and
    reference comparisons, its floor parts and its X-ray (``doc["xray"]``, if any); set
    ``doc["gates"]``, the floor of each statistical gate and the verdict."""
    floors = None
    if doc["floor"]["status"] == "ran":
        parts = {part: doc["floor"]["parts"][part]["overall"] for part in FLOOR_PARTS}
        floors = {m: {part: parts[part][m] for part in FLOOR_PARTS} for m in parts[FLOOR_PARTS[0]]
                  if m != "n_positions"}
    measured = {"llama.cpp": doc["overall"], "reference": doc["reference"].get("overall"),
                "reference_distribution": doc["reference"].get("distribution"),
                "reference_ops": xray_measured(doc.get("xray"))}
    doc["gates"] = evaluate_gates(profile, measured, floors)
    if floors is not None:
        # the floor each statistical gate compared to, by metric (gates.floor_of)
        doc["floor"]["floor"] = {g["metric"]: g["floor"] for g in doc["gates"] if g["kind"] == "statistical"}
    doc["verdict"] = "pass" if all(g["passed"] for g in doc["gates"]) else "fail"


def write_outputs(out_dir: Path, doc: dict, arrays: dict[str, dict]) -> None:
    """Write ``parity.json`` and its plot into ``out_dir`` as one set (``atomic_dir``): a failed or
    interrupted write leaves the previous parity.json with its own plot. Raises BringupError (exit 2)
    when ``out_dir`` is not a folder or holds other files."""
    with atomic_dir(out_dir, (PARITY, PLOT), "parity output folder") as tmp:
        plot_kl(arrays, tmp / PLOT)
        canonjson.write(tmp / PARITY, doc)


def plot_kl(arrays: dict[str, dict], path: Path) -> None:
    """Per-position KL(oracle‖ours) in nats per prompt (``arrays``: prompt id -> its
    :func:`position_metrics`), log scale, prompts side by side, top-1 disagreements marked: a
    1000x400 PNG written atomically to ``path``, byte-identical for the same arrays."""
    # imported here, not at the top: the backend must be chosen before pyplot is first imported,
    # and choosing it is a process-wide side effect that importing parity should not have
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    x0 = 0
    for pid, pm in arrays.items():
        kl = np.maximum(pm["kl"], 1e-12)
        xs = np.arange(x0, x0 + kl.size)
        ax.plot(xs, kl, lw=0.8, label=pid)
        miss = ~pm["top1_match"]
        ax.scatter(xs[miss], kl[miss], marker="x", color="black", s=12, zorder=3)
        ax.axvline(x0, color="0.85", lw=0.5)
        x0 += kl.size
    ax.set_yscale("log")
    ax.set_xlabel("position (prompts concatenated)")
    ax.set_ylabel("KL(llama.cpp || ours), nats")
    ax.set_title("Teacher-forced KL per position; x = top-1 disagreement")
    ax.legend(fontsize=6, ncol=4, loc="upper right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})  # no version stamp: same data, same bytes
    plt.close(fig)
    atomic.write_bytes(path, buf.getvalue())


def run_xray_for(doc: dict, gguf: Path, program: NativeProgram, n_tokens: int, rel_tol: float,
                 ir_prefill: Path, reference: NumpyReference | None = None) -> dict:
    """X-ray of ``program`` (its ``--dump-hidden``) against the numpy reference of ``gguf``, on the
    prompt of ``doc`` with the worst mean KL (its first ``n_tokens`` positions), per-op relative
    error tolerance ``rel_tol``.

    ``ir_prefill``: the program's prefill IR; its linear activation contract
    (``bringup.parity.xray.activation_contract``) makes the per-op reference round activations as the program does.

    A CLI that cannot dump hidden states gives ``{"status": "unavailable", "error": ...}`` in the
    result (recorded, never hidden); other errors propagate.
    """
    worst = max(doc["prompts"], key=lambda p: p["teacher_forced"]["kl_mean"])
    tokens = worst["tokens"][:n_tokens]
    with tempfile.TemporaryDirectory(prefix="bringup-xray-") as d:
        try:
            ours = dump_from_cli(program, tokens, Path(d))
        except BringupError as e:
            return {"status": "unavailable", "prompt": worst["id"], "error": str(e)[:2000]}
    ir = canonjson.read(ir_prefill, "prefill IR")
    res = xray_against_reference(reference or NumpyReference(gguf), tokens, ours, rel_tol, activation_contract(ir),
                                 kv_cache_dtype(ir))
    return {"status": "ran", "prompt": worst["id"], **res}


def contract_summary(contract: dict[str, str]) -> dict[str, Any]:
    """A program's activation contract (linear op id -> dtype) as counts per dtype."""
    counts: dict[str, int] = {}
    for dt in contract.values():
        counts[dt] = counts.get(dt, 0) + 1
    return {"source": "the program's IR providers' quant.activation", "ops_per_dtype": dict(sorted(counts.items()))}



if __name__ == "__main__":  # pragma: no cover - the same as `bringup parity`
    sys.exit(main(["parity", *sys.argv[1:]]))
