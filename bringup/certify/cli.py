"""``bringup certify``: the command line of the certify stage (argument parsing, the printed verdict, exit
6 for a failed gate); the certification itself is :func:`bringup.certify.report.certify`."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from bringup.formats import bench_summary
from bringup.core.errors import GateError
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
    print(f"certify {a.model}: {cert['verdict'].upper()}"
          + (f" (failed: {', '.join(failed)})" if failed else "")
          + f"; speed: {bench_summary.one_line(speed['bench'], speed['not_benched'])}")
    if failed:
        raise GateError(f"certification failed: {', '.join(failed)} (see {out_dir / 'certification.md'})")
    return 0
