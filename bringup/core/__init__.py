"""Shared code of every stage: errors and exit codes, the CLI dispatcher, project paths, JSON I/O
(canonical JSON, schema validation, atomic writes), hashing and the Snakemake glue."""
