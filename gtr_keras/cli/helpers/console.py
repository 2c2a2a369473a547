"""The command line's console: the library's log records (the `gtr_keras` logger) written as they are, INFO on
stdout and WARNING and above on stderr, while a command runs.

The library never prints: each module logs to `logging.getLogger(__name__)`, under `gtr_keras`. A program
that embeds it routes or silences them with `logging` as it does any library's. Without any handler set up,
Python drops the INFO records (progress, `tune`'s table, a server's address) and writes the warnings and
errors on stderr (`logging.lastResort`); `gtr-keras` shows both as the command's own lines.

Example:
>>> with console_logging():  # doctest: +SKIP
...     gtr_keras.tuning.tuner.tune("indexes/scifact")  # its table on stdout
"""

import contextlib
import logging
import sys

LOGGER = "gtr_keras"


class ConsoleHandler(logging.Handler):
    """Writes a record's message (with its traceback, if any) as it is: on the `sys.stdout` of the moment
    below WARNING, on `sys.stderr` from WARNING up; flushed at once."""

    def emit(self, record):
        try:
            stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # logging's rule: a handler's failure is reported, never raised into the caller
            self.handleError(record)


@contextlib.contextmanager
def console_logging(level=logging.INFO):
    """Writes the `gtr_keras` logger's records of `level` and above on the console (`ConsoleHandler`) for the
    block: the logger's level is lowered to `level` meanwhile (where it is higher), and both are put back after.

    Args:
        level: the least level written (default INFO: progress lines too).

    Example:
    >>> with console_logging():
    ...     logging.getLogger("gtr_keras.tuning.tuner").info("a line")
    a line
    """
    logger = logging.getLogger(LOGGER)
    handler = ConsoleHandler(level)
    previous = logger.level
    if previous == logging.NOTSET or previous > level:
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
