"""Memory budgets: a device profile (``config/devices.yaml``) or an explicit byte count, less headroom.

``usable = floor(budget x (1 - headroom))``; a run fits when its counted footprint is at most
``usable``. Device profiles are validated against ``config/schemas/devices.schema.json``.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from bringup.core import yamlfile
from bringup.core.errors import BringupError
from bringup.core.inputs import open_regular
from bringup.core.paths import CONFIG
from bringup.core.schemas import validate


@dataclass(frozen=True)
class Budget:
    """A memory budget: ``budget_bytes`` before headroom; ``usable_bytes`` what a plan may use.

    ``source`` and ``headroom_source`` say where the two numbers come from (reported verbatim).
    """
    source: str
    budget_bytes: int
    headroom_fraction: float
    headroom_source: str

    @property
    def usable_bytes(self) -> int:
        return int(math.floor(self.budget_bytes * (1.0 - self.headroom_fraction)))

    def fits(self, total: int) -> bool:
        return total <= self.usable_bytes


def load_devices(path: str | os.PathLike | None = None) -> dict[str, dict]:
    """Device profiles from config/devices.yaml (or ``path``), validated against devices.schema.json:
    name -> {description, ram_bytes, reserved_bytes, reserved_source, headroom_fraction}.
    Raises BringupError for a missing or unreadable file or an invalid profile."""
    path = Path(path) if path else CONFIG / "devices.yaml"
    try:
        with open_regular(path, "device profiles") as fh:   # a FIFO or device is refused, not read
            data = yaml.safe_load(fh.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise BringupError(f"cannot read device profiles {path}: {yamlfile.describe_error(e)}") from None
    validate(yamlfile.require_mapping(data, f"device profiles {path}", "devices"), "devices", str(path))
    for name, d in data["devices"].items():
        if d["reserved_bytes"] >= d["ram_bytes"]:
            raise BringupError(f"{path}: device {name}: reserved_bytes >= ram_bytes")
    return data["devices"]


def device_budget(name: str, devices: dict[str, dict] | None = None) -> Budget:
    """Budget of a device profile: (ram - reserved) bytes with the profile's headroom. Raises
    BringupError for a name the profiles do not have."""
    devices = devices if devices is not None else load_devices()
    if name not in devices:
        raise BringupError(f"unknown device {name!r}; config/devices.yaml has: {', '.join(sorted(devices))}")
    d = devices[name]
    return Budget(f"device {name}: {d['description']} (ram {d['ram_bytes']} - reserved {d['reserved_bytes']}; "
                  f"{d['reserved_source']})", d["ram_bytes"] - d["reserved_bytes"], float(d["headroom_fraction"]),
                  f"config/devices.yaml {name}.headroom_fraction")


_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$")
_UNITS = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def parse_bytes(text: str) -> int:
    """``"2GiB"`` -> 2147483648; ``"500MB"`` -> 500000000; plain integers are bytes (SI units
    are powers of 10, IEC units powers of 2). Raises BringupError for anything else."""
    m = _SIZE.match(str(text))
    if not m:
        raise BringupError(f"not a byte size: {text!r} (an integer with an optional unit B, KB, MB, GB, KiB, MiB, GiB)")
    return int(m.group(1)) * _UNITS[m.group(2)]
