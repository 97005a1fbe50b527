"""Build stage: gcc turns kernels + runtime + tokenizer + the generated model into ``libmodel.so``,
and the CLI into ``bringup-run``; ``build/provenance.json`` records how.

Contract (docs/architecture.md, docs/runtime.md):

- ``libmodel.so`` holds the kernel files of the providers the model's IRs use (``--ir``;
  bringup.build.sources.library_sources: without ``--ir`` every file of KERNELS), COMMON, RUNTIME, TOKENIZER and
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

import os
import platform
from pathlib import Path
from typing import Sequence

from bringup.build import compiler as cc_driver
from bringup.build import sources
from bringup.core import canonjson
from bringup.core.atomic import atomic_dir
from bringup.core import schemas
from bringup.formats import ggml
from bringup.core.errors import BringupError
from bringup.core.hashing import sha256_file
from bringup.core.paths import ROOT
from bringup.core.progress import Timed

# --no-undefined: the library links only the kernel files its providers name (sources.library_sources),
# so a map that forgets a file it needs fails here, at link time, not when the library is loaded.
LIB_LDFLAGS: tuple[str, ...] = ("-shared", "-pthread", "-Wl,-rpath,$ORIGIN", "-Wl,--build-id=sha1",
                                "-Wl,--no-undefined", "-lm")
CLI_LDFLAGS: tuple[str, ...] = ("-Wl,-rpath,$ORIGIN", "-Wl,--build-id=sha1", "-ldl", "-pthread")
#: what the build stage's folder holds, written as one set
BUILD_FILES = ("libmodel.so", "bringup-run", "provenance.json")


def _rel(p: Path) -> str:
    p = Path(p).resolve()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        # outside the checkout (a scratch build): folder/name, never the absolute path
        return f"{p.parent.name}/{p.name}"


#: ``--sanitize`` choices -> gcc flags (compile and link). Sanitizer builds are for tests and
#: debugging (they are recorded in provenance and never certified).
SANITIZERS = {"address": "address", "undefined": "undefined"}


def sanitizer_flags(names: Sequence[str]) -> list[str]:
    """gcc flags for the sanitizers ``names`` (ASan and/or UBSan): instrumented, with frame
    pointers and debug lines for readable reports, UBSan made fatal. BringupError for an unknown name."""
    bad = sorted(set(names) - set(SANITIZERS))
    if bad:
        raise BringupError(f"--sanitize {','.join(bad)}: known sanitizers are {', '.join(SANITIZERS)}")
    if not names:
        return []
    flags = [f"-fsanitize={','.join(SANITIZERS[n] for n in sorted(set(names)))}", "-fno-omit-frame-pointer", "-g"]
    return flags + (["-fno-sanitize-recover=undefined"] if "undefined" in names else [])


def build(codegen_dir: str | os.PathLike, out_dir: str | os.PathLike, sanitize: Sequence[str] = (),
          irs: Sequence[str | os.PathLike] = ()) -> dict:
    """Build ``libmodel.so`` and ``bringup-run`` from ``codegen_dir/model.c`` into ``out_dir`` and
    write ``out_dir/provenance.json``. Returns the provenance dict. ``sanitize`` (``address``,
    ``undefined``) instruments both binaries and is recorded in provenance. ``irs``: the model's
    IR files; the library then links only the kernel files of their providers (none given: every kernel file).

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
    providers = sources.ir_providers(irs) if irs else None
    lib_sources = [*(sources.CSRC / f for f in sources.library_sources(providers)), model_c]
    cli_sources = sources.paths(sources.COMMON, sources.CLI)
    hdrs = sources.program_headers(codegen_dir)
    san = sanitizer_flags(sanitize)
    # the three files appear as one set (atomic_dir): a failed or interrupted build, gcc killed
    # halfway, leaves the previous libmodel.so / bringup-run / provenance.json whole
    with atomic_dir(out_dir, BUILD_FILES, "build output folder") as tmp:
        lib, cli = tmp / "libmodel.so", tmp / "bringup-run"
        with Timed("build", f"compiling libmodel.so ({len(lib_sources)} C files)"):
            lib_cmd = cc_driver.gcc(lib_sources, lib, incs, [*LIB_LDFLAGS, *san], extra_cflags=san)
        with Timed("build", f"compiling bringup-run ({len(cli_sources)} C files)"):
            cli_cmd = cc_driver.gcc(cli_sources, cli, incs, [*CLI_LDFLAGS, *san], extra_cflags=san)
        prov = {
            "schema_version": 1,
            "compiler": {"path": cc, "version": cc_driver.compiler_version(cc)},
            "machine": platform.machine(),
            "isa_flags": list(cc_driver.isa_flags()),
            "cflags": list(cc_driver.base_cflags()),
            "ldflags": {"libmodel.so": list(LIB_LDFLAGS), "bringup-run": list(CLI_LDFLAGS)},
            "commands": {"libmodel.so": _portable(lib_cmd, codegen_dir, tmp),
                         "bringup-run": _portable(cli_cmd, codegen_dir, tmp)},
            "sources": {_rel(s): sha256_file(s) for s in sorted({*lib_sources, *cli_sources, *hdrs})},
            "artifacts": {"libmodel.so": sha256_file(lib), "bringup-run": sha256_file(cli)},
        }
        if san:
            prov["sanitize"] = sorted(set(sanitize))
        schemas.validate(prov, "build_provenance", "build/provenance.json")
        canonjson.write(tmp / "provenance.json", prov)
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
