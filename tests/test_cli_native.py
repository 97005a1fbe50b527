"""bringup-run's command line (csrc/cli, docs/runtime.md "bringup-run") on the smollm2 build: every
option and its domain, -m DIR and its lookup order, -f, output files that are not regular files,
NUL bytes, the chat loop through a pipe and through a terminal (a pty: line editing, history,
slash commands, Ctrl-C), and `bringup run` / `bringup chat`.

The program is the workflow's results/smollm2/build when its provenance lists exactly today's
sources, else it is built once from them (libmodel.so from results/smollm2/codegen, read-only)
into a temporary folder laid out as the workflow does (results/smollm2/{build,convert}, convert a
symbolic link to the real one); BRINGUP_TEST_SMOLLM2_BUILD=DIR names an already built folder
(libmodel.so + bringup-run) to use instead. Model runs use --no-verify, a small context and few
tokens, so each takes a second or two."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from bringup.core.errors import BringupError
from bringup.run import cli as run_cli
from bringup.core.paths import CSRC, ROOT
from tests.helpers.native_cli import FAST, cli, err_of, one_line_error


@pytest.fixture(scope="session")
def build(native_build) -> Path:
    """The smollm2 program's folder (tests/helpers/native_cli.py); overrides the kernel library's
    ``build`` for this module."""
    return native_build


# ---- options: --help, --version, parsing, domains (no model is opened) ----

def _table_options() -> list[str]:
    """Every name in args.c's option table (short, long, alias)."""
    text = (CSRC / "cli" / "args.c").read_text()
    names = []
    for m in re.finditer(r'\{O_\w+, (NULL|"-[^"]+"), ("--[^"]+"), (NULL|"--[^"]+"),', text):
        names += [g.strip('"') for g in m.groups() if g != "NULL"]
    return names


def test_help_documents_every_option(cli_only):
    r = cli(cli_only, "--help")
    assert r.returncode == 0
    out = r.stdout.decode()
    table = _table_options()
    wanted = ["-m", "--model", "-p", "--prompt", "-f", "--file", "-n", "--n-predict", "-t", "--threads", "-c",
              "--ctx-size", "-s", "--seed", "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
              "--repeat-last-n", "-i", "--interactive", "--chat", "--system", "--version", "-v", "--json", "--timing",
              "--all-logits", "--dump-hidden", "--no-verify", "--no-stop", "--prompt-tokens", "-h", "--help",
              "--max-tokens", "--temperature", "--ctx"]
    assert set(wanted) <= set(table)
    for name in table:
        assert re.search(rf"(^|[\s,(]){re.escape(name)}([\s,)=]|$)", out, re.M), name
    for words in ("exit codes", "/reset", "/stats", "/quit", "Ctrl-C", "Ctrl-D", "history"):
        assert words in out, words


def test_version_is_the_project_version(cli_only):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    r = cli(cli_only, "--version")
    assert r.returncode == 0 and r.stdout.decode().startswith(f"bringup-run {version} ")


@pytest.mark.parametrize("args,needle", [
    (["--temp", "-1"], "--temp -1: must be a finite number >= 0"),
    (["--temperature", "-0.5"], "--temperature -0.5"),
    (["--temp", "nan"], "--temp nan"), (["--temp", "inf"], "--temp inf"), (["--temp", "1e39"], "--temp 1e39"),
    (["--temp="], "--temp : must be"),
    (["--top-p", "0"], "--top-p 0: must be a number in (0, 1]"), (["--top-p", "1.5"], "--top-p 1.5"),
    (["--top-p", "nan"], "--top-p nan"),
    (["--min-p", "-0.1"], "--min-p -0.1: must be a number in [0, 1]"), (["--min-p=2"], "--min-p 2"),
    (["--min-p", "nan"], "--min-p nan"),
    (["--repeat-penalty", "0"], "--repeat-penalty 0: must be a finite number > 0"),
    (["--repeat-penalty", "-1"], "--repeat-penalty -1"), (["--repeat-penalty", "inf"], "--repeat-penalty inf"),
    (["--repeat-last-n", "-2"], "--repeat-last-n -2"), (["--top-k", "-1"], "--top-k -1"),
    (["-n", "-2"], "-n -2"), (["--max-tokens", "x"], "--max-tokens x"), (["-t", "0"], "-t 0: must be an integer in [1, 256]"),
    (["--threads=257"], "--threads 257"), (["-c", "-1"], "-c -1"), (["-s", "-2"], "-s -2"), (["--seed", "1.5"], "--seed 1.5"),
    (["--json=1"], "--json takes no value"), (["--bogus"], "unknown option --bogus"), (["-p"], "-p needs a value"),
    (["-p", "a", "-f", "b"], "give one of"), (["--chat", "--prompt-tokens", "1"], "cannot wrap --prompt-tokens"),
    (["-i", "--prompt-tokens", "1"], "-i chats in text"), (["-i", "--json"], "apply to a one-shot run"),
    (["--json"], "apply to a one-shot run"), (["-p", "a", "--dump-hidden", "d"], "add -n 0"),
    (["-p", "a", "--system", "s"], "--system applies to --chat"),
])
def test_usage_errors(cli_only, args, needle):
    """Refused at parse time (exit 2, one line naming the option) before any file is opened."""
    one_line_error(cli(cli_only, "lib.so", "w.bump", *args), 2, needle)


def test_model_and_positionals(cli_only, tmp_path):
    one_line_error(cli(cli_only, "-m", tmp_path, "lib.so", "w.bump", "-p", "a"), 2, "not both")
    one_line_error(cli(cli_only, "-p", "a"), 2, "no model: give -m DIR")
    one_line_error(cli(cli_only, "lib.so", "-p", "a"), 2, "give LIBMODEL and WEIGHTS (1 of 2 given)")
    (tmp_path / "file").write_text("x")
    one_line_error(cli(cli_only, "-m", tmp_path / "file", "-p", "a"), 2, "not a folder")
    one_line_error(cli(cli_only, "-m", tmp_path / "nope", "-p", "a"), 5, "No such file")
    e = one_line_error(cli(cli_only, "-m", tmp_path, "-p", "a"), 5, "no model found")
    assert "DIR/weights.bump" in e and "DIR/../convert/weights.bump" in e and "snakemake build" in e


def test_prompt_file_errors(cli_only, tmp_path):
    (tmp_path / "nul.txt").write_bytes(b"abc\x00def")
    one_line_error(cli(cli_only, "lib.so", "w.bump", "-f", tmp_path / "nul.txt"), 2, "byte 3 is NUL")
    one_line_error(cli(cli_only, "lib.so", "w.bump", "-f", tmp_path), 2, "not a regular file or a pipe")
    one_line_error(cli(cli_only, "lib.so", "w.bump", "-f", "/dev/zero"), 2, "not a regular file or a pipe")
    one_line_error(cli(cli_only, "lib.so", "w.bump", "-f", tmp_path / "missing"), 2, "No such file")


# ---- output files: only regular files, atomically (issue 13) ----

def test_all_logits_refuses_special_files(cli_only, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "target.f32"
    target.write_bytes(b"keep")
    link = tmp_path / "link.f32"
    link.symlink_to(target)
    (tmp_path / "dir").mkdir()
    cases = [(fifo, "is a FIFO"), ("/dev/null", "is a character device"), (link, "is a symbolic link"),
             (tmp_path / "dir", "is a directory"), (f"{tmp_path}/new/", "name a file")]
    for path, needle in cases:
        one_line_error(cli(cli_only, "lib.so", "w.bump", "--prompt-tokens", "1", "-n", "0", "--all-logits", path), 2,
                       needle, "--all-logits")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    assert link.is_symlink() and target.read_bytes() == b"keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "link.f32", "target.f32"]


def test_all_logits_replaces_a_regular_file_atomically(build, tmp_path):
    out = tmp_path / "logits.f32"
    out.write_bytes(b"old")
    r = cli(build, "-m", build, "--prompt-tokens", "1,2", "-n", "0", "--all-logits", out, *FAST)
    assert r.returncode == 0, err_of(r)
    assert out.stat().st_size == 2 * 49152 * 4 and not out.is_symlink()
    assert [p.name for p in tmp_path.iterdir()] == ["logits.f32"]   # no temporary file left
    r = cli(build, "lib.so", "w.bump", "--prompt-tokens", "1", "-n", "0", "--all-logits", tmp_path / "no" / "x.f32")
    one_line_error(r, 2, "does not exist")   # refused before the run


def test_dump_hidden_refuses_a_symlink(build, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    # the folder is checked when the run starts, after the model opened
    r = cli(build, "-m", build, "--prompt-tokens", "1", "-n", "0", "--dump-hidden", tmp_path / "link", *FAST)
    one_line_error(r, 2, "is a symbolic link")
    assert (tmp_path / "link").is_symlink() and list((tmp_path / "real").iterdir()) == []


# ---- runs: -m DIR, every option reaching the run ----

def test_model_dir_lookup_order(build, tmp_path):
    """bundle (DIR/weights.bump) before the workflow build folder (DIR/../convert), before the model
    folder (DIR/build + DIR/convert); --json and -v name the files used."""
    weights = (build.parent / "convert" / "weights.bump").resolve()
    bundle = tmp_path / "m" / "build"
    bundle.mkdir(parents=True)
    (bundle / "libmodel.so").symlink_to((build / "libmodel.so").resolve())
    (bundle / "weights.bump").symlink_to(weights)
    (tmp_path / "m" / "convert").mkdir()
    (tmp_path / "m" / "convert" / "weights.bump").write_bytes(b"not these")
    runs = {"bundle": bundle, "workflow build folder": build, "workflow model folder": build.parent}
    for how, d in runs.items():
        r = cli(build, "-m", d, "--prompt-tokens", "1", "-n", "0", "--json", "-v", *FAST)
        assert r.returncode == 0, err_of(r)
        doc = json.loads(r.stdout)
        assert doc["files"]["found_by"].startswith(how + ":"), doc["files"]
        assert Path(doc["files"]["weights"]).resolve() == weights
        assert f"bringup-run: weights {doc['files']['weights']}" in err_of(r)


def test_every_run_option_reaches_the_run(build):
    r = cli(build, "-m", build, "-p", "The capital of France is", "-n", "2", "-t", "1", "-c", "64", "-s", "7",
            "--temp=0.8", "--top-k=40", "--top-p", "0.9", "--min-p=0.05", "--repeat-penalty", "1.1",
            "--repeat-last-n=16", "--json", "--no-verify", "--no-stop")
    assert r.returncode == 0, err_of(r)
    doc = json.loads(r.stdout)
    assert doc["n_ctx"] == 64 and doc["threads"] == 1 and len(doc["generated_tokens"]) == 2
    assert doc["sampler"] == {"temperature": pytest.approx(0.8), "top_k": 40, "top_p": pytest.approx(0.9),
                              "min_p": pytest.approx(0.05), "repeat_penalty": pytest.approx(1.1), "repeat_last_n": 16,
                              "seed": 7}
    # defaults: every CPU this process may use, greedy, the window of 64; -s -1 draws a seed and says it
    r = cli(build, "-m", build, "--prompt-tokens", "1", "-n", "0", "--json", "-s", "-1", "--repeat-last-n", "-1", *FAST)
    doc = json.loads(r.stdout)
    assert doc["threads"] == min(len(os.sched_getaffinity(0)), 256)
    seed = doc["sampler"]["seed"]
    assert f"seed {seed} (drawn; -s {seed} repeats this run)" in err_of(r)
    assert doc["sampler"]["repeat_last_n"] == 256 and doc["sampler"]["temperature"] == 0


def test_prompt_file_equals_prompt(build, tmp_path):
    text = "Once upon a time,\nthere was"
    (tmp_path / "p.txt").write_text(text)
    a = cli(build, "-m", build, "-p", text, "-n", "0", "--json", *FAST)
    b = cli(build, "-m", build, "-f", tmp_path / "p.txt", "-n", "0", "--json", *FAST)
    assert a.returncode == b.returncode == 0, err_of(b)
    assert json.loads(a.stdout)["prompt_tokens"] == json.loads(b.stdout)["prompt_tokens"]


def test_n_predict_minus_one_fills_the_context(build):
    r = cli(build, "-m", build, "--prompt-tokens", "1,2,3", "-c", "8", "-n", "-1", "--no-stop", "--json", "--no-verify")
    assert r.returncode == 0, err_of(r)
    assert len(json.loads(r.stdout)["generated_tokens"]) == 6   # 5 free positions + the last id, never evaluated
    assert "the context (8 tokens) is full" in err_of(r)
    one_line_error(cli(build, "-m", build, "--prompt-tokens", "1,2,3", "-c", "8", "-n", "7", "--no-verify"), 2,
                   "-n 7 does not fit")


# ---- the chat loop through a pipe ----

def test_chat_loop_pipe_commands_and_nul(build):
    """Slash commands are not sent; a NUL line is refused with a message; the chat format is named."""
    r = cli(build, "-m", build, "-n", "1", *FAST,
            input=b"/stats\nab\x00cd\n/bogus\n/system\n/system be brief\n/stats\n/help\n/quit\nnot read\n")
    e = err_of(r)
    assert r.returncode == 0, e
    assert "chat format 'chatml_smollm2' of circuit llama: chat_template contains" in e
    assert "holds a NUL byte (byte 2); not sent to the model" in e
    assert "unknown command /bogus" in e and "system message: the chat format's default (You are" in e
    assert "system message set; conversation reset" in e
    assert e.count("context 0 of 256 positions used; 0 turns; no answer yet") == 2   # nothing reached the model
    assert "/reset" in e and r.stdout == b""


def test_chat_format_source_is_printed(build, tmp_path):
    """The chat loop names its format once, with the convert stage's reason from the manifest beside
    the weights (JSON escapes decoded, then shown escaped on one line), or says that the source is not recorded."""
    weights = (build.parent / "convert" / "weights.bump").resolve()
    why = 'the GGUF has no chat_template; circuit x declares \\"gemma\\"\\nfor that case \\u00e9'
    manifests = {"recorded": '{"a": [1, {"b": null}], "extra": [{"name": "tokenizer.blob", "reason": "no"}, '
                             '{"bytes": 5, "name": "chat.format", "reason": "' + why + '"}], "z": -1.5e3}',
                 "invalid": '{"extra": [{"name": "chat.format", "reason": "x"}',
                 "absent": None}
    said = {}
    for name, text in manifests.items():
        d = tmp_path / name
        d.mkdir()
        (d / "libmodel.so").symlink_to((build / "libmodel.so").resolve())
        (d / "weights.bump").symlink_to(weights)
        if text is not None:
            (d / "weights_manifest.json").write_text(text)
        r = cli(build, "-m", d, *FAST, input=b"/quit\n")
        assert r.returncode == 0, err_of(r)
        said[name] = [x for x in err_of(r).splitlines() if "chat format" in x or "chat.format" in x]
    assert said["recorded"] == ['bringup-run: the GGUF has no chat_template; circuit x declares "gemma"\\nfor that case '
                                '\u00e9 (tensor chat.format)']   # the newline escaped (put_shown), not sent
    assert said["invalid"] == ["bringup-run: chat format 'chatml_smollm2' (tensor chat.format); weights_manifest.json "
                               "beside the weights is not valid JSON"]
    assert said["absent"] == ["bringup-run: chat format 'chatml_smollm2' (tensor chat.format); its source is not "
                              "recorded here (no readable weights_manifest.json beside the weights)"]


def test_chat_loop_opens_with_the_prompt(build):
    """-i -p: the prompt is the first turn, then lines from stdin."""
    r = cli(build, "-m", build, "-i", "-p", "Hi", "-n", "1", *FAST, input=b"/stats\n")
    assert r.returncode == 0, err_of(r)
    assert "; 1 turns; last turn: " in err_of(r) and r.stdout.endswith(b"\n") and len(r.stdout) > 1


def test_chat_loop_sigint_at_the_prompt_quits(build):
    proc = subprocess.Popen([str(build / "bringup-run"), "-m", str(build), *FAST], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = b""
    while not seen.endswith(b"> "):
        chunk = os.read(proc.stderr.fileno(), 4096)
        assert chunk, seen
        seen += chunk
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    proc.stdin.close()
    proc.stdout.close()
    proc.stderr.close()


# ---- the chat loop on a terminal ----

class Pty:
    """bringup-run on a pseudo-terminal (stdin, stdout, stderr): keystrokes in, the screen out."""

    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.environ["TERM"] = "xterm"
            os.execv(argv[0], argv)
        self.out = b""

    def send(self, keys: bytes):
        os.write(self.fd, keys)

    def expect(self, pattern: bytes, timeout=120.0, count=1) -> bytes:
        end = time.monotonic() + timeout
        while self.out.count(pattern) < count:
            left = end - time.monotonic()
            assert left > 0, (pattern, self.out[-2000:])
            if select.select([self.fd], [], [], left)[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                assert chunk, ("program ended", pattern, self.out[-2000:])
                self.out += chunk
        return self.out

    def read_more(self, n: int, timeout=120.0):
        """Wait until n more bytes arrived."""
        want = len(self.out) + n
        end = time.monotonic() + timeout
        while len(self.out) < want:
            left = end - time.monotonic()
            assert left > 0, self.out[-2000:]
            if select.select([self.fd], [], [], left)[0]:
                self.out += os.read(self.fd, 65536)

    def wait(self, timeout=60.0) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            if select.select([self.fd], [], [], 0.2)[0]:
                try:
                    self.out += os.read(self.fd, 65536)
                except OSError:
                    pass
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(("still running", self.out[-2000:]))


def test_chat_loop_on_a_terminal(build):
    # The answer must outlast the test's Ctrl-C even on a loaded host: -n 200 with end-of-generation
    # stops ended it first once (CI beside the regression), and the Ctrl-C then quit at the prompt.
    # --no-stop -n -1 runs to the full context: about 1,000 tokens, seconds to a minute.
    p = Pty([str(build / "bringup-run"), "-m", str(build), "-n", "-1", "--no-stop", "-t", "1", "--no-verify",
             "-c", "1024"])
    p.expect(b"> ")
    p.send(b"/hlp\x1b[D\x1b[De\r")                  # Left, Left, insert: /help
    p.expect(b"/system [TEXT]")
    p.send(b"/statsx\x7f\r")                        # Backspace
    p.expect(b"no answer yet")
    p.send(b"\x1b[A\r")                             # Up: the last line again
    p.expect(b"no answer yet", count=2)
    p.send(b"sys\x01/\x05tem\r")                    # Ctrl-A, Ctrl-E: /system
    p.expect(b"system message: the chat format's default")
    p.send(b"a\x00b\r")                             # Ctrl-@ (NUL): refused, shown as ^@
    p.expect(b"not sent to the model")
    assert b"a^@b" in p.out
    n0 = len(p.out)
    p.send(b"Write a long story about a cat.\r")
    while b"\r\n" not in p.out[n0:]:              # the editor's newline (its redraws hold none)
        p.read_more(1)
    start = n0 + p.out[n0:].index(b"\r\n") + 2
    while len(p.out) < start + 8:                   # the answer has started
        p.read_more(1)
    p.send(b"\x03")                                 # Ctrl-C while it answers: the answer stops
    p.expect(b"[answer stopped by Ctrl-C]")
    p.send(b"/stats\r")
    p.expect(b"1 turns")
    p.send(b"\x03")                                 # Ctrl-C at the prompt: quit
    assert p.wait() == 0


def test_long_line_on_a_terminal_is_refused_and_the_chat_goes_on(build):
    """The editor stops taking bytes at the prompt cap (256 x 81 bytes at -c 256) and refuses the
    line at Enter; a line pasted past the cap costs time in proportion to its length."""
    p = Pty([str(build / "bringup-run"), "-m", str(build), *FAST])
    p.expect(b"> ")
    data, t0 = b"x" * 30000 + b"\r", time.monotonic()
    os.set_blocking(p.fd, False)
    while data:                      # write while draining the echo, so neither side blocks
        try:
            data = data[os.write(p.fd, data[:4096]):]
        except BlockingIOError:
            pass
        if select.select([p.fd], [], [], 0.01)[0]:
            try:
                p.out += os.read(p.fd, 65536)
            except BlockingIOError:
                pass
    os.set_blocking(p.fd, True)
    p.expect(b"this line is longer than 20736 bytes")
    assert time.monotonic() - t0 < 30
    p.send(b"/stats\r")
    p.expect(b"0 turns")
    p.send(b"\x04")
    assert p.wait() == 0


def test_chat_loop_quits_at_ctrl_d(build):
    p = Pty([str(build / "bringup-run"), "-m", str(build), *FAST])
    p.expect(b"> ")
    p.send(b"\x04")
    assert p.wait() == 0


# ---- bringup run / bringup chat ----

def bringup(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bringup", *map(str, args)], capture_output=True, cwd=ROOT,
                          timeout=timeout)


def test_bringup_run_executes_bringup_run(tree):
    r = bringup("run", "--model", "smollm2", "--results-dir", tree, "--", "--prompt-tokens", "1", "-n", "0", "--json",
                *FAST)
    assert r.returncode == 0, err_of(r)
    assert json.loads(r.stdout)["files"]["found_by"].startswith("workflow build folder:")


def test_bringup_run_and_chat_commands(tree, tmp_path, capsys):
    build = tree / "smollm2" / "build"
    assert run_cli.main(["--model", "smollm2", "--results-dir", str(tree), "--dry-run", "-n", "-1", "--temp", "0.5"],
                        chat=True) == 0
    assert capsys.readouterr().out.split() == [str(build / "bringup-run"), "-m", str(build), "-i", "-n", "-1",
                                               "--temp", "0.5"]
    cmd, dry = run_cli.command(["--model", "smollm2", "--results-dir", str(tree), "-p", "x", "--", "--dry-run"], False)
    assert cmd[3:] == ["-p", "x", "--dry-run"] and not dry   # after --: verbatim
    for argv, code, needle in [
            (["--model", "nope"], 2, "unknown model 'nope'"),
            (["--model", "smollm2", "--results-dir", str(tmp_path)], 7, "snakemake build --config model=smollm2"),
            (["--model", "smollm2", "--results-dir", str(tree), "-m", "x"], 2, "chosen by --model NAME"),
            (["--model", "smollm2", "--results-dir", str(tree), "--model=x"], 2, "--model given more than once")]:
        with pytest.raises(BringupError) as e:
            run_cli.command(argv, chat=False)
        assert e.value.exit_code == code and needle in str(e.value) and "\n" not in str(e.value)
    assert "smollm2" in str(pytest.raises(BringupError, run_cli.command, ["--model", "nope"], False).value)


# ---- issue 28: nothing blocks on a FIFO, nothing grows with the input, every name is escaped ----

GIB = 1 << 30


def bounded(build: Path, *args, input=None) -> subprocess.CompletedProcess:
    """bringup-run under ulimit -v 1 GiB, which must finish within 10 s."""
    import resource
    t0 = time.monotonic()
    r = subprocess.run([str(build / "bringup-run"), *map(str, args)], capture_output=True, input=input, timeout=60,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (GIB, GIB)))
    assert time.monotonic() - t0 < 10, err_of(r)
    return r


def test_fifo_as_library_or_weights_is_refused_not_waited_on(build, tmp_path):
    """dlopen and open of a FIFO block until a writer comes (forever): refused in one line, exit 2."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    weights = build.parent / "convert" / "weights.bump"
    one_line_error(bounded(build, fifo, weights, "-p", "a", *FAST), 2, f"model library {fifo} is a FIFO, not a regular file")
    one_line_error(bounded(build, build / "libmodel.so", fifo, "-p", "a", *FAST), 2, f"weights {fifo} is a FIFO, not a regular file")
    one_line_error(bounded(build, build / "libmodel.so", "/dev/zero", "-p", "a", *FAST), 2, "is a character device")
    d = tmp_path / "m"
    d.mkdir()
    os.mkfifo(d / "libmodel.so")
    (d / "weights.bump").symlink_to(weights.resolve())
    one_line_error(bounded(build, "-m", d, "-p", "a", *FAST), 2, "libmodel.so is a FIFO, not a regular file")


def test_prompt_file_fifo_without_a_writer_ends(build, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = bounded(build, "-m", build, "-f", fifo, "-n", "1", *FAST)
    assert "Traceback" not in err_of(r) and r.returncode in (0, 2), err_of(r)


def test_huge_prompt_is_refused_by_its_size_before_tokenizing(build, tmp_path):
    """A 20 MB one-word prompt file (40 s and 1.9 GB in the tokenizer before) and a -p longer than
    the context can hold: one line, exit 2, at once."""
    big = tmp_path / "word.txt"
    big.write_bytes(b"a" * (20 << 20))
    e = one_line_error(bounded(build, "-m", build, "-f", big, "-n", "1", *FAST), 2, f"-f {big} is {20 << 20} bytes",
                       "can fit the 256-token context", "refused before tokenizing")
    cap = int(re.search(r"at most (\d+) bytes", e).group(1))
    one_line_error(bounded(build, "-m", build, "-p", "b" * (cap + 1), "-n", "1", *FAST), 2, f"-p is {cap + 1} bytes")
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as fh:
        fh.truncate(65 << 20)   # sparse: refused by its size, never read
    one_line_error(bounded(build, "-m", build, "-f", huge, *FAST), 2, "larger than 64 MiB")


def test_long_interactive_line_is_refused_and_the_chat_goes_on(build):
    """A 30 MB line on stdin (2.8 GB before): refused with one message, never stored whole; the next
    line is read as usual."""
    r = bounded(build, "-m", build, "-n", "1", *FAST, input=b"x" * (30 << 20) + b"\n/stats\n")
    e = err_of(r)
    assert r.returncode == 0, e
    assert "this line is longer than" in e and "not sent to the model" in e
    assert "context 0 of 256 positions used; 0 turns" in e


def test_names_are_printed_escaped(build, tmp_path):
    """A path with a newline, a forged line and terminal escapes is shown escaped, in errors and in -v."""
    name = "w\n[ok] forged\x1b[2J\x1b]0;t\x07\u202e.bump"
    (tmp_path / name).symlink_to((build.parent / "convert" / "weights.bump").resolve())
    r = cli(build, build / "libmodel.so", tmp_path / name, "-v", "-p", "a", "-n", "1", *FAST)
    e = err_of(r)
    assert r.returncode == 0, e
    assert "w\\n[ok] forged\\x1b[2J\\x1b]0;t\\x07\\u202e.bump" in e
    assert "\x1b" not in e and "\x07" not in e and "\u202e" not in e
    assert not any(line.startswith("[ok]") for line in e.splitlines())
    one_line_error(cli(build, tmp_path / "lib\n[ok]\x1b[31m.so", tmp_path / name, "-p", "a", *FAST), 5, "lib\\n[ok]\\x1b[31m.so")
