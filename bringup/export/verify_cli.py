"""``bringup verify``: the command line of bundle verification (argument parsing, the signer pair, the
record written); the checks themselves are :mod:`bringup.export.verify`."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from bringup.core import argtypes, canonjson
from bringup.export import signing
from bringup.export.verify import MAX_THREADS, _SHA, verify
from bringup.core.subcommands import Parser


def _sha(text: str) -> str:
    if not _SHA.fullmatch(text.lower()):
        raise argparse.ArgumentTypeError("a SHA-256 is 64 hexadecimal digits (what bringup export printed)")
    return text.lower()


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``bringup verify BUNDLE [--expect-sha256 H] [--allowed-signers FILE --signer-identity ID]
    [--threads N] [--network try|require|off] [--json PATH]``."""
    ap = Parser(prog="bringup verify", description="check an exported bundle (a folder or its .tar.gz): "
                                 "hashes, CPU features, a bare-folder run that must reproduce its recorded tokens",
                                 epilog="exit codes: 0 ok, 2 usage or no such bundle, 3 integrity (or not the pinned or "
                                        "signed bundle), 4 CPU lacks a feature, 5 --network require and no namespace, "
                                        "or no ssh-keygen, 6 the run failed or differs. Without --expect-sha256 or a "
                                        "signature, verify proves the bundle consistent, not who made it (docs/export.md)")
    ap.add_argument("bundle", type=Path, help="bundle folder or .tar.gz (bringup export)")
    ap.add_argument("--expect-sha256", type=_sha, metavar="SHA",
                    help="the SHA-256 the sender gave you (bringup export prints it): of the archive or of bundle.json; "
                         "anything else is refused before the bundle's program runs")
    ap.add_argument("--allowed-signers", type=Path, metavar="FILE",
                    help=f"an OpenSSH allowed-signers file: {signing.SIG_NAME} must be a signature of bundle.json by "
                         f"--signer-identity in it (ssh-keygen -Y verify -n {signing.NAMESPACE})")
    ap.add_argument("--signer-identity", metavar="ID", help="the signer's identity in --allowed-signers")
    ap.add_argument("--threads", type=argtypes.threads, help=f"--threads of the run, 1..{MAX_THREADS} "
                    "(default: the bundle's check.threads)")
    ap.add_argument("--network", choices=("try", "require", "off"), default="try",
                    help="isolate the run from the network: where possible and say so (try), or fail when "
                         "impossible (require), or not (off)")
    ap.add_argument("--json", type=Path, help="write the verification record here")
    a = ap.parse_args(argv)
    if (a.allowed_signers is None) != (a.signer_identity is None):
        ap.error("--allowed-signers and --signer-identity go together")
    if a.allowed_signers is not None:
        signing.ssh_keygen()  # exit 5 before any work when it is missing
    rec = verify(a.bundle, threads=a.threads, network=a.network, expect_sha256=a.expect_sha256,
                 allowed_signers=a.allowed_signers, identity=a.signer_identity)
    if a.json:
        canonjson.write(a.json, rec)
    return 0
