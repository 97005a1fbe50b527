"""The standalone check: the program runs from a copy in a bare temporary folder, with an empty
environment and no network, and reproduces recorded greedy tokens.

One function, :func:`run_bare`, serves ``bringup verify`` (on a bundle) and the certification's
standalone gate (on the three files of a build). It

- copies the given files into a fresh ``tempfile.mkdtemp()`` folder outside the checkout;
- runs the command there with an empty environment (``env={}``, what ``env -i`` gives) and, where
  the host allows unprivileged user + network namespaces, inside ``unshare -rn`` (a network
  namespace holding only a loopback device that is down). Whether the run was isolated, and why
  not when it was not, is in the record: never silently;
- records the files the running program actually mapped, by sampling ``/proc/<pid>/maps`` while it
  runs (``ldd`` says what the loader would pick; this says what it did pick), and flags any shared
  library loaded from neither the bare folder nor the system library folders;
- compares the generated tokens with the expected ones, exactly.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from bringup.core.errors import BringupError
from bringup.core.native import NativeProgram, run_command, stderr_tail
from bringup.core.paths import ROOT

#: Folders a shared library may come from besides the bare folder: the system's (glibc, libm).
SYSTEM_LIB_DIRS = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/")
#: Seconds between two samples of /proc/<pid>/maps.
SAMPLE_S = 0.005
_SO = re.compile(r"\.so(\.\d+)*$")


def network_isolation() -> tuple[list[str], dict[str, Any]]:
    """The command prefix that runs a program without network, and the record of the probe.

    Tries ``unshare -rn`` (unprivileged user + network namespace), then ``unshare -n`` (needs
    CAP_SYS_ADMIN), each by running ``cat /proc/net/dev`` inside: the namespace must show no
    interface but ``lo``. Returns ``([], {"isolated": False, "reason": ...})`` when neither works.
    """
    unshare, cat = shutil.which("unshare"), shutil.which("cat")
    if not unshare or not cat:
        return [], {"isolated": False, "reason": "unshare (util-linux) or cat not found on PATH"}
    reasons = []
    for opts in (["-rn"], ["-n"]):
        p = run_command([unshare, *opts, cat, "/proc/net/dev"], timeout_s=30, what="unshare probe", env={})
        if p.returncode != 0:
            reasons.append(f"unshare {opts[0]}: {stderr_tail(p.stderr).splitlines()[-1:] or ['exit %d' % p.returncode]}")
            continue
        ifaces = sorted(ln.split(":")[0].strip() for ln in p.stdout.decode().splitlines()[2:] if ":" in ln)
        if ifaces != ["lo"]:
            reasons.append(f"unshare {opts[0]}: the namespace still shows interfaces {ifaces}")
            continue
        return [unshare, *opts], {"isolated": True, "method": f"unshare {opts[0]}", "interfaces": ifaces}
    return [], {"isolated": False, "reason": "; ".join(reasons)}


def _mapped_files(pid: int) -> set[str] | None:
    """Paths of the file-backed mappings of ``pid`` (None once it has exited)."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            text = fh.read()
    except OSError:
        return None
    out = set()
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            out.add(parts[5].removesuffix(" (deleted)"))
    return out


def _run_sampled(cmd: list[str], cwd: Path, program: Path, timeout_s: float) -> tuple[int, bytes, bytes, set[str], int]:
    """Run ``cmd`` (empty environment) and sample the mappings of ``program`` while it runs.
    Returns (exit status, stdout, stderr, mapped files, number of samples taken of ``program``)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env={}, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        mapped: set[str] = set()
        samples, deadline = 0, time.monotonic() + timeout_s
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise BringupError(f"standalone run timed out after {timeout_s:g} s")
                try:  # a wrapper (unshare) runs first, then execs the program under the same pid
                    is_program = Path(os.readlink(f"/proc/{proc.pid}/exe")) == program
                except OSError:
                    is_program = False
                if is_program and (m := _mapped_files(proc.pid)) is not None:
                    mapped |= m
                    samples += 1
                time.sleep(SAMPLE_S)
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), mapped, samples


def classify_mappings(mapped: set[str], bare: Path) -> dict[str, list[str]]:
    """Split mapped paths into ``in_folder`` (relative names inside ``bare``), ``system_libraries``
    and ``foreign_libraries`` (a shared library from anywhere else: the check fails on any)."""
    bare_s = str(bare) + "/"
    in_folder, system, foreign = [], [], []
    for p in sorted(mapped):
        if p.startswith(bare_s):
            in_folder.append(p[len(bare_s):])
        elif _SO.search(p):
            (system if p.startswith(SYSTEM_LIB_DIRS) else foreign).append(p)
    return {"in_folder": in_folder, "system_libraries": system, "foreign_libraries": foreign}


def run_bare(files: Mapping[str, str | os.PathLike], argv: Sequence[str], tokens: Sequence[int],
             expect: Sequence[int], threads: int, *, network: str = "try", require_loaded: Sequence[str] = (),
             timeout_s: float = 600.0) -> dict[str, Any]:
    """Copy ``files`` (name in the bare folder -> source path) into a fresh temporary folder, run
    ``argv`` (relative to that folder, e.g. ``["./bringup-run", "./libmodel.so", "./weights.bump"]``)
    there with the greedy options for ``len(expect)`` tokens after ``tokens`` and ``--threads``,
    and compare the generated tokens with ``expect``.

    ``network``: ``"try"`` isolates when the host allows it and records why not otherwise;
    ``"require"`` raises BringupError (exit 5 class: unavailable) when it cannot; ``"off"`` skips it.
    ``require_loaded``: names in the folder the program must be seen mapping (e.g. ``libmodel.so``).

    Returns the record {dir, command, env, network, exit_code, runtime_isa (the kernel level the
    program reports dispatching to, when it does), prompt_tokens, expected_tokens, generated_tokens,
    loaded, samples, stderr, problems, ok}; ``ok`` is true when the program exited 0, reproduced
    ``expect`` exactly, loaded no library from outside the folder and the system library folders,
    and was seen mapping every ``require_loaded`` file. Raises BringupError when the folder would
    lie inside the checkout or a file cannot be copied.
    """
    wrapper, net = network_isolation() if network != "off" else ([], {"isolated": False, "reason": "not requested (--network off)"})
    if network == "require" and not net["isolated"]:
        raise BringupError(f"cannot run without network here: {net['reason']}", exit_code=5)
    n = len(expect)
    with tempfile.TemporaryDirectory(prefix="bringup-bare-") as d:
        d = Path(d).resolve()
        if d == ROOT.resolve() or ROOT.resolve() in d.parents:
            raise BringupError(f"temporary folder {d} is inside the checkout; set TMPDIR elsewhere")
        for name, src in sorted(files.items()):
            dst = d / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)  # keeps the executable bit
        args = [*argv, *NativeProgram.greedy_args(tokens, n), "--threads", str(threads)]
        code, out, err, mapped, samples = _run_sampled([*wrapper, *args], d, d / Path(argv[0]).name, timeout_s)
        loaded = classify_mappings(mapped, d)
    try:
        doc = json.loads(out) if code == 0 else {}
        got = [int(t) for t in doc["generated_tokens"]] if code == 0 else None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
        doc, got = {}, None
    problems = []
    if code != 0:
        problems.append(f"the program exited {code}: {(stderr_tail(err).splitlines() or [''])[-1]}")
    elif got != [int(t) for t in expect]:
        first = next((i for i, (a, b) in enumerate(zip(got or [], expect)) if a != b), min(len(got or []), n))
        problems.append(f"generated tokens differ from the recorded ones at position {first} "
                        f"(got {got[first] if got and first < len(got) else 'none'}, recorded {expect[first] if first < n else 'none'})")
    if loaded["foreign_libraries"]:
        problems.append(f"shared libraries loaded from outside the folder and the system: {', '.join(loaded['foreign_libraries'])}")
    if code == 0 and samples == 0 and require_loaded:
        problems.append("the program exited before its mappings could be sampled: loaded libraries unobserved")
    elif code == 0:
        unseen = [f for f in require_loaded if f not in loaded["in_folder"]]
        if unseen:
            problems.append(f"the program was not seen loading {', '.join(unseen)} from the folder")
    return {"dir": "a fresh tempfile.mkdtemp() outside the checkout", "env": {},
            "command": " ".join([*(Path(w).name for w in wrapper[:1]), *wrapper[1:], *argv,
                                 "--prompt-tokens", f"<{len(tokens)} ids>", *args[len(argv) + 2:]]),
            "network": net, "exit_code": code, "runtime_isa": doc.get("isa") if isinstance(doc, dict) else None, "prompt_tokens": [int(t) for t in tokens],
            "expected_tokens": [int(t) for t in expect], "generated_tokens": got,
            "loaded": loaded, "samples": samples, "stderr": stderr_tail(err)[-1000:],
            "problems": problems, "ok": not problems}
