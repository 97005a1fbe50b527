"""Same bytes stop the wave: bringup.core.reuse keys a job by the contents of its inputs (code
included) and copies a stored result back instead of recomputing, verified, and says so in its log."""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest

from bringup.build import sources
from bringup.core import canonjson, reuse
from bringup.core.hashing import sha256_file


def _job(tmp_path: Path, calls: list, payload: str = "result"):
    """A job: inputs a.txt and code.py, outputs out/r.json and out/p.png, a log; run() counts calls."""
    ins = [tmp_path / "a.txt", tmp_path / "code.py"]
    outs = {"json": tmp_path / "out" / "r.json", "plot": tmp_path / "out" / "p.png"}
    log = tmp_path / "job.log"

    def run() -> int:
        calls.append(1)
        for p in outs.values():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f"{payload} {p.name}")
        log.write_text("computed\n")
        return 0
    return ins, outs, log, run


def _key(ins, params=None):
    return reuse.job_key("parity_model", {"model": "m"}, params or {"threads": 2}, ins)


def test_identical_inputs_reuse_the_stored_outputs_and_say_so(tmp_path):
    calls: list = []
    ins, outs, log, run = _job(tmp_path, calls)
    ins[0].write_text("weights")
    ins[1].write_text("code v1")
    store = tmp_path / ".reuse" / "parity_model"
    k1 = _key(ins)
    assert reuse.reuse_or_run(k1, store, outs, log, run) == (0, False) and len(calls) == 1
    first = {n: p.read_bytes() for n, p in outs.items()}
    for p in outs.values():     # Snakemake deletes the outputs before it reruns a job
        p.unlink()
    # the inputs rewritten with the same bytes (a newer mtime): the same key, nothing recomputed
    ins[0].write_text("weights")
    assert _key(ins) == k1
    assert reuse.reuse_or_run(k1, store, outs, log, run) == (0, True) and len(calls) == 1
    assert {n: p.read_bytes() for n, p in outs.items()} == first
    assert log.read_text().startswith(f"reused: inputs identical to {k1}") and "computed" in log.read_text()


def test_a_changed_input_code_or_setting_is_a_new_key(tmp_path):
    calls: list = []
    ins, outs, log, run = _job(tmp_path, calls)
    ins[0].write_text("weights")
    ins[1].write_text("code v1")
    k1 = _key(ins)
    ins[1].write_text("code v2")            # the job's code is one of its inputs
    k2 = _key(ins)
    assert k2 != k1 and _key(ins, {"threads": 1}) != k2
    ins[0].write_text("weights!")
    assert _key(ins) not in (k1, k2)
    store = tmp_path / "store"
    reuse.reuse_or_run(k1, store, outs, log, run)
    reuse.reuse_or_run(k2, store, outs, log, run)
    assert len(calls) == 2


def test_a_tampered_entry_is_recomputed_and_the_log_says_why(tmp_path):
    calls: list = []
    ins, outs, log, run = _job(tmp_path, calls)
    ins[0].write_text("weights")
    ins[1].write_text("code")
    store, k = tmp_path / "store", _key(ins)
    reuse.reuse_or_run(k, store, outs, log, run)
    (store / k / "json").write_text("forged verdict")
    assert reuse.reuse_or_run(k, store, outs, log, run) == (0, False) and len(calls) == 2
    assert "does not match its recorded sha256; recomputing" in log.read_text()
    assert outs["json"].read_text() == "result r.json"
    # a stored output that links out of the entry (its manifest naming the target's hash) is not used
    (tmp_path / "secret").write_text("not a result")
    (store / k / "json").unlink()
    (store / k / "json").symlink_to(tmp_path / "secret")
    m = canonjson.read(store / k / reuse.MANIFEST, "m")
    m["files"]["json"] = sha256_file(tmp_path / "secret")
    canonjson.write(store / k / reuse.MANIFEST, m)
    assert reuse.reuse_or_run(k, store, outs, log, run) == (0, False) and len(calls) == 3
    assert "is a symbolic link; recomputing" in log.read_text()
    # and a failed run stores nothing
    assert reuse.reuse_or_run("f" * 64, store, outs, log, lambda: 6) == (6, False)
    assert not (store / ("f" * 64)).exists()


def test_the_store_keeps_the_most_recent_entries_only(tmp_path):
    calls: list = []
    _, outs, log, run = _job(tmp_path, calls)
    store = tmp_path / "store"
    for i in range(reuse.KEEP + 2):
        reuse.reuse_or_run(f"{i:064x}", store, outs, log, run)
    assert len([p for p in store.iterdir()]) == reuse.KEEP


# --- the workflow, end to end on a small generated model ------------------------------------

@pytest.mark.slow
def test_a_byte_identical_rebuild_reruns_no_parity_and_a_real_change_does(tmp_path):
    """In a fresh clone (tests/test_review.py's small model and config): certify; a comment in a
    kernel source the model uses reruns the build but reuses parity's stored result; a comment in
    parity's own code is a new key, so parity computes again."""
    from tests.clone import clone_checkout
    from tests.helpers.review import MODEL, ensure_synth_gguf, run_in, small_config

    gguf = ensure_synth_gguf(MODEL, tmp_path / "fetch")
    clone = clone_checkout(tmp_path / "clone")
    small_config(clone)
    (clone / "resources" / "models").mkdir(parents=True)
    shutil.copy2(gguf, clone / "resources" / "models")
    snakemake = str(Path(sys.executable).parent / "snakemake")

    def certify() -> tuple[float, str]:
        t0 = time.monotonic()
        r = run_in(clone, snakemake, "certify", "-c2", "--config", f"model={MODEL}", timeout=3600)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        return time.monotonic() - t0, (clone / f"results/{MODEL}/logs/parity.log").read_text()

    _, log = certify()
    assert not log.startswith("reused:") and "stored for reuse as" in log
    parity = (clone / f"results/{MODEL}/parity/parity.json").read_bytes()
    lib = clone / f"results/{MODEL}/build/libmodel.so"
    lib_before = lib.read_bytes()
    kernel = next(f for f in sources.build_inputs(
        [clone / f"results/{MODEL}/ir/ir_prefill.json", clone / f"results/{MODEL}/ir/ir_decode.json"], clone)
        if f.startswith("csrc/kernels/") and f.endswith(".c"))
    (clone / kernel).write_text((clone / kernel).read_text() + "\n/* a comment */\n")
    secs, log = certify()
    assert lib.read_bytes() == lib_before, "the rebuilt library differs: the premise of reuse"
    assert log.startswith("reused: inputs identical to "), log[:500]
    assert (clone / f"results/{MODEL}/parity/parity.json").read_bytes() == parity
    print(f"byte-identical rebuild: certify took {secs:.0f} s, parity reused")
    metrics = clone / "bringup/parity/metrics.py"
    metrics.write_text(metrics.read_text() + "\n# a comment\n")
    _, log = certify()
    assert not log.startswith("reused:") and "stored for reuse as" in log
    assert len(list((clone / f"results/{MODEL}/.reuse/parity_model").iterdir())) == 2
