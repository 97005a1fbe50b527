"""Which C files make which binary, named file by file (paths relative to ``csrc/``).

A build compiles exactly these lists, and its provenance records exactly what it compiled: there
is no folder glob that could pick up a file nobody meant to ship (a test driver, a scratch file).
``tests/test_build.py`` checks that every C file under ``csrc/`` is in exactly one list.

- ``libmodel.so`` = the kernel files of the providers its IR uses (each kernel map's ``impl.sources``
  and its variants' ``sources``, :func:`provider_kernels`) + ALWAYS_LINKED + COMMON + RUNTIME +
  TOKENIZER + the generated ``codegen/model.c``; without an IR (``bringup build`` with no ``--ir``),
  every file of KERNELS. So editing one kernel source changes, and rebuilds, only the libraries
  whose IR uses a provider from it (``rules/build.smk`` declares :func:`build_inputs`).
- ``bringup-run`` = COMMON + CLI (it ``dlopen``s the library, so any model's library works with it)
- the kernel test library (``bringup kernels build``) = KERNELS
- TEST_DRIVERS are compiled only by tests (e.g. the tokenizer under the sanitizers)
- FUZZ = the libFuzzer targets (BUMP reader, tokenizer, the CLI's chat-format parser, the server's
  request reader), built only by ``tests/fuzz/run.py``
- BENCH = the bench stage's host probes (``bu_bandwidth``: DRAM read bandwidth), built by ``bringup bench``
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from bringup.core import canonjson
from bringup.core.errors import BringupError
from bringup.core.paths import CSRC, KERNEL_MAPS
from bringup.ir import block

KERNELS: tuple[str, ...] = (
    "kernels/bu_attention.c", "kernels/bu_dequant.c", "kernels/bu_elementwise.c", "kernels/bu_embed.c",
    "kernels/bu_linear.c", "kernels/bu_linear_q8act.c", "kernels/bu_norm.c",
    "kernels/bu_rope.c", "kernels/bu_cpu.c", "kernels/bu_isa_cache.c", "kernels/bu_linear_fast.c",
    "kernels/bu_linear_fast_avx2.c",
    "kernels/bu_linear_fast_avx512.c", "kernels/bu_linear_q8fast.c", "kernels/bu_linear_q8fast_avx2.c",
    "kernels/bu_linear_q8fast_avx512.c", "kernels/bu_attention_fast.c", "kernels/bu_attention_avx2.c",
    "kernels/bu_glu_fast.c", "kernels/bu_glu_avx2.c", "kernels/bu_attention_f16.c",
    "kernels/bu_attention_f16_fast.c", "kernels/bu_attention_f16_avx2.c", "kernels/bu_moe.c",
    "kernels/bu_moe_fast.c",
)
#: Kernel files every ``libmodel.so`` links, whatever its providers: the ISA dispatch that the
#: runtime checks when the library loads (``bu_isa_check``) and the CLI reports (``bu_isa_name``,
#: ``bu_isa_report`` in --json), and the file that keeps its measured choices per host and library.
ALWAYS_LINKED: tuple[str, ...] = ("kernels/bu_cpu.c", "kernels/bu_isa_cache.c")
COMMON: tuple[str, ...] = ("common/bu_common.c",)
RUNTIME: tuple[str, ...] = ("runtime/bu_sha256.c", "runtime/bu_bump.c", "runtime/bu_sampler.c", "runtime/bu_runtime.c",
                             "runtime/bu_threadpool.c", "runtime/bu_team.c")
TOKENIZER: tuple[str, ...] = (
    "tokenizer/bu_tok_load.c", "tokenizer/bu_tok_vocab.c", "tokenizer/bu_tok_unicode.c", "tokenizer/bu_tok_pretok.c",
    "tokenizer/bu_tok_rules.c",
    "tokenizer/bu_tok_merge.c", "tokenizer/bu_tok_encode.c", "tokenizer/bu_tok_decode.c",
    "tokenizer/bu_unicode_tables.c",
)
CLI: tuple[str, ...] = (
    "cli/bringup_run.c", "cli/util.c", "cli/args.c", "cli/library.c", "cli/chat.c", "cli/generate.c", "cli/one_shot.c",
    "cli/interactive.c", "cli/line_edit.c", "cli/json_out.c", "cli/out_file.c", "cli/model_files.c",
    "cli/dump_hidden.c", "cli/habits.c", "cli/bu_server.c", "cli/bu_endpoints.c", "cli/bu_http.c", "cli/bu_request.c",
    "cli/bu_json.c",
)
TEST_DRIVERS: tuple[str, ...] = ("tokenizer/bu_tok_check.c",)
#: libFuzzer targets (clang -fsanitize=fuzzer,address,undefined), built only by tests/fuzz/run.py:
#: each is linked with the sources of the component it fuzzes (docs/fuzzing.md)
FUZZ: tuple[str, ...] = ("fuzz/fuzz_bump.c", "fuzz/fuzz_tok_load.c", "fuzz/fuzz_tok_encode.c", "fuzz/fuzz_chat.c",
                         "fuzz/fuzz_server_request.c")
BENCH: tuple[str, ...] = ("bench/bu_bandwidth.c",)

#: Header folders, in -I order: the public headers (kernel ABI, format table, runtime, sampler and
#: tokenizer APIs), then each component's own. ``cli/`` is not one: its headers are found beside the
#: CLI's own files (``#include "util.h"``), so no other component can include them.
INCLUDE_DIRS: tuple[str, ...] = ("include", "common", "kernels", "runtime", "tokenizer")
#: The CLI's header folder (one header per concern; util.h the leaf): inputs of the CLI's compile only.
CLI_HEADER_DIR = "cli"


def paths(*lists: tuple[str, ...]) -> list[Path]:
    """Absolute paths of the files of ``lists`` (e.g. ``paths(COMMON, TOKENIZER)``), in order."""
    return [CSRC / s for group in lists for s in group]


def include_dirs(codegen_dir: Path | None = None) -> list[Path]:
    """The ``-I`` folders of the native program, then ``codegen_dir`` (model.h) when given."""
    return [CSRC / d for d in INCLUDE_DIRS] + ([Path(codegen_dir)] if codegen_dir else [])


def headers(dirs: list[Path]) -> list[Path]:
    """Every header in ``dirs``, sorted: what a compile with those ``-I`` folders can include."""
    return sorted({h for d in dirs for h in Path(d).glob("*.h")})


def program_headers(codegen_dir: Path | None = None) -> list[Path]:
    """Every header the native program's compiles can read, sorted: those of :func:`include_dirs`
    (with ``codegen_dir``'s model.h when given) and the CLI's own (CLI_HEADER_DIR)."""
    return headers([*include_dirs(codegen_dir), CSRC / CLI_HEADER_DIR])


def kernel_sources() -> list[Path]:
    """The C sources of the kernel library (compile with ``-I csrc/include -I csrc/kernels``)."""
    return paths(KERNELS)


def kernel_headers() -> list[Path]:
    """Headers the kernel sources include (public ``bu_*.h`` and the kernels' internal ones), sorted."""
    return sorted([*(CSRC / "include").glob("bu_*.h"), *(CSRC / "kernels").glob("*.h")])


def ir_providers(ir_paths: Iterable[str | os.PathLike]) -> set[str]:
    """Provider ids (kernel map ids) of every op of the IRs at ``ir_paths`` (``ops[].provider``).
    Raises BringupError for a missing or unreadable IR."""
    out: set[str] = set()
    for p in ir_paths:
        out |= {op["provider"] for op in block.expand(canonjson.read(Path(p), "IR"))}
    return out


def provider_kernels(providers: Iterable[str], maps_dir: str | os.PathLike = KERNEL_MAPS) -> list[str]:
    """The kernel C files (``csrc``-relative, in KERNELS order) that serve ``providers``: each
    provider's kernel map ``impl.sources`` and every ``variants[].sources`` (``.c`` files; headers are
    declared by :func:`build_inputs`), plus ALWAYS_LINKED.

    Raises BringupError for a provider without a map in ``maps_dir``, or a map naming a C file
    that is not in KERNELS (it would be compiled without being on the list)."""
    maps = {}
    for f in sorted(Path(maps_dir).glob("*.json")):
        m = canonjson.read(f, "kernel map")
        maps[m["id"]] = m
    files = set(ALWAYS_LINKED)
    for pid in sorted(set(providers)):
        if pid not in maps:
            raise BringupError(f"build: provider {pid!r} has no kernel map in {maps_dir}")
        m = maps[pid]
        for src in [*m["impl"].get("sources", []), *(s for v in m.get("variants", []) for s in v["sources"])]:
            if not src.endswith(".c"):
                continue
            name = src.removeprefix("csrc/")
            if name not in KERNELS:
                raise BringupError(f"kernel map {pid}: source {src} is not in bringup.build.sources.KERNELS")
            files.add(name)
    return [k for k in KERNELS if k in files]


def library_sources(providers: Iterable[str] | None, maps_dir: str | os.PathLike = KERNEL_MAPS) -> list[str]:
    """``csrc``-relative C files of ``libmodel.so`` besides ``model.c``: the kernels of ``providers``
    (:func:`provider_kernels`; None: every file of KERNELS), then COMMON, RUNTIME and TOKENIZER."""
    kernels = list(KERNELS) if providers is None else provider_kernels(providers, maps_dir)
    return [*kernels, *COMMON, *RUNTIME, *TOKENIZER]


def build_inputs(ir_paths: Iterable[str | os.PathLike], root: str | os.PathLike = ".") -> list[str]:
    """Every ``csrc`` file the build of a model whose IRs are ``ir_paths`` reads, as paths relative
    to ``root`` (the workflow's folder, which holds ``csrc/`` and ``kernel_maps/``), sorted: the
    library's C files (:func:`library_sources` of the IRs' providers), the CLI's, and every header
    of INCLUDE_DIRS (any compile may include any of them) and of the CLI's folder. For ``rules/build.smk``."""
    root = Path(root)
    c_files = [*library_sources(ir_providers(ir_paths), root / "kernel_maps"), *COMMON, *CLI]
    hdrs = [str(h.relative_to(root)) for d in (*INCLUDE_DIRS, CLI_HEADER_DIR) for h in (root / "csrc" / d).glob("*.h")]
    return sorted({*(f"csrc/{c}" for c in c_files), *hdrs})
