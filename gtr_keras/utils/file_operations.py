"""The operations that change files, each a crash point: every write, flush, fsync, rename and remove of
gtr-keras' outputs goes through `perform`, so that a test can count a run's operations and stop it at any one.

`utils/files` calls `perform(kind, path)` just before it does each one
(`"mkdir"`, `"write"`, `"fsync"`, `"rename"`, `"remove"`); a staged output
(`files.atomic_outputs`) is one `"write"`, however many files the code that
writes it (NumPy, Keras, TensorFlow) makes there: nothing outside its staging
path changes meanwhile. Lock files (`utils/locks`) are not outputs and are not
counted.

- `watching(watcher)` shows each operation of the block to `watcher(kind, path)`
  before it is done; a test's watcher may stop the process there (a real kill
  of a subprocess: tests/killed_at.py). Outside such a block `perform` does
  nothing: no setting or environment variable turns a crash point on.
- `counting()` counts the operations of the block (`OperationLog`).
- `stopping_at(n)` makes the `n`-th operation of the block (from 1) raise
  `CrashPoint`, a `BaseException` that `utils/files` lets through without
  cleaning up, and every later one too, as if the process had died there: the
  block leaves on disk exactly what a kill at that point would.
"""

import contextlib
import dataclasses
import os

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

    def __call__(self, kind, path):
        if self.crashed:
            raise CrashPoint(f"stopped before {kind} {path}")
        self.operations.append((kind, path))
        if self.stop_at and self.count >= self.stop_at:
            self.crashed = True
            raise CrashPoint(f"stopped at operation {self.count}: {kind} {path}")


_WATCHERS = []


def perform(kind, path):
    """Notes that operation `kind` (one of `KINDS`) on `path` is about to be done: shows it to the watchers of
    the moment (`watching`; none outside a test), which may stop the run there (`CrashPoint`)."""
    for watcher in list(_WATCHERS):
        watcher(kind, os.fspath(path))


def crashed():
    """True once a `stopping_at` block has stopped: cleanup code skips its work, as a dead process would."""
    return any(isinstance(watcher, OperationLog) and watcher.crashed for watcher in _WATCHERS)


@contextlib.contextmanager
def watching(watcher):
    """Shows each file operation of the block to `watcher(kind, path)` just before it is done; yields `watcher`.

    Args:
        watcher: a callable of an operation's kind (one of `KINDS`) and path; what it raises stops the
            operation (a test's watcher may also kill the process there).

    Example:
    >>> seen = []
    >>> with watching(lambda kind, path: seen.append(kind)):
    ...     build_index(encoder, corpus, "runs/index")  # doctest: +SKIP
    """
    _WATCHERS.append(watcher)
    try:
        yield watcher
    finally:
        _WATCHERS.remove(watcher)


@contextlib.contextmanager
def counting():
    """An `OperationLog` of the block's operations.

    Example:
    >>> with counting() as log:
    ...     build_index(encoder, corpus, "runs/index")
    >>> log.count
    23
    """
    with watching(OperationLog()) as log:
        yield log


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
    with watching(OperationLog(stop_at=n)) as log:
        try:
            yield log
        except CrashPoint:
            if not log.crashed:
                raise
