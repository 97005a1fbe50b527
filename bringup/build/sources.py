"""Which C files make which binary, named file by file (paths relative to ``csrc/``).

A build compiles exactly these lists, and its provenance records exactly what it compiled: there
is no folder glob that could pick up a file nobody meant to ship (a test driver, a scratch file).
``tests/test_build.py`` checks that every C file under ``csrc/`` is in exactly one list.

- ``libmodel.so`` = KERNELS + COMMON + RUNTIME + TOKENIZER + the generated ``codegen/model.c``
- ``bringup-run`` = COMMON + CLI (it ``dlopen``s the library, so any model's library works with it)
- the kernel test library (``bringup kernels build``) = KERNELS
- TEST_DRIVERS are compiled only by tests (e.g. the tokenizer under the sanitizers)
"""
from __future__ import annotations

from pathlib import Path

from bringup.core.paths import CSRC

KERNELS: tuple[str, ...] = (
    "kernels/bu_attention.c", "kernels/bu_dequant.c", "kernels/bu_elementwise.c", "kernels/bu_embed.c",
    "kernels/bu_linear.c", "kernels/bu_linear_avx2.c", "kernels/bu_linear_q8act.c", "kernels/bu_norm.c",
    "kernels/bu_rope.c",
)
COMMON: tuple[str, ...] = ("common/bu_common.c",)
RUNTIME: tuple[str, ...] = ("runtime/bu_sha256.c", "runtime/bu_bump.c", "runtime/bu_sampler.c", "runtime/bu_runtime.c")
TOKENIZER: tuple[str, ...] = (
    "tokenizer/bu_tok_load.c", "tokenizer/bu_tok_vocab.c", "tokenizer/bu_tok_unicode.c", "tokenizer/bu_tok_pretok.c",
    "tokenizer/bu_tok_merge.c", "tokenizer/bu_tok_encode.c", "tokenizer/bu_tok_decode.c",
    "tokenizer/bu_unicode_tables.c",
)
CLI: tuple[str, ...] = (
    "cli/bringup_run.c", "cli/args.c", "cli/library.c", "cli/chat.c", "cli/generate.c", "cli/one_shot.c",
    "cli/interactive.c", "cli/json_out.c", "cli/all_logits.c", "cli/dump_hidden.c",
)
TEST_DRIVERS: tuple[str, ...] = ("tokenizer/bu_tok_check.c",)

#: Header folders, in -I order: the kernel ABI and format table, then each component's own.
INCLUDE_DIRS: tuple[str, ...] = ("include", "common", "kernels", "runtime", "tokenizer")


def paths(*lists: tuple[str, ...]) -> list[Path]:
    """Absolute paths of the files of ``lists`` (e.g. ``paths(COMMON, TOKENIZER)``), in order."""
    return [CSRC / s for group in lists for s in group]


def include_dirs(codegen_dir: Path | None = None) -> list[Path]:
    """The ``-I`` folders of the native program, then ``codegen_dir`` (model.h) when given."""
    return [CSRC / d for d in INCLUDE_DIRS] + ([Path(codegen_dir)] if codegen_dir else [])


def headers(dirs: list[Path]) -> list[Path]:
    """Every header in ``dirs``, sorted: what a compile with those ``-I`` folders can include."""
    return sorted({h for d in dirs for h in Path(d).glob("*.h")})


def kernel_sources() -> list[Path]:
    """The C sources of the kernel library (compile with ``-I csrc/include -I csrc/kernels``)."""
    return paths(KERNELS)


def kernel_headers() -> list[Path]:
    """Headers the kernel sources include (public ``bu_*.h`` and the kernels' internal ones), sorted."""
    return sorted([*(CSRC / "include").glob("bu_*.h"), *(CSRC / "kernels").glob("*.h")])
