"""`Batcher`: the texts of concurrent requests run together in batches, by one worker thread.

Requests put their texts on one queue, each with a key, and wait for a future.
The worker takes the oldest request, waits up to `max_wait` seconds (from that
request's arrival) for more until `batch_size` texts are queued, then takes
requests in arrival order up to `batch_size` texts (a larger request alone)
and makes one `run(key, texts, stop)` call for each key among them. While it
runs, the next batch fills: under load, batches are full without waiting. A
queue holding `max_queue` texts takes no more (`submit` returns None, which the
server answers with 503 at once), so a burst cannot pile up unbounded work.

Each request is judged alone: a call that fails for a batch of several requests
is made again for each of them alone, so that only the request whose texts
fail gets the error (an `OverloadedError`, which no text causes, goes to all).
`abandon` ends the work at once at a stop: every request waiting or running
gets `Stopping`, and `run` sees `stop` set (`encoding` then ends between two
forward passes).

The server has two: one encodes (the model's only thread: key `"query"` or
`"document"`, `encoding`), one searches (key: the searcher, `k` and the
retriever), so that concurrent searches cost one matrix product, not one each.
"""

import collections
import concurrent.futures
import threading
import time

import numpy as np

from gtr_keras.errors import OverloadedError, UserError

KINDS = ("query", "document")

_Item = collections.namedtuple("_Item", "texts key future arrived")


class Stopping(OverloadedError):
    """A request the server did not finish because it is stopping (`Batcher.abandon`)."""


def encoding(encoder, batch_size=32):
    """The `run` of a `Batcher` that encodes with `encoder` (what `gtr_keras.load` returns), `batch_size`
    texts per forward pass: key `"query"` or `"document"`, `(float32 [n, D] embeddings, token counts)` for
    `n` texts. The counts are the encoder's tokenizer's (EOS included, truncated to the kind's budget); an
    export that tokenizes inside its graph (SavedModel, LiteRT) has none to ask, and counts 0.

    The texts are encoded in the batches `encoder.encode` makes (sorted by length, so equal embeddings),
    one call each, and `stop` (a `threading.Event`) is looked at between two: once set, `Stopping`.

    Example:
    >>> run = encoding(gtr_keras.load("gtr-small-distilled"))
    >>> embeddings, counts = run("document", ["lift on a wing"], threading.Event())
    """

    def run(kind, texts, stop):
        if kind not in KINDS:
            raise UserError(f"kind must be one of {KINDS}, got {kind!r}")
        items = encoder.prepare(texts, kind)  # token ids, where the encoder takes them
        counts = [len(ids) for ids in items] if hasattr(encoder, "tokenize") else [0] * len(texts)
        order = np.argsort([len(item) for item in items], kind="stable")
        embeddings = np.zeros((len(texts), encoder.embedding_dim), np.float32)
        for start in range(0, len(texts), batch_size):
            if stop.is_set():
                raise Stopping("the server is stopping: the encoding was abandoned")
            rows = order[start : start + batch_size]
            embeddings[rows] = encoder.encode([texts[row] for row in rows], kind, batch_size)
        return embeddings, counts

    return run


class _Queries:
    """An encoder of queries for `Retriever.search` whose texts go through an encoding `Batcher`."""

    def __init__(self, batcher):
        self.batcher = batcher

    def encode_queries(self, texts, batch_size=None):
        return self.batcher.wait(list(texts), "query")[0]


def query_encoder(batcher):
    """What a `Retriever` takes as its encoder to encode its queries through `batcher` (`encoding`'s), sharing
    its batches with other requests; `encode_queries` waits at most the batcher's timeout.

    Example:
    >>> retriever = Retriever(query_encoder(batcher), index, corpus)
    """
    return _Queries(batcher)


def _settle(future, result=None, error=None):
    """Gives `future` its result or error unless it has one already (an abandoned request's `Stopping`)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


class Batcher:
    """Runs the texts of concurrent requests in shared batches, in one thread.

    Args:
        run: `run(key, texts, stop)` gives a tuple of sequences (arrays, lists) of `len(texts)` each; a
            request gets its rows of each (`encoding` makes the encoder's). `stop` is a `threading.Event`,
            set when the batcher is abandoned: a long `run` may look at it and end (raising `Stopping`).
        batch_size: the most texts a batch takes of several requests (and, for `encoding`, per forward pass).
        max_wait: seconds the worker waits from a request's arrival for others to share its batch.
        max_queue: the most texts waiting at once; a request beyond it is refused (`submit` gives None).
        timeout: seconds `wait` waits for its result (`OverloadedError` past it).
        name: the worker thread's name.

    Example:
    >>> batcher = Batcher(encoding(gtr_keras.load("gtr-small-distilled"), 32), batch_size=32, max_wait=0.0)
    >>> embeddings, tokens = batcher.submit(["lift on a wing"], "document").result(timeout=30)
    >>> embeddings.shape, tokens
    ((1, 768), [5])
    >>> batcher.close()
    """

    def __init__(self, run, batch_size=32, max_wait=0.0, max_queue=4096, timeout=60.0, name="gtr-keras-batcher"):
        if batch_size < 1 or max_queue < 1 or max_wait < 0 or timeout <= 0:
            raise UserError("batch_size and max_queue must be positive, max_wait >= 0 and timeout > 0")
        self.run = run
        self.batch_size = batch_size
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.timeout = timeout
        self.batches = 0  # forward batches taken, for /health
        self._pending = collections.deque()
        self._running = []
        self._queued = 0
        self._closed = False
        self._stop = threading.Event()
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    @property
    def queued(self):
        """Texts waiting for the worker now."""
        return self._queued

    @property
    def running(self):
        """Texts of the batch the worker runs now (0: it waits for requests)."""
        return sum(len(item.texts) for item in self._running)

    def submit(self, texts, key):
        """Queues `texts` (a non-empty list of strings) to run with `key` (hashable).

        Returns:
            A `concurrent.futures.Future` of the request's rows of `run(key, texts of the batch)`, or None
            when the queue is full or the batcher is closed (refused at once, nothing queued).
        """
        future = concurrent.futures.Future()
        with self._condition:
            if self._closed or self._queued + len(texts) > self.max_queue:
                return None
            self._pending.append(_Item(list(texts), key, future, time.monotonic()))
            self._queued += len(texts)
            self._condition.notify()
        return future

    def wait(self, texts, key):
        """`submit`, then its result, waiting at most `timeout` seconds (for a caller in a thread).

        Raises:
            OverloadedError: the queue is full, or no result came within `timeout`.
            Stopping: the batcher was abandoned.
        """
        future = self.submit(texts, key)
        if future is None:
            if self._stop.is_set():
                raise Stopping("the server is stopping")
            raise OverloadedError(f"the queue is full ({self.max_queue:,} texts); retry")
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise OverloadedError(f"no answer within {self.timeout:g} s; retry") from None

    def close(self, timeout=10.0):
        """Stops taking requests, runs those queued, and ends the worker (waiting up to `timeout` s; 0: no
        wait, the worker ends by itself)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        self._thread.join(timeout)

    def abandon(self):
        """Stops taking requests and gives every request queued or running `Stopping` at once; the batch
        running ends at its next look at `stop` (`encoding`: before its next forward pass)."""
        with self._condition:
            self._closed = True
            self._stop.set()
            items = [*self._pending, *self._running]
            self._pending.clear()
            self._queued = 0
            self._condition.notify_all()
        for item in items:
            _settle(item.future, error=Stopping("the server is stopping: this request was not finished"))

    def join(self, timeout):
        """Waits up to `timeout` seconds for the worker to end (after `close` or `abandon`); True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _next_batch(self):
        with self._condition:
            self._running = []
            while not self._pending and not self._closed:
                self._condition.wait()
            if not self._pending:
                return None
            deadline = self._pending[0].arrived + self.max_wait
            while self._queued < self.batch_size and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._condition.wait(remaining)
            batch, size = [], 0
            while self._pending and (not batch or size + len(self._pending[0].texts) <= self.batch_size):
                item = self._pending.popleft()
                if item.future.set_running_or_notify_cancel():  # not cancelled (its client gave up)
                    batch.append(item)
                size += len(item.texts)
            self._queued -= size
            self._running = batch
            return batch

    def _work(self):
        while (batch := self._next_batch()) is not None:
            if not batch:  # every request of it was cancelled
                continue
            self.batches += 1
            groups = {}
            for item in batch:
                groups.setdefault(item.key, []).append(item)
            for key, items in groups.items():
                self._run_group(key, items)

    def _run_group(self, key, items):
        """Runs `items` (requests of one key) as one call; if it fails for several, each alone, so that the
        error goes to the requests whose texts cause it and the others get their answers."""
        if self._stop.is_set():
            return  # abandoned: each has its `Stopping`
        try:
            result = self.run(key, [text for item in items for text in item.texts], self._stop)
        except OverloadedError as error:  # the server's state (a full queue, a stop), not a text's fault
            for item in items:
                _settle(item.future, error=error)
            return
        except Exception as error:  # handed to the request, which answers it; the worker goes on
            if len(items) == 1:
                _settle(items[0].future, error=error)
                return
            for item in items:
                self._run_group(key, [item])
            return
        start = 0
        for item in items:
            end = start + len(item.texts)
            _settle(item.future, tuple(part[start:end] for part in result))
            start = end
