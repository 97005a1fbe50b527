"""``bringup chat --model NAME [bringup-run options]``: bringup-run's chat loop (``-i``) on what
the workflow built for NAME (bringup.run.cli)."""
from __future__ import annotations

from bringup.run import cli


def cli_main(argv: list[str]) -> int:
    return cli.main(argv, chat=True)
