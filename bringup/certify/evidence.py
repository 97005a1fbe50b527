"""``bringup verify-results``: check a copied results folder against this checkout without
recomputing the pipeline, then (``--touch``) tell Snakemake that it is up to date.

Why: Snakemake decides what to rerun from file modification times first. A results folder copied
into a fresh clone has the copy's times (or, with ``cp -p``, times older than every source file of
the clone), so ``snakemake -n certify`` wants to rerun all of its jobs; ``snakemake --touch``
would fix the times but would also hide an input that really changed. So the times are fixed
only after every input is shown to be what made the results, from the hashes the artifacts
record (docs/regression.md, "Reviewing evidence"):

- every file the certification names has the SHA-256 it recorded; the GGUF is the registry's pin
  and fetch's provenance names the registry's current source;
- the cheap deterministic stages are derived again with this checkout's code, data and workflow
  config and must give the same bytes: convert's config, manifest and tokenizer (from the GGUF
  header), the IR (circuits, kernel maps, ``ctx``, ``prefill_chunk``), the arena plan, the
  calibrated memory model (``config/devices.yaml``, ``memory.*``), the generated C (codegen
  templates) and the certification pages (report templates);
- the build's recorded C sources, the calibration's binaries and parity's inputs (GGUF, BUMP,
  binaries, parity profile, prompt set, threads, oracle threads) hash to what this checkout and
  config give, and every stage's code hash in the certification (and parity.json's) is this
  checkout's (``bringup.core.codedeps``: code is an input of every job);
- the native program, copied to a bare folder, still generates the tokens parity recorded.

The commit the certification was issued at is printed beside this checkout's (information: the
code that matters is checked by its hashes above).
Exit 0 when every check passes; 3 (IntegrityError) naming the checks that failed, and nothing
touched; 7 when the results folder has no certification.
"""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import jinja2

from bringup.certify import report as certify
from bringup.codegen import emit as codegen
from bringup.convert import importer as convert
from bringup.core import canonjson, codedeps
from bringup.parity import prompt_sets
from bringup.core.cli import main
from bringup.core.errors import BringupError, IntegrityError
from bringup.core.hashing import sha256_file
from bringup.core.paths import ROOT, rel
from bringup.fetch import registry as registry_mod
from bringup.ir import lower as ir_lower
from bringup.plan import planner

#: The workflow's configuration file (Snakefile ``configfile:``), read for the params the rules pass.
WORKFLOW_CONFIG = ROOT / "config" / "config.yaml"
#: Tokens of parity's first prompt the bare-folder run must reproduce (certify's default).
RERUN_TOKENS = 16


class Checks:
    """The list of checks: each ``(name, ok, detail)``, printed as it is made."""

    def __init__(self, out=sys.stdout):
        self.rows: list[tuple[str, bool, str]] = []
        self.out = out

    def add(self, name: str, ok: bool, detail: str = "") -> bool:
        self.rows.append((name, bool(ok), detail))
        print(f"{'ok  ' if ok else 'DIFF'}  {name}{': ' + detail if detail else ''}", file=self.out, flush=True)
        return bool(ok)

    def same(self, name: str, recorded: Any, now: Any) -> bool:
        """A recorded value against the value now; the detail shows both when they differ."""
        if recorded == now:
            return self.add(name, True)
        return self.add(name, False, f"recorded {_short(recorded)}, now {_short(now)}")

    def run(self, name: str, fn: Callable[[], tuple[bool, str]]) -> None:
        """A check that may raise: a BringupError is a failed check with its message."""
        try:
            ok, detail = fn()
        except BringupError as e:
            ok, detail = False, str(e)
        self.add(name, ok, detail)

    @property
    def failed(self) -> list[str]:
        return [n for n, ok, _ in self.rows if not ok]


def _short(v: Any) -> str:
    s = str(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _file_sha(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() else None


def _quiet(argv: list[str]) -> int:
    """``bringup argv`` in-process with its output swallowed (it is compared, not shown)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(argv)
    if rc != 0:
        raise BringupError(err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {rc}")
    return rc


def check_recorded_files(c: Checks, cert: dict, res: Path, gguf: Path, entry: registry_mod.ModelEntry) -> None:
    """Every file the certification names, at the SHA-256 it recorded; the GGUF against the pin."""
    prov = cert["provenance"]
    c.same("GGUF sha256 = registry pin", entry.sha256, _file_sha(gguf))
    c.same("GGUF sha256 = certified", prov["model"]["sha256"], _file_sha(gguf))
    fetch = canonjson.read_result(res / "fetch" / "provenance.json", "fetch provenance")
    c.same("fetch provenance: registry source", [u.text for u in entry.sources], fetch.get("uris"))
    c.same("fetch provenance: registry pin", entry.sha256, fetch.get("pinned_sha256"))
    named = {"bump": prov["bump"], "plan": prov["plan"], "build provenance": prov["build"]["provenance"],
             "parity.json": cert["parity"]["parity_json"],
             **{f"convert {k}": v for k, v in prov["convert"].items()},
             **{f"IR {k}": v for k, v in prov["ir"].items()},
             **{f"generated {k}": v for k, v in prov["generated_c"].items()}}
    if cert.get("memory_model"):
        named["memory model"] = cert["memory_model"]
    for what, f in named.items():
        c.same(f"{what} ({f['path']})", f["sha256"], _file_sha(ROOT / f["path"]))
    for name, sha in prov["build"]["artifacts_sha256"].items():
        c.same(f"build artifact {name}", sha, _file_sha(res / "build" / name))
    passed = res / "certify" / "PASSED"
    want = f"pass {sha256_file(res / 'certify' / 'certification.json')}\n" if cert["verdict"] == "pass" else None
    c.same("certify/PASSED names this certification", want, passed.read_text() if passed.is_file() else None)


def check_derived(c: Checks, cert: dict, res: Path, gguf: Path, cfg: dict, model: str) -> None:
    """The cheap deterministic stages derived again here must give the recorded bytes."""
    def conversion():
        plan = convert.plan_conversion(gguf)
        man = canonjson.read_result(res / "convert" / "weights_manifest.json", "weights manifest")
        same = {"config.json": plan["config"] == canonjson.read_result(res / "convert" / "config.json", "config.json"),
                "tokenizer.json": plan["tokenizer"] == canonjson.read_result(res / "convert" / "tokenizer.json", "tokenizer"),
                "weights_manifest.json": {**plan["manifest"], "bump": man.get("bump")} == man}
        bad = [k for k, v in same.items() if not v]
        return not bad, f"differ: {', '.join(bad)}" if bad else ""
    c.run("convert: config, tokenizer, manifest from the GGUF", conversion)

    irs_now: dict[str, dict] = {}

    def ir():
        irs_now.update(ir_lower.compile_ir(canonjson.read_result(res / "convert" / "config.json", "config.json"),
                                           canonjson.read_result(res / "convert" / "weights_manifest.json", "manifest"),
                                           chunk=cfg["prefill_chunk"], n_ctx=cfg["ctx"],
                                           kv_type=cfg["memory"]["kv_dtype"]))   # as rule ir_model passes it
        bad = [ph for ph, doc in irs_now.items()
               if canonjson.sha256(doc) != canonjson.sha256(canonjson.read_result(res / "ir" / f"ir_{ph}.json", "IR"))]
        return not bad, f"differ: {', '.join(bad)} (circuit, kernel maps, ctx, prefill_chunk or memory.kv_dtype changed)" if bad else ""
    c.run("ir: both phases from config, manifest, circuits, kernel maps", ir)

    def plan():
        irs = irs_now or {ph: canonjson.read_result(res / "ir" / f"ir_{ph}.json", "IR") for ph in ir_lower.PHASES}
        ok = canonjson.sha256(planner.plan_irs(irs)) == canonjson.sha256(
            canonjson.read_result(res / "plan" / "memory_plan.json", "memory plan"))
        return ok, "" if ok else "differs"
    c.run("plan: the arena plan from the IR", plan)

    def memory_model():
        with tempfile.TemporaryDirectory(prefix="bringup-review-") as d:
            out = Path(d) / "memory_model_calibrated.json"
            p = res / "plan"
            _quiet(["plan", "memory", "--gguf", str(gguf), "--ctx", str(cfg["ctx"]), "--seqs", str(cfg["memory"]["seqs"]),
                    "--kv-dtype", cfg["memory"]["kv_dtype"], "--chunk", str(cfg["prefill_chunk"]),
                    "--device", cfg["memory"]["device"], "--devices", str(ROOT / "config" / "devices.yaml"),
                    "--memory-plan", str(p / "memory_plan.json"), "--ir-dir", str(res / "ir"),
                    "--calibration", str(p / "runtime_calibration.json"), "--out", str(out)])
            ok = out.read_bytes() == (p / "memory_model_calibrated.json").read_bytes()
        return ok, "" if ok else "differs (config/devices.yaml, memory.* or the calibration changed)"
    c.run("plan: the calibrated memory model", memory_model)

    def generated_c():
        irp = canonjson.read_result(res / "ir" / "ir_prefill.json", "IR")
        sha = codegen.payload_sha_from_manifest(canonjson.read_result(res / "convert" / "weights_manifest.json", "manifest"), irp)
        gen = codegen.emit_sources(irp, canonjson.read_result(res / "ir" / "ir_decode.json", "IR"),
                                   canonjson.read_result(res / "plan" / "memory_plan.json", "plan"), payload_sha256=sha)
        bad = [n for n, text in gen.texts.items() if (res / "codegen" / n).read_text() != text]
        return not bad, f"differ: {', '.join(bad)} (codegen templates or code changed)" if bad else ""
    with contextlib.redirect_stderr(io.StringIO()):   # codegen's own progress lines
        c.run("codegen: model.c and model.h from IR and plan", generated_c)

    def pages():
        with tempfile.TemporaryDirectory(prefix="bringup-review-") as d:
            try:
                certify.render(cert, Path(d), canonjson.read_result(res / "parity" / "parity.json", "parity.json"))
            except jinja2.TemplateError as e:
                return False, f"this checkout's report templates cannot render it ({e}): rerun certify"
            bad = [n for n in ("certification.md", "certification.html")
                   if (Path(d) / n).read_bytes() != (res / "certify" / n).read_bytes()]
        return not bad, f"differ: {', '.join(bad)} (report templates changed: rerun certify)" if bad else ""
    c.run("certify: the pages from certification.json", pages)


def check_inputs(c: Checks, cert: dict, res: Path, cfg: dict, model: str) -> None:
    """Recorded hashes of the inputs of build, calibration and parity against this checkout."""
    build = canonjson.read_result(res / "build" / "provenance.json", "build provenance")
    changed = [p for p, sha in build.get("sources", {}).items() if _file_sha(ROOT / p) != sha]
    c.add(f"build: {len(build.get('sources', {}))} C sources", not changed,
          f"changed: {', '.join(changed[:5])}" if changed else "")
    cal = canonjson.read_result(res / "plan" / "runtime_calibration.json", "calibration")
    c.same("calibration: bringup-run", cal.get("binary_sha256"), _file_sha(res / "build" / "bringup-run"))
    c.same("calibration: libmodel.so", cal.get("library_sha256"), _file_sha(res / "build" / "libmodel.so"))
    parity = canonjson.read_result(res / "parity" / "parity.json", "parity.json")
    inputs = parity["inputs"]
    profiles = ROOT / cfg["parity"]["profiles_dir"]
    profile = profiles / f"{model}.json" if (profiles / f"{model}.json").is_file() else profiles / "default.json"
    c.same("parity: profile", (inputs["profile"]["path"], inputs["profile"]["sha256"]), (rel(profile), _file_sha(profile)))
    # the prompt set the workflow gives this model's parity (bringup.parity.prompt_sets)
    prompts = ROOT / prompt_sets.choose(canonjson.read(profile, "parity profile"), cfg["parity"]["prompts"])[0]
    c.same("parity: prompt set", (inputs["prompt_set"]["path"], inputs["prompt_set"]["sha256"]),
           (rel(prompts), _file_sha(prompts)))
    c.same("parity: threads (config threads)", parity["program"]["threads"], cfg["threads"])
    prog = parity["program"]
    c.same("parity: binaries", (prog["cli_sha256"], prog["lib_sha256"]),
           (_file_sha(res / "build" / "bringup-run"), _file_sha(res / "build" / "libmodel.so")))
    c.same("parity: BUMP payload", prog["weights"]["payload_sha256"], cert["provenance"]["bump"]["payload_sha256"])
    c.same("parity: oracle threads (config parity.oracle_threads)", parity["settings"].get("oracle_threads"),
           cfg["parity"]["oracle_threads"])
    # code is an input of every job (bringup.core.codedeps): each stage's code must be this checkout's
    for stage, rec in sorted(cert["code"]["stages"].items()):
        if stage not in codedeps.STAGES:
            c.add(f"code: {stage!r}", False, "not a stage of this checkout")
            continue
        c.same(f"code: {stage} ({rec['files']} files)", rec["sha256"], codedeps.code_record(stage)["sha256"])
        for rule, sha in sorted(rec.get("recorded", {}).items()):    # what the job that produced it ran
            c.same(f"code: {stage} recorded by {rule}", sha, rec["sha256"])
    c.same("code: parity.json written by this parity code", (parity["settings"].get("code") or {}).get("sha256"),
           codedeps.code_record("parity")["sha256"])


def check_tokens(c: Checks, res: Path, threads: int) -> None:
    """The program, copied to a bare folder, generates what parity recorded for its first prompt."""
    first = canonjson.read_result(res / "parity" / "parity.json", "parity.json")["prompts"][0]
    expect = first["greedy"]["ours"][:RERUN_TOKENS]
    run = certify.standalone_run(res / "build" / "bringup-run", res / "build" / "libmodel.so",
                                 res / "convert" / "weights.bump", first["tokens"], expect, threads)
    c.add(f"rerun: {len(expect)} recorded tokens of prompt {first['id']} from a bare folder", run["ok"],
          "" if run["ok"] else f"generated {run.get('generated_tokens')}; {run.get('problems')}")


def snakemake(args: list[str]) -> subprocess.CompletedProcess:
    """The workflow's Snakemake (beside this Python) in the checkout, output captured."""
    exe = Path(sys.executable).parent / "snakemake"
    return subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True, timeout=1800)


def touch(model: str) -> str:
    """``snakemake --touch certify`` for ``model``, then a dry run that must have nothing to do.
    Returns the dry run's verdict line; raises IntegrityError when jobs still want to run."""
    cfg = ["--config", f"model={model}"]
    t = snakemake(["--touch", "certify", *cfg])
    if t.returncode != 0:
        raise IntegrityError(f"snakemake --touch failed: {(t.stderr or t.stdout).strip().splitlines()[-1:]}")
    dry = snakemake(["-n", "certify", *cfg])
    out = dry.stdout + dry.stderr
    if dry.returncode != 0 or "Nothing to be done" not in out:
        raise IntegrityError("after --touch, `snakemake -n certify` still plans jobs: "
                             + " ".join(out.strip().splitlines()[-6:]))
    return "snakemake -n certify: nothing to be done"
