"""Errors the user can fix, and errors to retry later. The `gtr-keras` command prints any `UserError` or
`RetryLaterError` as one line and exits with status 2; other exceptions are bugs and keep their traceback.

A `UserError` (a `ValueError`) says the input is wrong: the same call fails again until it changes. A
`RetryLaterError` is none of them: the input is fine, and the same call may succeed later (`BusyError`:
another run holds the output; `OverloadedError`: a server's queue is full).

The module imports nothing heavy, so every other module (and the command line
before it imports TensorFlow) can use it.
"""

from collections.abc import Callable
from typing import NoReturn

# `UserError`, `DataError`, `CheckpointError`, `MismatchError` and `RetryLaterError` are `gtr_keras`' names.
__all__ = ["DataWarning", "TrainingError", "BusyError", "OverloadedError", "run_script"]


class UserError(ValueError):
    """Bad input, a bad setting or a mismatch; the message names the file, line and field (or flag)."""


class DataError(UserError):
    """Malformed input data; the message names the file, line and field."""


class DataWarning(UserWarning):
    """Input that was read, but not verbatim (for example invalid UTF-8)."""


class CheckpointError(UserError):
    """A model directory or checkpoint that cannot be loaded as it is."""


class MismatchError(UserError):
    """Work to be resumed or combined was made from other inputs or settings; the message says
    what changed and how to start over."""


class TrainingError(UserError):
    """Training could not go on (NaN loss, data ran out); the message says what to do."""


class RetryLaterError(Exception):
    """The work cannot be done now but may be later, unchanged (not a `UserError`: the input is fine)."""


class BusyError(RetryLaterError):
    """An output is in use by another run; the message names that run."""


class OverloadedError(RetryLaterError):
    """A server's work queue is full, or its answer did not come in time; the message says to retry."""


def run_script(main: Callable[[], int | None]) -> NoReturn:
    """Runs a recipe's or benchmark's `main()` as `gtr-keras` runs a command: a `UserError`, `RetryLaterError` or
    `OSError` ends the script with exit status 2 and one line on stderr, `SCRIPT: error: MESSAGE`;
    any other exception is a bug and keeps its traceback. `main`'s return value is the exit status.

    Args:
        main: a function of no arguments (it parses `sys.argv` itself).

    Example:
    >>> if __name__ == "__main__":  # doctest: +SKIP
    ...     run_script(main)
    """
    import os
    import sys

    try:
        status = main()
    except (UserError, RetryLaterError, OSError) as error:
        message = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {message}\n")
        sys.exit(2)
    sys.exit(status)
