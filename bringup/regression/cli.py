"""`bringup regression`: summarize the certifications of a regression run.

Reads results/<model>/certify/certification.json of every model, writes summary.json (schema
regression_summary), summary.md and summary.html to the output folder, and appends this night to
history.jsonl once per certification set (the change from the previous night is the difference to
the last line with another set). The summary is written whatever the verdict.

exit codes: 0 every model passed; 6 every certification is present and some gate failed;
7 some model has no readable certification (its pipeline crashed or did not run); 2 bad usage or
an unknown model; 3 history.jsonl is corrupt. See docs/regression.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from bringup.core import canonjson
from bringup.core.errors import GateError
from bringup.core.paths import RESULTS
from bringup.fetch import registry
from bringup.regression import models as selection
from bringup.regression.render import render
from bringup.regression.summary import EXIT_GATE_FAILED, EXIT_INCOMPLETE, IncompleteError, summarize
from bringup.core.subcommands import Parser


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``bringup regression [--models M ...] [--results DIR] [--out-dir DIR]``; returns 0, or
    raises GateError (6) / IncompleteError (7) after the summary is written."""
    ap = Parser(prog="bringup regression", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", metavar="MODEL",
                    help="registry models to summarize (default: every entry fetchable here)")
    ap.add_argument("--registry", type=Path, help="default: config/models.yaml")
    ap.add_argument("--results", type=Path, default=RESULTS,
                    help="folder holding <model>/certify/certification.json (default: results/)")
    ap.add_argument("--out-dir", type=Path, help="default: RESULTS/regression")
    ap.add_argument("--history", type=Path, help="default: OUT_DIR/history.jsonl")
    a = ap.parse_args(argv)
    out_dir = a.out_dir or a.results / "regression"
    names = selection.select(registry.load(a.registry), a.models)
    certs = {m: a.results / m / "certify" / "certification.json" for m in names}
    summary = summarize(certs, a.history or out_dir / "history.jsonl")
    canonjson.write(out_dir / "summary.json", summary)
    render(summary, out_dir)
    for m in summary["models"]:
        detail = ", ".join(m["failed_gates"]) or m["error"] or ""
        print(f"regression {m['model']}: {m['status'].upper()}" + (f" ({detail})" if detail else ""))
    where = out_dir / "summary.md"
    if summary["exit_code"] == EXIT_INCOMPLETE:
        missing = [m["model"] for m in summary["models"] if m["status"] in ("missing", "invalid")]
        raise IncompleteError(f"no valid certification for {', '.join(missing)} (see {where})")
    if summary["exit_code"] == EXIT_GATE_FAILED:
        failed = [m["model"] for m in summary["models"] if m["status"] == "fail"]
        raise GateError(f"gates failed for {', '.join(failed)} (see {where})")
    print(f"regression: every model passed (see {where})")
    return 0
