"""Progress of long stages, on stderr only (stdout stays data): a tqdm bar when stderr is a
terminal, plain lines when it is a file (a rule's log, where Snakemake's ``run_stage`` sends it).

Plain lines read ``[<stage>] <what> <i>/<n>: <label> (<s> s)``. A stage with many small steps
(convert's tensors) would flood a log with one line each, so past ``MAX_LINES`` steps a line is
written only when another 1/MAX_LINES of the work is done, or when ``QUIET_S`` seconds passed
since the last line (a slow step still shows that the stage is alive), and always for the last step.
"""
from __future__ import annotations

import sys
import time
from typing import IO

from tqdm import tqdm

#: At most about this many lines per progress in a log (plus the QUIET_S keep-alive lines).
MAX_LINES = 40
#: A line is written after a step when the last line is older than this (seconds).
QUIET_S = 10.0


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is an interactive terminal (False for files, pipes and closed streams)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def note(stage: str, message: str, stream: IO[str] | None = None) -> None:
    """One progress line ``[stage] message`` on stderr (or ``stream``), flushed at once."""
    print(f"[{stage}] {message}", file=stream or sys.stderr, flush=True)


class Progress:
    """Progress over ``total`` steps of ``what`` in ``stage`` (a context manager).

    ``step(label)`` after each finished step; ``label`` names it (a tensor, a prompt and
    program). On a terminal: a tqdm bar whose postfix is the last label. Otherwise: plain lines
    (module doc), and a closing line with the count and the total time. ``stream`` defaults to
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
        if (self.total <= MAX_LINES or bucket != self._last_bucket or self.done >= self.total
                or now - self.t_line >= QUIET_S):
            self._last_bucket, self.t_line = bucket, now
            note(self.stage, f"{self.what} {self.done}/{self.total}: {label} ({dt:.1f} s)", self.stream)

    def close(self) -> None:
        """End the bar, or write the closing line (count and total time)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.done:
            note(self.stage, f"{self.what}: {self.done} {self.unit}(s) in {time.monotonic() - self.t0:.1f} s",
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
        note(self.stage, f"{self.what} ...")
        self.t0 = time.monotonic()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            note(self.stage, f"{self.what}: done in {time.monotonic() - self.t0:.1f} s")
