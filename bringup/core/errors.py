"""The one exception type the CLI turns into a clear one-line error and a non-zero exit."""


class BringupError(Exception):
    """A user-facing error: bad input, hash mismatch, unsupported format, failed gate.

    ``exit_code`` follows bringup's convention: 2 bad input / usage, 3 integrity (hash, corrupt
    file), 4 unsupported (architecture, quant type, no provider), 5 resource unavailable
    (network, missing dependency), 6 gate failed (parity, certification, budget), 7 incomplete
    (a result is missing).
    """

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class IntegrityError(BringupError):
    exit_code = 3


class UnsupportedError(BringupError):
    exit_code = 4


class UnavailableError(BringupError):
    exit_code = 5


class GateError(BringupError):
    exit_code = 6


class IncompleteError(BringupError):
    """A result that should exist does not (a model's pipeline crashed: no certification)."""
    exit_code = 7
