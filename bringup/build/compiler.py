"""The one C compiler driver: every C file bringup compiles (the native program, the kernel test
library, test fixtures) goes through ``gcc()`` here.

- The ISA target is explicit (``-march=x86-64-v2``) and recorded, never ``-march=native``: a binary
  runs on any machine of that baseline and its floating point does not depend on the build host.
  ``-ffp-contract=off`` is required by the kernels' declared reduction order (no FMA contraction).
- ``-ffile-prefix-map`` writes the checkout as ``.``, other source folders by their name and the
  output folder as ``build``, so no absolute path of the build machine ends up in a binary and the
  same sources, compiler and flags give byte-identical files wherever they are built.
- The output is written atomically (a temporary file, then rename): a failed compile leaves nothing.

Errors: UnavailableError (exit 5) when the compiler is missing; UnsupportedError (exit 4) for a
``native`` ISA flag; BringupError (exit 2) for a missing source or a failed compile (with gcc's
message). gcc warnings are printed to stderr, never dropped.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from bringup.core.errors import BringupError, UnavailableError, UnsupportedError
from bringup.core.paths import ROOT

#: The kernels' flags, which every C file of the native program is compiled with too: optimised C11,
#: position-independent, the explicit x86-64-v2 baseline (SSE4.2, POPCNT; no AVX, no FMA), no FMA
#: contraction (-ffp-contract=off keeps every declared rounding point), warnings on. The SIMD levels
#: of the fast kernels (csrc/kernels/bu_linear_fast_avx2.c, _avx512.c) raise the target per file
#: with ``#pragma GCC target`` and are called only on a CPU that has it (ISA chosen at load,
#: docs/kernels.md), so the binary still runs on any x86-64-v2 host.
DEFAULT_FLAGS: tuple[str, ...] = ("-O2", "-std=c11", "-fPIC", "-march=x86-64-v2", "-ffp-contract=off",
                                  "-Wall", "-Wextra")

#: Added for the native program (recorded in its provenance): no fast-math, and the C errors that
#: would otherwise only be warnings about a call or a pointer that cannot be right.
EXTRA_CFLAGS: tuple[str, ...] = (
    "-fno-fast-math", "-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types",
    "-Wno-unused-parameter",
)


def base_cflags() -> tuple[str, ...]:
    """DEFAULT_FLAGS + EXTRA_CFLAGS: the flags of every file of the native program."""
    return DEFAULT_FLAGS + EXTRA_CFLAGS


def isa_flags(flags: Sequence[str] | None = None) -> tuple[str, ...]:
    """The ISA-selecting flags (``-m...``) among ``flags`` (default: base_cflags())."""
    return tuple(f for f in (base_cflags() if flags is None else flags) if f.startswith("-m"))


def check_isa(flags: Sequence[str]) -> None:
    """Raise UnsupportedError when a flag asks for the build host's ISA (``-march=native``,
    ``-mtune=native``): the target must be explicit and recorded."""
    for f in flags:
        if f.startswith("-march=native") or f.startswith("-mtune=native"):
            raise UnsupportedError(f"flag {f}: the ISA must be explicit and recorded, not 'native'")


def compiler(name: str | None = None) -> str:
    """Path of the C compiler ``name`` (default ``$CC``, else gcc). Raises UnavailableError when
    it is not on PATH."""
    cc = name or os.environ.get("CC", "gcc")
    path = shutil.which(cc)
    if not path:
        raise UnavailableError(f"C compiler {cc!r} not found on PATH (set CC or install gcc)")
    return path


def compiler_version(cc: str) -> str:
    """First line of ``cc --version``. Raises UnavailableError if the compiler cannot run."""
    try:
        r = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise UnavailableError(f"C compiler {cc!r} not usable: {e}") from None
    return r.stdout.splitlines()[0].strip()


def prefix_map_flags(out_dir: Path, sources: Sequence[Path]) -> list[str]:
    """-ffile-prefix-map for the checkout (``.``) and for every source folder outside it (its own
    name), then the output folder (as ``build``); gcc uses the last matching map, so the more
    specific folders come after the checkout. The list depends only on folder names."""
    dirs: list[tuple[Path, str]] = [(ROOT, ".")]
    for d in (Path(s).resolve().parent for s in sources):
        if d != ROOT and (d, d.name) not in dirs and ROOT not in d.parents:
            dirs.append((d, d.name))
    dirs.append((Path(out_dir).resolve(), "build"))
    return [f"-ffile-prefix-map={d}={name}" for d, name in dirs]


def gcc(sources: Sequence[Path], out: Path, include_dirs: Sequence[Path], ldflags: Sequence[str],
        extra_cflags: Sequence[str] = (), defines: Sequence[str] = (), cflags: Sequence[str] | None = None,
        cc: str | None = None) -> list[str]:
    """Compile and link ``sources`` into ``out`` (an executable, or a shared library when
    ``ldflags`` has ``-shared``), atomically, with ``cflags`` (default base_cflags()) +
    ``extra_cflags`` + the prefix maps, ``-I`` per include folder and ``-D`` per define.

    Returns the command line (argv) that ran, naming ``out`` by its file name (not the temporary
    file). Raises BringupError for a missing source or a failed compile (gcc's stderr in the
    message), UnsupportedError for a native ISA flag, UnavailableError when there is no compiler.
    """
    flags = [*(base_cflags() if cflags is None else cflags), *extra_cflags]
    check_isa(flags)
    cc = compiler(cc)
    out = Path(out)
    missing = [str(s) for s in sources if not Path(s).is_file()]
    if missing:
        raise BringupError(f"missing C sources: {', '.join(missing)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    argv = [cc, *flags, *prefix_map_flags(out.parent, sources), *(f"-I{d}" for d in include_dirs),
            *(f"-D{d}" for d in defines), "-o", tmp, *map(str, sources), *ldflags]
    try:
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise BringupError(f"gcc failed building {out.name} (exit {r.returncode}):\n{r.stderr.strip()}")
        if r.stderr.strip():
            # warnings are not errors, but they are shown, never dropped
            print(f"gcc warnings building {out.name}:\n{r.stderr.strip()}", file=sys.stderr)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return [out.name if a == tmp else a for a in argv]
