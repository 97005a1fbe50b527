"""Certification: one verdict for one model, with the evidence behind it.

``bringup certify`` reads the artifacts of every earlier stage under ``results/{model}/`` and
writes ``certify/certification.json`` (schema ``certification``), ``.md`` and ``.html`` (jinja2
templates ``reports/certification.{md,html}.j2``):

- the verdict and every gate with its measured value and threshold: the parity gates from
  ``parity/parity.json`` plus certification's own (parity evidence is current for these
  binaries and this GGUF; the binary runs standalone);
- the provenance chain: model URI and sha256, BUMP hashes, circuit and kernel-map hashes, IR and
  plan hashes, generated C hashes, compiler, flags and ISA, oracle versions;
- the parity summary and the memory plan summary;
- speed: certify times nothing (a job beside it would distort the figure); it cites the bench's
  latest results for this exact ``libmodel.so`` (``bench/bench.json``, matched by sha256) with
  their date, threads, load and the llama.cpp build compared with, or says "not benched";
- code: the content hash of every stage's code (``bringup.core.codedeps``), and whether parity's
  evidence was produced by the parity code of this checkout;
- standalone evidence: ``ldd`` of the CLI and the library, and a run from a temporary directory
  outside the checkout with an empty environment, whose tokens must equal the parity run's.

Exit 0 when every gate passes, 6 (GateError) when one fails; the three files are written either way.
"""
from __future__ import annotations

import json
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Sequence

import jinja2
import jinja2.sandbox
import markupsafe

from bringup import __version__
from bringup.certify import plot
from bringup.formats import bench_summary
from bringup.core import atomic
from bringup.core import canonjson, codedeps
from bringup.core.errors import BringupError, IntegrityError
from bringup.core.hashing import sha256_file
from bringup.ir import block
from bringup.ir import kernel_maps
from bringup.core.native import run_command
from bringup.core.paths import CIRCUITS, KERNEL_MAPS, REPORTS, ROOT, rel
from bringup.export.standalone import run_bare
from bringup.core.schemas import validate
from bringup.core import stamp
from bringup.parity.oracles.llama_cpp import LlamaCppOracle, cpu_features
from bringup.plan.memory import report as memory_report
from bringup.parity.run import bump_identity


def _load(path: Path, what: str) -> dict:
    # an earlier stage's artifact: the message says which one is missing
    return canonjson.read_result(path, f"certify: {what} (run the stage that writes it)")


def _file(path: Path) -> dict[str, str]:
    if not Path(path).is_file():
        raise BringupError(f"certify: {path} not found")
    return {"path": rel(path), "sha256": sha256_file(path)}


# --------------------------------------------------------------------------------------------
# provenance
# --------------------------------------------------------------------------------------------

def kernel_map_hashes(provider_ids: set[str], maps_dir: Path = KERNEL_MAPS) -> dict[str, dict]:
    """sha256 (``bringup.ir.kernel_maps.map_sha256``: the hash the IR records) of the kernel map of
    every provider id used. Raises BringupError for an id with no map, or an invalid map."""
    maps = kernel_maps.load_maps(Path(maps_dir))
    by_id = {mid: {"path": rel(maps[mid].path), "sha256": kernel_maps.map_sha256(maps[mid].path)}
             for mid in provider_ids if mid in maps}
    missing = sorted(provider_ids - set(by_id))
    if missing:
        raise BringupError(f"certify: providers with no kernel map in {maps_dir}: {', '.join(missing)}")
    return dict(sorted(by_id.items()))


def gather_provenance(res: Path, gguf: Path) -> dict[str, Any]:
    """The chain from the pinned model to the binary. Raises BringupError for a missing artifact."""
    fetch = _load(res / "fetch" / "provenance.json", "fetch provenance")
    gguf_sha = sha256_file(gguf)
    cfg = _load(res / "convert" / "config.json", "config.json")
    irs = {ph: _load(res / "ir" / f"ir_{ph}.json", f"IR ({ph})") for ph in ("prefill", "decode")}
    circ = irs["prefill"].get("circuit") or {}
    circ_file = CIRCUITS / f"{circ.get('name', '')}.json"
    providers = {op["provider"] for ir in irs.values() for op in (block.expand(ir) if ir else []) if op.get("provider")}
    build = _load(res / "build" / "provenance.json", "build provenance")
    weights = res / "convert" / "weights.bump"
    artifacts = {name: sha256_file(res / "build" / name) for name in ("libmodel.so", "bringup-run")}
    return {
        "model": {"name": fetch.get("model"), "uris": fetch.get("uris"), "sha256": gguf_sha,
                  "pinned_sha256": fetch.get("pinned_sha256"),
                  "sha256_matches_pin": gguf_sha == fetch.get("pinned_sha256"),
                  "architecture": cfg.get("architecture")},
        "bump": {**_file(weights), **bump_identity(weights)},
        "convert": {n: _file(res / "convert" / n) for n in ("config.json", "weights_manifest.json", "tokenizer.json")},
        "circuit": {"name": circ.get("name"), "sha256_in_ir": circ.get("sha256"),
                    **({"sha256": sha256_file(circ_file), "path": rel(circ_file)} if circ_file.is_file() else
                       {"sha256": None, "path": None})},
        "kernel_maps": kernel_map_hashes(providers),
        "ir": {ph: _file(res / "ir" / f"ir_{ph}.json") for ph in irs},
        "plan": _file(res / "plan" / "memory_plan.json"),
        "generated_c": {n: _file(res / "codegen" / n) for n in ("model.c", "model.h")},
        "build": {"compiler": build.get("compiler"), "cflags": build.get("cflags"),
                  "isa_flags": build.get("isa_flags"), "ldflags": build.get("ldflags"),
                  "machine": build.get("machine"), "artifacts": build.get("artifacts"),
                  "artifacts_sha256": artifacts,
                  "artifacts_match": build.get("artifacts") == artifacts,
                  "provenance": _file(res / "build" / "provenance.json")},
        "isa": {"build_flags": build.get("isa_flags"), "ir_target": (irs["prefill"].get("target") or {}).get("isa")},
        "toolchain": {"bringup": __version__, "python": platform.python_version(),
                      "packages": _versions(["numpy", "gguf", "jinja2", "jsonschema", "snakemake",
                                             "llama-cpp-python", "matplotlib", "pandas"])},
    }


def _versions(names: list[str]) -> dict[str, str | None]:
    out = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = None
    return out


def summarize_plan(plan: dict) -> dict[str, Any]:
    """Arena decision and per-phase arena / lower bound / ratio / copies from memory_plan.json."""
    phases = {}
    for ph, p in sorted((plan.get("phases") or {}).items()):
        phases[ph] = {k: p[k] for k in ("arena_bytes", "lower_bound_bytes", "ratio", "copy_ops",
                                         "kv_handoffs", "n_ops") if k in p}
        phases[ph]["n_buffers"] = len(p.get("buffers", []))
    if not phases:
        raise BringupError("certify: memory_plan.json has no phases")
    arena = plan.get("arena") or {}
    return {"arena": {k: arena[k] for k in ("decision", "bytes", "reason", "fits") if k in arena},
            "phases": phases, "state": {k: v for k, v in (plan.get("state") or {}).items() if k != "buffers"}}


# --------------------------------------------------------------------------------------------
# standalone evidence and speed
# --------------------------------------------------------------------------------------------

def ldd(path: Path) -> dict[str, Any]:
    """Shared libraries ``path`` loads (ldd), with any that are missing or inside the checkout.
    Raises BringupError when ldd is not installed or hangs (60 s)."""
    p = run_command(["ldd", str(path)], timeout_s=60, what="certify: ldd (needed for the standalone evidence)")
    libs, missing, inside = [], [], []
    root = str(ROOT.resolve())
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if not line:
            continue
        libs.append(line)
        if "not found" in line:
            missing.append(line)
        target = line.split("=>", 1)[1].strip().split(" (")[0] if "=>" in line else line.split(" (")[0]
        if target.startswith(root):
            inside.append(line)
    dynamic = p.returncode == 0
    return {"file": path.name, "dynamic": dynamic, "libraries": libs, "missing": missing,
            "inside_checkout": inside, "ok": dynamic and not missing and not inside,
            "stderr": p.stderr.decode("utf-8", "replace").strip()[-500:]}


def standalone_run(cli: Path, lib: Path, weights: Path, tokens: Sequence[int], expect: Sequence[int],
                   threads: int) -> dict[str, Any]:
    """The check ``bringup verify`` runs on a bundle (bringup.export.standalone.run_bare), on the
    CLI, the library and the weights: copied into a bare temporary folder outside the checkout,
    run with an empty environment and, where the host allows it, without network, the libraries it
    mapped recorded; ``ok`` when it generates exactly ``expect``."""
    return run_bare({p.name: p for p in (cli, lib, weights)}, [f"./{p.name}" for p in (cli, lib, weights)],
                    tokens, expect, threads)


#: The stages whose code a certification names (bringup.core.codedeps.STAGES), in DAG order.
CODE_STAGES = ("convert", "ir", "plan", "codegen", "build", "parity", "certify")


def speed_section(bench_json: Path, lib: Path) -> dict[str, Any]:
    """The bench's headline for this library (bringup.formats.bench_summary.for_library) or why there is
    none; no figure is timed here."""
    lib_sha = sha256_file(lib)
    bench, why = bench_summary.for_library(bench_json, lib_sha)
    return {"lib_sha256": lib_sha, "bench": bench, "not_benched": why,
            "method": "not timed by certify (a job beside it would distort the figure): the bench's latest "
                      "results for this exact libmodel.so (bench.json, matched by sha256; docs/bench.md: "
                      "interleaved rounds against the faster llama.cpp build, load before and after)"}


def code_records(res: Path) -> dict[str, dict]:
    """The code records of ``res/code/<rule>.json`` (bringup.core.smk.record_code; schema
    code_record), by rule. Raises BringupError (integrity) for a record that does not match its
    schema or names another rule than its file."""
    out = {}
    for path in sorted((res / "code").glob("*.json")):
        rec = _load(path, f"code record {path.name}")
        validate(rec, "code_record", f"code/{path.name}")
        if rec["rule"] != path.stem:
            raise IntegrityError(f"certify: code/{path.name} records rule {rec['rule']!r}, not {path.stem!r}")
        out[path.stem] = rec
    return out


def code_section(parity: dict, res: Path) -> dict[str, Any]:
    """``{"stages": {stage: {"sha256", "files", "recorded": {rule: sha256}}}, "parity_matches",
    "records_match", "bench"}``: the code of every stage in this checkout; the code each job that
    produced an artifact recorded (results/<model>/code/<rule>.json, by rule); whether parity.json
    was produced by this parity code (None: parity.json predates the record); whether every
    recorded hash equals this checkout's (None: no record); the bench's recorded code, or None."""
    stages = {s: codedeps.code_record(s) for s in CODE_STAGES}
    records = code_records(res)
    for rule, rec in records.items():
        if rec["stage"] in stages:
            stages[rec["stage"]].setdefault("recorded", {})[rule] = rec["code"]["sha256"]
    recorded = (parity.get("settings", {}).get("code") or {}).get("sha256")
    matches = [h == stages[s]["sha256"] for s in stages for h in stages[s].get("recorded", {}).values()]
    bench = records.get("bench_model", {}).get("code")
    return {"stages": stages, "parity_matches": None if recorded is None else recorded == stages["parity"]["sha256"],
            "records_match": all(matches) if matches else None, "bench": bench}


# --------------------------------------------------------------------------------------------
# gates and documents
# --------------------------------------------------------------------------------------------

#: Keys of a parity gate that certification copies when present (the required ones always are).
_PARITY_GATE_OPTIONAL = ("kind", "against", "margin", "floor", "floor_rule", "floor_parts", "note",
                         "target", "target_met", "target_gap")


def certification_gates(parity: dict, prov: dict, evidence: dict) -> list[dict[str, Any]]:
    """Parity's gates (with their floor and margin) plus certification's own, each {id, source,
    metric, cmp, threshold, measured, margin, passed, reason}; certification's own are
    requirements measured as 1 (met) or 0 against a threshold of 1."""
    gates = []
    for g in parity["gates"]:
        gates.append({**{k: g[k] for k in ("id", "metric", "cmp", "threshold", "measured", "passed", "reason")},
                      "source": "parity", "description": g.get("description", ""),
                      **{k: g[k] for k in _PARITY_GATE_OPTIONAL if k in g}})

    def own(gid, ok, desc, reason):
        gates.append({"id": gid, "kind": "requirement", "metric": gid, "cmp": ">=", "threshold": 1,
                      "measured": 1 if ok else 0, "margin": 0 if ok else -1, "passed": bool(ok),
                      "reason": reason, "source": "certify", "description": desc})

    pin = parity.get("inputs", {}).get("gguf", {}).get("sha256")
    prog = parity.get("program", {})
    arts = prov["build"]["artifacts_sha256"]  # the files as they are now, not as recorded
    own("parity_is_current", pin == prov["model"]["sha256"]
        and prog.get("cli_sha256") == arts.get("bringup-run") and prog.get("lib_sha256") == arts.get("libmodel.so")
        and (prog.get("weights") or {}).get("payload_sha256") == prov["bump"]["payload_sha256"],
        "parity.json was measured on this GGUF, these binaries and this BUMP",
        "Parity evidence certifies only the exact files it was measured on; a rebuilt binary or a reconverted BUMP needs a new parity run.")
    own("model_matches_pin", prov["model"]["sha256_matches_pin"], "the GGUF's sha256 equals the registry pin",
        "A certificate names one pinned model; a GGUF that differs from its pin is a different model.")
    own("build_artifacts_match", prov["build"]["artifacts_match"],
        "libmodel.so and bringup-run hash to what build/provenance.json recorded",
        "The binaries certified must be the ones the recorded build produced, so the provenance chain holds.")
    own("standalone_libraries", all(x["ok"] for x in evidence["ldd"].values()),
        "ldd: every library found, none inside the checkout",
        "The program must run without this checkout: every shared library it loads is found on the system.")
    own("standalone_run", evidence["run"]["ok"],
        "a run from a temporary directory outside the checkout, empty environment, reproduces the parity run's tokens",
        "The program must reproduce the parity run's tokens from a fresh directory with an empty environment, so nothing in the checkout or the environment is needed.")
    return gates


def render(cert: dict, out_dir: Path, parity: dict | None = None) -> None:
    """Write certification.md and .html from the jinja2 templates in ``reports/`` (HTML
    autoescaped: model metadata strings are data, never markup). ``parity``: the parity.json
    document the certification names, for the HTML's inline plot (bringup.certify.plot, built
    from numbers with every id escaped); None: no inline plot."""
    # sandboxed: a template may read the data it is given, never call into Python beyond that
    env_html = jinja2.sandbox.SandboxedEnvironment(loader=jinja2.FileSystemLoader(str(REPORTS)), autoescape=True,
                                                   undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env_md = jinja2.sandbox.SandboxedEnvironment(loader=jinja2.FileSystemLoader(str(REPORTS)), autoescape=False,
                                                 undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env_html.filters.update(used_share=plot.used_share, tightest=plot.tightest)
    for env in (env_html, env_md):
        env.filters["num"] = _num
        env.filters["mdcell"] = lambda s: str(s).replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")
    atomic.write_text(out_dir / "certification.md", env_md.get_template("certification.md.j2").render(c=cert))
    svg = markupsafe.Markup(plot.kl_svg(parity)) if parity is not None else ""
    atomic.write_text(out_dir / "certification.html",
                      env_html.get_template("certification.html.j2").render(c=cert, kl_svg=svg))


def memory_model_section(path: Path) -> dict[str, Any]:
    """The memory model document at ``path`` (memory_model.json, schema ``memory_model``) for the
    certification: its path and sha256, its Markdown page, and its sections with each table as
    ``{"columns": [...], "rows": [[...]]}`` for the HTML page. Raises BringupError for a missing,
    non-JSON or invalid document (a Markdown file included)."""
    doc = _load(path, "memory model (plan/memory_model_calibrated.json)")
    validate(doc, "memory_model", str(path))
    secs = []
    for sec in memory_report.sections(doc):
        t = sec["table"]
        table = None if t is None else json.loads(t.to_json(orient="split", index=False))
        secs.append({"title": sec["title"], "text": sec["text"],
                     "table": None if table is None else {"columns": table["columns"], "rows": table["data"]}})
    return {"path": rel(path), "sha256": sha256_file(path), "markdown": memory_report.render_markdown(doc),
            "sections": secs}


def _reference_columns(p: dict) -> dict[str, Any]:
    """A parity prompt's comparison with the reference, as certification's per-prompt columns."""
    r = p.get("reference")
    if r is None:
        return {}
    return {"reference_top1_agreement": r["teacher_forced"]["top1_agreement"],
            "reference_kl_mean": r["teacher_forced"]["kl_mean"],
            "reference_first_token_match": r["first_generated_top1_match"],
            "reference_greedy_prefix": r["greedy"]["prefix_len"], "reference_greedy_identical": r["greedy"]["identical"]}


def _num(v, digits: int = 4) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


#: what `bringup certify` writes into its folder, and the verdict marker the workflow adds there
CERTIFY_FILES = ("certification.json", "certification.md", "certification.html", "PASSED")


def certify(model: str, res: Path, gguf: Path, *, out_dir: Path | None = None, parity_path: Path | None = None,
            threads: int = 2, standalone_tokens: int = 16, memory_model: Path | None = None) -> dict:
    """Certify ``model`` from its results folder ``res`` (default out_dir RESULTS/certify, parity
    RESULTS/parity/parity.json): the standalone run, the gates, certification.{json,md,html} written
    as one set. Returns the certification (its ``failed_gates`` say whether it passed)."""
    out_dir = out_dir or res / "certify"
    parity_path = parity_path or res / "parity" / "parity.json"
    parity = _load(parity_path, "parity.json")
    validate(parity, "parity", "parity.json")
    prov = gather_provenance(res, gguf)
    plan = summarize_plan(_load(res / "plan" / "memory_plan.json", "memory_plan.json"))
    cli, lib, weights = res / "build" / "bringup-run", res / "build" / "libmodel.so", res / "convert" / "weights.bump"

    first = parity["prompts"][0]
    expect = first["greedy"]["ours"][: standalone_tokens]
    if not expect:
        raise BringupError("certify: parity.json's first prompt has no greedy tokens to reproduce")
    evidence = {"ldd": {"bringup-run": ldd(cli), "libmodel.so": ldd(lib)},
                "run": standalone_run(cli, lib, weights, first["tokens"], expect, threads)}
    with LlamaCppOracle(gguf, n_ctx=64, n_threads=1) as oracle:   # its provenance only
        oracle_info = oracle.info()
    speed = speed_section(res / "bench" / "bench.json", lib)

    gates = certification_gates(parity, prov, evidence)
    failed = [g["id"] for g in gates if not g["passed"]]
    mm = None
    if memory_model:
        mm = memory_model_section(memory_model)
    cert = {
        "schema_version": 1, "model": model,
        "verdict": "fail" if failed else "pass", "failed_gates": failed, "gates": gates,
        "provenance": {**prov, "oracles": {"llama.cpp": oracle_info}},
        "parity": {"overall": parity["overall"], "verdict": parity["verdict"],
                   "prompts": [{"id": p["id"], "kind": p["kind"], "n_tokens": p["n_tokens"],
                                **{k: p["teacher_forced"][k] for k in ("top1_agreement", "kl_mean", "cosine_min")},
                                "first_generated_top1_match": p["first_generated_top1_match"],
                                "greedy_prefix": p["greedy"]["prefix_len"], "greedy_identical": p["greedy"]["identical"],
                                **_reference_columns(p)}
                               for p in parity["prompts"]],
                   "settings": parity["settings"], "inputs": parity["inputs"],
                   "parity_json": _file(parity_path),
                   "plots": parity.get("plots", []), "xray": parity.get("xray"),
                   "reference_check": (parity.get("reference") or {}).get("overall"),
                   "reference": parity.get("reference"), "floor": parity.get("floor"),
                   "profile": parity["inputs"].get("profile")},
        "memory_plan": plan, "memory_model": mm,
        "speed": speed, "standalone": evidence, "code": code_section(parity, res),
        "host": {"cpu": cpu_features(), "platform": platform.platform(), "python": sys.version.split()[0]},
        # who issued it and when (version, git commit, UTC time): kept in this one field (bringup.core.stamp)
        "issued": stamp.issued(),
    }
    validate(cert, "certification", "certification.json")
    # One set: the JSON and its two pages appear together or not at all, and an interrupted or
    # failed rerun leaves the previous set. A previous verdict marker (PASSED, certify_verdict's)
    # belongs to the previous certification, so the swap retires it with that set.
    with atomic.atomic_dir(out_dir, CERTIFY_FILES, "certification folder") as tmp:
        canonjson.write(tmp / "certification.json", cert)
        # the pages are rendered from the file as written (canonical key order), so `bringup
        # verify-results` can render them again from certification.json and compare the bytes
        render(canonjson.read(tmp / "certification.json", "certification.json"), tmp, parity)
    return cert
