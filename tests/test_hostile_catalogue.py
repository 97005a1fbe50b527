"""The hostile-input catalogue (issue 13, docs/hostile_input.md): bad files, metadata, registries,
workflow settings, circuits, kernel maps, command lines and environments. Every case asserts the
exit class, one error line naming the problem (no traceback, control characters escaped) and
that the case's folder is byte-identical afterwards: nothing partial appeared and a previous
good conversion in it survived.

`bringup` runs in-process (``bringup.core.cli.main``) except where the exit path itself is the
point (signals, a full disk under a file-size limit, Snakemake's parse).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import runpy
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from bringup.convert import importer
from bringup.core.cli import main
from bringup.core.errors import BringupError, one_line
from bringup.core.paths import ROOT
from sigint import terminal_sigint
from tests import hostile_gguf as H
from tests.hostile_cases import CASES, ENTRY, Base, Case
from tests.tree_snapshot import snapshot

CATEGORIES = ("file", "metadata", "registry", "workflow", "circuit", "kernel map", "cli", "environment", "export")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Base:
    root = tmp_path_factory.mktemp("hostile_base")
    g = H.tiny(root / "tiny.gguf")
    importer.convert(g, root / "good")
    return Base(g, g.read_bytes(), root / "good")


def run(argv: list[str], capsys) -> tuple[int, str]:
    """``bringup argv`` in-process: (exit code, stderr). argparse's usage errors exit via SystemExit."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err


def check_error(rc: int, err: str, want_rc: int, pattern: str) -> None:
    assert "Traceback" not in err, err
    assert rc == want_rc, err
    last = err.rstrip("\n").splitlines()[-1]
    assert re.match(r"^bringup( [a-z]+)?: error: ", last), err
    assert re.search(pattern, last), last
    assert all(ord(c) >= 32 for c in last), repr(last)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_case(case: Case, base: Base, tmp_path: Path, capsys) -> None:
    w = tmp_path / "w"
    w.mkdir()
    todo = case.build(w, base)
    before = snapshot(w)
    if callable(todo):
        with pytest.raises(BringupError) as e:
            todo()
        rc, err = e.value.exit_code, f"bringup ir: error: {one_line(str(e.value))}\n"
    else:
        rc, err = run(todo, capsys)
    check_error(rc, err, case.rc, case.pattern)
    assert snapshot(w) == before, "the case changed its folder (a partial output, or a lost good set)"


def test_catalogue_is_large_and_covers_every_category() -> None:
    # the workflow and environment cases are the tests below the table
    assert {c.category for c in CASES} | {"workflow", "environment"} == set(CATEGORIES)
    assert len(CASES) + N_WORKFLOW + N_ENVIRONMENT >= 60
    assert len({c.id for c in CASES}) == len(CASES)


# --- environment: full and read-only disks, signals mid-stage ---------------------------------------

N_ENVIRONMENT = 7
PY = [sys.executable, "-m", "bringup"]


def _leftovers(w: Path) -> list[str]:
    return sorted(n for n in os.listdir(w) if ".tmp-" in n)


@contextlib.contextmanager
def tmpfs(path: Path, size_kb: int):
    """A tmpfs of ``size_kb`` at ``path`` (needs root: skips otherwise), unmounted afterwards."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()}); the RLIMIT_FSIZE case covers a full disk")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _set_size(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir())


def test_disk_full_tmpfs_keeps_the_previous_set(base: Base, tmp_path: Path, capsys) -> None:
    need_kb = _set_size(base.good) // 1024
    with tmpfs(tmp_path / "mnt", need_kb + 24) as mnt:
        shutil.copytree(base.good, mnt / "out")
        before = snapshot(mnt)
        rc, err = run(["convert", str(base.gguf), "--out-dir", str(mnt / "out")], capsys)
        check_error(rc, err, 5, r"no space left on the device")
        assert snapshot(mnt) == before and not _leftovers(mnt)


def test_disk_full_file_size_limit(base: Base, tmp_path: Path) -> None:
    """A full disk as an unprivileged user sees it: RLIMIT_FSIZE makes writes fail with EFBIG."""
    shutil.copytree(base.good, tmp_path / "out")
    before = snapshot(tmp_path)
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))  # noqa: E731
    r = subprocess.run([*PY, "convert", str(base.gguf), "--out-dir", str(tmp_path / "out")], capture_output=True,
                       text=True, preexec_fn=limit, timeout=120)
    check_error(r.returncode, r.stderr, 5, r"file size limit exceeded")
    assert snapshot(tmp_path) == before and not _leftovers(tmp_path)


def test_read_only_folder(base: Base, tmp_path: Path, capsys) -> None:
    with tmpfs(tmp_path / "mnt", 1024) as mnt:
        shutil.copytree(base.good, mnt / "out")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        before = snapshot(mnt)
        rc, err = run(["convert", str(base.gguf), "--out-dir", str(mnt / "out")], capsys)
        check_error(rc, err, 2, r"(?i)read-only file system")
        assert snapshot(mnt) == before


@pytest.fixture(scope="module")
def big_gguf(tmp_path_factory) -> Path:
    """A 1-layer model of 80 MB, so that convert is still writing when a signal comes."""
    return H.tiny(tmp_path_factory.mktemp("big") / "big.gguf", n_embd=1024, n_ff=4096)


def _interrupt(gguf_path: Path, w: Path, sig: int) -> subprocess.CompletedProcess:
    """Start convert into w/out and send ``sig`` once it is writing weights.bump in its temporary folder."""
    p = subprocess.Popen([*PY, "convert", str(gguf_path), "--out-dir", str(w / "out")], stderr=subprocess.PIPE,
                         text=True, preexec_fn=terminal_sigint)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        if any(list(Path(w, t).glob(".weights.bump.tmp-*")) for t in _leftovers(w)):
            p.send_signal(sig)
            break
        time.sleep(0.002)
    _, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, "", err)


@pytest.mark.parametrize("sig,rc,said", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_signal_mid_convert_keeps_the_previous_set(base: Base, big_gguf: Path, tmp_path: Path, sig, rc, said) -> None:
    shutil.copytree(base.good, tmp_path / "out")
    before = snapshot(tmp_path)
    r = _interrupt(big_gguf, tmp_path, sig)
    check_error(r.returncode, r.stderr, rc, said)
    assert snapshot(tmp_path) == before and not _leftovers(tmp_path)


def test_sigkill_mid_convert_then_rerun(base: Base, big_gguf: Path, tmp_path: Path, capsys) -> None:
    """SIGKILL cannot be handled: the old set stays in place, the dead writer's temporary folder is
    left, and the next run removes it and completes."""
    shutil.copytree(base.good, tmp_path / "out")
    before = snapshot(tmp_path / "out")
    r = _interrupt(big_gguf, tmp_path, signal.SIGKILL)
    assert r.returncode == -signal.SIGKILL
    assert snapshot(tmp_path / "out") == before
    assert main(["convert", str(base.gguf), "--out-dir", str(tmp_path / "out")]) == 0
    assert not _leftovers(tmp_path)
    assert snapshot(tmp_path / "out") == snapshot(base.good)


# --- workflow: Snakemake settings and the stage glue ----------------------------------------------

N_WORKFLOW = 4
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


@pytest.mark.parametrize("config,said", [
    (["model=nosuchmodel"], r"unknown model 'nosuchmodel'.*has: .*smollm2"),
    (["registry=/nonexistent/models.yaml"], r"model registry not found: /nonexistent/models.yaml"),
    (["ctx=-5"], r"ctx"),
])
def test_workflow_settings_fail_at_parse_time(config, said) -> None:
    r = subprocess.run([SNAKEMAKE, "convert", "-n", "--config", *config], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out, out[-2000:]
    assert re.search(said, out), out[-2000:]


def test_fetch_rule_uses_the_configured_registry(base: Base, tmp_path: Path) -> None:
    """scripts/fetch.py passes --config registry=... to `bringup fetch`: a registry whose pin is
    wrong fails the job (exit 3) instead of fetching by the default registry."""
    reg = tmp_path / "reg.yaml"
    reg.write_text(ENTRY.format(uri=f"file://{base.gguf}", sha="0" * 64))
    smk = types.SimpleNamespace(wildcards=types.SimpleNamespace(model="tiny"), config={"registry": str(reg)},
                                output=types.SimpleNamespace(gguf=str(tmp_path / "m.gguf"),
                                                             provenance=str(tmp_path / "p.json")),
                                log=[str(tmp_path / "fetch.log")])
    with pytest.raises(SystemExit, match="bringup fetch failed with exit code 3"):
        runpy.run_path(str(ROOT / "scripts" / "fetch.py"), init_globals={"snakemake": smk})
    assert "the registry pins " + "0" * 64 in (tmp_path / "fetch.log").read_text()
    assert not (tmp_path / "m.gguf").exists()


def test_docs_list_every_case() -> None:
    doc = (ROOT / "docs" / "hostile_input.md").read_text()
    missing = [c.id for c in CASES if f"| `{c.id}` | {c.rc} |" not in doc]
    assert not missing, f"docs/hostile_input.md lacks {missing}"


def test_ctx_beyond_training_is_recorded_when_allowed(base: Base, tmp_path: Path, capsys) -> None:
    """The way out of cli-ir-ctx-above-training: explicit, and on record in the IR."""
    argv = ["ir", "--config", str(base.good / "config.json"), "--manifest", str(base.good / "weights_manifest.json"),
            "--out-dir", str(tmp_path / "ir"), "--chunk", "8", "--ctx", "256", "--allow-ctx-beyond-training"]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "ir" / "ir_decode.json").read_text())
    assert doc["dims"]["n_ctx"] == 256
    assert "above the training context 128: --allow-ctx-beyond-training" in doc["values_source"]["n_ctx"]


@pytest.mark.parametrize("text,want", [
    ("a\nb", "a\\nb"), ("a\rb", "a\\rb"), ("\x1b[31mred", "\\x1b[31mred"), ("rtl\u202eevil", "rtl\\u202eevil"),
    ("line\u2028sep", "line\\u2028sep"), ("bad\udcffbyte", "bad\\udcffbyte"), ("café ok", "café ok"),
])
def test_one_line_escapes_what_could_forge_a_line(text: str, want: str) -> None:
    assert one_line(text) == want


def test_shown_escapes_and_bounds_a_string() -> None:
    from bringup.core.errors import SHOWN_MAX, shown
    assert shown("blk.0\n[ok] x\x1b[2J") == "blk.0\\n[ok] x\\x1b[2J"
    long = shown("a" * (SHOWN_MAX + 5000))
    assert long == "a" * SHOWN_MAX + "...[5000 more characters]"     # cut, and said so


# issue 28: headers too large to be a model's are refused from their counts, in bounded time and
# memory; run as a separate process under an address-space limit, as a user's shell would
BOUNDED = [c for c in CASES if c.id in ("kv-count-1e6", "inspect-kv-count-1e6", "plan-memory-kv-count-1e6",
                                         "array-3e6-items", "nested-arrays-1e5")]


@pytest.mark.parametrize("case", BOUNDED, ids=[c.id for c in BOUNDED])
def test_large_header_bounded_under_ulimit(case: Case, base: Base, tmp_path: Path) -> None:
    limit = 1 << 30      # ulimit -v 1 GiB (the old reader took 7 GB, or died at the limit with exit 1)
    argv = case.build(tmp_path, base)
    t0 = time.monotonic()
    p = subprocess.run([*PY, *argv], capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert time.monotonic() - t0 < 10, "refusing an implausible header took more than 10 s"
    check_error(p.returncode, p.stderr, case.rc, case.pattern)


# --- bounded: the cases below the CLI that could allocate, under ulimit -v 1 GB and 10 s ----------

BOUNDED = [c for c in CASES if c.id.startswith(("template-", "synth-"))]
_BOUNDED_RUN = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from bringup.core.errors import BringupError
from tests.hostile_cases import CASES, Base
g, good, w, cid = map(Path, sys.argv[1:5])
todo = next(c for c in CASES if c.id == str(cid)).build(w, Base(g, g.read_bytes(), good))
try:
    todo()
except BringupError as e:
    # this process's peak resident set (VmHWM: since exec; getrusage's ru_maxrss would also count
    # the forking test process's size, which Linux keeps across execve)
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(e.exit_code, int(hwm.split()[1]))
"""


@pytest.mark.parametrize("case", BOUNDED, ids=[c.id for c in BOUNDED])
def test_bounded_under_one_gigabyte_and_ten_seconds(case: Case, base: Base, tmp_path: Path) -> None:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", _BOUNDED_RUN, str(base.gguf), str(base.good), str(tmp_path), case.id],
                       capture_output=True, text=True, timeout=30, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert time.monotonic() - t0 < 10, "took 10 s or more"
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    rc, rss_kb = map(int, p.stdout.split())
    assert rc == case.rc and rss_kb < 1 << 20
