"""Build the libFuzzer targets (csrc/fuzz, bringup.build.sources.FUZZ) and run fuzzing campaigns.

    .venv/bin/python tests/fuzz/run.py                       # 1,000,000 executions per campaign
    .venv/bin/python tests/fuzz/run.py --runs 20000 --max-time 8 --campaign bump
    .venv/bin/python tests/fuzz/run.py --replay              # only replay tests/fuzz/regressions
    .venv/bin/python tests/fuzz/run.py --merge               # minimise tests/fuzz/corpus/* in place
    .venv/bin/python tests/fuzz/run.py --write-seeds         # regenerate the seed corpora

Campaigns (docs/fuzzing.md): ``bump`` (fuzz_bump), ``tok_load`` (fuzz_tok_load), ``chat`` (fuzz_chat),
``server_request`` (fuzz_server_request: bringup-run --server's request head, JSON and body readers) and
``tok_encode_smollm2`` / ``tok_encode_gemma3`` (fuzz_tok_encode on that model's packed tokenizer
blob, made from its pinned GGUF, fetched through ``bringup.fetch``). Each campaign starts from
the committed corpus ``tests/fuzz/corpus/<campaign>/`` (read only) plus a work folder that
receives new inputs; crashes, leaks, timeouts and out-of-memory inputs are written to
``<work>/crashes/<campaign>/``. Every file of ``tests/fuzz/regressions/<target>/`` is replayed
first. Exit 0 when nothing crashed, 1 when something did, 5 when clang or libFuzzer is missing.

Targets are compiled by the project's one compiler driver (``bringup.build.compiler.gcc``) with
clang: ``-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:   # run as a script: make `bringup` and `tests` importable
    sys.path.insert(0, str(ROOT))

from bringup.build import compiler, sources  # noqa: E402
from bringup.core.errors import BringupError  # noqa: E402

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
INSTALL_HINT = ("clang with libFuzzer is missing: `bash bootstrap.sh --test` installs it "
                "(Debian: apt-get install clang libclang-rt-dev)")

#: SHA-256 (csrc/runtime/bu_sha256.c, checked against hashlib by tests/test_runtime.py) is left
#: uninstrumented: hashing every mutated file dominates the BUMP target's time otherwise
IGNORELIST = HERE / "sanitizer_ignorelist.txt"
CFLAGS = ("-std=c11", "-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
          "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror", f"-fsanitize-ignorelist={IGNORELIST}",
          f"-fsanitize-coverage-ignorelist={IGNORELIST}")
#: target -> the csrc files it is linked with (the component it fuzzes)
LINKS = {
    "fuzz_bump": (*sources.COMMON, "runtime/bu_bump.c", "runtime/bu_sha256.c"),
    "fuzz_tok_load": (*sources.COMMON, *sources.TOKENIZER),
    "fuzz_tok_encode": (*sources.COMMON, *sources.TOKENIZER),
    "fuzz_chat": (*sources.COMMON, "cli/util.c", "cli/chat.c"),
    "fuzz_server_request": ("cli/bu_http.c", "cli/bu_request.c", "cli/bu_json.c"),
}
#: campaign -> (target, model whose tokenizer blob it loads or None, extra libFuzzer options).
#: A model is a pinned model or "vocab:<name>", llama.cpp's models/ggml-vocab-<name>.gguf (the
#: pre-tokenizers and the tokenizer model of issue 32: default, deepseek-llm/-coder, qwen35, gemma4).
#: gemma3's texts are capped: its 6k user-defined tokens are searched in every text (as llama.cpp)
CAMPAIGNS = {
    "bump": ("fuzz_bump", None, ()),
    "tok_load": ("fuzz_tok_load", None, ()),
    "chat": ("fuzz_chat", None, ()),
    "tok_encode_smollm2": ("fuzz_tok_encode", "smollm2", ()),
    "tok_encode_gemma3": ("fuzz_tok_encode", "gemma3", ("-max_len=160",)),
    "tok_encode_default": ("fuzz_tok_encode", "vocab:gpt-neox", ()),
    "tok_encode_deepseek_llm": ("fuzz_tok_encode", "vocab:deepseek-llm", ()),
    "tok_encode_deepseek_coder": ("fuzz_tok_encode", "vocab:deepseek-coder", ()),
    "tok_encode_qwen35": ("fuzz_tok_encode", "vocab:qwen35", ()),
    "tok_encode_gemma4": ("fuzz_tok_encode", "vocab:gemma-4", ()),
    "server_request": ("fuzz_server_request", None, ("-max_len=4096", f"-dict={HERE / 'server_request.dict'}")),
}
assert {f"fuzz/{t}.c" for t in LINKS} == set(sources.FUZZ)


def require_clang() -> str:
    """Path of clang, checked to link a libFuzzer program. Raises BringupError (exit 5) otherwise."""
    cc = shutil.which("clang")
    if not cc:
        raise BringupError(INSTALL_HINT, 5)
    r = subprocess.run([cc, "-print-file-name=libclang_rt.fuzzer-x86_64.a"], capture_output=True, text=True)
    if r.returncode != 0 or not Path(r.stdout.strip()).is_file():
        raise BringupError(INSTALL_HINT, 5)
    return cc


def build(target: str, out_dir: Path) -> Path:
    """Compile fuzz target ``target`` (a LINKS key) into ``out_dir``; returns the executable."""
    cc = require_clang()
    exe = out_dir / target
    # the CLI's headers are found beside its files, not by -I: a target that fuzzes a CLI file names the folder
    cli = [sources.CSRC / sources.CLI_HEADER_DIR] if any(f.startswith("cli/") for f in LINKS[target]) else []
    compiler.gcc(sources.paths((f"fuzz/{target}.c",), LINKS[target]), exe, [*sources.include_dirs(), *cli], (),
                 cflags=CFLAGS, cc=cc)
    return exe


def tokenizer_blob(model: str, out_dir: Path) -> Path:
    """The packed tokenizer blob of ``model`` (bringup.formats.tokenizer_pack of its pinned GGUF's
    tokenizer, or of llama.cpp's ``ggml-vocab-<name>.gguf`` for ``vocab:<name>``), written once
    into ``out_dir``."""
    from bringup.fetch.sources import fetch_model, fetch_resource
    from bringup.formats import gguf_file, tokenizer_json, tokenizer_pack

    out = out_dir / f"{model.replace(':', '_')}.tokblob"
    if not out.is_file():
        if model.startswith("vocab:"):
            path = Path(fetch_resource("llama_cpp_vocab")) / f"ggml-vocab-{model[6:]}.gguf"
        else:
            path = fetch_model(model)
        reader = gguf_file.read_header(path).reader
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(tokenizer_pack.pack(tokenizer_json.from_gguf(reader)))
    return out


def _env(model: str | None, work: Path) -> dict:
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:allocator_may_return_null=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    if model:
        env["BU_FUZZ_TOK_BLOB"] = str(tokenizer_blob(model, work / "blobs"))
    return env


def replay(campaign: str, exe: Path, work: Path) -> dict:
    """Run every file of ``tests/fuzz/regressions/<target>/`` once through ``exe``."""
    target, model, _ = CAMPAIGNS[campaign]
    files = sorted(p for p in (REGRESSIONS / target).glob("*") if p.is_file())
    if not files:
        return {"files": 0, "ok": True}
    r = subprocess.run([str(exe), "-runs=1", *map(str, files)], capture_output=True, text=True,
                       env=_env(model, work), timeout=600)
    return {"files": len(files), "ok": r.returncode == 0, "log": r.stderr[-4000:] if r.returncode else ""}


def campaign(name: str, exe: Path, work: Path, runs: int, max_time: int | None) -> dict:
    """Run ``exe`` for ``runs`` executions (or ``max_time`` seconds, whichever ends first) from the
    committed corpus. Returns executions, seconds, exec/s, new corpus size and crash files."""
    target, model, extra = CAMPAIGNS[name]
    grow = work / "corpus" / name
    crashes = work / "crashes" / name
    grow.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    argv = [str(exe), f"-runs={runs}", "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1",
            f"-artifact_prefix={crashes}/", *extra, str(grow), str(CORPUS / name)]
    if max_time:
        argv.insert(2, f"-max_total_time={max_time}")
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=_env(model, work))
    secs = time.monotonic() - t0
    stats = dict(re.findall(r"stat::(\w+):\s+(\d+)", r.stderr))
    execs = int(stats.get("number_of_executed_units", 0))
    found = sorted(str(p) for p in crashes.iterdir())
    return {"campaign": name, "target": target, "executions": execs, "seconds": round(secs, 1),
            "exec_per_sec": int(stats.get("average_exec_per_sec", 0)), "peak_rss_mb": int(stats.get("peak_rss_mb", 0)),
            "new_inputs": len(list(grow.iterdir())), "crashes": found, "ok": r.returncode == 0 and not found,
            "log": r.stderr[-4000:] if r.returncode else ""}


def merge(name: str, exe: Path, work: Path) -> int:
    """Minimise ``tests/fuzz/corpus/<name>`` together with the work corpus (libFuzzer -merge=1):
    the committed folder is replaced by the inputs that keep the coverage. Returns the file count."""
    target, model, _ = CAMPAIGNS[name]
    out = work / "merged" / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    grow = work / "corpus" / name
    grow.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([str(exe), "-merge=1", str(out), str(CORPUS / name), str(grow)], capture_output=True,
                       text=True, env=_env(model, work))
    if r.returncode != 0:
        raise BringupError(f"merge of {name} failed: {r.stderr[-2000:]}")
    dest = CORPUS / name
    for p in dest.iterdir():
        p.unlink()
    for p in out.iterdir():
        shutil.copy2(p, dest / p.name)
    return len(list(dest.iterdir()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tests/fuzz/run.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaign", action="append", choices=sorted(CAMPAIGNS), help="campaign(s) to run (default: all)")
    ap.add_argument("--runs", type=int, default=1_000_000, help="executions per campaign (libFuzzer -runs)")
    ap.add_argument("--max-time", type=int, help="seconds per campaign at most (libFuzzer -max_total_time)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bringup-fuzz"), help="work folder (binaries, crashes)")
    ap.add_argument("--replay", action="store_true", help="only replay tests/fuzz/regressions")
    ap.add_argument("--merge", action="store_true", help="after running, minimise the committed corpora in place")
    ap.add_argument("--write-seeds", action="store_true", help="regenerate the seed corpora (tests/fuzz/seeds.py)")
    ap.add_argument("--json", type=Path, help="write the results as JSON here")
    a = ap.parse_args(argv)
    try:
        if a.write_seeds:
            from tests.fuzz import seeds
            for name, n in seeds.write_all(CORPUS, a.work).items():
                print(f"seeds {name}: {n} files")
            return 0
        names = a.campaign or list(CAMPAIGNS)
        bins = {t: build(t, a.work / "bin") for t in sorted({CAMPAIGNS[n][0] for n in names})}
        results, ok = [], True
        for name in names:
            exe = bins[CAMPAIGNS[name][0]]
            rep = replay(name, exe, a.work)
            ok &= rep["ok"]
            print(f"{name}: replayed {rep['files']} regression inputs: {'ok' if rep['ok'] else 'CRASH'}", flush=True)
            if not rep["ok"]:
                print(rep["log"], file=sys.stderr)
            if a.replay:
                continue
            res = campaign(name, exe, a.work, a.runs, a.max_time)
            res["replayed"] = rep["files"]
            results.append(res)
            ok &= res["ok"]
            print(f"{name}: {res['executions']} executions in {res['seconds']} s ({res['exec_per_sec']} exec/s, "
                  f"peak RSS {res['peak_rss_mb']} MB), {len(res['crashes'])} crashes", flush=True)
            if not res["ok"]:
                print(res["log"], file=sys.stderr)
            if a.merge:
                print(f"{name}: corpus minimised to {merge(name, exe, a.work)} files", flush=True)
        if a.json:
            a.json.write_text(json.dumps(results, indent=1) + "\n")
        return 0 if ok else 1
    except BringupError as e:
        print(f"tests/fuzz/run.py: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
