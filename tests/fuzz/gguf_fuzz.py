"""Structured fuzzer of the GGUF importer (hypothesis, fixed seed): mutate a small valid GGUF and
check that reading it ends well.

    .venv/bin/python tests/fuzz/gguf_fuzz.py --examples 300 --seed 0
    .venv/bin/python tests/fuzz/gguf_fuzz.py --replay tests/fuzz/regressions/gguf

The base file is tests.synth.write_tiny_llama (1 layer, F32 + Q8_0 weights, byte-level BPE). Each
example applies 1 to 3 mutations that know the GGUF v3 layout (ggml/docs/gguf.md): header counts
and version, a KV's key length, value type, string length, array item type and count, value bytes,
a tensor info's name length, n_dims, dims, GGML type and data offset, plus truncation, byte flips
and inserted bytes. Then ``gguf_file.read_header``, ``importer.plan_conversion`` and, when the
plan succeeds, ``importer.convert`` into a scratch folder. Every outcome must be success or a
``BringupError`` with exit class 2 (bad input), 3 (integrity) or 4 (unsupported): any other
exception (a traceback = exit 1 = a bug), a MemoryError under the address-space limit (a huge
allocation), or an example over the time limit (a hang) is a failure. Failures are all collected
(not only the first), printed one per kind with the mutation, and the inputs saved to --save-dir.
Exit 0: no failure; 1: failures.
"""
from __future__ import annotations

import argparse
import resource
import shutil
import signal
import struct
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:   # run as a script: make `bringup` and `tests` importable
    sys.path.insert(0, str(ROOT))

import gguf  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bringup.convert import importer  # noqa: E402
from bringup.core.errors import BringupError  # noqa: E402
from bringup.formats import gguf_check, gguf_file  # noqa: E402
from tests.synth import write_tiny_llama  # noqa: E402

ALLOWED_EXIT = (2, 3, 4)
INTERESTING = [0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 31, 32, 33, 63, 64, 65, 255, 256, 4096, 2**16, 2**31 - 1, 2**31,
               2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


class Hang(BaseException):
    """Raised by the per-example alarm (a BaseException, so no `except Exception` swallows it)."""


@dataclass
class Layout:
    """Byte offsets of the fields of a GGUF v3 file that the mutations target."""
    data: bytes
    kvs: tuple         # gguf_check.MetadataKV
    tensors: list      # per tensor: {"name_len": off, "n_dims": off, "dims": [off], "type": off, "offset": off}


def layout(data: bytes) -> Layout:
    """Where the fields are, from bringup's own header walk (gguf_check.walk) of the base file."""
    lay = gguf_check.walk(data, "base.gguf")
    tensors = []
    for t in lay.tensors:
        off = t.offset + 8 + len(t.name.encode())
        nd = len(t.dims)
        tensors.append({"name_len": t.offset, "n_dims": off, "dims": [off + 4 + 8 * i for i in range(nd)],
                        "type": off + 4 + 8 * nd, "offset": off + 8 + 8 * nd})
    return Layout(data, lay.kvs, tensors)


def _u(draw, width: int, orig: int | None = None) -> int:
    top = 2**(8 * width) - 1
    choices = [v for v in INTERESTING if v <= top]
    if orig is not None:
        choices += [max(0, orig - 1), min(top, orig + 1), min(top, orig * 2), orig // 2, min(top, orig + 32)]
    return draw(st.one_of(st.sampled_from(choices), st.integers(0, top)))


@st.composite
def mutation(draw, lay: Layout):
    """One mutation: (description, function bytearray -> bytearray)."""
    d = lay.data
    kind = draw(st.sampled_from(["header", "kv", "kv", "tensor", "tensor", "truncate", "flip", "insert"]))

    def put(off: int, width: int, value: int):
        def f(b: bytearray) -> bytearray:
            b[off:off + width] = value.to_bytes(width, "little")
            return b
        return f

    if kind == "header":
        off, width = draw(st.sampled_from([(4, 4), (8, 8), (16, 8)]))
        v = _u(draw, width, int.from_bytes(d[off:off + width], "little"))
        return f"header[{off}] = {v}", put(off, width, v)
    if kind == "kv":
        i = draw(st.integers(0, len(lay.kvs) - 1))
        kv = lay.kvs[i]
        fields = [("key length", kv.offset, 8), ("value type", kv.start - 4, 4)]
        if kv.vtype == 8:
            fields.append(("string length", kv.start, 8))
        if kv.vtype == 9:
            fields += [("array item type", kv.start, 4), ("array count", kv.start + 4, 8)]
            sub = struct.unpack_from("<I", d, kv.start)[0]
            if sub == 8 and kv.end > kv.start + 12:
                fields.append(("first item length", kv.start + 12, 8))
        what, off, width = draw(st.sampled_from(fields))
        if draw(st.booleans()) and kv.end > kv.start:
            pos = draw(st.integers(kv.start, kv.end - 1))
            raw = draw(st.binary(min_size=1, max_size=8))
            return f"kv {kv.key} value bytes at {pos} = {raw.hex()}", lambda b: b[:pos] + raw + b[pos + len(raw):]
        v = _u(draw, width, int.from_bytes(d[off:off + width], "little"))
        return f"kv {kv.key} {what} = {v}", put(off, width, v)
    if kind == "tensor":
        i = draw(st.integers(0, len(lay.tensors) - 1))
        t = lay.tensors[i]
        fields = [("name length", t["name_len"], 8), ("n_dims", t["n_dims"], 4), ("type", t["type"], 4),
                  ("offset", t["offset"], 8)] + [(f"dim {k}", o, 8) for k, o in enumerate(t["dims"])]
        what, off, width = draw(st.sampled_from(fields))
        v = _u(draw, width, int.from_bytes(d[off:off + width], "little"))
        return f"tensor {i} {what} = {v}", put(off, width, v)
    if kind == "truncate":
        n = draw(st.integers(0, len(d) - 1))
        return f"truncate to {n} bytes", lambda b: b[:n]
    if kind == "flip":
        pos, x = draw(st.integers(0, len(d) - 1)), draw(st.integers(1, 255))

        def flip(b: bytearray) -> bytearray:
            if pos < len(b):
                b[pos] ^= x
            return b
        return f"xor byte {pos} with {x:#x}", flip
    pos, raw = draw(st.integers(0, len(d))), draw(st.binary(min_size=1, max_size=16))
    return f"insert {raw.hex()} at {pos}", lambda b: b[:pos] + raw + b[pos:]


def _alarm(*_):
    raise Hang()


def check_file(path: Path, out_dir: Path, time_limit: float) -> tuple[str, str | None]:
    """Read, plan and convert ``path`` into ``out_dir`` (removed afterwards). Returns (outcome:
    "converted" or "exit N", None) when the outcome is allowed, else (kind, what went wrong)."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, time_limit)
    try:
        gguf_file.read_header(path)
        importer.plan_conversion(path)
        importer.convert(path, out_dir)
        return "converted", None
    except BringupError as e:
        if e.exit_code not in ALLOWED_EXIT:
            return f"exit {e.exit_code}", f"BringupError with exit class {e.exit_code} (not in {ALLOWED_EXIT}): {e}"
        return f"exit {e.exit_code}", None
    except Hang:
        return "hang", f"no result within {time_limit} s"
    except MemoryError:
        return "MemoryError", "an allocation not bounded by the file size"
    except Exception as e:  # noqa: BLE001 - any other exception is the bug this fuzzer looks for
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return f"{type(e).__name__} at {Path(tb.filename).name}:{tb.lineno}", str(e)[:200]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        shutil.rmtree(out_dir, ignore_errors=True)


def run(examples: int, seed_value: int, work: Path, save_dir: Path | None, time_limit: float) -> dict:
    """Run ``examples`` mutated files; returns {"examples", "outcomes": {kind: count}, "failures": {...}}."""
    base_path = write_tiny_llama(work / "base.gguf", n_ff=32, weight_type=gguf.GGMLQuantizationType.Q8_0)
    base = base_path.read_bytes()
    lay = layout(base)
    outcomes: dict[str, int] = {}
    failures: dict[str, tuple[str, bytes]] = {}
    counter = [0]

    @seed(seed_value)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.lists(mutation(lay), min_size=1, max_size=3))
    def one(muts):
        counter[0] += 1
        data = bytearray(base)
        for _, f in muts:
            data = bytearray(f(data))
        path = work / f"ex{counter[0]}.gguf"   # a new name each time: read_header caches by path
        path.write_bytes(data)
        kind, problem = check_file(path, work / f"out{counter[0]}", time_limit)
        path.unlink()
        outcomes[kind] = outcomes.get(kind, 0) + 1
        if problem is not None and kind not in failures:
            failures[kind] = (f"{problem} | mutations: " + "; ".join(m for m, _ in muts), bytes(data))

    one()
    if save_dir and failures:
        save_dir.mkdir(parents=True, exist_ok=True)
        for i, (_, data) in enumerate(failures.values()):
            (save_dir / f"failure{i}.gguf").write_bytes(data)
    return {"examples": counter[0], "outcomes": outcomes, "failures": {k: v[0] for k, v in failures.items()}}


def replay(folder: Path, work: Path, time_limit: float) -> dict:
    """Check every file of ``folder`` (regression inputs) as one example each."""
    failures = {}
    files = sorted(p for p in folder.glob("*.gguf"))
    for i, p in enumerate(files):
        kind, problem = check_file(p, work / f"replay{i}", time_limit)
        if problem:
            failures[p.name] = f"{kind}: {problem}"
    return {"examples": len(files), "failures": failures}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tests/fuzz/gguf_fuzz.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per example before it counts as a hang")
    ap.add_argument("--memory-limit-mb", type=int, default=4096, help="address-space limit (RLIMIT_AS)")
    ap.add_argument("--replay", type=Path, help="check the .gguf files of this folder instead of fuzzing")
    ap.add_argument("--save-dir", type=Path, help="write one failing input per failure kind here")
    a = ap.parse_args(argv)
    lim = a.memory_limit_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    with tempfile.TemporaryDirectory(prefix="gguf_fuzz.") as d:
        res = replay(a.replay, Path(d), a.time_limit) if a.replay else \
            run(a.examples, a.seed, Path(d), a.save_dir, a.time_limit)
    print(f"gguf_fuzz: {res['examples']} examples; outcomes {res.get('outcomes', {})}")
    for k, v in res["failures"].items():
        print(f"FAILURE {k}: {v}")
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
