"""The operations that change files, each a crash point: every write, flush, fsync, rename and remove of
gtr-keras' outputs goes through `perform`, so that a test can count a run's operations and stop it at any one.

`utils/files` calls `perform(kind, path)` just before it does each one
(`"mkdir"`, `"write"`, `"fsync"`, `"rename"`, `"remove"`); a staged output
(`files.atomic_outputs`) is one `"write"`, however many files the code that
writes it (NumPy, Keras, TensorFlow) makes there: nothing outside its staging
path changes meanwhile. Lock files (`utils/locks`) are not outputs and are not
counted.

- `counting()` counts the operations of the block (`OperationLog`).
- `stopping_at(n)` makes the `n`-th operation of the block (from 1) raise
  `CrashPoint`, a `BaseException` that `utils/files` lets through without
  cleaning up, and every later one too, as if the process had died there: the
  block leaves on disk exactly what a kill at that point would.
- The environment variable `GTR_KERAS_CRASH_AT=N` kills the process
  (SIGKILL) at its `N`-th operation, for tests of real kills in a subprocess.
"""

import contextlib
import dataclasses
import os
import signal

CRASH_AT_VARIABLE = "GTR_KERAS_CRASH_AT"
KINDS = ("mkdir", "write", "fsync", "rename", "remove")


class CrashPoint(BaseException):  # noqa: N818  (a stop, not an error)
    """Raised at the operation `stopping_at` stops at, and at every one after it in the block."""


@dataclasses.dataclass
class OperationLog:
    """The operations performed in a `counting` block, as `(kind, path)` pairs in order."""

    operations: list = dataclasses.field(default_factory=list)
    stop_at: int = 0
    crashed: bool = False

    @property
    def count(self):
        return len(self.operations)


_LOGS = []


def perform(kind, path):
    """Notes that operation `kind` (one of `KINDS`) on `path` is about to be done; raises `CrashPoint` (or
    kills the process, under `GTR_KERAS_CRASH_AT`) when it is the one to stop at."""
    for log in _LOGS:
        if log.crashed:
            raise CrashPoint(f"stopped before {kind} {path}")
        log.operations.append((kind, os.fspath(path)))
        if log.stop_at and log.count >= log.stop_at:
            log.crashed = True
            raise CrashPoint(f"stopped at operation {log.count}: {kind} {path}")
    crash_at = os.environ.get(CRASH_AT_VARIABLE)
    if crash_at:
        _ENVIRONMENT_COUNT[0] += 1
        if _ENVIRONMENT_COUNT[0] >= int(crash_at):
            os.kill(os.getpid(), signal.SIGKILL)


_ENVIRONMENT_COUNT = [0]


def crashed():
    """True once a `stopping_at` block has stopped: cleanup code skips its work, as a dead process would."""
    return any(log.crashed for log in _LOGS)


@contextlib.contextmanager
def counting():
    """An `OperationLog` of the block's operations.

    Example:
    >>> with counting() as log:
    ...     build_index(encoder, corpus, "runs/index")
    >>> log.count
    23
    """
    log = OperationLog()
    _LOGS.append(log)
    try:
        yield log
    finally:
        _LOGS.remove(log)


@contextlib.contextmanager
def stopping_at(n):
    """Stops the block at its `n`-th operation (`CrashPoint`, caught here): yields its `OperationLog`,
    whose `crashed` says whether the block got that far.

    Example:
    >>> with stopping_at(5) as log:
    ...     build_index(encoder, corpus, "runs/index")
    >>> log.crashed
    True
    """
    log = OperationLog(stop_at=n)
    _LOGS.append(log)
    try:
        yield log
    except CrashPoint:
        if not log.crashed:
            raise
    finally:
        _LOGS.remove(log)
