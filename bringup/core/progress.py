"""Progress of long stages, on stderr only (stdout stays data): a tqdm bar when stderr is a
terminal, plain lines when it is a file (a rule's log, where Snakemake's ``run_stage`` sends it).

Plain lines read ``[<stage>] <what> <i>/<n>: <label> (<s> s; about <t> left)``. Every step has its
line while a progress has at most ``EVERY_STEP`` steps, and every step that took ``SLOW_STEP_S``
or more (parity's 45 runs: 1/45 ... 45/45, none skipped). A stage with many small steps (convert's
tensors) would flood a log with one line each, so beyond that a line is written only when another
1/MAX_LINES of the work is done, or when ``QUIET_S`` seconds passed since the last line (the stage
is alive), and always for the last step.

Under Snakemake a rule's stderr is its log file (``run_stage``), so the person at the terminal
would see only the job's header. ``echo_to(stream)`` (``run_stage`` passes the job's own stderr
from before the redirect: the terminal Snakemake was started from, a CI log, a Slurm job's output)
also writes the progress lines and ``Timed`` lines there. Plain lines, never a bar there: Snakemake
runs jobs side by side (profile cores: 2) and prints its own lines, and a bar redrawn with
carriage returns would overwrite theirs.
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import IO, Iterator

from tqdm import tqdm

#: At most about this many lines per progress in a log (plus the QUIET_S keep-alive lines).
MAX_LINES = 40
#: Up to this many steps, every step has its line.
EVERY_STEP = 100
#: A step that took at least this long (seconds) always has its line.
SLOW_STEP_S = 1.0
#: A line is written after a step when the last line is older than this (seconds).
QUIET_S = 10.0

#: Where progress lines are also written (echo_to); None: nowhere else.
_echo: IO[str] | None = None


@contextlib.contextmanager
def echo_to(stream: IO[str] | None) -> Iterator[None]:
    """Within the block, progress and ``Timed`` lines also go to ``stream`` (None: nowhere else).
    A stream that fails to take a line (closed, a broken pipe) is dropped, never fatal."""
    global _echo
    before, _echo = _echo, stream
    try:
        yield
    finally:
        _echo = before


def _echo_line(line: str, primary: IO[str]) -> None:
    """``line`` to the echo stream too, unless it is ``primary`` itself."""
    global _echo
    if _echo is None or _echo is primary:
        return
    try:
        print(line, file=_echo, flush=True)
    except (OSError, ValueError):   # the terminal went away: the log still has every line
        _echo = None


def remaining(done: int, total: int, elapsed_s: float) -> str:
    """A rough estimate of the time left after ``done`` of ``total`` steps took ``elapsed_s``
    seconds (the mean step so far times the steps left): ``"about 3 min left"``, ``""`` when done."""
    if done <= 0 or done >= total:
        return ""
    left = elapsed_s / done * (total - done)
    if left < 90:
        return f"about {max(1, round(left))} s left"
    if left < 5400:
        return f"about {round(left / 60)} min left"
    return f"about {left / 3600:.1f} h left"


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is an interactive terminal (False for files, pipes and closed streams)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def note(stage: str, message: str, stream: IO[str] | None = None) -> None:
    """One progress line ``[stage] message`` on stderr (or ``stream``), flushed at once."""
    print(f"[{stage}] {message}", file=stream or sys.stderr, flush=True)


def _note_echoed(stage: str, message: str, stream: IO[str] | None = None) -> None:
    """``note``, and the same line to the echo stream (echo_to)."""
    stream = stream or sys.stderr
    note(stage, message, stream)
    _echo_line(f"[{stage}] {message}", stream)


class Progress:
    """Progress over ``total`` steps of ``what`` in ``stage`` (a context manager).

    ``step(label)`` after each finished step; ``label`` names it (a tensor, a prompt and
    program). On a terminal: a tqdm bar whose postfix is the last label. Otherwise: plain lines
    (module doc), and a closing line with the count and the total time; the lines also go to the
    echo stream (echo_to), which is never given a bar. ``stream`` defaults to
    ``sys.stderr`` as it is when the object is made (so a redirected stderr is honoured).
    """

    def __init__(self, stage: str, what: str, total: int, unit: str = "step", stream: IO[str] | None = None):
        self.stage, self.what, self.total, self.unit = stage, what, int(total), unit
        self.stream = stream or sys.stderr
        self.done = 0
        self.t0 = self.t_step = self.t_line = time.monotonic()
        self.bar = (tqdm(total=self.total, desc=f"[{stage}] {what}", unit=unit, file=self.stream,
                         dynamic_ncols=True, leave=True) if is_terminal(self.stream) else None)
        self._last_bucket = 0

    def step(self, label: str = "", n: int = 1) -> None:
        """Record ``n`` finished steps, the last of which is ``label``."""
        now = time.monotonic()
        dt, self.t_step = now - self.t_step, now
        self.done += n
        if self.bar is not None:
            self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(n)
            return
        bucket = self.done * MAX_LINES // max(self.total, 1)
        if (self.total <= EVERY_STEP or dt >= SLOW_STEP_S or bucket != self._last_bucket
                or self.done >= self.total or now - self.t_line >= QUIET_S):
            self._last_bucket, self.t_line = bucket, now
            left = remaining(self.done, self.total, now - self.t0)
            _note_echoed(self.stage, f"{self.what} {self.done}/{self.total}: {label} ({dt:.1f} s"
                         f"{'; ' + left if left else ''})", self.stream)

    def write(self, message: str) -> None:
        """A line of its own, ``message`` as it is (a round's summary), above the bar or between
        the step lines, and on the echo stream."""
        if self.bar is not None:
            self.bar.write(message, file=self.stream)
        else:
            print(message, file=self.stream, flush=True)
            _echo_line(message, self.stream)

    def close(self) -> None:
        """End the bar, or write the closing line (count and total time)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.done:
            _note_echoed(self.stage, f"{self.what}: {self.done} {self.unit}(s) in {time.monotonic() - self.t0:.1f} s",
                 self.stream)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Timed:
    """``with Timed(stage, what):`` writes ``[stage] what ...`` before and ``[stage] what: done
    in <s> s`` after the block (for single long steps: a compile, a download, loading a model)."""

    def __init__(self, stage: str, what: str):
        self.stage, self.what = stage, what

    def __enter__(self) -> "Timed":
        _note_echoed(self.stage, f"{self.what} ...")
        self.t0 = time.monotonic()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            _note_echoed(self.stage, f"{self.what}: done in {time.monotonic() - self.t0:.1f} s")
