"""`Batcher`: texts of concurrent requests encoded together, by one worker thread that owns the model.

Requests put their texts on one queue and wait for a future. The worker takes
the oldest request, waits up to `max_wait` seconds (from that request's
arrival) for more until `batch_size` texts are queued, then takes requests in
arrival order up to `batch_size` texts (a larger request alone) and encodes
each kind (`"query"`, `"document"`) of them in one `encode` call. While it
encodes, the next batch fills: under load, batches are full without waiting.
A queue holding `max_queue` texts takes no more (`submit` returns None, which
the server answers with 503 at once), so a burst cannot pile up unbounded work.
"""

import collections
import concurrent.futures
import threading
import time

from gtr_keras.errors import OverloadedError, UserError

KINDS = ("query", "document")

_Item = collections.namedtuple("_Item", "texts kind future arrived")


class Batcher:
    """Encodes the texts of concurrent requests in shared batches, in one thread.

    Args:
        encoder: what `gtr_keras.load` returns (`tokenize(texts, kind)`, `encode(texts, kind, batch_size)`).
        batch_size: texts per forward pass, and the most a batch takes of several requests.
        max_wait: seconds the worker waits from a request's arrival for others to share its batch.
        max_queue: the most texts waiting at once; a request beyond it is refused (`submit` gives None).
        timeout: seconds `encode` waits for its result (`OverloadedError` past it).

    Example:
    >>> batcher = Batcher(gtr_keras.load("gtr-small-distilled"), batch_size=32, max_wait=0.002)
    >>> embeddings, tokens = batcher.submit(["lift on a wing"], "document").result(timeout=30)
    >>> embeddings.shape, tokens
    ((1, 768), [6])
    >>> batcher.close()
    """

    def __init__(self, encoder, batch_size=32, max_wait=0.002, max_queue=4096, timeout=60.0):
        if batch_size < 1 or max_queue < 1 or max_wait < 0 or timeout <= 0:
            raise UserError("batch_size and max_queue must be positive, max_wait >= 0 and timeout > 0")
        self.encoder = encoder
        self.batch_size = batch_size
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.timeout = timeout
        self.batches = 0  # forward batches taken, for /health
        self._pending = collections.deque()
        self._queued = 0
        self._closed = False
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="gtr-keras-batcher", daemon=True)
        self._thread.start()

    @property
    def queued(self):
        """Texts waiting for the worker now."""
        return self._queued

    def submit(self, texts, kind):
        """Queues `texts` (a non-empty list of strings) for encoding as `kind`.

        Returns:
            A `concurrent.futures.Future` of `(float32 [len(texts), D] embeddings, token counts)`, or None
            when the queue is full or the batcher is closed (refused at once, nothing queued).
        """
        if kind not in KINDS:
            raise UserError(f"kind must be one of {KINDS}, got {kind!r}")
        future = concurrent.futures.Future()
        with self._condition:
            if self._closed or self._queued + len(texts) > self.max_queue:
                return None
            self._pending.append(_Item(list(texts), kind, future, time.monotonic()))
            self._queued += len(texts)
            self._condition.notify()
        return future

    def encode(self, texts, kind):
        """`submit`, then the embeddings once encoded, waiting at most `timeout` seconds.

        Raises:
            OverloadedError: the queue is full, or no result came within `timeout`.
        """
        future = self.submit(texts, kind)
        if future is None:
            raise OverloadedError(f"the encoder's queue is full ({self.max_queue} texts); retry")
        try:
            return future.result(timeout=self.timeout)[0]
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise OverloadedError(f"no embeddings within {self.timeout:g} s; retry") from None

    def encode_queries(self, texts, batch_size=None):
        """Query embeddings through the shared batches (what `Retriever.search` calls); `batch_size` is
        the batcher's own."""
        return self.encode(list(texts), "query")

    def close(self, timeout=10.0):
        """Stops taking requests, encodes those queued, and ends the worker (waiting up to `timeout` s)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        self._thread.join(timeout)

    def _next_batch(self):
        with self._condition:
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
                batch.append(item)
                size += len(item.texts)
            self._queued -= size
            return batch

    def _run(self):
        while (batch := self._next_batch()) is not None:
            self.batches += 1
            for kind in KINDS:
                items = [item for item in batch if item.kind == kind and item.future.set_running_or_notify_cancel()]
                if items:
                    self._encode(items, kind)

    def _encode(self, items, kind):
        texts = [text for item in items for text in item.texts]
        try:
            counts = [len(ids) for ids in self.encoder.tokenize(texts, kind)]
            embeddings = self.encoder.encode(texts, kind, self.batch_size)
        except Exception as error:  # handed to each request, which answers it; the worker goes on
            for item in items:
                item.future.set_exception(error)
            return
        start = 0
        for item in items:
            end = start + len(item.texts)
            item.future.set_result((embeddings[start:end], counts[start:end]))
            start = end
