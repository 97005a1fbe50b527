# Shared helpers for the rules: registry look-ups (params, so a registry edit reruns fetch),
# the models of the regression, and the memory each job declares (resources: mem_mb).
import glob
import json
from pathlib import Path

import yaml

from bringup.core.cli import main as bringup_main
from bringup.core.errors import BringupError
from bringup.fetch import registry
from bringup.regression import models as regression_selection

# An unknown model fails here, while the workflow is parsed, with one line naming the known ones
# (not later, inside a job's params, with a traceback).
try:
    REGISTRY = registry.load(config["registry"])
    if MODEL not in REGISTRY.models:
        raise BringupError(f"unknown model {MODEL!r} (--config model=...); the registry "
                           f"({config['registry']}) has: {', '.join(sorted(REGISTRY.models))}")
    # `snakemake regression`: config regression.models, else every entry fetchable here.
    REGRESSION_MODELS = regression_selection.select(
        REGISTRY, config.get("regression", {}).get("models"))
except BringupError as e:
    raise WorkflowError(str(e)) from None


def registry_entry(model):
    with open(config["registry"]) as fh:
        reg = yaml.safe_load(fh)
    if model not in reg["models"]:
        raise ValueError(f"unknown model {model!r}; registry has {sorted(reg['models'])}")
    return reg["models"][model]


# Memory (MB) a job may use, for `--resources mem_mb=N` (docs/regression.md). Jobs that run the
# model (ours and llama.cpp's) scale with its planned footprint: plan_memory's total_bytes
# (weights mapped + KV cache + arena, plan/memory_model.json) when it is planned, else this guess.
FOOTPRINT_UNPLANNED_MB = 1024


def footprint_mb(model):
    """The planned footprint of ``model`` in MB (plan/memory_model.json total_bytes), or
    FOOTPRINT_UNPLANNED_MB before plan_memory has run."""
    try:
        data = json.loads(Path(f"results/{model}/plan/memory_model.json").read_text())
        return -(-data["total_bytes"] // 2**20)
    except (OSError, ValueError, KeyError):
        return FOOTPRINT_UNPLANNED_MB


def parity_profile(wc):
    """The parity profile of a model: its own (config parity.profiles_dir/<model>.json) or, for
    a model without one, default.json; parity.json records which path was used."""
    own = Path(config["parity"]["profiles_dir"]) / f"{wc.model}.json"
    return str(own if own.exists() else own.with_name("default.json"))
