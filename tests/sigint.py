"""Child processes that a test interrupts with SIGINT get the disposition a terminal gives them.

A process started from a shell's background job (``cmd &``, as CI runners and ``nohup`` wrappers
may do) inherits SIGINT *ignored*, and Python then never installs its KeyboardInterrupt handler:
the test's Ctrl-C would be lost and the test would measure the launcher, not bringup. Pass
``preexec_fn=terminal_sigint`` to every Popen a test sends SIGINT to.
"""
from __future__ import annotations

import signal


def terminal_sigint() -> None:
    """Reset SIGINT to its default in the child, before exec (a Popen ``preexec_fn``)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
