"""The kernel library alone (``csrc/kernels`` as ``libbu_kernels-<key>.so``), for the kernel tests'
ctypes calls and ``bringup kernels build``; compiled by the one driver, bringup.build.compiler.

The file is named by a key over everything that determines its bytes, so an unchanged build is
reused and any change gives a new file (docs/kernels.md "Build").
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from bringup.build import compiler as cc_driver
from bringup.build import sources
from bringup.core import canonjson
from bringup.core.errors import BringupError
from bringup.core.hashing import sha256_file
from bringup.core.paths import CSRC
from bringup.formats import ggml

#: The kernel library's compiler flags unless a caller gives others.
DEFAULT_FLAGS = cc_driver.DEFAULT_FLAGS
#: Test builds only: the avx512 files' intrinsics as SIMDe's code on the AVX2 level, so the kernel
#: tests check the AVX-512 level's bits on a host without AVX-512 (csrc/kernels/bu_avx512_emulated.h;
#: needs Debian's libsimde-dev, which bootstrap.sh --test installs). Never for a program build.
AVX512_EMULATION_FLAGS = (*DEFAULT_FLAGS, "-DBU_EMULATE_AVX512", "-Wno-psabi")
#: Test builds only, added to DEFAULT_FLAGS or AVX512_EMULATION_FLAGS: BU_TEST_SLOW_LEVEL=<level>
#: in the environment then makes every dispatched linear call at that level 2 ms slower, so a test
#: sees the measured dispatch avoid it (csrc/kernels/bu_cpu.c). Never for a program build.
TEST_HOOK_FLAGS = ("-DBU_TEST_HOOKS",)
#: The compiler a kernel library is built with unless a caller names another.
COMPILER = "gcc"


@dataclass(frozen=True)
class BuildRecord:
    """What ``build_kernel_library`` built: the library and everything that determined its bytes."""

    library: Path
    compiler: str
    compiler_version: str
    flags: tuple[str, ...]
    sources: dict[str, str]     # repo-relative path -> sha256, sources and headers
    key: str                    # sha256 over compiler version, flags and sources: names the file
    cached: bool                # True when an existing library with this key was reused

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form (no ``cached``: it describes this call, not the build)."""
        return {"library": self.library.name, "compiler": self.compiler,
                "compiler_version": self.compiler_version, "flags": list(self.flags),
                "sources": dict(self.sources), "key": self.key}


def build_kernel_library(out_dir: Path | str, flags: Sequence[str] | None = None,
                         compiler: str = COMPILER) -> BuildRecord:
    """Compile ``sources.KERNELS`` into ``out_dir/libbu_kernels-<key>.so``; return its BuildRecord.

    ``flags`` default to ``DEFAULT_FLAGS``; they, the compiler version and the SHA-256 of every
    source and header form ``key`` (SHA-256 hex of their canonical JSON), which names the file: an
    unchanged build is reused (``cached=True``), any change gives a new file, written atomically
    (a file with that name is always complete). The record is returned, not written: callers put
    ``record.to_json()`` into their own provenance. Raises BringupError when ``bu_formats.h`` is not
    current for the format table; raises UnsupportedError for
    ``-march=native``, BringupError for a failed compile (with the compiler's output),
    UnavailableError if there is no compiler.
    """
    out_dir = Path(out_dir)
    flags = tuple(DEFAULT_FLAGS if flags is None else flags)
    ggml.check_c_header()
    cc_driver.check_isa(flags)
    cver = cc_driver.compiler_version(cc_driver.compiler(compiler))
    root = CSRC.parent
    srcs = {str(p.relative_to(root)): sha256_file(p) for p in sources.kernel_sources() + sources.kernel_headers()}
    key = canonjson.sha256({"compiler": cver, "flags": list(flags), "sources": srcs})
    lib = out_dir / f"libbu_kernels-{key}.so"
    if lib.is_file():
        return BuildRecord(lib, compiler, cver, flags, srcs, key, cached=True)
    try:
        cc_driver.gcc(sources.kernel_sources(), lib, [CSRC / "include", CSRC / "kernels"],
                      ("-shared", "-Wl,--build-id=sha1", "-lm"),  # the build-id keys the ISA cache
                      cflags=flags, cc=compiler)
    except BringupError as e:
        raise BringupError(f"kernel library build failed: {e}", e.exit_code) from None
    return BuildRecord(lib, compiler, cver, flags, srcs, key, cached=False)
