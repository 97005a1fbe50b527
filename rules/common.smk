# Shared helpers for the rules: registry look-ups (params, so a registry edit reruns fetch).
import glob

import yaml


def registry_entry(model):
    with open(config["registry"]) as fh:
        reg = yaml.safe_load(fh)
    if model not in reg["models"]:
        raise ValueError(f"unknown model {model!r}; registry has {sorted(reg['models'])}")
    return reg["models"][model]
