"""The host a bench ran on: its CPU (``lscpu``, the kernel-selecting CPU flags), its load, and its
DRAM read bandwidth measured by the C probe ``csrc/bench/bu_bandwidth.c``.

The probe is compiled by the project's one gcc driver (bringup.build.compiler, the native
program's flags) and run at 1 thread and at all cores over a buffer of at least
BANDWIDTH_LLC_MULTIPLE times the last-level cache (and BANDWIDTH_MIN_BYTES), best of N passes:
the best pass is the bandwidth the host can deliver; the median is recorded beside it.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from bringup.build import compiler, sources
from bringup.core.errors import BringupError
from bringup.core.native import run_command, stderr_tail
from bringup.parity.oracles.llama_cpp import cpu_features

BANDWIDTH_MIN_BYTES = 256 << 20
BANDWIDTH_LLC_MULTIPLE = 8
PROBE_TIMEOUT_S = 300


def build_probe(out_dir: Path) -> tuple[Path, list[str]]:
    """Compile ``bu_bandwidth`` into ``out_dir``; returns its path and the gcc command line.
    Raises BringupError (2) when the compile fails, UnavailableError (5) without gcc."""
    exe = Path(out_dir) / "bu_bandwidth"
    argv = compiler.gcc(sources.paths(sources.BENCH), exe, [], ("-pthread",), extra_cflags=("-pthread",))
    return exe, argv


def llc_bytes() -> int | None:
    """Size of the largest cache level of CPU 0 in bytes (sysfs), or None when it is not reported."""
    sizes = []
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            text = (d / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * unit)
    return max(sizes) if sizes else None


def probe_bytes() -> int:
    """The probe's buffer: BANDWIDTH_LLC_MULTIPLE x the LLC, at least BANDWIDTH_MIN_BYTES."""
    llc = llc_bytes() or 0
    return max(BANDWIDTH_MIN_BYTES, BANDWIDTH_LLC_MULTIPLE * llc)


def measure_bandwidth(exe: Path, threads: int, nbytes: int, repeats: int = 10) -> dict[str, Any]:
    """Run the probe: ``{"threads", "bytes", "repeats", "best_gb_per_s", "median_gb_per_s",
    "passes_gb_per_s", "checksum"}`` (GB = 1e9 bytes). Raises BringupError when it fails."""
    p = run_command([str(exe), "--bytes", str(nbytes), "--threads", str(threads), "--repeats", str(repeats)],
                    timeout_s=PROBE_TIMEOUT_S, what="the bandwidth probe")
    if p.returncode != 0:
        raise BringupError(f"the bandwidth probe failed (exit {p.returncode}): {stderr_tail(p.stderr)}")
    try:
        out = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        raise BringupError(f"the bandwidth probe printed something that is not JSON ({e})") from None
    if not out.get("best_gb_per_s", 0) > 0:
        raise BringupError(f"the bandwidth probe measured no bandwidth: {out}")
    return out


def lscpu() -> dict[str, str]:
    """``lscpu``'s fields (name -> value) that describe the CPU, or {} when lscpu is absent."""
    keep = ("Architecture", "Model name", "Vendor ID", "CPU family", "Model", "CPU(s)", "Thread(s) per core",
            "Core(s) per socket", "Socket(s)", "L1d cache", "L2 cache", "L3 cache", "Hypervisor vendor", "CPU max MHz")
    try:
        r = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    fields = {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in keep:
            fields[k.strip()] = v.strip()
    return fields


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (what else was running: the numbers' caveat)."""
    return [round(x, 2) for x in os.getloadavg()]


def describe() -> dict[str, Any]:
    """The host: lscpu fields, CPU flags of interest, core count, load averages, platform."""
    return {"lscpu": lscpu(), "cpu": cpu_features(), "cpu_count": os.cpu_count() or 1,
            "load_average": load_average(), "platform": platform.platform()}
