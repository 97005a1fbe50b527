"""llama-cli's habits in bringup-run (issue 33 section 2; csrc/cli/args.c, csrc/cli/habits.c,
docs/runtime.md "llama-cli's options"): getopt_long parsing with llama.cpp's single-dash names, the
nearest option for a typo, -ngl / --no-mmap notes, -cnv / -no-cnv / -st, --ignore-eos, -r, -e,
the prompt's echo (--no-display-prompt, --color), -b, --mlock, and --timing's llama_perf lines.

The program and fixtures are test_cli_native's (the smollm2 build, or BRINGUP_TEST_SMOLLM2_BUILD)."""
from __future__ import annotations

import json
import re
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.native_cli import FAST, cli, err_of, one_line_error


@pytest.fixture(scope="session")
def build(native_build) -> Path:
    """The smollm2 program's folder (tests/helpers/native_cli.py); overrides the kernel library's
    ``build`` for this module."""
    return native_build

PROMPT = "The capital of France is"


def run_ok(build, *args, **kw) -> subprocess.CompletedProcess:
    r = cli(build, "-m", build, *args, **kw)
    assert r.returncode == 0, err_of(r)
    return r


def ids(r) -> list[int]:
    return json.loads(r.stdout)["generated_tokens"]


# ---- parsing (no model opened) ----

@pytest.mark.parametrize("args,needle", [
    (["--tmep", "1"], "unknown option --tmep; did you mean --temp?"),
    (["--n-gpu-layer", "9"], "did you mean --n-gpu-layers?"),
    (["--verbos"], "did you mean --verbose?"),
    (["-ngll", "9"], "unknown option -ngll; did you mean -ngl?"),
    (["--no-display-promt"], "did you mean --no-display-prompt?"),
    (["--max", "3"], "unknown option --max (see --help)"),            # abbreviations are not taken
    (["-fx"], "unknown option -fx"),                                   # never read as -f x
    (["-fa"], "-fa needs a value"), (["-fa", "yes"], "-fa: 'yes' is not on, off or auto"),
    (["-iv"], "unknown option -iv"), (["-n5"], "unknown option -n5"),  # no bundles, no glued values
    (["-ngl", "x"], "-ngl x: must be an integer >= -1, auto or all"), (["-ngl", "-2"], "-ngl -2"),
    (["-ngl"], "-ngl needs a value (N)"), (["--n-gpu-layers=x"], "--n-gpu-layers x"),
    (["-b", "0"], "-b 0: must be an integer >= 1"), (["--batch-size", "x"], "--batch-size x"),
    (["-r", ""], "-r: empty text"), (["--mlock=1"], "--mlock takes no value"),
    (["-no-cnv"], "-no-cnv runs one prompt"), (["-no-cnv", "-cnv", "-p", "a"], "contradicts -i/-cnv"),
    (["-st", "--prompt-tokens", "1"], "-st formats a chat turn"), (["-e", "--prompt-tokens", "1"], "-e processes"),
    (["-cnv", "--json"], "apply to a one-shot run"),
    (["-p", "a", "-e", "--system", "s"], "--system applies to --chat"),
])
def test_usage_errors(cli_only, args, needle):
    e = one_line_error(cli(cli_only, "lib.so", "w.bump", *args), 2, needle)
    assert "\n" not in e.strip()


def test_typo_of_a_short_word_gets_no_wild_guess(cli_only):
    e = one_line_error(cli(cli_only, "lib.so", "w.bump", "--bogus"), 2, "unknown option --bogus (see --help)")
    assert "did you mean" not in e
    e = one_line_error(cli(cli_only, "lib.so", "w.bump", "-x"), 2, "unknown option -x (see --help)")


def test_help_lists_the_llama_options(cli_only):
    out = cli(cli_only, "--help").stdout.decode()
    for name in ("-ngl", "--n-gpu-layers", "-fa", "--flash-attn", "-cnv", "--conversation", "-no-cnv", "--no-conversation", "-st",
                 "--single-turn", "--color", "--ignore-eos", "-r", "--reverse-prompt", "-e", "--escape", "--no-escape",
                 "--no-display-prompt", "-b", "--batch-size", "--mlock", "--no-mmap"):
        assert re.search(rf"(^|[\s,(]){re.escape(name)}([\s,)=]|$)", out, re.M), name


def test_values_may_start_with_a_dash_and_positionals_come_anywhere(cli_only):
    # -p's value "-cnv" is a prompt, not an option; the library comes after the options: refused
    # only for the library that is not there (exit 5), so parsing went through
    r = cli(cli_only, "-p", "-cnv", "-n", "-1", "--temp=0.5", "lib.so", "--", "w.bump")
    assert r.returncode == 5 and "lib.so" in err_of(r), err_of(r)


# ---- runs ----

def test_prompt_is_echoed_unless_no_display_prompt(build, tmp_path):
    a = run_ok(build, "-p", PROMPT, "-n", "4", *FAST)
    b = run_ok(build, "-p", PROMPT, "-n", "4", "--no-display-prompt", *FAST)
    j = run_ok(build, "-p", PROMPT, "-n", "4", "--json", *FAST)
    assert a.stdout == PROMPT.encode() + b.stdout and not b.stdout.startswith(PROMPT.encode())
    assert json.loads(j.stdout)["text"].encode() + b"\n" == b.stdout   # the answer alone, one newline
    t = run_ok(build, "--prompt-tokens", "1,2,3", "-n", "2", *FAST)   # ids are not echoed
    assert not t.stdout.startswith(b"1,2,3")
    c = run_ok(build, "-p", PROMPT, "-n", "4", "--color", *FAST)       # a pipe: no color codes
    assert c.stdout == a.stdout
    r = run_ok(build, "-p", PROMPT, "-n", "1", "--all-logits", tmp_path / "l.f32", *FAST)   # also when recording
    assert r.stdout.startswith(PROMPT.encode())


def test_escape(build):
    plain = run_ok(build, "-p", "a\\tb", "-n", "0", "--json", *FAST)
    esc = run_ok(build, "-p", "a\\tb", "-e", "-n", "0", "--json", *FAST)
    tab = run_ok(build, "-p", "a\tb", "-n", "0", "--json", *FAST)
    assert json.loads(esc.stdout)["prompt_tokens"] == json.loads(tab.stdout)["prompt_tokens"]
    assert json.loads(plain.stdout)["prompt_tokens"] != json.loads(tab.stdout)["prompt_tokens"]
    off = run_ok(build, "-p", "a\\tb", "-e", "--no-escape", "-n", "0", "--json", *FAST)
    assert json.loads(off.stdout)["prompt_tokens"] == json.loads(plain.stdout)["prompt_tokens"]
    echo = run_ok(build, "-p", "x\\x41\\n\\q", "-e", "-n", "0", *FAST)
    assert echo.stdout == b"xA\n\\q\n"   # \xHH and \n processed, an unknown escape kept as typed
    one_line_error(cli(build, "-m", build, "-p", "a\\x00b", "-e", *FAST), 2, "\\x00 at byte 1")


def test_ignore_eos_is_no_stop_and_reverse_prompt_stops(build):
    a = run_ok(build, "-p", PROMPT, "-n", "12", "--no-stop", "--json", *FAST)
    b = run_ok(build, "-p", PROMPT, "-n", "12", "--ignore-eos", "--json", *FAST)
    assert ids(a) == ids(b) and len(ids(a)) == 12
    text = json.loads(a.stdout)["text"]
    stop = text[len(text) // 2:][:3]   # a few characters from the middle of the answer, maybe mid-token
    assert stop.strip(), text
    r = run_ok(build, "-p", PROMPT, "-n", "12", "--no-stop", "-r", "never-there", "-r", stop, "--json", *FAST)
    got = json.loads(r.stdout)["text"]
    # stopped at the token that completed the text (it may end inside that token)
    assert stop in got and text.startswith(got) and len(got) < len(text), (got, text)
    one_line_error(cli(build, "-m", build, *sum([["-r", "x"]] * 17, []), "-p", "a", *FAST), 2, "at most 16")


def test_batch_size_gives_the_same_tokens(build):
    a = run_ok(build, "-p", PROMPT + " and the capital of Italy is", "-n", "4", "--json", "--no-stop", *FAST)
    b = run_ok(build, "-p", PROMPT + " and the capital of Italy is", "-n", "4", "--json", "--no-stop", "-b", "3", *FAST)
    assert ids(a) == ids(b) and json.loads(a.stdout)["prompt_tokens"] == json.loads(b.stdout)["prompt_tokens"]
    big = run_ok(build, "-p", PROMPT, "-n", "1", "-b", "100000", *FAST)
    assert "note: -b 100000: the library's prefill is planned for" in err_of(big)


def test_ngl_and_no_mmap_say_one_note_and_run(build):
    r = run_ok(build, "-p", PROMPT, "-n", "2", "-ngl", "99", "--no-mmap", "-fa", "on", *FAST)
    e = err_of(r)
    assert e.count("-ngl 99: this program runs on the CPU only") == 1 and e.count("--no-mmap:") == 1
    assert e.count("-fa on: the attention is this build's certified kernel") == 1
    assert r.stdout.startswith(PROMPT.encode())
    for v in ("all", "auto", "-1", "0"):
        run_ok(build, "-p", PROMPT, "-n", "0", "--n-gpu-layers", v, *FAST)


def test_conversation_single_turn_and_no_conversation(build):
    # -cnv = the chat loop (-p its first turn, said once); -st ends it after one answer
    r = run_ok(build, "-cnv", "-n", "2", *FAST, input=b"hi\nsecond turn\n")
    assert "interactive chat" in err_of(r) and r.stdout.count(b"\n") == 2
    r = run_ok(build, "-st", "-n", "2", *FAST, input=b"hi\nnot read\n")
    assert r.stdout.count(b"\n") == 1
    r = run_ok(build, "-cnv", "-p", "hi", "-n", "2", *FAST, input=b"")
    assert "-cnv with a prompt: the prompt is the first user turn" in err_of(r)
    # -st with a prompt = --chat; -no-cnv with a prompt = the one-shot default
    a = run_ok(build, "-st", "-p", "hi", "-n", "3", "--json", *FAST)
    b = run_ok(build, "--chat", "-p", "hi", "-n", "3", "--json", *FAST)
    assert json.loads(a.stdout)["prompt_tokens"] == json.loads(b.stdout)["prompt_tokens"]
    c = run_ok(build, "-no-cnv", "-p", "hi", "-n", "3", "--json", *FAST)
    d = run_ok(build, "-p", "hi", "-n", "3", "--json", *FAST)
    assert json.loads(c.stdout)["prompt_tokens"] == json.loads(d.stdout)["prompt_tokens"]


def _memlock(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, limit))


def _has_ipc_lock() -> bool:
    """Whether this process holds CAP_IPC_LOCK (then RLIMIT_MEMLOCK does not bind it: root here)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 14 & 1)
    return False


def test_mlock(build):
    cmd = [str(build / "bringup-run"), "-m", str(build), "-p", "a", "-n", "1", "--mlock", "-v", *FAST]
    # refused: a 1 MiB limit, and without CAP_IPC_LOCK (dropped from the bounding set when we hold it)
    drop = ["setpriv", "--bounding-set=-ipc_lock", "--"] if _has_ipc_lock() else []
    if drop and not shutil.which("setpriv"):
        pytest.skip("CAP_IPC_LOCK held and no setpriv to drop it: RLIMIT_MEMLOCK cannot refuse here")
    small = subprocess.run([*drop, *cmd], capture_output=True, timeout=300, preexec_fn=_memlock(1 << 20))
    one_line_error(small, 5, "--mlock: cannot lock the", "RLIMIT_MEMLOCK is 1.0 MiB", "ulimit -l")
    assert small.stdout == b""   # refused before the prompt is echoed or evaluated
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if not _has_ipc_lock() and hard != resource.RLIM_INFINITY and hard < (256 << 20):
        pytest.skip(f"RLIMIT_MEMLOCK hard limit {hard} bytes: too small to lock the weights here")
    big = subprocess.run(cmd, capture_output=True, timeout=300)
    assert big.returncode == 0 and "MiB of weights locked in RAM" in err_of(big), err_of(big)


def test_timing_in_llama_perf_shape_and_json(build):
    r = run_ok(build, "-p", PROMPT, "-n", "3", "--no-stop", "--timing", "-c", "256")   # verified: the check is timed
    e = err_of(r)
    load = re.search(r"^llama_perf_context_print:        load time = +([\d.]+) ms \(open ([\d.]+) ms, the weights' "
                     r"SHA-256 check \((sha-ni|portable)\) included; first token at ([\d.]+) ms\)$", e, re.M)
    assert load, e
    total = re.search(r"^llama_perf_context_print:       total time = +([\d.]+) ms / +(\d+) tokens$", e, re.M)
    assert total and int(total.group(2)) == 5 + 2, e   # 5 prompt tokens + 2 decode runs (the last id is not run)
    assert float(load.group(2)) <= float(load.group(1)) <= float(load.group(4)) <= float(total.group(1))
    for line in ("llama_perf_sampler_print:    sampling time =", "llama_perf_context_print: prompt eval time =",
                 "llama_perf_context_print:        eval time ="):
        assert re.search(rf"^{re.escape(line)} +[\d.]+ ms / +\d+ (runs|tokens) ", e, re.M), line
    j = run_ok(build, "-p", PROMPT, "-n", "3", "--no-stop", "--timing", "--json", *FAST)
    t = json.loads(j.stdout)["timing"]
    assert 0 < t["open_ms"] <= t["load_ms"] <= t["first_token_ms"] <= t["total_ms"]
    assert t["open_includes_weights_check"] is False and t["sample_runs"] == 3   # FAST has --no-verify
    assert t["sha256_impl"] in ("sha-ni", "portable")


def test_bringup_run_passes_llama_options_through(tree):
    """`bringup run` hands llama-cli's options to bringup-run as typed (its parser knows only
    --model, --results-dir, --dry-run and takes no abbreviations)."""
    from bringup.run import cli as run_cli
    args = ["-ngl", "99", "-no-cnv", "-p", "-cnv", "-r", "User:", "-e", "--no-display-prompt", "-b", "8", "--mlock",
            "--color", "-st", "--ignore-eos", "--no-mmap"]
    cmd, dry = run_cli.command(["--model", "smollm2", "--results-dir", str(tree), *args], False)
    assert cmd[3:] == args and not dry
