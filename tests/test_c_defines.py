"""Numbers C owns and Python reads (bringup.core.c_defines): Python's value is the C compiler's."""
from __future__ import annotations

import subprocess

import pytest

from bringup.build import compiler
from bringup.codegen import emit
from bringup.core.c_defines import KERNELS_HEADER, RUNTIME_HEADER, c_define
from bringup.core.errors import BringupError
from bringup.core.paths import CSRC
from bringup.ir import kernel_map_table, lower


def test_python_reads_what_the_compiler_sees(tmp_path):
    src = tmp_path / "v.c"
    src.write_text('#include <stdio.h>\n#include "bu_kernels.h"\n#include "bu_runtime.h"\n'
                   'int main(void) { printf("%lld %d\\n", (long long)BU_DIM_MAX, BU_RT_ABI_VERSION); return 0; }\n')
    exe = tmp_path / "v"
    compiler.gcc([src], exe, [CSRC / "include"], ())
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert [int(x) for x in out] == [lower.DIM_MAX, emit.RUNTIME_ABI_VERSION]
    assert kernel_map_table._MAX_DIM == lower.DIM_MAX == c_define(KERNELS_HEADER, "BU_DIM_MAX") == 2**31 - 1
    assert emit.RUNTIME_ABI_VERSION == c_define(RUNTIME_HEADER, "BU_RT_ABI_VERSION")


@pytest.mark.parametrize("line, want", [("#define BU_X 7", 7), ("#define BU_X ((int64_t)2147483647)", 2**31 - 1),
                                        ("#define BU_X 12 /* why */", 12)])
def test_a_literal_is_read(tmp_path, line, want):
    h = tmp_path / "h.h"
    h.write_text(f"/* x */\n{line}\n")
    assert c_define(h, "BU_X") == want


@pytest.mark.parametrize("line", ["#define BU_X (1 << 31)", "#define BU_X INT32_MAX", "#define BU_Y 3", "#define BU_X 0x10"])
def test_anything_but_a_literal_is_refused(tmp_path, line):
    h = tmp_path / "h.h"
    h.write_text(f"{line}\n")
    with pytest.raises(BringupError, match="BU_X"):
        c_define(h, "BU_X")
