"""``bringup verify BUNDLE``: check an exported bundle (a folder or its ``.tar.gz``) on this host.

0. Pin (exit 3), when the receiver gives one: ``--expect-sha256 H`` (H is the archive's SHA-256
   or bundle.json's, as ``bringup export`` printed them) and/or ``--allowed-signers FILE
   --signer-identity ID`` (bundle.json.sig must be that signer's OpenSSH signature of bundle.json,
   bringup.export.signing). Without a pin verify proves the bundle consistent, not authentic
   (docs/export.md, threat model).
1. Integrity (exit 3): every entry of the folder is a regular file or folder (no symbolic link,
   FIFO, device or socket, each named); bundle.json (at most 1 MiB) is valid (schema ``bundle``)
   and its check fields are exact integers in range; every file it lists exists with its size
   and SHA-256; there is no other file or folder (besides bundle.json, SHA256SUMS, which must
   equal the sums of the listed files and bundle.json, and bundle.json.sig). An archive is
   checked from its tar headers against bundle.json before anything is extracted
   (bringup.export.archive.extract_bundle).
2. CPU (exit 4): this host is the bundle's machine and has every ``/proc/cpuinfo`` flag the code
   needs (bringup.core.isa).
3. Standalone run (exit 6): the bundle's three program files are copied into a bare temporary
   folder and its recorded prompt runs there with an empty environment and, where the host allows
   it, without network (``unshare -rn``; when it does not, the output says so); the libraries the
   running program mapped are recorded, it must load ``libmodel.so`` from that folder and no
   library from outside it and the system's, and it must reproduce the recorded greedy tokens
   exactly (bringup.export.standalone.run_bare, the check the certification's standalone gate
   runs too).

What runs is always the bundle's own ``bringup-run``, with the command verify builds
(:func:`run_command_of`): one of two fixed forms, the prompt token ids and counts as decimal
integers checked here, the thread count; nothing from bundle.json is ever a program, a flag or a
path. Every failure is one line naming the file or the feature. ``--json PATH`` writes the record.
"""
from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

from bringup.core import argtypes
from bringup.core.errors import BringupError, GateError, IntegrityError
from bringup.core.hashing import sha256_bytes, sha256_file
from bringup.core.inputs import kind
from bringup.core.schemas import validate
from bringup.core import isa
from bringup.export import archive, signing
from bringup.export.bundle import PROGRAM, UNHASHED, run_argv, sha256sums
from bringup.export.standalone import run_bare

#: Entries a bundle folder may hold (files and folders): a bundle has about 13.
MAX_ENTRIES = archive.MAX_MEMBERS
#: --threads of the run: what a host can have (the native runtime's limit), not what a bundle asks for.
MAX_THREADS = argtypes.MAX_THREADS
_SHA = re.compile(r"[0-9a-f]{64}")


def scan(root: Path) -> set[str]:
    """The relative paths of the regular files under ``root`` (symbolic links not followed).
    Raises IntegrityError naming, on one line, every symbolic link, FIFO, device or socket, or
    when the folder holds more than MAX_ENTRIES entries."""
    files, bad, todo, count = set(), [], [root], 0
    while todo:
        folder = todo.pop()
        with os.scandir(folder) as it:
            for e in it:
                count += 1
                if count > MAX_ENTRIES:
                    raise IntegrityError(f"{root.name}: more than {MAX_ENTRIES} entries; a bundle has about 13")
                rel = Path(e.path).relative_to(root).as_posix()
                mode = e.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    todo.append(Path(e.path))
                elif stat.S_ISREG(mode):
                    files.add(rel)
                else:
                    bad.append(f"{rel} is a {kind(mode)}")
    if bad:
        raise IntegrityError(f"{root.name}: {'; '.join(sorted(bad))} (a bundle holds only regular files and folders)")
    return files


def read_manifest(root: Path) -> bytes:
    """The bytes of ``root/bundle.json`` (a regular file of at most 1 MiB). Raises IntegrityError."""
    path = root / "bundle.json"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise IntegrityError(f"{root.name}: bundle.json missing (not a bundle, or damaged)") from None
    if not stat.S_ISREG(st.st_mode):
        raise IntegrityError(f"{root.name}: bundle.json is a {kind(st.st_mode)}, not a regular file")
    if st.st_size > UNHASHED["bundle.json"]:
        raise IntegrityError(f"{root.name}: bundle.json is {st.st_size:,} bytes; a bundle's is at most "
                             f"{UNHASHED['bundle.json']:,} (read whole before it is checked)")
    return path.read_bytes()


def parse_manifest(raw: bytes, where: str) -> dict[str, Any]:
    """bundle.json ``raw`` parsed, schema-checked and its run fields checked (check_run). Raises
    IntegrityError (one line)."""
    try:
        m = json.loads(raw.decode("utf-8"))
        validate(m, "bundle", "bundle.json")
        check_run(m)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise IntegrityError(f"{where}: bundle.json is not JSON ({type(e).__name__}: {str(e)[:200]})") from None
    except BringupError as e:
        raise IntegrityError(f"{where}: " + str(e).splitlines()[0] + (" ..." if "\n" in str(e) else "")) from None
    return m


def _ints(values: Any, what: str, lo: int, hi: int) -> list[int]:
    if not isinstance(values, list) or not all(type(v) is int and lo <= v <= hi for v in values):
        raise IntegrityError(f"bundle.json {what} must be integers from {lo} to {hi} (a number of another "
                             "type is refused, not converted)")
    return values


def check_run(m: dict) -> None:
    """The fields the run's command is built from are exact integers in range (JSON Schema's
    "integer" admits 1.0), the three program files are listed with their roles, and the prompt
    and the expected tokens fit the planned context. Raises IntegrityError."""
    c = m["check"]
    _ints(c["prompt_tokens"], "check.prompt_tokens", 0, 2**31 - 1)
    _ints(c["expected_tokens"], "check.expected_tokens", 0, 2**31 - 1)
    _ints([c["threads"]], "check.threads", 1, MAX_THREADS)
    _ints([m["memory"]["ctx"]], "memory.ctx", 1, 2**31 - 1)
    if len(c["prompt_tokens"]) + len(c["expected_tokens"]) > m["memory"]["ctx"]:
        raise IntegrityError(f"bundle.json check: {len(c['prompt_tokens'])} prompt + {len(c['expected_tokens'])} "
                             f"generated tokens exceed the planned context of {m['memory']['ctx']}")
    roles = {f["path"]: f["role"] for f in m["files"]}
    for name, (_, role) in PROGRAM.items():
        if roles.get(name) != role:
            raise IntegrityError(f"bundle.json does not list {name} as the {role}")
    if len(roles) != len(m["files"]) or set(roles) & set(UNHASHED):
        raise IntegrityError("bundle.json lists a file twice, or lists bundle.json, SHA256SUMS or the signature")


def run_command_of(m: dict, threads: int) -> tuple[list[str], list[int], list[int]]:
    """(program argv, prompt tokens, expected tokens) of the check run, from the checked fields
    only: the fixed form run_argv picks, the token ids as integers (run_bare adds them as
    ``--prompt-tokens 1,2,3 --max-tokens N`` and ``--threads``)."""
    c = m["check"]
    return run_argv(m["run"]["model_dir_option"]), list(c["prompt_tokens"]), list(c["expected_tokens"])


def check_files(root: Path, manifest: dict) -> int:
    """Compare the folder with bundle.json; return the number of bytes checked. Raises
    IntegrityError listing, on one line, every symbolic link or special file (scan), or every
    missing, changed or unexpected file."""
    present = scan(root)
    problems, listed, total = [], set(), 0
    for f in manifest["files"]:
        p, name = root / f["path"], f["path"]
        listed.add(name)
        if name not in present:
            problems.append(f"{name} missing")
        elif p.stat().st_size != f["size"]:
            problems.append(f"{name} is {p.stat().st_size} bytes, bundle.json says {f['size']} (tampered or truncated)")
        elif sha256_file(p) != f["sha256"]:
            problems.append(f"{name} sha256 differs from bundle.json (tampered or corrupt)")
        else:
            total += f["size"]
    extra = sorted(present - listed - set(UNHASHED))
    if extra:
        problems.append(f"unexpected file{'s' if len(extra) > 1 else ''} {', '.join(extra)} (not in bundle.json)")
    folders = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir() and not p.is_symlink()}
    stray = sorted(d for d in folders if not any(n.startswith(d + "/") for n in listed))
    if stray:
        problems.append(f"unexpected folder{'s' if len(stray) > 1 else ''} {', '.join(stray)} (bundle.json lists no file in it)")
    sums = root / "SHA256SUMS"
    if not problems and ("SHA256SUMS" not in present or sums.stat().st_size > UNHASHED["SHA256SUMS"]
                         or sums.read_text(errors="replace") != sha256sums(root, [*listed, "bundle.json"])):
        problems.append("SHA256SUMS does not match bundle.json and the files")
    sig = signing.SIG_NAME
    if sig in present and (root / sig).stat().st_size > UNHASHED[sig]:
        problems.append(f"{sig} is over {UNHASHED[sig]:,} bytes")
    if problems:
        raise IntegrityError(f"{root.name}: " + "; ".join(problems))
    return total


def _check_sha(where: str, raw: bytes, expect: str | None, archive_sha256: str | None) -> None:
    mine = sha256_bytes(raw)
    if expect is not None and expect not in (mine, archive_sha256):
        got = f"the archive's sha256 is {archive_sha256} and its " if archive_sha256 else ""
        raise IntegrityError(f"{where}: {got}bundle.json's sha256 is {mine}, not the pinned --expect-sha256 "
                             f"{expect}: not the bundle its sender pinned")


def check_pin(root: Path, raw: bytes, *, expect_sha256: str | None = None, archive_sha256: str | None = None,
              allowed_signers: Path | None = None, identity: str | None = None,
              say: Callable[[str], None] = print) -> None:
    """The receiver's pin: ``expect_sha256`` must be bundle.json's SHA-256 (``raw``) or the
    archive's (``archive_sha256``, None for a folder); a signature is checked when
    ``allowed_signers`` is given. Raises IntegrityError (3), signing's errors."""
    if expect_sha256 is not None:
        _check_sha(root.name, raw, expect_sha256, archive_sha256)
        say(f"verify: pinned: {'the archive' if expect_sha256 == archive_sha256 else 'bundle.json'} has the expected sha256")
    if allowed_signers is not None:
        line = signing.check(root, raw, allowed_signers, identity)
        say(f"verify: signed: {line}")


def pin_given(pin: dict) -> bool:
    return pin.get("expect_sha256") is not None or pin.get("allowed_signers") is not None


def verify_folder(root: Path, *, threads: int | None = None, network: str = "try",
                  say: Callable[[str], None] = print, archive_sha256: str | None = None, **pin) -> dict[str, Any]:
    """Run the checks on bundle folder ``root``; returns the record {bundle, files, bytes, isa,
    run}. ``pin``: check_pin's ``expect_sha256``, ``allowed_signers``, ``identity``. Raises
    IntegrityError (3), UnsupportedError (4), GateError (6), or BringupError (5) when
    ``network="require"`` and the host cannot isolate the run or ssh-keygen is missing."""
    raw = read_manifest(root)
    check_pin(root, raw, archive_sha256=archive_sha256, say=say, **pin)
    m = parse_manifest(raw, root.name)
    total = check_files(root, m)
    say(f"verify {m['name']}: {len(m['files'])} files ({total / 1e6:.1f} MB) match bundle.json "
        f"(bundle.json sha256 {sha256_bytes(raw)})" + ("" if pin_given(pin) else
                                                          "; not pinned: consistent, authenticity unchecked"))
    isa.check_host(m["isa"])
    say(f"verify {m['name']}: this CPU has every feature of {m['isa']['name']}")
    c = m["check"]
    argv, tokens, expect = run_command_of(m, threads or c["threads"])
    run = run_bare({n: root / n for n in PROGRAM}, argv, tokens, expect, threads or c["threads"],
                   network=network, require_loaded=["libmodel.so"])
    net = run["network"]
    say(f"verify {m['name']}: ran {run['command']} in a bare temporary folder, empty environment, "
        + (f"no network ({net['method']})" if net["isolated"] else f"WITH the host's network ({net['reason']})"))
    libs = [f"./{n}" for n in run["loaded"]["in_folder"] if ".so" in n] + run["loaded"]["system_libraries"]
    say(f"verify {m['name']}: shared libraries loaded: {', '.join(libs)}")
    if not run["ok"]:
        raise GateError(f"{m['name']}: standalone run failed: {'; '.join(run['problems'])}")
    say(f"verify {m['name']}: OK: the recorded {len(c['expected_tokens'])} greedy tokens reproduced exactly"
        + (f" (kernels dispatched: {run['runtime_isa']})" if run.get("runtime_isa") else ""))
    return {"bundle": m["name"], "bundle_json_sha256": sha256_bytes(raw), "files": len(m["files"]),
            "bytes": total, "isa": m["isa"]["name"], "pinned": pin_given(pin), "run": run}


def verify(path: str | Path, **kw) -> dict[str, Any]:
    """:func:`verify_folder` on a bundle folder or a ``.tar.gz`` of one (extracted into a
    temporary folder first). Raises BringupError (2) when ``path`` does not exist."""
    path = Path(path)
    if path.is_dir():  # the path the user typed may be a link; nothing inside the bundle may
        return verify_folder(path, **kw)
    if not path.exists():
        raise BringupError(f"{path}: no such bundle folder or archive")
    sha = sha256_file(path, "bundle archive")  # a FIFO or device: refused here (exit 2)

    def sizes(raw: bytes) -> dict[str, int]:  # from the headers, before anything is extracted
        _check_sha(path.name, raw, kw.get("expect_sha256"), sha)
        return _sizes(parse_manifest(raw, path.name))
    with tempfile.TemporaryDirectory(prefix="bringup-verify-") as d:
        return verify_folder(archive.extract_bundle(path, d, sizes), archive_sha256=sha, **kw)


def _sizes(m: dict) -> dict[str, int]:
    """Each file of an archive: its exact size from bundle.json, or minus its upper bound."""
    return {f["path"]: f["size"] for f in m["files"]} | {n: -b for n, b in UNHASHED.items()}
