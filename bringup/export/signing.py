"""Bundle signatures with OpenSSH (``ssh-keygen -Y sign`` / ``-Y verify``, OpenSSH 8.1+).

What is signed is ``bundle.json``: it lists every other file with its SHA-256 and size, and verify
refuses any file it does not list, so a valid signature over it authenticates the whole bundle.
The signature travels inside the bundle as ``bundle.json.sig`` (SIG_NAME) under the namespace
``bringup-bundle`` (NAMESPACE: a signature made for anything else, e.g. a git commit or another
tool's file, does not verify here). The receiver names the key: an OpenSSH allowed-signers file
and the identity in it (``ssh-keygen(1)``, ALLOWED SIGNERS); nothing about the key comes from the
bundle.

The program is the fixed name ``ssh-keygen`` looked up on the caller's PATH, never a path from a
bundle; a missing one is UnavailableError (exit 5). Every argument is either a fixed option, a
path the caller gave (made absolute, so none can read as an option) or the fixed-name signature
file inside the bundle folder.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from bringup.core.errors import BringupError, IntegrityError, UnavailableError, one_line

#: The signature's namespace (ssh-keygen -n): what the signature is for.
NAMESPACE = "bringup-bundle"
#: The signature file in the bundle folder, beside the bundle.json it signs.
SIG_NAME = "bundle.json.sig"
#: Seconds ssh-keygen may take (a passphrase prompt on a terminal included).
TIMEOUT_S = 120


def ssh_keygen() -> str:
    """The path of ``ssh-keygen`` on PATH. Raises UnavailableError (5) when there is none."""
    exe = shutil.which("ssh-keygen")
    if exe is None:
        raise UnavailableError("ssh-keygen (OpenSSH, package openssh-client) not found on PATH: "
                               "it signs and checks bundle signatures")
    return exe


def _run(argv: list[str], what: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                              capture_output=True, timeout=TIMEOUT_S, env={"PATH": os.environ.get("PATH", "")})
    except subprocess.TimeoutExpired:
        raise BringupError(f"{what}: ssh-keygen timed out after {TIMEOUT_S} s") from None


def _last_line(err: bytes) -> str:
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return one_line(lines[-1][:300]) if lines else "no message"


def sign(folder: Path, key: Path) -> None:
    """Sign ``folder/bundle.json`` with the OpenSSH private key ``key`` (or a public key whose
    private half is in ssh-agent), writing ``folder/bundle.json.sig``. Raises BringupError (2) for
    a missing key or a failed signing, UnavailableError (5) without ssh-keygen."""
    exe = ssh_keygen()
    key = Path(key).absolute()
    if not key.is_file():
        raise BringupError(f"--sign-key {key}: no such key file")
    p = _run([exe, "-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE, str(Path(folder).absolute() / "bundle.json")],
             "signing bundle.json")
    if p.returncode != 0 or not (Path(folder) / SIG_NAME).is_file():
        raise BringupError(f"ssh-keygen -Y sign with {key} failed (exit {p.returncode}): {_last_line(p.stderr)}")


def check(folder: Path, manifest_bytes: bytes, allowed_signers: Path, identity: str) -> str:
    """Check ``folder/bundle.json.sig`` over ``manifest_bytes`` (the bundle.json bytes verify
    read) against ``identity`` in the OpenSSH ``allowed_signers`` file; returns ssh-keygen's
    confirmation line. Raises BringupError (2) for a missing allowed-signers file, IntegrityError
    (3) for a missing or invalid signature, UnavailableError (5) without ssh-keygen."""
    exe = ssh_keygen()
    allowed = Path(allowed_signers).absolute()
    if not allowed.is_file():
        raise BringupError(f"--allowed-signers {allowed}: no such file")
    sig = Path(folder).absolute() / SIG_NAME
    if not sig.is_file() or sig.is_symlink():
        raise IntegrityError(f"{Path(folder).name}: {SIG_NAME} missing: the bundle is not signed, "
                             "and --allowed-signers asks for a signature")
    p = _run([exe, "-Y", "verify", "-f", str(allowed), "-I", identity, "-n", NAMESPACE, "-s", str(sig)],
             "checking the bundle's signature", stdin=manifest_bytes)
    if p.returncode != 0:
        raise IntegrityError(f"{Path(folder).name}: the signature {SIG_NAME} is not a valid {NAMESPACE} signature of "
                             f"bundle.json by {one_line(identity)!r} in {allowed}: {_last_line(p.stderr)}")
    return _last_line(p.stdout or p.stderr)
