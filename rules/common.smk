# Shared helpers for the rules: registry look-ups (params, so a registry edit reruns fetch),
# the models of the regression, and the memory each job declares (resources: mem_mb).
import glob
import json
from pathlib import Path
from types import SimpleNamespace

import yaml

from bringup.core import codedeps
from bringup.core.cli import main as bringup_main
from bringup.core.errors import BringupError
from bringup.fetch import registry
from bringup.parity import prompt_sets
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
        REGISTRY, config.get("regression", {}).get("models"), config.get("regression", {}).get("large"))
except BringupError as e:
    raise WorkflowError(str(e)) from None


def registry_entry(model):
    with open(config["registry"]) as fh:
        reg = yaml.safe_load(fh)
    if model not in reg["models"]:
        raise ValueError(f"unknown model {model!r}; registry has {sorted(reg['models'])}")
    return reg["models"][model]


# Memory (MB) a job may use, for `--resources mem_mb=N` and the Slurm profile's --mem
# (docs/regression.md, docs/slurm.md). Jobs that run the model (ours and llama.cpp's) scale with
# its planned footprint, the memory model's total_bytes (weights mapped + KV cache + arena), read
# from the memory model they declare as an input. Snakemake evaluates `resources` when the job is
# created; while the memory model does not exist yet, reading it raises FileNotFoundError on an
# input file, which Snakemake records as "to be determined" and evaluates again once the job is
# ready, so every request is the model's, never a guess.
def footprint_mb(memory_model):
    """The planned footprint in MB (``total_bytes`` of the memory model JSON at ``memory_model``,
    rounded up). Raises FileNotFoundError while it is not written yet (see above)."""
    data = json.loads(Path(str(memory_model)).read_text())
    return -(-data["total_bytes"] // 2**20)


# Parity also holds logits over the whole vocabulary: per prompt, ours and llama.cpp's twice in
# fp32 and the float64 reference's over the prompt and its greedy continuation (about 830 positions
# for the default prompt set's longest prompt, > 512 tokens so gemma3's window is exercised), with
# the reference's own float64 temporaries. Measured peaks (Snakemake benchmarks, 2026-12-01): gemma3
# (262144 entries) 9.7 GB, smollm2 (49152) 4.1 GB; so 24 KiB per vocabulary entry (about 1000
# positions x 8 bytes x 3) on top of the programs and 4 GB of Python and float64 weights. Since
# the reference streams its weights (one block in float64 at a time: 0.5 GB for a 1B model;
# bringup.plan.memory.reference) the 4 GB holds Python, the two llama.cpp oracles and that block;
# not yet lowered: no parity run has measured the new peak of a whole parity job.
# A generated model (synth://) is made in memory (bringup.fetch.synth.memory_bytes, an upper bound
# from the shape): its vocabulary is not read before the job, so the largest of llama.cpp's
# vocabularies (gemma's 262144 tokens) stands in for it. A download streams (measured < 100 MB).
SYNTH_VOCAB_BOUND = 262144


def fetch_mem_mb(model):
    """The fetch job's memory request in MB: 512, or for a synth:// entry what generating it may hold."""
    uri = registry_entry(model).get("uri") or ""
    if not uri.startswith("synth://"):
        return 512
    from bringup.fetch import synth
    return 512 + -(-synth.memory_bytes(synth.parse(uri), SYNTH_VOCAB_BOUND) // 2**20)


def parity_mem_mb(memory_model):
    """Parity's memory request in MB: twice the planned footprint (ours + llama.cpp), 24 KiB per
    vocabulary entry (``model.hparams.n_vocab`` of the memory model) and 4096. Raises
    FileNotFoundError while the memory model is not written yet (see footprint_mb)."""
    n_vocab = json.loads(Path(str(memory_model)).read_text())["model"]["hparams"]["n_vocab"]
    return 2 * footprint_mb(memory_model) + -(-n_vocab * 24 // 1024) + 4096


def parity_prompts(wc):
    """The prompt set of a model's parity: its own profile's ``prompt_set`` (a profile may size the
    set for its model, e.g. config/prompts/large.json for a billion-parameter one), or config
    parity.prompts for a model measured with default.json."""
    path = Path(parity_profile(wc))
    if path.name == "default.json":
        return config["parity"]["prompts"]
    return json.loads(path.read_text())["prompt_set"]


def parity_profile(wc):
    """The parity profile of a model: its own (config parity.profiles_dir/<model>.json) or, for
    a model without one, default.json; parity.json records which path was used."""
    own = Path(config["parity"]["profiles_dir"]) / f"{wc.model}.json"
    return str(own if own.exists() else own.with_name("default.json"))


def parity_prompts(wc):
    """The prompt set of a model's parity run (bringup.parity.prompt_sets): config parity.prompts
    full (the model's profile's prompt_set, sized per model), quick (the profile's quick block)
    or a path every model uses. Raises BringupError for quick with a profile without one."""
    profile = json.loads(Path(parity_profile(wc)).read_text())
    return prompt_sets.choose(profile, config["parity"]["prompts"])[0]


# config parity.prompts is checked while the workflow is parsed, for every model it may run: one
# line naming the profile (e.g. quick with a profile that has no quick block), not a job's traceback.
try:
    for _model in sorted({MODEL, *REGRESSION_MODELS}):
        parity_prompts(SimpleNamespace(model=_model))
except (BringupError, OSError, ValueError, KeyError) as e:
    raise WorkflowError(f"config parity.prompts={config['parity']['prompts']!r}: {e}") from None


def parity_prompt_size():
    """bringup parity --prompt-set: quick when config parity.prompts says so, else full."""
    return "quick" if config["parity"]["prompts"] == "quick" else "full"


# Code is an input: a job depends on the bringup modules its commands import (transitively, read
# statically with ast), their templates, the schemas they validate against and the data folders
# they read (bringup.core.codedeps), so editing bringup/ir/lower.py reruns ir and what follows it,
# and editing bringup/bench/ reruns no certification. Paths are this workflow's own (basedir).
# Not declared for fetch_model (its GGUF is verified against the registry's sha256 pin: no code can
# change its bytes, and a rerun would download it again) nor bench_llama_native (a shared build
# under resources/, keyed by llama.cpp's version and the host ISA).
def code_inputs(stage):
    """The root-relative code files of ``stage`` (a key of bringup.core.codedeps.STAGES)."""
    return codedeps.code_files(stage, workflow.basedir)
