"""``bringup export``: a certified program as a relocatable bundle and its deterministic archive.

Reads ``results/{model}/`` (certify, build, convert, parity, plan) and writes
``OUT/<model>-<isa>/`` and ``OUT/<model>-<isa>.tar.gz`` (docs/export.md):

- ``bringup-run``, ``libmodel.so``, ``weights.bump`` at the top (the layout ``bringup-run -m DIR``
  expects), with the convert stage's ``weights_manifest.json`` beside the weights (where the chat
  loop reads the source of its chat format, so it names it instead of "not recorded here"), ``certify/certification.{json,html}`` and the plots the HTML shows under ``parity/``
  (so its ``../parity/`` links still work);
- ``bundle.json`` (schema ``bundle``): every other file with its SHA-256 and size, the CPU
  features the code needs (bringup.core.isa), the memory at the planned context (the memory
  model), the libraries (NEEDED sonames; what the certified run loaded), the provenance back to
  the pinned registry URI, which of two fixed command forms the CLI takes (``run``), and the
  check: the certification's recorded prompt tokens and greedy tokens;
- ``SHA256SUMS`` (every file incl. bundle.json, for ``sha256sum -c``), ``verify.sh`` (the check
  without Python) and ``README.md`` for the receiver;
- with ``--sign-key KEY``, ``bundle.json.sig``: an OpenSSH signature of bundle.json
  (bringup.export.signing).

bundle.json holds no command line: ``run`` only says which of the two fixed forms of
:func:`run_argv` this build of the CLI takes, and ``bringup verify`` builds the command itself.

Nothing in it names the build machine (bringup.export.relocatable), nothing in it depends on the
time, so two exports of the same results are byte-identical, archive included.

Errors: GateError (6) for a certification that did not pass; IntegrityError (3) when a file
differs from what the certification recorded (a rebuilt binary, a reconverted BUMP, another
parity run, a parity.json edited after certification), a certification.json that no longer
hashes to what ``certify/PASSED`` recorded (edited after certification), or the registry pin
moved; UnsupportedError (4) for an ISA it cannot name; BringupError (2) for a missing input. The bundle folder and its archive appear as a pair, complete
or not at all; a failed or interrupted export leaves the previous pair as it was.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Sequence

import jinja2

from bringup.core import canonjson
from bringup.core.errors import BringupError, GateError, IntegrityError
from bringup.core.hashing import sha256_file
from bringup.core.native import run_command
from bringup.core.paths import CONFIG, KERNEL_MAPS, ROOT
from bringup.core.schemas import validate
from bringup.core import isa
from bringup.export import archive, relocatable, signing
from bringup.fetch import registry
from bringup.ir import kernel_maps

TEMPLATES = Path(__file__).parent / "templates"
#: Files of the program, at the top of the bundle (the layout of ``bringup-run -m DIR``).
PROGRAM = {"bringup-run": ("build/bringup-run", "cli"), "libmodel.so": ("build/libmodel.so", "library"),
           "weights.bump": ("convert/weights.bump", "weights")}
#: The convert stage's record of the weights, beside them: the chat loop names its chat format's
#: source from it (csrc/cli/model_files.c); its ``bump`` hashes must be the certified BUMP's.
WEIGHTS_MANIFEST = {"weights_manifest.json": ("convert/weights_manifest.json", "weights-manifest")}
#: Certification reports in the bundle (the .md stays behind: the HTML is the same content).
REPORTS = {"certify/certification.json": "certification", "certify/certification.html": "report"}
#: Files bundle.json does not list (it lists every other file; SHA256SUMS covers it; the signature
#: signs it), each with the most bytes it may have (smollm2's bundle.json: 13 kB; see docs/export.md).
UNHASHED = {"bundle.json": 1 << 20, "SHA256SUMS": 64 << 10, signing.SIG_NAME: 16 << 10}
EXECUTABLE = {"bringup-run", "libmodel.so", "verify.sh"}


def _portable(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` (the results folder) or the checkout, else its name alone:
    the bundle names no folder of the build machine."""
    p = Path(path).resolve()
    for root in (Path(base).resolve(), ROOT):
        if p.is_relative_to(root):
            return p.relative_to(root).as_posix()
    return p.name


def _certified(res: Path) -> dict:
    """certification.json of ``res``, checked: it passed, it is byte for byte the one
    ``certify/PASSED`` names (the workflow's verdict marker records its SHA-256), parity.json is
    the one it names, and the program files are the ones it certified."""
    path = res / "certify" / "certification.json"
    cert = canonjson.read(path, "certification.json (run `snakemake certify`)")
    validate(cert, "certification", "certification.json")
    if cert["verdict"] != "pass":
        raise GateError(f"{cert['model']} is not certified (failed: {', '.join(cert['failed_gates'])}); "
                        "only a passing certification is exported")
    passed, sha = res / "certify" / "PASSED", sha256_file(path)
    if not passed.is_file():
        raise BringupError(f"{passed} not found: the workflow's verdict marker (run `snakemake certify`)")
    if passed.stat().st_size > 100 or passed.read_text(errors="replace") != f"pass {sha}\n":
        raise IntegrityError(f"{path} (sha256 {sha[:12]}) is not the certification {passed} recorded: "
                             "edited after certification; run `snakemake certify` again")
    pj, ppath = cert["parity"]["parity_json"], res / "parity" / "parity.json"
    if sha256_file(ppath, "parity.json") != pj["sha256"]:
        raise IntegrityError(f"{ppath} is not the parity.json the certification names (sha256 {pj['sha256'][:12]}): "
                             "edited or rerun after certification")
    prov = cert["provenance"]
    want = {**prov["build"]["artifacts_sha256"], "weights.bump": prov["bump"]["sha256"]}
    for name, (src, _) in PROGRAM.items():
        if sha256_file(res / src) != want[name]:
            raise IntegrityError(f"{res / src} differs from the file certified (rebuilt or reconverted "
                                 "after certification): run `snakemake certify` again")
    wm = res / WEIGHTS_MANIFEST["weights_manifest.json"][0]
    recorded = canonjson.read(wm, "weights_manifest.json (run `snakemake convert`)").get("bump")
    if not isinstance(recorded, dict) or recorded.get("payload_sha256") != prov["bump"]["payload_sha256"]:
        raise IntegrityError(f"{wm} does not describe the certified weights.bump (payload sha256 "
                             f"{prov['bump']['payload_sha256'][:12]}): reconverted after certification")
    return cert


def recorded_check(cert: dict, res: Path, threads: int) -> dict[str, Any]:
    """The prompt and greedy tokens of the certification's standalone run. The prompt is the
    run's own record when it has one, else parity.json's first prompt (the one that run used),
    after checking that parity.json is the file the certification names and agrees with it."""
    run = cert["standalone"]["run"]
    expect = [int(t) for t in run["expected_tokens"]]
    tokens, source = run.get("prompt_tokens"), "certification.json standalone.run.prompt_tokens"
    if tokens is None:
        pj = cert["parity"]["parity_json"]  # _certified checked that parity.json hashes to it
        first = canonjson.read(res / "parity" / "parity.json", "parity.json")["prompts"][0]
        tokens, source = first["tokens"], f"parity.json prompt {first['id']!r} (sha256 {pj['sha256'][:12]}), the standalone run's prompt"
        if first["greedy"]["ours"][: len(expect)] != expect:
            raise IntegrityError("the certification's standalone tokens are not parity.json's first greedy run")
    return {"prompt_tokens": [int(t) for t in tokens], "expected_tokens": expect, "threads": threads,
            "source": source}


def isa_requirement(cert: dict) -> dict[str, Any]:
    """bringup.core.isa.requirement for the certified build: its ISA flags and the ISA
    extensions of every kernel provider it uses (their kernel maps' selection.isa)."""
    b = cert["provenance"]["build"]
    maps = kernel_maps.load_maps(KERNEL_MAPS)
    used = cert["provenance"]["kernel_maps"]
    lost = sorted(set(used) - set(maps))
    if lost:
        raise BringupError(f"kernel maps of certified providers not found: {', '.join(lost)}")
    return isa.requirement(b["machine"], b["isa_flags"], {pid: maps[pid].selection.get("isa", []) for pid in used})


def memory(path: Path, cert: dict) -> dict[str, Any]:
    """The memory the program needs at its planned context, from memory-model JSON ``path``
    (bytes), checked to be the model of the certified memory plan."""
    mm = canonjson.read(path, "memory model JSON (plan/memory_model*.json)")
    validate(mm, "memory_model", str(path))
    if mm["inputs"]["memory_plan_sha256"] != cert["provenance"]["plan"]["sha256"]:
        raise IntegrityError(f"{path} was computed for another memory plan than the certified one")
    p = mm["params"]
    return {"total_bytes": mm["total_bytes"], "ctx": p["ctx"], "seqs": p["seqs"], "kv_dtype": p["kv_dtype"],
            "prefill_chunk": p["chunk"], "complete": mm["complete"], "missing": mm["missing"],
            "components": {c["name"]: c["bytes"] for c in mm["components"]},
            "source": {"path": _portable(path, path.parent.parent), "sha256": sha256_file(path)}}


def provenance(cert: dict, registry_path: Path) -> dict[str, Any]:
    """The chain back to the pinned model: the registry entry (checked against the certified
    GGUF), the certification's provenance (BUMP, circuit, kernel maps, IR, plan, C, build)."""
    entry = registry.load(registry_path).model(cert["model"])
    model = cert["provenance"]["model"]
    if entry.sha256 != model["sha256"]:
        raise IntegrityError(f"registry {registry_path} pins {cert['model']} to sha256 {str(entry.sha256)[:12]}, "
                             f"the certified GGUF is {model['sha256'][:12]}: certify again")
    return {"model": model,
            "registry": {"path": _portable(registry_path, ROOT), "uris": [u.text for u in entry.sources],
                         "requires": [u.text for u in entry.requires], "sha256": entry.sha256},
            "chain": {k: v for k, v in cert["provenance"].items() if k != "model"}}


def run_form(cli: Path) -> dict[str, Any]:
    """How the bundle's CLI is started from the bundle folder (bundle.json ``run``): whether this
    build of bringup-run has ``-m DIR`` (its --help lists ``-m``). No command line: see run_argv."""
    p = run_command([str(cli), "--help"], timeout_s=30, what="bringup-run --help", env={})
    return {"model_dir_option": p.returncode == 0 and re.search(rb"^\s*-m[ ,]", p.stdout, re.M) is not None}


def run_argv(model_dir_option: bool) -> list[str]:
    """The command that starts the bundle's CLI from the bundle folder: one of two fixed forms,
    chosen by the boolean bundle.json ``run.model_dir_option`` (nothing else from a bundle)."""
    if not isinstance(model_dir_option, bool):
        raise IntegrityError(f"bundle.json run.model_dir_option is a {type(model_dir_option).__name__}, not a boolean")
    return ["./bringup-run", "-m", "."] if model_dir_option else ["./bringup-run", "./libmodel.so", "./weights.bump"]


def _file_entry(folder: Path, name: str, role: str) -> dict[str, Any]:
    p = folder / name
    return {"path": name, "role": role, "size": p.stat().st_size, "sha256": sha256_file(p)}


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=False,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.globals["mib"] = lambda b: f"{b / 2**20:,.0f}"
    env.globals.update(run_argv=run_argv, program=sorted(PROGRAM), sig_name=signing.SIG_NAME,
                       namespace=signing.NAMESPACE)
    return env


def sha256sums(folder: Path, names: Sequence[str]) -> str:
    """``sha256sum`` output for ``names`` in ``folder`` (sorted)."""
    return "".join(f"{sha256_file(folder / n)}  {n}\n" for n in sorted(names))


def _fill(stage: Path, res: Path, cert: dict, manifest: dict) -> None:
    """Copy the files into ``stage`` and write verify.sh, README.md, bundle.json, SHA256SUMS."""
    files = PROGRAM | WEIGHTS_MANIFEST
    roles = {n: r for n, (_, r) in files.items()} | dict(REPORTS)
    sources = {n: res / s for n, (s, _) in files.items()} | {n: res / n for n in REPORTS}
    for plot in cert["parity"]["plots"]:  # certification.html shows them as ../parity/<name>
        if not isinstance(plot, str) or not _PLOT.fullmatch(plot):
            raise IntegrityError(f"certification.json parity.plots names {plot!r}, not a plain file name in parity/")
        sources[f"parity/{plot}"], roles[f"parity/{plot}"] = res / "parity" / plot, "plot"
    for name, src in sorted(sources.items()):
        if not src.is_file():
            raise BringupError(f"export: {src} not found (the certification lists it)")
        (stage / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, stage / name)
    needed = {n: relocatable.check_elf(stage / n, n) for n in sorted(sources) if relocatable.is_elf(stage / n)}
    manifest["libraries"].update(needed=needed, needed_sonames=sorted({s for v in needed.values() for s in v}))
    write_manifest(stage, manifest, roles)


def write_manifest(stage: Path, manifest: dict, roles: dict[str, str]) -> None:
    """Render verify.sh and README.md into ``stage`` (which holds the files ``roles`` names: path
    -> role), list every file with its size and SHA-256 in ``manifest["files"]``, set the modes,
    and write bundle.json (schema-checked) and SHA256SUMS."""
    roles = dict(roles)
    env = _env()
    (stage / "verify.sh").write_text(env.get_template("verify.sh.j2").render(**manifest))
    roles["verify.sh"] = "check"
    manifest["files"] = [_file_entry(stage, n, roles[n]) for n in sorted(roles)]
    (stage / "README.md").write_text(env.get_template("README.md.j2").render(b=manifest))
    roles["README.md"] = "readme"
    manifest["files"] = [_file_entry(stage, n, roles[n]) for n in sorted(roles)]
    for name in roles:
        os.chmod(stage / name, 0o755 if name in EXECUTABLE else 0o644)
    validate(manifest, "bundle", "bundle.json")
    canonjson.write(stage / "bundle.json", manifest)
    (stage / "SHA256SUMS").write_text(sha256sums(stage, [*roles, "bundle.json"]))
    for name in ("bundle.json", "SHA256SUMS"):
        os.chmod(stage / name, 0o644)


#: The top-level names an export writes into its bundle folder: an existing folder of that name
#: may hold only these (atomic_dir refuses to discard anything else). A fixed set, not read from
#: the previous bundle.json, so a folder Snakemake emptied of its declared outputs is still ours.
OWNED = {*PROGRAM, *WEIGHTS_MANIFEST, *UNHASHED, "certify", "parity", "verify.sh", "README.md"}


def bundle_files(plots: Sequence[str]) -> list[str]:
    """The paths of a bundle's files (bundle.json's ``files`` and the unlisted bundle.json and
    SHA256SUMS; an unsigned bundle) when its certification shows the parity ``plots``: the
    outputs rule export_model declares."""
    return sorted([*PROGRAM, *WEIGHTS_MANIFEST, *REPORTS, *(f"parity/{p}" for p in plots), "verify.sh", "README.md",
                   "bundle.json", "SHA256SUMS"])


_PLOT = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,99}")


def export(model: str, res: Path, out_dir: Path, memory_model: Path, registry_path: Path = CONFIG / "models.yaml",
           threads: int = 2, expect_name: str | None = None, sign_key: Path | None = None) -> tuple[Path, Path, dict]:
    """Write the bundle of ``model`` from results folder ``res`` into ``out_dir``; returns
    (bundle folder, archive, manifest). ``expect_name``: fail (exit 2) unless the bundle gets
    this name. ``sign_key``: an OpenSSH key to sign bundle.json with (bringup.export.signing).
    Raises as listed in the module docstring."""
    res, out_dir = Path(res), Path(out_dir)
    cert = _certified(res)
    if cert["model"] != model:
        raise BringupError(f"{res}/certify/certification.json certifies {cert['model']!r}, not {model!r}")
    req = isa_requirement(cert)
    name = f"{model}-{req['name']}"
    if expect_name is not None and name != expect_name:
        raise BringupError(f"the certified build of {model} is for {req['name']}, so its bundle is {name}; "
                           f"the caller expected {expect_name} (rules/export.smk names it from the build flags)")
    ldd = {k: [re.sub(r"\s*\(0x[0-9a-f]+\)$", "", line) for line in v["libraries"]]
           for k, v in cert["standalone"]["ldd"].items()}
    manifest = {
        "schema_version": 2, "name": name, "model": model, "isa": req,
        "memory": memory(memory_model, cert), "provenance": provenance(cert, registry_path),
        "certification": {"path": "certify/certification.json", "verdict": cert["verdict"],
                          "sha256": sha256_file(res / "certify" / "certification.json")},
        "run": run_form(res / PROGRAM["bringup-run"][0]), "check": recorded_check(cert, res, threads),
        "libraries": {"certified_ldd": ldd, "certified_loaded": cert["standalone"]["run"].get("loaded")},
    }
    final, tar = out_dir / name, out_dir / f"{name}.tar.gz"

    def fill(stage: Path) -> None:
        _fill(stage, res, cert, manifest)
        names = [str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file()]
        relocatable.check_no_paths(stage, names, [ROOT, res, out_dir, stage])
        if sign_key is not None:
            signing.sign(stage, sign_key)

    # folder and archive appear as a pair, complete, or not at all: a failed or interrupted export
    # leaves the previous bundle and its archive as they were
    archive.write_folder_and_archive(final, tar, OWNED, fill)
    return final, tar, manifest
