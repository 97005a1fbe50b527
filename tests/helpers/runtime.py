"""The runtime's C structures as ctypes mirrors (csrc/include/bu_runtime.h, csrc/runtime/bu_model_abi.h)."""
from __future__ import annotations

import ctypes as C


class Params(C.Structure):
    _fields_ = [("n_ctx", C.c_int32), ("verify_payload", C.c_int32), ("n_threads", C.c_int32)]
