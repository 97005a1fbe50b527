"""Project-relative locations of data files (circuits, kernel maps, schemas, config)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config"
SCHEMAS = CONFIG / "schemas"
CIRCUITS = ROOT / "circuits"
KERNEL_MAPS = ROOT / "kernel_maps"
CSRC = ROOT / "csrc"
REPORTS = ROOT / "reports"
RESOURCES = ROOT / "resources"
RESULTS = ROOT / "results"
