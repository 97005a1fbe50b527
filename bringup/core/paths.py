"""Project-relative locations of data files (circuits, kernel maps, schemas, config)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"
SCHEMAS = CONFIG / "schemas"
CIRCUITS = ROOT / "circuits"
KERNEL_MAPS = ROOT / "kernel_maps"
TENSOR_MAPS = ROOT / "tensor_maps"
CSRC = ROOT / "csrc"
REPORTS = ROOT / "reports"
RESOURCES = ROOT / "resources"
RESULTS = ROOT / "results"


def rel(p) -> str:
    """``p`` relative to the project root when it lies inside it (for reports: no absolute paths)."""
    p = Path(p).resolve()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)
