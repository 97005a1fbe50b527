"""llama.cpp built for this host's ISA (``GGML_NATIVE=ON``), at the same pinned version as the
installed llama-cpp-python, built once into ``resources/llama_cpp_native/<version>-<isa>/`` and reused.

The source is the vendored ``vendor/llama.cpp`` of llama-cpp-python's source distribution, pinned
(URI + SHA-256) in the registry's ``resources`` (config/models.yaml: the entry whose URI is
``pypi-sdist://llama-cpp-python==<installed version>/...``) and unpacked by bringup.fetch into
``resources/sdist/``. The build is the portable oracle's configuration (shared libraries only, no
OpenMP, no curl, no tools) with ``GGML_NATIVE=ON`` instead of the explicit AVX2/FMA/F16C list, so
the two builds differ in the ISA alone. ``<isa>`` is gcc's ``-march=native`` CPU name plus the first
8 hex digits of the SHA-256 of the ``-m`` flags it resolves to (a VM that masks a feature gets its
own folder). The folder holds ``lib/libllama.so`` (+ libggml*) and ``build.json`` (version, source
hash, cmake flags, resolved ISA flags, compiler, build time); it appears complete or not at all.

llama-cpp-python loads it through ``LLAMA_CPP_LIB_PATH=<folder>/lib`` (bringup.bench.llama_runner).

Errors: UnavailableError (5) when cmake or a compiler is missing or the installed llama-cpp-python
has no pinned source in the registry; BringupError (2) when the build fails (the log's tail quoted).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from bringup.core.errors import BringupError, UnavailableError
from bringup.core.hashing import sha256_file
from bringup.core.paths import RESOURCES
from bringup.fetch import registry as registry_mod
from bringup.fetch.sources import resolve_sdist

DIST = "llama-cpp-python"
#: The portable oracle's configuration (bootstrap.sh CMAKE_ARGS) less its ISA list, plus GGML_NATIVE.
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DGGML_NATIVE=ON", "-DGGML_OPENMP=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_COMMON=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DGGML_BLAS=OFF", "-DGGML_CCACHE=OFF", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN",
)
#: The one target built (libllama and the ggml libraries it links); the folder's lib/ gets these files.
TARGET = "llama"
LIB_GLOBS = ("libllama.so*", "libggml*.so*")
BUILD_TIMEOUT_S = 3600


def installed_version() -> str:
    """The installed llama-cpp-python's version. Raises UnavailableError when it is not installed."""
    try:
        return version(DIST)
    except PackageNotFoundError:
        raise UnavailableError(f"{DIST} is not installed (pip install '.[oracle]')") from None


def pinned_source(ver: str, registry_path: str | Path | None = None) -> tuple[registry_mod.Uri, str]:
    """The registry resource pinning ``llama-cpp-python==ver``'s source distribution, as the URI of
    its ``vendor/llama.cpp`` folder and the archive's SHA-256. Raises UnavailableError when the
    registry pins no source of that version (the native build must be the installed version)."""
    reg = registry_mod.load(registry_path)
    pins = sorted({r.sha256 for r in reg.resources.values()
                   if r.uri.scheme == "pypi-sdist" and r.uri.dist == DIST and r.uri.version == ver})
    if len(pins) != 1:
        raise UnavailableError(f"the registry pins {len(pins)} source distributions of {DIST}=={ver} "
                               f"(need exactly one, in config/models.yaml resources)")
    return registry_mod.parse_uri(f"pypi-sdist://{DIST}=={ver}/vendor/llama.cpp"), pins[0]


def native_isa(cc: str = "gcc") -> dict:
    """What ``-march=native`` means here: ``{"march", "flags" (the -m flags gcc resolves it to,
    enabled ones only), "key"}`` with key = march + 8 hex of the flags' SHA-256. Raises
    UnavailableError when ``cc`` cannot run."""
    try:
        r = subprocess.run([cc, "-march=native", "-E", "-v", "-x", "c", "-"], input="", capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UnavailableError(f"cannot run {cc} to resolve -march=native: {e}") from None
    line = next((ln for ln in r.stderr.splitlines() if "cc1" in ln and "-march=" in ln), None)
    if r.returncode != 0 or line is None:
        raise UnavailableError(f"{cc} -march=native did not report its target: {r.stderr.strip()[-300:]}")
    march = re.search(r"-march=(\S+)", line).group(1)
    flags = sorted(f for f in line.split() if f.startswith("-m") and not f.startswith(("-mno-", "-march", "-mtune")))
    digest = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:8]
    return {"march": march, "flags": flags, "key": f"{march}-{digest}"}


def _tool(name: str) -> str:
    path = shutil.which(name) or (shutil.which(name, path=str(Path(sys.executable).parent)))
    if not path:
        raise UnavailableError(f"{name} not found on PATH (install it, or `pip install {name}` into the venv)")
    return path


def _run(argv: list[str], log, cwd: Path | None = None) -> None:
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    try:
        r = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BringupError(f"{Path(argv[0]).name} timed out after {BUILD_TIMEOUT_S} s") from None
    if r.returncode != 0:
        log.flush()
        tail = Path(log.name).read_text(errors="replace").strip().splitlines()[-15:]
        raise BringupError(f"{Path(argv[0]).name} failed (exit {r.returncode}) building llama.cpp:\n" + "\n".join(tail))


def build_dir(root: Path = RESOURCES / "llama_cpp_native", ver: str | None = None, isa: dict | None = None) -> Path:
    """``root/<version>-<isa key>``: where this host's native build of the installed version lives."""
    return Path(root) / f"{ver or installed_version()}-{(isa or native_isa())['key']}"


def ensure(root: Path = RESOURCES / "llama_cpp_native", jobs: int | None = None,
           registry_path: str | Path | None = None, log=None) -> dict:
    """The native build's ``build.json`` (with ``lib_dir``), building it first when absent.

    ``jobs``: parallel compile jobs (default os.cpu_count()); ``log``: a text file for cmake's
    output (default: ``<folder>.log`` beside the folder). Reuses an existing folder only when its
    build.json names the same version, source hash and resolved ISA flags."""
    ver, isa = installed_version(), native_isa()
    out = build_dir(root, ver, isa)
    meta_path = out / "build.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("version") == ver and meta.get("isa", {}).get("flags") == isa["flags"]:
            return {**meta, "lib_dir": str(out / "lib"), "reused": True}
        raise BringupError(f"{out} holds a different build ({meta.get('version')}, {meta.get('isa', {}).get('march')}); "
                           f"remove it to rebuild")
    uri, sha = pinned_source(ver, registry_path)
    src = resolve_sdist(uri, sha)
    cmake, cc, cxx = _tool("cmake"), _tool(os.environ.get("CC", "gcc")), _tool(os.environ.get("CXX", "g++"))
    out.parent.mkdir(parents=True, exist_ok=True)
    own_log = log is None
    log = open(out.parent / f"{out.name}.log", "w") if own_log else log
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    t0 = time.monotonic()
    try:
        print(f"[bench] building llama.cpp {ver} for {isa['march']} into {out} (once; log: {log.name})",
              file=sys.stderr, flush=True)
        flags = [*CMAKE_FLAGS, f"-DCMAKE_C_COMPILER={cc}", f"-DCMAKE_CXX_COMPILER={cxx}"]
        _run([cmake, "-S", str(src), "-B", str(tmp / "build"), *flags], log)
        _run([cmake, "--build", str(tmp / "build"), "--config", "Release", "--target", TARGET,
              "-j", str(jobs or os.cpu_count() or 1)], log)
        built = tmp / "build" / "bin"
        if not (built / "libllama.so").exists():
            raise BringupError(f"the native llama.cpp build made no bin/libllama.so (see {log.name})")
        final = tmp / "final"
        (final / "lib").mkdir(parents=True)
        for pattern in LIB_GLOBS:  # symlinks (libllama.so -> libllama.so.0 -> ...) kept as links
            for f in sorted(built.glob(pattern)):
                shutil.copy2(f, final / "lib" / f.name, follow_symlinks=False)
        meta = {"version": ver, "source": {"uri": uri.text, "sdist_sha256": sha,
                                           "llama_h_sha256": sha256_file(src / "include" / "llama.h")},
                "cmake_flags": list(CMAKE_FLAGS), "cmake_target": TARGET, "isa": isa, "cmake": _first_line([cmake, "--version"]),
                "compiler": _first_line([cc, "--version"]), "build_seconds": round(time.monotonic() - t0, 1),
                "libraries_sha256": {p.name: sha256_file(p) for p in sorted((final / "lib").glob("*.so*"))
                                     if p.is_file() and not p.is_symlink()}}
        (final / "build.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        os.replace(final, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if own_log:
            log.close()
    return {**meta, "lib_dir": str(out / "lib"), "reused": False}


def _first_line(argv: list[str]) -> str:
    r = subprocess.run(argv, capture_output=True, text=True)
    return (r.stdout or r.stderr).splitlines()[0].strip() if (r.stdout or r.stderr) else ""
