"""Resolve pinned registry URIs to local files under resources/, verifying SHA-256.

Nothing is installed into the user's environment: PyPI distributions go to
resources/pypi/<dist>-<version>/ (pip --target), source distributions to resources/sdist/.
A generated model (synth://) is written by bringup.fetch.synth into a scratch folder beside its
destination, from a vocabulary in the llama_cpp_vocab resource, and checked the same way.
A model file is written to resources/models/<name>.gguf only after its hash matched.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bringup.core.atomic import atomic_open, check_output_path
from bringup.core.errors import BringupError, IntegrityError, UnavailableError, one_line
from bringup.core.hashing import sha256_file
from bringup.core.inputs import open_regular, regular_file
from bringup.core.paths import RESOURCES, ROOT
from bringup.core.progress import Progress, Timed, is_terminal
from bringup.fetch import synth
from bringup.fetch.registry import Registry, Uri, load

PIP_TIMEOUT_S = 600
HF_TIMEOUT_S = 15
HF_HOST = "huggingface.co"


def _log(msg: str) -> None:
    print(f"[fetch] {one_line(msg)}", file=sys.stderr, flush=True)   # names from the registry, escaped


def _pip(args: list[str], what: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--no-input",
           "--timeout", "30", "--retries", "1"]
    try:
        with Timed("fetch", f"pip: {what}"):   # the download itself: pip's own output is captured
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UnavailableError(f"pip did not finish {what} within {PIP_TIMEOUT_S} s") from None
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise UnavailableError(f"pip failed {what}: {' | '.join(tail)}")


def _inside(root: Path, rel: str, uri: Uri) -> Path:
    p = (root / rel).resolve()
    if not p.is_relative_to(root.resolve()):
        raise BringupError(f"{uri.text}: path escapes its distribution")
    if not p.exists():
        raise BringupError(f"{uri.text}: {rel} is not in {uri.dist}=={uri.version} (looked in {root})")
    return p


def resolve_pypi(uri: Uri, resources: Path = RESOURCES) -> Path:
    """Install ``dist==version`` (wheel only, no dependencies) into resources/pypi and return the path."""
    target = resources / "pypi" / f"{uri.dist}-{uri.version}"
    if not (target / ".complete").exists():
        _log(f"installing {uri.dist}=={uri.version} into {target.relative_to(resources.parent)}")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".pip-"))
        try:
            _pip(["install", "--no-deps", "--only-binary=:all:", "--no-compile", "--target", str(tmp),
                  f"{uri.dist}=={uri.version}"], f"installing {uri.dist}=={uri.version}")
            (tmp / ".complete").write_text(f"{uri.dist}=={uri.version}\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _inside(target, uri.path, uri)


def resolve_sdist(uri: Uri, sha256: str, resources: Path = RESOURCES) -> Path:
    """Download the source distribution, check its SHA-256, unpack it, return the path inside it."""
    target = resources / "sdist" / f"{uri.dist}-{uri.version}"
    if not (target / ".complete").exists():
        _log(f"downloading the source distribution {uri.dist}=={uri.version}")
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".sdist-") as tmp:
            dl = Path(tmp, "dl")
            _pip(["download", "--no-deps", "--no-binary=:all:", "-d", str(dl),
                  f"{uri.dist}=={uri.version}"], f"downloading {uri.dist}=={uri.version}")
            archives = list(dl.iterdir())
            if len(archives) != 1:
                raise BringupError(f"expected one sdist archive for {uri.dist}, got {archives}")
            got = sha256_file(archives[0])
            if got != sha256:
                raise IntegrityError(f"{archives[0].name}: sha256 {got} != pinned {sha256}")
            out = Path(tmp, "src")
            with tarfile.open(archives[0]) as tf:
                tf.extractall(out, filter="data")
            (top,) = list(out.iterdir())
            Path(top, ".complete").write_text(f"{uri.dist}=={uri.version} {sha256}\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(top, target)
    return _inside(target, uri.path, uri)


def manual_path(model: str, uri: Uri, resources: Path = RESOURCES) -> Path:
    """Where a user puts a hub file by hand when there is no network."""
    return resources / "manual" / model / Path(uri.path).name


def resolve_hf(uri: Uri, model: str, resources: Path = RESOURCES) -> Path:
    """Download one file from the hub at the pinned revision; fail in one clear line without network."""
    manual = manual_path(model, uri, resources)
    if manual.exists():
        _log(f"using the hand-placed file {manual}")
        return manual
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", str(HF_TIMEOUT_S))
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", str(HF_TIMEOUT_S))
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    hint = (f"cannot download {uri.path} at revision {uri.revision} from {uri.repo}; "
            f"put the file by hand at {manual}")
    try:
        # Fail in seconds, not after the hub client's retries: is the endpoint reachable at all?
        socket.create_connection((HF_HOST, 443), timeout=HF_TIMEOUT_S).close()
    except OSError as e:
        raise UnavailableError(f"{hint} (no connection to {HF_HOST}: {e})") from None
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise UnavailableError(f"{hint} (huggingface_hub is not installed)") from None
    if not is_terminal(sys.stderr):
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no \r-redrawn bar in a log
    try:
        with Timed("fetch", f"downloading {uri.path} from {uri.repo}"):
            return Path(hf_hub_download(repo_id=uri.repo, filename=uri.path, revision=uri.revision,
                                        cache_dir=str(resources / "hf")))
    except Exception as e:  # any network / hub error becomes the one clear line
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise UnavailableError(f"{hint} ({type(e).__name__}: {reason})") from None


def resolve_uri(uri: Uri, model: str, resources: Path = RESOURCES, sha256: str | None = None) -> Path:
    """The local path of a downloadable or file URI (synth:// is generated by fetch_model)."""
    if uri.scheme == "synth":
        raise BringupError(f"{uri.text}: a generated model is not a downloadable resource")
    if uri.scheme == "file":
        p = Path(uri.path)
        p = p if p.is_absolute() else ROOT / p
        if not p.exists():
            raise BringupError(f"{uri.text}: no such file {p}")
        return regular_file(p, f"{uri.text}: file")
    if uri.scheme == "pypi":
        return resolve_pypi(uri, resources)
    if uri.scheme == "pypi-sdist":
        if sha256 is None:
            raise BringupError(f"{uri.text}: a source distribution needs a pinned sha256")
        return resolve_sdist(uri, sha256, resources)
    return resolve_hf(uri, model, resources)


def fetch_model(name: str, registry: Registry | None = None, resources: Path = RESOURCES,
                dest: Path | None = None) -> Path:
    """Resolve model ``name`` to a verified GGUF at ``dest`` (default resources/models/<name>.gguf).

    Multi-part models are concatenated in registry order; a synth:// source is generated into a
    scratch folder beside ``dest`` (removed afterwards). The file appears at ``dest`` only once its
    SHA-256 equals the registry's; a mismatch raises IntegrityError and leaves nothing behind.
    Raises UnavailableError when a source cannot be reached (e.g. no network for hf://).
    """
    registry = registry or load()
    entry = registry.model(name)
    dest = check_output_path(dest if dest else resources / "models" / f"{name}.gguf", "fetch destination")
    if dest.exists() and entry.sha256 and sha256_file(dest) == entry.sha256:
        _log(f"{name}: {dest} is present and verified")
        return dest
    for req in entry.requires:
        resolve_uri(req, name, resources)
    with contextlib.ExitStack() as scratch:
        parts = [_generate(u, registry, resources, dest, scratch) if u.synth else resolve_uri(u, name, resources)
                 for u in entry.sources]
        if entry.sha256 is None:
            got = sha256_file(parts[0]) if len(parts) == 1 else "(not computed)"
            raise IntegrityError(f"{name}: the registry has no pinned sha256 ({entry.unverified}); "
                                 f"the resolved file hashes to {got}: pin it in config/models.yaml first")
        _log(f"{name}: assembling {len(parts)} part(s) and checking sha256")
        with atomic_open(dest, "wb") as out, Progress("fetch", "part", len(parts), unit="part") as prog:
            h = hashlib.sha256()
            for p in parts:
                with open_regular(p, f"resolved part of {name}") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
                        out.write(block)
                prog.step(f"{p.name} ({p.stat().st_size / 2**20:.1f} MiB)")
            if h.hexdigest() != entry.sha256:
                raise IntegrityError(f"{name}: sha256 of the resolved file is {h.hexdigest()}, "
                                     f"the registry pins {entry.sha256}; nothing was written")
    return dest


def _generate(uri: Uri, registry: Registry, resources: Path, dest: Path,
              scratch: contextlib.ExitStack) -> Path:
    """Generate a synth:// model into a temporary folder beside ``dest`` that ``scratch`` removes."""
    vocab_dir = fetch_resource(synth.VOCAB_RESOURCE, registry, resources)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(scratch.enter_context(tempfile.TemporaryDirectory(dir=dest.parent, prefix=".synth-")))
    _log(f"generating {uri.text}")
    return synth.generate(uri.synth, vocab_dir, tmp / dest.name)


def provenance(name: str, path: Path, registry: Registry | None = None) -> dict:
    """What made the fetched file: URIs, pinned and measured hashes, size."""
    registry = registry or load()
    e = registry.model(name)
    return {"model": name, "uris": [u.text for u in e.sources], "requires": [u.text for u in e.requires],
            "sha256": sha256_file(path), "pinned_sha256": e.sha256, "bytes": path.stat().st_size,
            "architecture_expected": e.architecture}


def fetch_resource(name: str, registry: Registry | None = None, resources: Path = RESOURCES) -> Path:
    """Resolve a non-model resource (e.g. llama.cpp's vocabulary test files) to a local path."""
    registry = registry or load()
    r = registry.resource(name)
    return resolve_uri(r.uri, name, resources, sha256=r.sha256)
