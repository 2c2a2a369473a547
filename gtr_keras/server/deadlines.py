"""`Deadlines`: every wait of a request (its body, its answer) bounded by its own limit and by the server's
stop.

`bounded(seconds)` ends a wait with `TimeoutError` after `seconds`. `stop(grace)`
brings every wait in flight, and each one begun after, to end `grace` seconds
from then at the latest, and runs a last step at that moment (the server
abandons its batches there): the requests in flight are answered when the grace
period ends (503), never cancelled unanswered, and none outlives it.
"""

import asyncio
import contextlib

# The longest any wait of the server may be given (seconds: a day), far within `threading.TIMEOUT_MAX`, which
# a thread's wait of more overflows: `--request-timeout`, `--poll-interval`, `--max-wait-ms` and the others.
LONGEST_WAIT = 86_400.0


class Deadlines:
    """The deadlines of a server's waits (one per server, used in its event loop).

    Example:
    >>> deadlines = Deadlines()
    >>> async with deadlines.bounded(30.0):  # doctest: +SKIP
    ...     body = await request.body()
    """

    def __init__(self):
        self.stop_at = None  # the event loop's time at which the waits in flight end, once stopping
        self._waits = set()

    @contextlib.asynccontextmanager
    async def bounded(self, seconds):
        """An `async with` block ended by `TimeoutError` after `seconds`, or at the stop's end if sooner."""
        loop = asyncio.get_running_loop()
        when = loop.time() + seconds
        if self.stop_at is not None:
            when = min(when, self.stop_at)
        async with asyncio.timeout_at(when) as timeout:
            self._waits.add(timeout)
            try:
                yield
            finally:
                self._waits.discard(timeout)

    def stopped(self):
        """True once the stop's end has come: a wait that ended by `TimeoutError` now was ended by the stop."""
        return self.stop_at is not None and asyncio.get_running_loop().time() >= self.stop_at

    def stop(self, grace, then=None):
        """Brings every wait to end `grace` seconds from now at the latest, and calls `then()` at that moment
        (a second stop may only bring the end closer)."""
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + grace
        if self.stop_at is not None and self.stop_at <= stop_at:
            return
        self.stop_at = stop_at
        for timeout in list(self._waits):
            if timeout.when() is None or timeout.when() > stop_at:
                timeout.reschedule(stop_at)
        if then is not None:
            loop.call_at(stop_at, then)
