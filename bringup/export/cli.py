"""``bringup export``: the command line of the export stage (argument parsing, the signing key checked
before any work, the printed hashes to pin); the bundle itself is :mod:`bringup.export.bundle`."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from bringup.core.errors import BringupError
from bringup.core.hashing import sha256_file
from bringup.core.paths import CONFIG
from bringup.core.subcommands import model_parser
from bringup.export import signing
from bringup.export.bundle import export, run_argv


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``bringup export --model M --results results/M --out-dir results/M/export``."""
    ap = model_parser("bringup export", "a certified program as a relocatable bundle "
                      "(results/M/export/<model>-<isa>/) and its deterministic .tar.gz",
                      results_help="results/{model} (certified)", out_default="RESULTS/export", gguf=False)
    ap.add_argument("--memory-model", type=Path,
                    help="memory model JSON (default: RESULTS/plan/memory_model_calibrated.json, the one "
                         "with measured runtime overheads that certify reports)")
    ap.add_argument("--registry", type=Path, default=CONFIG / "models.yaml")
    ap.add_argument("--threads", type=int, default=2, help="--threads of the recorded check run")
    ap.add_argument("--name", help="the bundle name the caller expects (<model>-<isa>); a different one is an error")
    ap.add_argument("--sign-key", type=Path, help="sign bundle.json with this OpenSSH key (ssh-keygen -Y sign -n "
                    f"{signing.NAMESPACE}); the signature is {signing.SIG_NAME} in the bundle")
    a = ap.parse_args(argv)
    mm = a.memory_model or a.results / "plan" / "memory_model_calibrated.json"
    if a.sign_key is not None:  # before any work: ssh-keygen missing (5), no such key (2)
        signing.ssh_keygen()
        if not a.sign_key.is_file():
            raise BringupError(f"--sign-key {a.sign_key}: no such key file")
    final, tar, m = export(a.model, a.results, a.out_dir or a.results / "export", mm, a.registry, a.threads, a.name,
                           a.sign_key)
    total = sum(f["size"] for f in m["files"])
    print(f"exported {m['name']}: {len(m['files'])} files, {total / 1e6:.1f} MB -> {final} and {tar.name}"
          + (f", signed ({signing.SIG_NAME})" if a.sign_key else ""))
    print(f"  archive sha256 {sha256_file(tar)}")
    print(f"  bundle.json sha256 {sha256_file(final / 'bundle.json')}")
    print("  send one of them through another channel; the receiver pins it: bringup verify BUNDLE --expect-sha256 SHA")
    print(f"  needs {m['isa']['name']} ({m['isa']['machine']}), {m['memory']['total_bytes'] / 2**20:.0f} MiB "
          f"at ctx {m['memory']['ctx']}; run: {' '.join(run_argv(m['run']['model_dir_option']))}")
    return 0
