"""Every ``bringup`` command's usage error is one line, ``bringup <cmd>[ <job>]: error: ... (bringup
<cmd>[ <job>] --help)``, exit 2 (README's exit classes), from one shared parser class
(bringup.core.subcommands.Parser): argparse's own error is a usage block and a message, two lines
or more."""
from __future__ import annotations

import re

import pytest

from bringup.core import subcommands
from bringup.core.cli import COMMANDS, main
from bringup.core.paths import ROOT

#: commands made of jobs: each job's parser, and the dispatcher's own errors
JOBS = {"bench": ("run", "native", "render"), "plan": ("arena", "memory")}


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as e:   # argparse's exit, as the console script sees it
        rc = e.code
    return rc, capsys.readouterr().err


def _argvs() -> list[list[str]]:
    out = []
    for cmd in sorted(COMMANDS):
        out.append([cmd, "--no-such-option"])
        for job in JOBS.get(cmd, ()):
            out.append([cmd, job, "--no-such-option"])
    return out + [["bench"], ["bench", "frob"], ["plan", "x\x1b[2J"], ["kernels", "frob"],
                  ["fetch", "smollm2", "--timeout", "soon"]]


@pytest.mark.parametrize("argv", _argvs(), ids=" ".join)
def test_a_usage_error_is_one_line_exit_2(argv, capsys):
    rc, err = _run(argv, capsys)
    prog = "bringup " + " ".join(argv[:2] if argv[0] in JOBS and len(argv) > 2 else argv[:1])
    assert rc == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert re.fullmatch(rf"{re.escape(prog)}: error: \S.* \({re.escape(prog)} --help\)\n", err), err
    assert "usage:" not in err and all(ord(c) >= 32 for c in err[:-1]), repr(err)


def test_a_job_dispatcher_names_its_jobs(capsys):
    assert _run(["bench", "frob"], capsys) == (
        2, "bringup bench: error: unknown job 'frob'; jobs: run, native, render (bringup bench --help)\n")
    assert _run(["plan"], capsys) == (2, "bringup plan: error: no job given; jobs: arena, memory "
                                         "(bringup plan --help)\n")
    rc, err = _run(["plan", "--help"], capsys)
    assert rc == 0 and err == ""


def test_every_parser_is_the_shared_one():
    """No module builds argparse's parser itself (its two-line error): every command takes
    subcommands.Parser, so a new command cannot drift back."""
    own = ROOT / "bringup" / "core" / "subcommands.py"
    users = [p.relative_to(ROOT) for p in (ROOT / "bringup").rglob("*.py")
             if p != own and re.search(r"\bArgumentParser\s*\(", p.read_text())]
    assert users == []
    assert issubclass(subcommands.Parser, subcommands.argparse.ArgumentParser)
