"""Build stage: gcc turns kernels + runtime + tokenizer + the generated model into ``libmodel.so``,
and the CLI into ``bringup-run``; ``build/provenance.json`` records how.

Contract (docs/architecture.md, docs/runtime.md):

- ``libmodel.so`` holds the files of bringup.build.sources KERNELS, COMMON, RUNTIME, TOKENIZER and
  codegen/model.c; it exports the runtime API (``bu_api_get``) and the tokenizer. ``bringup-run``
  holds COMMON + CLI and ``dlopen``s the library named on its command line.
- Both go through the one compiler driver (bringup.build.compiler): the kernels' explicit ISA
  flags, ``-Wl,-rpath,$ORIGIN`` and ``-ffile-prefix-map``, so no absolute path of the build
  machine ends up in them and the same sources, compiler and flags give byte-identical files.
- ``provenance.json`` (schema ``build_provenance``) lists exactly the sources compiled and every
  header of the include folders, each with its SHA-256, and both commands with the checkout,
  codegen and output folders written as ``.``, ``$CODEGEN`` and ``$OUT``.

Errors: UnavailableError (exit 5) when gcc is missing; BringupError (exit 2) for a missing input
file, a stale ``bu_formats.h`` or a failing compile (with gcc's message).
"""
from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

from bringup.build import compiler as cc_driver
from bringup.build import sources
from bringup.core import canonjson
from bringup.core import schemas
from bringup.formats import ggml
from bringup.core.errors import BringupError
from bringup.core.hashing import sha256_file
from bringup.core.paths import ROOT

LIB_LDFLAGS: tuple[str, ...] = ("-shared", "-pthread", "-Wl,-rpath,$ORIGIN", "-Wl,--build-id=sha1", "-lm")
CLI_LDFLAGS: tuple[str, ...] = ("-Wl,-rpath,$ORIGIN", "-Wl,--build-id=sha1", "-ldl")


def _rel(p: Path) -> str:
    p = Path(p).resolve()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        # outside the checkout (a scratch build): folder/name, never the absolute path
        return f"{p.parent.name}/{p.name}"


def build(codegen_dir: str | os.PathLike, out_dir: str | os.PathLike) -> dict:
    """Build ``libmodel.so`` and ``bringup-run`` from ``codegen_dir/model.c`` into ``out_dir`` and
    write ``out_dir/provenance.json``. Returns the provenance dict.

    Raises BringupError (missing model.c / sources, stale bu_formats.h, compile error),
    UnavailableError (no gcc).
    """
    codegen_dir, out_dir = Path(codegen_dir), Path(out_dir)
    model_c = codegen_dir / "model.c"
    if not model_c.is_file():
        raise BringupError(f"{model_c} not found: run `bringup codegen` first")
    ggml.check_c_header()
    cc = cc_driver.compiler()
    incs = sources.include_dirs(codegen_dir)
    lib_sources = [*sources.paths(sources.KERNELS, sources.COMMON, sources.RUNTIME, sources.TOKENIZER), model_c]
    cli_sources = sources.paths(sources.COMMON, sources.CLI)
    lib, cli = out_dir / "libmodel.so", out_dir / "bringup-run"
    lib_cmd = cc_driver.gcc(lib_sources, lib, incs, LIB_LDFLAGS)
    try:
        cli_cmd = cc_driver.gcc(cli_sources, cli, incs, CLI_LDFLAGS)
    except BaseException:
        lib.unlink(missing_ok=True)   # a failed stage leaves nothing behind
        raise
    prov = {
        "schema_version": 1,
        "compiler": {"path": cc, "version": cc_driver.compiler_version(cc)},
        "machine": platform.machine(),
        "isa_flags": list(cc_driver.isa_flags()),
        "cflags": list(cc_driver.base_cflags()),
        "ldflags": {"libmodel.so": list(LIB_LDFLAGS), "bringup-run": list(CLI_LDFLAGS)},
        "commands": {"libmodel.so": _portable(lib_cmd, codegen_dir, out_dir),
                     "bringup-run": _portable(cli_cmd, codegen_dir, out_dir)},
        "sources": {_rel(s): sha256_file(s) for s in sorted({*lib_sources, *cli_sources, *sources.headers(incs)})},
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
