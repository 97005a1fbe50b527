"""Runtime calibration: the process overheads the component model cannot see (code, stacks, libc,
tokenizer tables, allocator slack), measured as peak RSS of the native CLI minus the predicted
components at the same run parameters.

Record format: ``$defs/calibration`` of ``config/schemas/memory_model.schema.json``; procedure and
measurements in docs/memory_model.md. The CLI's timing fields are ``bringup-run --timing --json``
(csrc/cli/json_out.c ``timing_fields``: getrusage ``ru_maxrss`` in KiB on Linux, ``ru_majflt``,
``ru_minflt``).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jsonschema

from bringup.core.errors import BringupError
from bringup.core.native import NativeProgram, timing_of, tokens_arg
from bringup.core.paths import SCHEMAS
from bringup.plan.memory.footprint import evaluate
from bringup.plan.memory.spec import SCHEMA_VERSION, ModelSpec, Overhead, RunParams

# getrusage fields of `bringup-run --timing --json` (csrc/cli/json_out.c timing_fields) that
# calibration and the RSS proof read: ru_maxrss (KiB on Linux) and ru_majflt.
RUN_TIMING_RSS_KIB = "peak_rss_kib"
RUN_TIMING_MAJFLT = "major_page_faults"
RUN_TIMING_MINFLT = "minor_page_faults"


def calibration_prompt(n_vocab: int, n: int) -> list[int]:
    """The fixed token ids a calibration run feeds (their values do not change the footprint)."""
    return [(100 + i) % n_vocab for i in range(n)]


def _schema_defs() -> dict:
    return json.loads((SCHEMAS / "memory_model.schema.json").read_text())


def validate_calibration(obj: Any, what: str = "calibration") -> None:
    """Validate a runtime calibration record against ``$defs/calibration`` of the model schema."""
    s = _schema_defs()
    sub = {"$schema": s["$schema"], "$defs": s["$defs"], "$ref": "#/$defs/calibration"}
    errors = sorted(jsonschema.Draft202012Validator(sub).iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:20]]
        raise BringupError(f"{what} is not a runtime calibration record:\n" + "\n".join(lines))


def overheads_from_calibration(cal: dict, source: str) -> tuple[tuple[Overhead, ...], str]:
    """Overheads of a validated calibration record, and the sentence naming their source."""
    validate_calibration(cal, source)
    ovs = tuple(Overhead(o["name"], int(o["bytes"]), o["what"]) for o in cal["overheads"])
    pts = ", ".join(f"C={q['ctx']}: {q['peak_rss_bytes']} measured - {q['predicted_bytes']} predicted"
                    for q in cal["points"])
    return ovs, (f"calibration {source} (bringup-run sha256 {cal['binary_sha256'][:12]}, "
                 f"header {cal['model_header_sha256'][:12]}): {cal['method']}; {pts}")


def calibrate(spec: ModelSpec, measurements: list[dict], *, binary_sha256: str, library_sha256: str,
              command: list[str]) -> dict:
    """A calibration record from measured runs of the native CLI on this model.

    ``measurements``: [{"ctx", "seqs", "kv_dtype", "chunk", "peak_rss_bytes"}]. The overhead is the
    mean of (measured peak RSS - predicted components without overheads) over the points, rounded
    to a page (4096 bytes); a spread larger than one page across points means the component model
    itself is off by that much, and is recorded. Raises BringupError when no point is given or a
    predicted component is absent.
    """
    if not measurements:
        raise BringupError("calibration needs at least one measured run")
    bare = dataclasses.replace(spec, overheads=None)
    points = []
    for m in measurements:
        fp = evaluate(bare, RunParams(m["ctx"], m["seqs"], m["kv_dtype"], m["chunk"]))
        absent = [x for x in fp.missing if x != "runtime_overheads"]
        if absent:
            raise BringupError(f"cannot calibrate: components {absent} are absent")
        points.append({"ctx": m["ctx"], "seqs": m["seqs"], "kv_dtype": m["kv_dtype"], "chunk": m["chunk"],
                       "peak_rss_bytes": int(m["peak_rss_bytes"]), "predicted_bytes": fp.total_bytes})
    diffs = [q["peak_rss_bytes"] - q["predicted_bytes"] for q in points]
    mean = sum(diffs) / len(diffs)
    overhead = max(0, int(round(mean / 4096)) * 4096)
    cal = {
        "kind": "bringup.runtime_calibration", "schema_version": SCHEMA_VERSION,
        "binary_sha256": binary_sha256, "library_sha256": library_sha256,
        "model_header_sha256": spec.header_sha256, "command": list(command),
        "method": "peak RSS (getrusage ru_maxrss) of bringup-run minus the predicted weights, load copies, "
                  "activations, workspace and KV cache at the same run parameters; mean over points, page-rounded",
        "points": points,
        "overheads": [{"name": "process", "bytes": overhead,
                       "what": "code and data of bringup-run + libmodel.so + libc, stacks, tokenizer tables, "
                               "allocator slack, BUMP header/table/tokenizer blob pages"}],
        "spread_bytes": max(diffs) - min(diffs),
    }
    validate_calibration(cal)
    return cal


def run_native(binary: str | os.PathLike, library: str | os.PathLike, weights: str | os.PathLike, *,
               ctx: int, prompt_tokens: list[int], max_tokens: int, extra: list[str] | None = None,
               timeout: float = 600) -> dict:
    """Run ``bringup-run LIBMODEL WEIGHTS --prompt-tokens IDS --max-tokens N --temperature 0 --ctx C
    --timing --json [extra]`` in a process of its own (``NativeProgram``, ``own_process``: its peak
    RSS is its own, not this Python process's) and return its JSON, with ``peak_rss_bytes``
    (ru_maxrss KiB x 1024), ``major_page_faults`` and ``minor_page_faults`` (-1 when not reported)
    copied to the top level and the command line under ``command``.

    Raises BringupError with the CLI's stderr tail when it fails or outlives ``timeout`` seconds,
    or when its JSON lacks the timing fields.
    """
    program = NativeProgram(binary, library, weights, threads=None, timeout_s=timeout)
    args = ["--prompt-tokens", tokens_arg(prompt_tokens), "--max-tokens", str(max_tokens), "--temperature", "0",
            "--ctx", str(ctx), "--timing", "--json", *(extra or [])]
    out = program.run_json(args, own_process=True)
    t = timing_of(out, (RUN_TIMING_RSS_KIB, RUN_TIMING_MAJFLT))
    out["peak_rss_bytes"] = int(t[RUN_TIMING_RSS_KIB]) * 1024
    out["major_page_faults"] = int(t[RUN_TIMING_MAJFLT])
    out["minor_page_faults"] = int(t.get(RUN_TIMING_MINFLT, -1))
    out["command"] = program.argv(args)
    return out
