"""``bringup verify BUNDLE``: check an exported bundle (a folder or its ``.tar.gz``) on this host.

1. Integrity (exit 3): bundle.json is valid (schema ``bundle``); every file it lists exists with
   its size and SHA-256; there is no other file (besides bundle.json and SHA256SUMS, which must
   equal the sums of the listed files and bundle.json).
2. CPU (exit 4): this host is the bundle's machine and has every ``/proc/cpuinfo`` flag the code
   needs (bringup.export.isa).
3. Standalone run (exit 6): the bundle is copied into a bare temporary folder and its recorded
   prompt runs there with an empty environment and, where the host allows it, without network
   (``unshare -rn``; when it does not, the output says so); the libraries the running program
   mapped are recorded, it must load ``libmodel.so`` from that folder and no library from
   outside it and the system's, and it must reproduce the recorded greedy tokens exactly
   (bringup.export.standalone.run_bare, the check the certification's standalone gate runs too).

Every failure is one line naming the file or the feature. ``--json PATH`` writes the record.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from bringup.core import canonjson
from bringup.core.errors import BringupError, GateError, IntegrityError
from bringup.core.hashing import sha256_file
from bringup.core.schemas import validate
from bringup.export import archive, isa
from bringup.export.bundle import UNHASHED, sha256sums
from bringup.export.standalone import run_bare


def load_manifest(root: Path) -> dict[str, Any]:
    """bundle.json of the bundle folder ``root``, schema-checked. Raises IntegrityError."""
    path = root / "bundle.json"
    if not path.is_file():
        raise IntegrityError(f"{root.name}: bundle.json missing (not a bundle, or damaged)")
    try:
        m = canonjson.read(path, "bundle.json")
        validate(m, "bundle", "bundle.json")
    except BringupError as e:
        raise IntegrityError(str(e).splitlines()[0] + (" ..." if "\n" in str(e) else "")) from None
    return m


def check_files(root: Path, manifest: dict) -> int:
    """Compare the folder with bundle.json; return the number of bytes checked. Raises
    IntegrityError listing, on one line, every missing, changed or unexpected file."""
    problems, listed, total = [], set(), 0
    for f in manifest["files"]:
        p, name = root / f["path"], f["path"]
        listed.add(name)
        if not p.is_file() or p.is_symlink():
            problems.append(f"{name} missing")
        elif p.stat().st_size != f["size"]:
            problems.append(f"{name} is {p.stat().st_size} bytes, bundle.json says {f['size']} (tampered or truncated)")
        elif sha256_file(p) != f["sha256"]:
            problems.append(f"{name} sha256 differs from bundle.json (tampered or corrupt)")
        else:
            total += f["size"]
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir()}
    extra = sorted(present - listed - set(UNHASHED))
    if extra:
        problems.append(f"unexpected file{'s' if len(extra) > 1 else ''} {', '.join(extra)} (not in bundle.json)")
    sums = root / "SHA256SUMS"
    if not problems and (not sums.is_file() or sums.read_text() != sha256sums(root, [*listed, "bundle.json"])):
        problems.append("SHA256SUMS does not match bundle.json and the files")
    if problems:
        raise IntegrityError(f"{root.name}: " + "; ".join(problems))
    return total


def verify_folder(root: Path, *, threads: int | None = None, network: str = "try",
                  say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the three checks on bundle folder ``root``; returns the record {bundle, files, bytes,
    isa, run}. Raises IntegrityError (3), UnsupportedError (4), GateError (6), or BringupError (5)
    when ``network="require"`` and the host cannot isolate the run."""
    m = load_manifest(root)
    total = check_files(root, m)
    say(f"verify {m['name']}: {len(m['files'])} files ({total / 1e6:.1f} MB) match bundle.json "
        f"(bundle.json sha256 {sha256_file(root / 'bundle.json')})")
    isa.check_host(m["isa"])
    say(f"verify {m['name']}: this CPU has every feature of {m['isa']['name']}")
    files = {f["path"]: root / f["path"] for f in m["files"]}
    c = m["check"]
    run = run_bare(files, m["run"]["argv"], c["prompt_tokens"], c["expected_tokens"], threads or c["threads"],
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
    return {"bundle": m["name"], "bundle_json_sha256": sha256_file(root / "bundle.json"), "files": len(m["files"]),
            "bytes": total, "isa": m["isa"]["name"], "run": run}


def verify(path: str | Path, **kw) -> dict[str, Any]:
    """:func:`verify_folder` on a bundle folder or a ``.tar.gz`` of one (extracted into a
    temporary folder first). Raises BringupError (2) when ``path`` does not exist."""
    path = Path(path)
    if path.is_dir():
        return verify_folder(path, **kw)
    if not path.is_file():
        raise BringupError(f"{path}: no such bundle folder or archive")
    with tempfile.TemporaryDirectory(prefix="bringup-verify-") as d:
        return verify_folder(archive.extract_bundle(path, d), **kw)


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``bringup verify BUNDLE [--threads N] [--network try|require|off] [--json PATH]``."""
    ap = argparse.ArgumentParser(prog="bringup verify", description="check an exported bundle (a folder or its .tar.gz): "
                                 "hashes, CPU features, a bare-folder run that must reproduce its recorded tokens",
                                 epilog="exit codes: 0 ok, 2 no such bundle, 3 integrity, 4 CPU lacks a feature, "
                                        "5 --network require and no namespace, 6 the run failed or differs")
    ap.add_argument("bundle", type=Path, help="bundle folder or .tar.gz (bringup export)")
    ap.add_argument("--threads", type=int, help="--threads of the run (default: the bundle's check.threads)")
    ap.add_argument("--network", choices=("try", "require", "off"), default="try",
                    help="isolate the run from the network: where possible and say so (try), or fail when "
                         "impossible (require), or not (off)")
    ap.add_argument("--json", type=Path, help="write the verification record here")
    a = ap.parse_args(argv)
    rec = verify(a.bundle, threads=a.threads, network=a.network)
    if a.json:
        canonjson.write(a.json, rec)
    return 0
