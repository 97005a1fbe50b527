"""``bringup parity``: the command line of the parity stage (argument parsing and checks, the oracles and
the reference opened, parity.json written, the verdict printed); the comparison itself is
:func:`bringup.parity.run.run_parity`."""
from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Sequence

from threadpoolctl import threadpool_info, threadpool_limits

from bringup.core import canonjson, codedeps
from bringup.core.errors import BringupError, GateError
from bringup.core.hashing import sha256_file
from bringup.core.native import NativeProgram
from bringup.core.paths import ROOT, rel
from bringup.core.progress import Timed
from bringup.core import argtypes
from bringup.core.schemas import validate
from bringup.parity.gates import select_gates
from bringup.parity.oracles import LlamaCppOracle, NumpyReference
from bringup.parity import prompt_sets, run
from bringup.parity.prompt_sets import load_input, resolve_profile
from bringup.parity.reference_checks import ReferenceMemory, ReferenceProgram
from bringup.parity.xray import activation_contract, kv_cache_dtype
from bringup.parity.run import (PLOT, SAME_AS_REFERENCE, apply_gates, bump_identity, contract_summary, run_parity,
                                run_xray_for, tokenize_prompts, write_outputs)
from bringup.core.subcommands import Parser


#: Threads of the BLAS library under the float64 reference's numpy (see cli_main).
REFERENCE_BLAS_THREADS = 1


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``bringup parity``: write parity.json (+ parity_kl.png) for one model.

    Exit 0 when parity ran (the verdict is in the file; certify turns a failed gate into exit 6),
    or 6 with ``--strict`` when a gate fails. Errors raise BringupError (exit code per kind).
    """
    ap = Parser(prog="bringup parity", description=run.__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--gguf", required=True, type=Path)
    ap.add_argument("--cli", required=True, type=Path, help="results/{model}/build/bringup-run")
    ap.add_argument("--lib", required=True, type=Path, help="results/{model}/build/libmodel.so")
    ap.add_argument("--weights", required=True, type=Path, help="results/{model}/convert/weights.bump")
    ap.add_argument("--profile", type=Path, help="default: config/parity_profiles/{model}.json, else default.json "
                    "(recorded in parity.json -> inputs.profile.default)")
    ap.add_argument("--prompts", type=Path, help="default: the profile's prompt_set (of --prompt-set's size)")
    ap.add_argument("--prompt-set", choices=prompt_sets.SIZES, default="full",
                    help="full: the profile's prompt set and minimums; quick: its quick block (CI-sized runs; "
                         "recorded in parity.json settings.prompt_set)")
    ap.add_argument("--threads", type=argtypes.threads, default=2, help="threads of our program")
    ap.add_argument("--oracle-threads", type=argtypes.threads, default=1,
                    help="threads of the llama.cpp oracles (default 1: its threads spin-wait, so more of them "
                         "collapse under load; recorded in parity.json settings.oracle_threads)")
    ap.add_argument("--out-dir", required=True, type=Path,
                    help="folder for parity.json and parity_kl.png, written as one set (results/{model}/parity)")
    ap.add_argument("--strict", action="store_true", help="exit 6 when a gate fails")
    ap.add_argument("--ir", type=Path, help="results/{model}/ir/ir_prefill.json: the program's activation numerics, for the "
                    "reference, for X-ray and for which gates apply (quantized activations: the profile's "
                    "quantized_activations gates, docs/parity.md)")
    ap.add_argument("--xray", choices=("on-fail", "always", "never"), default="on-fail",
                    help="run X-ray (needs bringup-run --dump-hidden) when a gate fails, always, or never")
    ap.add_argument("--xray-tokens", type=int, default=32, help="positions X-ray dumps (memory: ~T x 1 MB)")
    ap.add_argument("--reference-positions", type=int, default=None,
                    help="0: skip the float64 reference (its exact gates and the floor then fail as not "
                         "measured; for quick runs). Default: every position of every prompt, as the gates require")
    a = ap.parse_args(argv)
    if a.reference_positions not in (None, 0):
        raise BringupError("--reference-positions takes only 0 (skip the reference): the exact gates compare "
                           "every position of every prompt")
    if a.threads < 1 or a.oracle_threads < 1:
        raise BringupError(f"--threads and --oracle-threads take at least 1 (got {a.threads}, {a.oracle_threads})")
    use_reference = a.reference_positions is None
    if use_reference and a.ir is None:
        raise BringupError("the exact gates run the reference with the program's activation numerics: pass --ir "
                           "(results/{model}/ir/ir_prefill.json), or --reference-positions 0 to skip them")

    # The float64 reference is numpy over OpenBLAS, whose threads spin-wait for each other: beside
    # other jobs on 2 cores a 200-token smollm2 forward took 35.7 s with 2 BLAS threads and 5.7 s
    # with 1 (load 11, 2026-12-03). One thread slows in proportion to the load (settings.reference_blas).
    with threadpool_limits(limits=REFERENCE_BLAS_THREADS, user_api="blas"):
        return _run(a, use_reference)


def _run(a: argparse.Namespace, use_reference: bool) -> int:
    """The run of :func:`cli_main`, with its checked arguments ``a``; returns its exit code."""
    profile, profile_input = resolve_profile(a.model, a.profile)
    set_path, profile, _ = prompt_sets.choose(profile, a.prompt_set)
    prompts_path = a.prompts or ROOT / set_path
    prompt_set, prompts_sha = load_input(prompts_path, "prompt_set", "prompt set")
    gguf_sha = sha256_file(a.gguf)
    reference = contract = llama_act = memory = None
    kv = "F32"
    if a.ir is not None:
        ir_prefill = canonjson.read(a.ir, "prefill IR")
        contract, kv = activation_contract(ir_prefill), kv_cache_dtype(ir_prefill)
    # a quantized-activation program has its own gates against the reference (before any run)
    gates, gate_set = select_gates(profile, contract)
    profile = {**profile, "gates": gates}
    if use_reference:
        with Timed("parity", "float64 reference: reading the GGUF's tensor table"):
            reference = NumpyReference(a.gguf)   # weights streamed per pass (oracles/weights.py), shared with X-ray
        same = reference.activation_dtypes(contract) == reference.activation_dtypes("ggml-q8")
        memory = ReferenceMemory.of(a.gguf, reference.cfg)
        # the floor's second reference differs from ours in the activation numerics only
        llama_act = SAME_AS_REFERENCE if same else ReferenceProgram(reference, "ggml-q8", kv, memory)
    with contextlib.ExitStack() as oracles:
        with Timed("parity", "llama.cpp oracles (F16 and F32 KV cache): loading"):
            oracle = oracles.enter_context(LlamaCppOracle(a.gguf, n_ctx=4096, n_threads=a.oracle_threads))
            oracle_f32 = oracles.enter_context(LlamaCppOracle(a.gguf, n_ctx=4096, n_threads=a.oracle_threads,
                                                              kv_type="f32"))
        prompts, chat_source = tokenize_prompts(prompt_set, oracle)
        need = max(len(p["tokens"]) for p in prompts) + profile["greedy"]["max_tokens"]
        if need > oracle.n_ctx:
            raise BringupError(f"longest prompt + greedy tokens = {need} positions > oracle context {oracle.n_ctx}")
        ours = NativeProgram(a.cli, a.lib, a.weights, oracle.n_vocab, a.threads)
        inputs = {"gguf": {"path": rel(a.gguf), "sha256": gguf_sha}, "profile": profile_input,
                  "prompt_set": {"path": rel(prompts_path), "sha256": prompts_sha, "name": prompt_set["name"]},
                  "chat_rendering": chat_source}
        program_info = {"cli_sha256": sha256_file(a.cli), "lib_sha256": sha256_file(a.lib),
                        "weights": bump_identity(a.weights), "threads": a.threads}
        eog = [t for t in range(oracle.n_vocab) if oracle.is_eog(t)]
        doc, arrays = run_parity(
            model=a.model, oracle=oracle, ours=ours, prompts=prompts, profile=profile,
            oracle_info=oracle.info(), program_info=program_info, inputs=inputs,
            reference=ReferenceProgram(reference, contract, kv, memory) if reference else None,
            reference_llama_act=llama_act,
            oracle_kv_f32=oracle_f32, eog=eog)
        doc["floor"]["parts"]["llama_cpp_kv_cache"]["oracle_params"] = oracle_f32.info()["params"]
    if reference is not None:
        doc["reference"].update(info=reference.info(), activations=contract_summary(contract), kv_cache=kv,
                                memory=memory.summary())
    else:
        doc["reference"]["reason"] = "--reference-positions 0"
    doc["reference"]["gate_set"] = gate_set
    # (a gate against X-ray has failed as not measured so far: on-fail runs X-ray for it)
    if a.xray == "always" or (a.xray == "on-fail" and doc["verdict"] == "fail"):
        if a.ir is None:
            raise BringupError("X-ray needs --ir (the program's ir_prefill.json) for its activation contract; "
                               "or pass --xray never")
        with Timed("parity", f"X-ray over {a.xray_tokens} positions"):
            doc["xray"] = run_xray_for(doc, a.gguf, ours, a.xray_tokens, profile["xray"]["rel_tol"], a.ir, reference)
        print(doc["xray"].get("summary") or f"x-ray unavailable: {doc['xray'].get('error')}")
        if any(g["against"] == "reference_ops" for g in gates):
            apply_gates(doc, profile)
    doc["plots"] = [PLOT]
    doc["settings"].update(oracle_threads=a.oracle_threads, code=codedeps.code_record("parity"), prompt_set=a.prompt_set,
                           reference_blas={"threads": REFERENCE_BLAS_THREADS, "libraries": sorted(
                               f"{i['internal_api']} {i['version']} ({i['num_threads']} threads)"
                               for i in threadpool_info() if i["user_api"] == "blas")})
    validate(doc, "parity", "parity.json")
    write_outputs(a.out_dir, doc, arrays)
    failed = [g["id"] for g in doc["gates"] if not g["passed"]]
    print(f"parity {a.model}: {doc['verdict']} " + " ".join(
        f"{g['id']}={_fmt(g['measured'])}{'' if g['passed'] else '(FAIL)'}" for g in doc["gates"]))
    if failed and a.strict:
        raise GateError(f"parity gates failed: {', '.join(failed)}")
    return 0
