"""Memory model: the footprint of a model run, from the GGUF header alone, against a budget.

``bringup plan memory`` answers "does this model fit this device at context C with S sequences,
and if not, what would make it fit", before any tensor byte is read. One module per job:

- ``spec``: the GGUF header (``bringup.formats.gguf_file``) -> ModelSpec; RunParams.
- ``footprint``: the evaluator, six components (weights, load copies, activations, workspace,
  KV cache, runtime overheads), in bytes.
- ``arena``: the activation arena from ``memory_plan.json`` or planned in-process from the header.
- ``budget``: device profiles and explicit budgets. ``search``: inverse queries (longest context,
  most sequences, smallest budget). ``alternatives``: ranked ways to make a run fit.
- ``calibration``: runtime overheads measured with the native CLI. ``report``: memory_model.json
  and its Markdown page. ``cli``: the command.

The names below are the package's public surface (``from bringup.plan import memory as mm``).
Design, formulas and their sources: docs/memory_model.md.
"""
from bringup.plan.memory.alternatives import REQUANT_CANDIDATES, alternatives, requantized
from bringup.plan.memory.arena import (arena_from_plan, manifest_from_header, nodes_from_ir, plan_in_process,
                                       with_planned_arena)
from bringup.plan.memory.budget import Budget, device_budget, load_devices, parse_bytes
from bringup.plan.memory.calibration import (calibrate, calibration_prompt, overheads_from_calibration, run_native,
                                             validate_calibration)
from bringup.plan.memory.cli import cli_main
from bringup.plan.memory.footprint import (Footprint, activation_estimate, attention_scratch_estimate, evaluate,
                                           kv_cache_bytes, kv_layer_rows, kv_row_bytes, load_copy_bytes)
from bringup.plan.memory.report import build_report, render_markdown, summed_nodes
from bringup.plan.memory.search import (CTX_SEARCH_CAP, SEQ_SEARCH_CAP, check_monotonic, largest_fitting,
                                        longest_context, most_sequences, smallest_budget)
from bringup.plan.memory.spec import (KV_DTYPES, LOAD_COPY_RULES, SCHEMA_VERSION, ArenaPlan, KVLayer, ModelHeader,
                                      ModelSpec, Overhead, RunParams, Weight, hparams_from_header, kv_layers_uniform,
                                      read_model_header, spec_from_header)

__all__ = [
    "REQUANT_CANDIDATES", "alternatives", "requantized",
    "arena_from_plan", "manifest_from_header", "nodes_from_ir", "plan_in_process", "with_planned_arena",
    "Budget", "device_budget", "load_devices", "parse_bytes",
    "calibrate", "calibration_prompt", "overheads_from_calibration", "run_native", "validate_calibration",
    "cli_main",
    "Footprint", "activation_estimate", "attention_scratch_estimate", "evaluate", "kv_cache_bytes",
    "kv_layer_rows", "kv_row_bytes", "load_copy_bytes",
    "build_report", "render_markdown", "summed_nodes",
    "CTX_SEARCH_CAP", "SEQ_SEARCH_CAP", "check_monotonic", "largest_fitting", "longest_context",
    "most_sequences", "smallest_budget",
    "KV_DTYPES", "LOAD_COPY_RULES", "SCHEMA_VERSION", "ArenaPlan", "KVLayer", "ModelHeader", "ModelSpec",
    "Overhead", "RunParams", "Weight", "hparams_from_header", "kv_layers_uniform", "read_model_header",
    "spec_from_header",
]
