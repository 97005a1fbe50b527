"""The regression summary: one record per night (the certifications of every selected model), the
history of records (``history.jsonl``, one canonical JSON line each) and the change from the
previous night.

A night record (schema ``regression_history``) is what one history line holds; the summary (schema
``regression_summary``) is that record plus, per model, the change from the previous record. The
record is keyed by the hash of its certification set, so summarizing the same certifications again
appends nothing and reproduces the summary byte for byte (Snakemake may rerun the job; docs/regression.md).
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from bringup.formats import bench_summary
from bringup.core import canonjson, schemas
from bringup.core.errors import BringupError, GateError, IncompleteError
from bringup.core.hashing import sha256_file
from bringup.core.paths import rel
from bringup.core.stamp import git_commit

# Exit codes of `bringup regression` (docs/regression.md). 6 is bringup's "gate failed"; 7 means
# the pipeline did not deliver a readable certification for some model (it crashed or was not run).
EXIT_PASS = 0
EXIT_GATE_FAILED = GateError.exit_code
EXIT_INCOMPLETE = IncompleteError.exit_code


def model_record(model: str, path: Path) -> dict:
    """What the history keeps of one model's certification at ``path``: status ("pass", "fail",
    "missing" or "invalid"), the file's sha256, failed gates, every gate's measured value /
    threshold (None when not measured) / verdict, the speed ratios ours/llama.cpp (dimensionless,
    > 1 is faster; the bench's pp and tg tests for the certified library, None when not benched), the parity profile (``profile_is_default``: the model had none of its own) and
    the certification's ``issued`` stamp (bringup version, git commit, UTC timestamp; None when absent)."""
    rec = {"model": model, "status": "missing", "error": None, "certification": None, "issued": None,
           "failed_gates": [], "gates": {}, "speed_ratio": None, "bench": None, "parity_profile": None,
           "profile_is_default": None}
    if not path.exists():
        rec["error"] = f"no certification at {rel(path)} (the pipeline did not finish for {model})"
        return rec
    try:
        cert = canonjson.read_result(path, f"certification of {model}")
        schemas.validate(cert, "certification", f"certification of {model}")
        if cert["model"] != model:
            raise BringupError(f"{rel(path)} certifies {cert['model']!r}, not {model!r}")
    except BringupError as e:
        rec.update(status="invalid", error=str(e).splitlines()[0])
        return rec
    # parity.json records the profile it used (path, and `default` since the default profile
    # exists); older certifications have only the path, named <model>.json unless defaulted.
    profile = cert["parity"].get("profile") or (cert["parity"].get("inputs") or {}).get("profile") or {}
    profile_path = profile.get("path")
    is_default = profile.get("default", None if profile_path is None
                             else Path(profile_path).name != f"{model}.json")
    rec.update(
        status=cert["verdict"], certification={"path": rel(path), "sha256": sha256_file(path)},
        failed_gates=list(cert["failed_gates"]),
        # the certification's own stamp (version, commit, UTC time it was issued); older ones have none
        issued=cert.get("issued"),
        gates={g["id"]: {"measured": g["measured"], "threshold": g["threshold"], "cmp": g["cmp"],
                         "passed": g["passed"]} for g in cert["gates"]},
        # certify times nothing: the bench's figures for the certified library (ours / the faster
        # llama.cpp build, with date, threads and load), or None ("not benched")
        speed_ratio=bench_summary.prefill_decode(cert["speed"]["bench"]),
        bench=cert["speed"]["bench"],
        # the code of every stage, as the certification names it (results/<model>/code/<rule>.json)
        code={s: v["sha256"] for s, v in sorted(((cert.get("code") or {}).get("stages") or {}).items())} or None,
        parity_profile=profile_path, profile_is_default=is_default)
    return rec


def night_record(models: list[dict], commit: dict, timestamp: str) -> dict:
    """One history line: the model records, the hash of the certification set (sha256 of the
    canonical {model: certification sha256 or status}), the commit and the UTC timestamp."""
    key = {m["model"]: (m["certification"] or {}).get("sha256", m["status"]) for m in models}
    return {"schema_version": 1, "certifications_sha256": canonjson.sha256(key),
            "commit": commit, "timestamp": timestamp, "models": models}


def read_history(path: Path) -> list[dict]:
    """Every record of ``history.jsonl`` in order ([] when it does not exist). Raises
    IntegrityError-class BringupError (exit 3) naming the line that is not a valid record."""
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            schemas.validate(rec, "regression_history", f"{path} line {n}")
        except (ValueError, BringupError) as e:
            raise BringupError(f"{path} line {n} is not a history record: {str(e).splitlines()[0]}",
                               exit_code=3) from None
        out.append(rec)
    return out


def append_once(history: list[dict], path: Path, record: dict) -> tuple[dict, dict | None]:
    """Append ``record`` to ``path`` unless the last line has the same certification set, in which
    case that line (its commit and timestamp) stands for this run. Returns (this run's record,
    the previous night's record: the last one with a different certification set, or None)."""
    if history and history[-1]["certifications_sha256"] == record["certifications_sha256"]:
        record = history[-1]
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="ascii") as fh:
            fh.write(canonjson.dumps(record, compact=True) + "\n")
        history = [*history, record]
    previous = next((h for h in reversed(history[:-1])
                     if h["certifications_sha256"] != record["certifications_sha256"]), None)
    return record, previous


def _delta(now, before):
    return None if now is None or before is None else now - before


def change(now: dict, before: dict | None) -> dict | None:
    """The change of one model from the previous night: status before, whether the verdict
    flipped, and per gate (and speed ratio) the previous and current value and their difference
    (current - previous; None where either side is missing). None when there is no previous night."""
    if before is None:
        return None
    gates = {}
    for gid in sorted(set(now["gates"]) | set(before["gates"])):
        g, b = now["gates"].get(gid), before["gates"].get(gid)
        gates[gid] = {"previous": b and b["measured"], "measured": g and g["measured"],
                      "delta": _delta(g and g["measured"], b and b["measured"]),
                      "verdict_flipped": bool(g and b and g["passed"] != b["passed"])}
    ratios = {k: _delta((now["speed_ratio"] or {}).get(k), (before["speed_ratio"] or {}).get(k))
              for k in ("prefill", "decode")}
    return {"previous_status": before["status"], "verdict_flipped": before["status"] != now["status"],
            "certification_changed": before["certification"] != now["certification"],
            "gates": gates, "speed_ratio_delta": ratios}


def exit_code(models: list[dict]) -> int:
    """0 when every model passed, 7 when any certification is missing or invalid (a pipeline
    problem outranks a gate), else 6 (some gate failed)."""
    if any(m["status"] in ("missing", "invalid") for m in models):
        return EXIT_INCOMPLETE
    return EXIT_GATE_FAILED if any(m["status"] == "fail" for m in models) else EXIT_PASS


def summarize(certifications: dict[str, Path], history_path: Path, commit: dict | None = None,
              now: dt.datetime | None = None) -> dict:
    """Build the summary of ``certifications`` ({model: certification.json path}) and append this
    night to ``history_path`` (once per certification set). Returns the summary (schema
    ``regression_summary``): run (record hash, commit, ISO-8601 UTC timestamp), previous run,
    verdict ("pass", "fail", "incomplete"), exit code and per model the record plus its change."""
    models = [model_record(m, Path(p)) for m, p in certifications.items()]
    stamp = (now or dt.datetime.now(dt.timezone.utc)).isoformat(timespec="seconds")
    record = night_record(models, commit or git_commit(), stamp)
    record, previous = append_once(read_history(history_path), history_path, record)
    before = {m["model"]: m for m in previous["models"]} if previous else {}
    code = exit_code(models)
    summary = {
        "schema_version": 1,
        "run": {k: record[k] for k in ("certifications_sha256", "commit", "timestamp")},
        "previous": previous and {k: previous[k] for k in ("certifications_sha256", "commit", "timestamp")},
        "verdict": {EXIT_PASS: "pass", EXIT_GATE_FAILED: "fail"}.get(code, "incomplete"),
        "exit_code": code,
        "models": [{**m, "change": change(m, before.get(m["model"]))} for m in models],
    }
    schemas.validate(summary, "regression_summary", "regression summary")
    return summary

