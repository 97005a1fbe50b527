"""``bringup serve --model NAME [bringup-run options]``: bringup-run's OpenAI-compatible HTTP server
(``--server``; docs/runtime.md "The server") on what the workflow built for NAME (bringup.run.cli).
A thin launcher: the process becomes bringup-run, which serves the model; Python runs no model."""
from __future__ import annotations

from bringup.run import cli


def cli_main(argv: list[str]) -> int:
    return cli.main(argv, chat=False, serve=True)
