"""Build stage: gcc turns kernels + runtime + tokenizer + the generated model into ``libmodel.so``,
and the CLI into ``bringup-run``; ``build/provenance.json`` records how.

Contract (docs/architecture.md, docs/runtime.md):

- ``libmodel.so`` holds csrc/kernels, csrc/runtime, csrc/tokenizer and codegen/model.c; it exports
  the runtime API (``bu_api_get``) and the tokenizer. ``bringup-run`` holds only csrc/cli and
  ``dlopen``s the library named on its command line.
- Both are linked with ``-Wl,-rpath,$ORIGIN`` and ``-ffile-prefix-map``, so no absolute path of
  the build machine ends up in them; the same sources, compiler and flags give byte-identical files.
- The ISA target is fixed (the kernels' ``-march=x86-64-v2``), never ``-march=native``: the binary
  runs on any machine with that baseline and its floating point does not depend on the build host.
  ``-ffp-contract=off`` is required by the kernels' declared reduction order (no FMA contraction).

Errors: UnavailableError (exit 5) when gcc is missing; BringupError (exit 2) for a missing input
file; a failing compile raises BringupError with gcc's message.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from bringup.core import canonjson
from bringup.ir import kernel_maps as kernels
from bringup.core import schemas
from bringup.core.errors import BringupError, UnavailableError
from bringup.core.hashing import sha256_file
from bringup.core.paths import CSRC, ROOT

#: Flags every C file of the native program is compiled with (recorded in provenance): the kernel
#: library's own flags (bringup.kernels.DEFAULT_FLAGS: -O2, C11, PIC, the explicit x86-64-v2 ISA
#: baseline, -ffp-contract=off), plus warnings and reproducibility flags for the rest.
EXTRA_CFLAGS: tuple[str, ...] = (
    "-fno-fast-math", "-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types",
    "-Wno-unused-parameter",
)


def base_cflags() -> tuple[str, ...]:
    """The kernels' flags + EXTRA_CFLAGS. Raises BringupError if the kernel flags are not the
    ISA-explicit kind this build records (no -march=native)."""
    flags = tuple(kernels.DEFAULT_FLAGS) + EXTRA_CFLAGS
    if not any(f.startswith("-march=") for f in flags) or any("native" in f for f in flags):
        raise BringupError(f"kernel flags {kernels.DEFAULT_FLAGS} do not name an explicit ISA (-march=...)")
    return flags


def isa_flags() -> tuple[str, ...]:
    """The ISA-selecting flags among the compile flags (recorded separately in provenance)."""
    return tuple(f for f in base_cflags() if f.startswith("-m"))


LIB_LDFLAGS: tuple[str, ...] = ("-shared", "-pthread", "-Wl,-rpath,$ORIGIN", "-Wl,--build-id=sha1", "-lm")
CLI_LDFLAGS: tuple[str, ...] = ("-Wl,-rpath,$ORIGIN", "-Wl,--build-id=sha1", "-ldl")

RUNTIME_SOURCES = ("runtime/bu_sha256.c", "runtime/bu_bump.c", "runtime/bu_sampler.c", "runtime/bu_runtime.c")
CLI_SOURCES = ("cli/bringup_run.c",)


def compiler() -> str:
    """Path of the C compiler (``$CC`` or gcc). Raises UnavailableError when there is none."""
    cc = os.environ.get("CC", "gcc")
    path = shutil.which(cc)
    if not path:
        raise UnavailableError(f"C compiler {cc!r} not found on PATH (set CC or install gcc)")
    return path


def compiler_version(cc: str) -> str:
    """First line of ``cc --version``."""
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    return out.splitlines()[0].strip()


def _prefix_map_flags(out_dir: Path, sources: Sequence[Path]) -> list[str]:
    """-ffile-prefix-map for the checkout (``.``) and for every source folder outside it (its own
    name), then the output folder (as ``build``); gcc uses the last matching map, so the more specific folders
    come after the checkout. The list depends only on folder names, not on where they are."""
    dirs: list[tuple[Path, str]] = [(ROOT, ".")]
    for d in (Path(s).resolve().parent for s in sources):
        if d != ROOT and (d, d.name) not in dirs and ROOT not in d.parents:
            dirs.append((d, d.name))
    dirs.append((Path(out_dir).resolve(), "build"))
    return [f"-ffile-prefix-map={d}={name}" for d, name in dirs]


def gcc(sources: Sequence[Path], out: Path, include_dirs: Sequence[Path], ldflags: Sequence[str],
        extra_cflags: Sequence[str] = (), defines: Sequence[str] = ()) -> list[str]:
    """Compile and link ``sources`` into ``out`` (atomically: a temp file, then rename).

    Returns the command line (argv) that was run. Raises BringupError with gcc's stderr on failure.
    """
    cc = compiler()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    missing = [str(s) for s in sources if not Path(s).is_file()]
    if missing:
        raise BringupError(f"missing C sources: {', '.join(missing)}")
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    argv = [cc, *base_cflags(), *extra_cflags, *_prefix_map_flags(out.parent, sources),
            *(f"-I{d}" for d in include_dirs), *(f"-D{d}" for d in defines),
            "-o", tmp, *map(str, sources), *ldflags]
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
    # The recorded command names the artifact, not the temp file.
    return [out.name if a == tmp else a for a in argv]


def _rel(p: Path) -> str:
    p = Path(p).resolve()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        # outside the checkout (a scratch build): folder/name, never the absolute path
        return f"{p.parent.name}/{p.name}"


def kernel_sources() -> list[Path]:
    """The kernel C sources (bringup.kernels.kernel_sources)."""
    return list(kernels.kernel_sources())


def tokenizer_sources() -> list[Path]:
    return sorted((CSRC / "tokenizer").glob("*.c"))


def include_dirs(codegen_dir: Path | None = None) -> list[Path]:
    dirs = [CSRC / "include", CSRC / "kernels", CSRC / "runtime", CSRC / "tokenizer"]
    return dirs + ([Path(codegen_dir)] if codegen_dir else [])


def build(codegen_dir: str | os.PathLike, out_dir: str | os.PathLike) -> dict:
    """Build ``libmodel.so`` and ``bringup-run`` from ``codegen_dir/model.c`` into ``out_dir`` and
    write ``out_dir/provenance.json``. Returns the provenance dict.

    Raises BringupError (missing model.c / sources, compile error), UnavailableError (no gcc).
    """
    codegen_dir, out_dir = Path(codegen_dir), Path(out_dir)
    model_c = codegen_dir / "model.c"
    if not model_c.is_file():
        raise BringupError(f"{model_c} not found: run `bringup codegen` first")
    if kernels.FORMATS_HEADER.read_text() != kernels.render_formats_header():
        raise BringupError(f"{kernels.FORMATS_HEADER} is stale; run `bringup kernels gen-formats`")
    cc = compiler()
    incs = include_dirs(codegen_dir)
    lib_sources = [*kernel_sources(), *(CSRC / s for s in RUNTIME_SOURCES), *tokenizer_sources(), model_c]
    cli_sources = [CSRC / s for s in CLI_SOURCES]
    lib, cli = out_dir / "libmodel.so", out_dir / "bringup-run"
    lib_cmd = gcc(lib_sources, lib, incs, LIB_LDFLAGS)
    try:
        cli_cmd = gcc(cli_sources, cli, incs, CLI_LDFLAGS)
    except BaseException:
        lib.unlink(missing_ok=True)   # a failed stage leaves nothing behind
        raise
    headers = sorted({h for d in incs for h in Path(d).glob("*.h")})
    prov = {
        "schema_version": 1,
        "compiler": {"path": cc, "version": compiler_version(cc)},
        "machine": platform.machine(),
        "isa_flags": list(isa_flags()),
        "cflags": list(base_cflags()),
        "ldflags": {"libmodel.so": list(LIB_LDFLAGS), "bringup-run": list(CLI_LDFLAGS)},
        "commands": {"libmodel.so": _portable(lib_cmd, codegen_dir, out_dir),
                     "bringup-run": _portable(cli_cmd, codegen_dir, out_dir)},
        "sources": {_rel(s): sha256_file(s) for s in sorted({*lib_sources, *cli_sources, *headers})},
        "artifacts": {"libmodel.so": sha256_file(lib), "bringup-run": sha256_file(cli)},
    }
    schemas.validate(prov, "build_provenance", "build/provenance.json")
    canonjson.write(out_dir / "provenance.json", prov)
    return prov


def _portable(argv: list[str], codegen_dir: Path, out_dir: Path) -> list[str]:
    """The command with the checkout, codegen and output folders written as ``.``, ``$CODEGEN`` and
    ``$OUT``, so provenance does not depend on where the build ran (the compiler path is recorded
    separately, as found)."""
    subs = sorted({str(ROOT): ".", str(Path(codegen_dir).resolve()): "$CODEGEN",
                   str(Path(out_dir).resolve()): "$OUT"}.items(), key=lambda kv: -len(kv[0]))
    out = []
    for a in argv:
        for prefix, name in subs:
            a = a.replace(prefix, name)
        out.append(a)
    return out


def cli_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bringup build",
                                 description="compile libmodel.so and the bringup-run CLI")
    ap.add_argument("--codegen-dir", required=True, help="folder with model.c and model.h")
    ap.add_argument("--out-dir", required=True, help="folder for libmodel.so, bringup-run, provenance.json")
    a = ap.parse_args(argv)
    prov = build(a.codegen_dir, a.out_dir)
    print(f"built {a.out_dir}/libmodel.so ({prov['artifacts']['libmodel.so'][:12]}) and "
          f"{a.out_dir}/bringup-run ({prov['artifacts']['bringup-run'][:12]})")
    return 0
