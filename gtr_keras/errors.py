"""Errors the user can fix. The `gtr-keras` command prints any `UserError` as one
line and exits with status 2; other exceptions are bugs and keep their traceback.

The module imports nothing heavy, so every other module (and the command line
before it imports TensorFlow) can use it.
"""


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


class BusyError(UserError):
    """An output is in use by another run; the message names that run."""
