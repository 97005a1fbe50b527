"""``bringup verify-results``: the command line of the review of a copied results folder (argument
parsing, the certification read, the checks run in order, ``--touch``); the checks are
:mod:`bringup.certify.evidence`."""
from __future__ import annotations


import yaml

from bringup.core import canonjson, stamp
from bringup.core.errors import IncompleteError, IntegrityError
from bringup.core.paths import ROOT
from bringup.core.schemas import validate
from bringup.fetch import registry as registry_mod
from bringup.certify.evidence import (WORKFLOW_CONFIG, Checks, check_derived, check_inputs, check_recorded_files,
                                      check_tokens, touch)
from bringup.core.subcommands import Parser


def cli_main(argv: list[str]) -> int:
    ap = Parser(prog="bringup verify-results",
                                 description="Check a copied results folder (results/MODEL, its certification and "
                                             "every artifact behind it) against this checkout by the hashes the "
                                             "artifacts record, without recomputing the pipeline; with --touch, "
                                             "then mark it up to date for Snakemake. Exit 0 all checks passed, "
                                             "3 a check failed (nothing touched), 7 no certification.",
                                 epilog="Checks are printed one per line (ok / DIFF). docs/regression.md, "
                                        "\"Reviewing evidence\", has the whole recipe.")
    ap.add_argument("--model", required=True, help="the model's registry name (results/MODEL)")
    ap.add_argument("--no-rerun", action="store_true", help="skip the bare-folder run of the recorded tokens")
    ap.add_argument("--touch", action="store_true",
                    help="when every check passes: `snakemake --touch certify --config model=MODEL`, then "
                         "confirm that `snakemake -n certify` has nothing to do")
    a = ap.parse_args(argv)
    cfg = yaml.safe_load(WORKFLOW_CONFIG.read_text())
    entry = registry_mod.load(ROOT / cfg["registry"]).model(a.model)
    res = ROOT / "results" / a.model
    cert_path = res / "certify" / "certification.json"
    if not cert_path.is_file():
        raise IncompleteError(f"{cert_path} not found: no certification to review")
    cert = canonjson.read_result(cert_path, "certification")
    validate(cert, "certification", str(cert_path))
    gguf = ROOT / "resources" / "models" / f"{a.model}.gguf"
    issued = cert["issued"]
    here = stamp.git_commit(ROOT)
    print(f"certification of {a.model}: {cert['verdict']}, issued {issued['timestamp']} at commit "
          f"{issued['commit']['sha']}{' (uncommitted changes)' if issued['commit']['dirty'] else ''}; "
          f"this checkout: {here['sha']}{' (uncommitted changes)' if here['dirty'] else ''}")
    c = Checks()
    check_recorded_files(c, cert, res, gguf, entry)
    check_inputs(c, cert, res, cfg, a.model)
    check_derived(c, cert, res, gguf, cfg, a.model)
    if not a.no_rerun:
        check_tokens(c, res, cfg["threads"])
    if c.failed:
        raise IntegrityError(f"{len(c.failed)} of {len(c.rows)} checks failed ({', '.join(c.failed[:4])}"
                             f"{', ...' if len(c.failed) > 4 else ''}); nothing was touched")
    print(f"all {len(c.rows)} checks passed")
    if a.touch:
        print(touch(a.model))
    return 0
