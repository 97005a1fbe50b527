"""The one runner of the native CLI ``bringup-run`` (csrc/cli/bringup_run.c; options in docs/runtime.md).

Parity (teacher-forced logits, greedy continuations), X-ray (``--dump-hidden``), certification
(the out-of-checkout run, speed) and the memory model's calibration (``--timing`` peak RSS) all run
the program through :class:`NativeProgram`: one command line ``CLI LIB WEIGHTS [options]
[--threads N]``, one timeout, captured output, and one error when it fails, a BringupError naming
the CLI's exit status (its exit classes are bringup's: docs/runtime.md) and quoting the tail of
its stderr. :func:`run_command` is the same subprocess discipline for the other host tools (ldd).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bringup.core.errors import BringupError
from bringup.core.inputs import regular_file

#: characters of a failed program's stderr quoted in the error (its last lines say why)
STDERR_TAIL = 2000

# Linux keeps ru_maxrss across execve, and a child forked from this Python process starts with
# Python's resident pages counted: its ru_maxrss would report Python's peak, not the CLI's. A
# shell that forks again (the trailing `exit` keeps it from exec'ing in place) gives the CLI a
# fresh process whose peak is its own.
_OWN_PROCESS = ("/bin/sh", "-c", '"$@"; exit $?', "sh")


def stderr_tail(stderr: bytes | str) -> str:
    """The last STDERR_TAIL characters of a program's stderr, decoded (UTF-8, invalid bytes replaced)."""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    return text.strip()[-STDERR_TAIL:]


def run_command(argv: Sequence[str], *, timeout_s: float, what: str, cwd: str | os.PathLike | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` with captured stdout/stderr (bytes) and a ``timeout_s``-second limit; the exit
    status is the caller's to judge (``returncode``).

    The program runs in its own session, so a timeout or an interrupt kills it and every process
    it started. Raises BringupError naming ``what`` when the program is missing or cannot be
    executed, or when it outlives the timeout.
    """
    argv = [os.fspath(a) for a in argv]
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
                                start_new_session=True)
    except FileNotFoundError:
        raise BringupError(f"{what}: {argv[0]} not found") from None
    except OSError as e:
        raise BringupError(f"{what}: cannot run {argv[0]}: {e.strerror}") from None
    with proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except BaseException as e:   # a timeout, or an interrupt: nothing it started may live on
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if isinstance(e, subprocess.TimeoutExpired):
                raise BringupError(f"{what} timed out after {timeout_s:g} s") from None
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def tokens_arg(tokens: Sequence[int]) -> str:
    """Token ids as ``--prompt-tokens`` takes them: decimal, comma-separated."""
    return ",".join(str(int(t)) for t in tokens)


def timing_of(doc: Any, keys: Sequence[str] = ()) -> dict[str, Any]:
    """The ``timing`` object of ``bringup-run --json --timing`` output ``doc`` (milliseconds,
    tokens per second, ``peak_rss_kib`` in KiB, page-fault counts: csrc/cli/json_out.c
    timing_fields). Raises BringupError when it is absent or lacks one of ``keys``."""
    t = doc.get("timing") if isinstance(doc, dict) else None
    if not isinstance(t, dict):
        raise BringupError(f"bringup-run --json --timing output has no timing object "
                           f"(keys: {sorted(doc) if isinstance(doc, dict) else type(doc).__name__})")
    lost = [k for k in keys if k not in t]
    if lost:
        raise BringupError(f"bringup-run --timing output lacks {', '.join(lost)} (has {', '.join(sorted(t))})")
    return t


@dataclass
class NativeProgram:
    """Our program under test: ``bringup-run`` with its ``libmodel.so`` and ``weights.bump``.

    ``cli``, ``lib``, ``weights`` go into the command line as given (``./bringup-run`` stays
    relative to ``cwd``). ``n_vocab`` (needed by :meth:`logits_all` only) sizes the logit rows;
    ``threads`` is passed as ``--threads`` (None: the CLI's default); ``env`` None inherits ours.
    Every method raises BringupError when the CLI is missing, times out (``timeout_s`` seconds),
    exits non-zero (the message quotes its stderr tail) or prints something other than promised.
    """
    cli: str | os.PathLike
    lib: str | os.PathLike
    weights: str | os.PathLike
    n_vocab: int | None = None
    threads: int | None = 2
    timeout_s: float = 600.0
    cwd: str | os.PathLike | None = None
    env: dict[str, str] | None = None

    def argv(self, args: Sequence[str]) -> list[str]:
        """The command line: ``CLI LIB WEIGHTS *args [--threads N]``."""
        tail = ["--threads", str(self.threads)] if self.threads is not None else []
        return [os.fspath(self.cli), os.fspath(self.lib), os.fspath(self.weights), *map(str, args), *tail]

    def check_files(self) -> None:
        """Refuse (BringupError, exit 2) a CLI, library or weights path that is not a readable
        regular file: the program would block forever on a FIFO (dlopen, mmap) before it could
        say so (``inputs.regular_file``; paths relative to ``cwd`` as the program sees them)."""
        for what, p in (("bringup-run", self.cli), ("model library", self.lib), ("weights", self.weights)):
            regular_file(Path(self.cwd or ".") / p, what)

    def run(self, args: Sequence[str], *, check: bool = True, own_process: bool = False) -> subprocess.CompletedProcess:
        """Run the CLI with ``args``; stdout and stderr captured as bytes, ``.args`` the command line.

        ``check=False`` returns a non-zero exit as data instead of raising. ``own_process`` runs it
        through a shell so its ``peak_rss_kib`` is its own, not this Python process's (calibration).
        """
        self.check_files()
        cmd = self.argv(args)
        p = run_command([*_OWN_PROCESS, *cmd] if own_process else cmd, timeout_s=self.timeout_s,
                        what="our CLI", cwd=self.cwd, env=self.env)
        if check and p.returncode != 0:
            # the program's name and the options, not the paths: the message may go into a report
            said = " ".join([Path(cmd[0]).name, *(x for x in cmd[3:] if x.startswith("--"))])
            raise BringupError(f"our CLI failed (exit {p.returncode}): {said}\n{stderr_tail(p.stderr)}")
        return subprocess.CompletedProcess(cmd, p.returncode, p.stdout, p.stderr)

    def run_json(self, args: Sequence[str], *, own_process: bool = False) -> dict[str, Any]:
        """The JSON object the CLI prints with ``--json`` (appended unless ``args`` has it):
        ``prompt_tokens``, ``generated_tokens``, ``text``, ... (docs/runtime.md)."""
        args = list(args) if "--json" in args else [*args, "--json"]
        p = self.run(args, own_process=own_process)
        try:
            doc = json.loads(p.stdout)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BringupError(f"our CLI --json printed something that is not JSON ({e}): {p.stdout[:200]!r}") from None
        if not isinstance(doc, dict):
            raise BringupError(f"our CLI --json printed a {type(doc).__name__}, not an object")
        return doc

    @staticmethod
    def greedy_args(tokens: Sequence[int], n: int) -> list[str]:
        """Options of a greedy run: ``n`` tokens after ``tokens`` at temperature 0, as JSON."""
        return ["--prompt-tokens", tokens_arg(tokens), "--max-tokens", str(n), "--temperature", "0", "--json"]

    def greedy(self, tokens: Sequence[int], n: int) -> list[int]:
        """Greedy (argmax) continuation of ``tokens``: up to ``n`` token ids, ending early after an
        end-of-generation token (included)."""
        r = self.run_json(self.greedy_args(tokens, n))
        if "generated_tokens" not in r:
            raise BringupError(f"our CLI --json output has no generated_tokens (keys: {sorted(r)})")
        return [int(t) for t in r["generated_tokens"]]

    def logits_all(self, tokens: Sequence[int]) -> np.ndarray:
        """Teacher-forced logits of every position, float32 [len(tokens), n_vocab] (row i predicts
        token i+1), from ``--all-logits`` (raw little-endian float32, row-major). Raises
        BringupError when ``n_vocab`` is unset or the file has any other size."""
        if self.n_vocab is None:
            raise BringupError("NativeProgram.logits_all needs n_vocab")
        with tempfile.TemporaryDirectory(prefix="bringup-logits-") as d:
            out = Path(d) / "logits.f32"
            self.run(["--prompt-tokens", tokens_arg(tokens), "--all-logits", str(out), "--max-tokens", "0"])
            raw = out.read_bytes() if out.exists() else b""
        want = len(tokens) * self.n_vocab * 4
        if len(raw) != want:
            raise BringupError(f"--all-logits wrote {len(raw)} bytes; expected {want} "
                               f"({len(tokens)} positions x {self.n_vocab} vocab x float32)")
        return np.frombuffer(raw, dtype="<f4").reshape(len(tokens), self.n_vocab).copy()

    def timing(self, tokens: Sequence[int], n_decode: int, require: Sequence[str] = ()) -> dict[str, Any]:
        """The CLI's own ``--timing`` figures (:func:`timing_of`; ``require``: keys that must be
        there) for one prefill of ``tokens`` and ``n_decode`` decode steps (``--no-stop``: an
        end-of-generation token does not cut the measurement short)."""
        r = self.run_json(["--prompt-tokens", tokens_arg(tokens), "--max-tokens", str(n_decode),
                           "--temperature", "0", "--timing", "--no-stop"])
        return timing_of(r, require)

    def dump_hidden(self, tokens: Sequence[int], d: str | os.PathLike) -> None:
        """Prefill ``tokens`` (no generation) with ``--dump-hidden d``: the output of every prefill
        IR op in the dump format of docs/parity.md (read by ``bringup.parity.xray.load_dump``).
        The CLI refuses a non-empty ``d`` and leaves nothing behind when it fails."""
        self.run(["--prompt-tokens", tokens_arg(tokens), "--max-tokens", "0", "--dump-hidden", os.fspath(d)])
