"""``bringup certify``: the command line of the certify stage (argument parsing, the printed verdict, exit
6 for a failed gate); the certification itself is :func:`bringup.certify.report.certify`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from bringup.formats import bench_summary
from bringup.core import canonjson
from bringup.core.errors import GateError, shown
from bringup.core.hashing import sha256_file
from bringup.core import argtypes
from bringup.core.subcommands import model_parser
from bringup.certify import report
from bringup.certify.report import certify


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``bringup certify --model M --results results/M --gguf G``; exit 6 if a gate fails."""
    ap = model_parser("bringup certify", report.__doc__.split("\n")[0], results_help="results/{model}",
                      out_default="RESULTS/certify")
    ap.add_argument("--threads", type=argtypes.threads, default=2, help="threads of the standalone run")
    ap.add_argument("--standalone-tokens", type=int, default=16,
                    help="tokens the out-of-checkout run must reproduce (at most the parity greedy length)")
    ap.add_argument("--memory-model", type=Path, help="plan/memory_model_calibrated.json to include (the memory model "
                    "against the device budget; its tables become tables of the page)")
    ap.add_argument("--parity", type=Path, help="default: RESULTS/parity/parity.json")
    a = ap.parse_args(argv)
    out_dir = a.out_dir or a.results / "certify"
    cert = certify(a.model, a.results, a.gguf, out_dir=out_dir, parity_path=a.parity, threads=a.threads,
                   standalone_tokens=a.standalone_tokens, memory_model=a.memory_model)
    failed, speed = cert["failed_gates"], cert["speed"]
    print(verdict_line(cert, out_dir))
    print(f"certify {a.model}: speed: {bench_summary.one_line(speed['bench'], speed['not_benched'])}")
    if failed:
        raise GateError(f"certification failed: {', '.join(failed)} (see {out_dir / 'certification.md'})")
    return 0


def verdict_line(cert: dict, out_dir: Path) -> str:
    """The one line that ends a certification, for ``bringup certify`` and for rule certify_verdict
    (its log and the terminal Snakemake runs in): the verdict, how many gates passed, which
    failed, and where the certification is (``out_dir``: its page, with the .md and .json beside)."""
    failed, n = cert["failed_gates"], len(cert["gates"])
    head = f"{cert['verdict'].upper()}, {n - len(failed)} of {n} gates passed"
    return (f"certify {shown(cert['model'])}: {head}" + (f" (failed: {', '.join(failed)})" if failed else "")
            + f"; certification: {shown(Path(out_dir) / 'certification.html')} (.md, .json beside it)")


def record_verdict(cert_json: Path, log: Path, passed: Path) -> bool:
    """Rule certify_verdict: print ``verdict_line`` of ``cert_json`` (certification.json) to stderr,
    the terminal Snakemake runs in, and write it to ``log``; on a pass write ``passed`` ("pass
    <sha256 of cert_json>"). Returns whether the certification passed."""
    cert = canonjson.read(cert_json, "certification.json")
    line = verdict_line(cert, Path(cert_json).parent)
    print(line, file=sys.stderr, flush=True)
    Path(log).write_text(line + "\n")
    if cert["verdict"] == "pass":
        Path(passed).write_text(f"pass {sha256_file(cert_json)}\n")
    return cert["verdict"] == "pass"
