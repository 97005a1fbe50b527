"""Same bytes stop the wave: an expensive job reuses its outputs when its inputs' contents are equal.

Snakemake reruns a job when an input is newer than its outputs, and deletes the outputs first. A
rebuild that writes byte-identical files (a comment in a kernel source, a refactor of codegen)
would therefore rerun parity, whose numbers cannot change. So parity's jobs are content-addressed
on top of Snakemake: the job's key is the SHA-256 of the canonical JSON of

    {"rule", "wildcards", "params", "inputs": [[path, sha256 of its bytes], ...] sorted}

where the inputs include the job's code (``code_inputs``, ``bringup.core.codedeps``), so a change
to the code, a setting or any input byte is a new key. A finished job stores its outputs and log
under ``<store>/<key>/`` (the store is a folder the job owns in its model's results, e.g.
``results/M/.reuse/parity_model/``) with a manifest of their hashes; a job whose key is stored
copies them back (atomically, each file verified against the manifest) and logs
``reused: inputs identical to <key>``. A stored entry that fails its manifest is said so in the
log, removed and recomputed. The store keeps the KEEP most recent entries.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from bringup.core import atomic, canonjson, stamp
from bringup.core.hashing import sha256_file

#: Entries a store keeps (most recent first): enough to go back and forth between two versions.
KEEP = 3
MANIFEST = "reuse.json"


def _file_hashes(path: Path) -> list[list[str]]:
    """[[path, sha256]] of a file, or of every file under a folder (sorted)."""
    if path.is_dir():
        return [[str(p), sha256_file(p, "job input")] for p in sorted(path.rglob("*")) if p.is_file()]
    return [[str(path), sha256_file(path, "job input")]]


def job_key(rule: str, wildcards: dict, params: dict, inputs: list) -> str:
    """The content key of a job (see the module docstring): 64 hex characters. ``inputs``: its
    input paths (files or folders, duplicates allowed); ``params`` must be JSON (else str())."""
    hashes = sorted({tuple(h) for p in inputs for h in _file_hashes(Path(p))})
    doc = {"rule": rule, "wildcards": {k: str(v) for k, v in wildcards.items()},
           "params": canonjson.dumps(params, compact=True) if _is_json(params) else str(params),
           "inputs": [list(h) for h in hashes]}
    return canonjson.sha256(doc)


def _is_json(obj) -> bool:
    try:
        canonjson.dumps(obj, compact=True)
        return True
    except (TypeError, ValueError):
        return False


def _copy(src: Path, dst: Path) -> None:
    with open(src, "rb") as fi, atomic.atomic_open(dst) as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)


def _verified(entry: Path, outputs: dict[str, Path]) -> str | None:
    """None when ``entry`` holds every output with the manifest's hash, else why not."""
    try:
        manifest = canonjson.read(entry / MANIFEST, "reuse manifest")
        files = manifest["files"]
        if not isinstance(files, dict) or set(files) != set(outputs):
            return "its outputs are not this rule's"
        for name in outputs:
            if (entry / name).is_symlink():      # a stored output is a file of the entry, never a link out
                return f"stored {name} is a symbolic link"
            if sha256_file(entry / name, "stored output") != files[name]:
                return f"stored {name} does not match its recorded sha256"
    except Exception as e:  # noqa: BLE001 - any unreadable entry is recomputed, and said so
        return f"unreadable ({type(e).__name__}: {str(e)[:200]})"
    return None


def _store(store: Path, key: str, outputs: dict[str, Path], log: Path | None) -> None:
    """Copy the outputs (and log) into ``store/key`` (a complete folder appears by one rename)."""
    tmp = store / f".tmp-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, path in outputs.items():
        shutil.copyfile(path, tmp / name)
    if log is not None and log.is_file():
        shutil.copyfile(log, tmp / "log")
    canonjson.write(tmp / MANIFEST, {"key": key, "stored": stamp.utc_now(),
                                     "files": {n: sha256_file(p) for n, p in outputs.items()}})
    entry = store / key
    shutil.rmtree(entry, ignore_errors=True)
    os.rename(tmp, entry)
    entries = sorted((p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def reuse_or_run(key: str, store: Path, outputs: dict[str, Path], log: Path | None,
                 run: Callable[[], int]) -> tuple[int, bool]:
    """Copy the outputs stored under ``store/key`` back, or ``run()`` and store them on exit 0.
    Returns (exit code, reused). The log says which, and why an entry was not used."""
    store, entry = Path(store), Path(store) / key
    note = ""
    if entry.is_dir():
        why = _verified(entry, outputs)
        if why is None:
            for name, path in outputs.items():
                _copy(entry / name, path)
            os.utime(entry)             # most recently used: kept longest
            if log is not None:
                prior = (entry / "log").read_text(errors="replace") if (entry / "log").is_file() else ""
                atomic.write_text(log, f"reused: inputs identical to {key} ({entry}, stored "
                                  f"{canonjson.read(entry / MANIFEST, 'reuse manifest')['stored']}); "
                                  f"its log follows\n{prior}")
            return 0, True
        note = f"reuse entry {entry} not used: {why}; recomputing\n"
        shutil.rmtree(entry, ignore_errors=True)
    t0 = time.monotonic()
    rc = run()
    if note and log is not None:
        with open(log, "a") as fh:
            fh.write(note)
    if rc == 0:
        _store(store, key, outputs, log)
        if log is not None:
            with open(log, "a") as fh, contextlib.suppress(OSError):
                fh.write(f"stored for reuse as {key} ({time.monotonic() - t0:.1f} s of work)\n")
    return rc, False
