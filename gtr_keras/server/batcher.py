"""`Batcher`: the texts of concurrent requests run together in batches, by one worker thread.

Requests put their texts on one queue, each with a key, and wait for a future.
The worker takes the oldest request, waits up to `max_wait` seconds (from that
request's arrival) for more until `batch_size` texts are queued, then takes
requests in arrival order up to `batch_size` texts (a larger request alone)
and makes one `run(key, texts, stop)` call for each key among them. While it
runs, the next batch fills: under load, batches are full without waiting. A
queue holding `max_queue` texts takes no more (`submit` returns None, which the
server answers with 503 at once), so a burst cannot pile up unbounded work.

With a token budget (`max_batch_tokens`, `--max-batch-tokens`), a batch is
bounded by tokens instead: the worker measures the queued requests' texts
(`lengths`, the tokenizer's counts; each text once) and takes requests in
arrival order while their tokens stay within the budget (a larger request
alone), and `encoding` cuts a batch into forward passes of at most that many
padded tokens, texts of like lengths together (`forward_passes`).

Each request is judged alone: a call that fails for a batch of several requests
is made again for each of them alone, so that only the request whose texts
fail gets the error (an `OverloadedError`, which no text causes, goes to all).
`abandon` ends the work at once at a stop: every request waiting or running
gets `Stopping`, and `run` sees `stop` set (`encoding` then ends between two
forward passes).

The server has two: one encodes (the model's only thread: key `"query"` or
`"document"`, `encoding`), one searches (key: the searcher, `k` and the
retriever), so that concurrent searches cost one matrix product, not one each.
Each batch runs in the context of its requests (`gateway.stages`): its queueing,
tokenizing, model call and search are child spans of theirs, and observations
of the batcher's `observer` (the application's metrics), where there are.
"""

import collections
import concurrent.futures
import threading
import time

import numpy as np

from gtr_keras.errors import OverloadedError, UserError
from gtr_keras.server.gateway import stages

KINDS = ("query", "document")
LIKE_LENGTHS = 16  # tokens: a forward pass of a token budget pads a text to at most twice its length, or to this


class _Item:
    """A request in a `Batcher`'s queue: its texts, key and future, when it came (monotonic, and ns since the
    epoch for its spans), its spans' parents, and its texts' token counts once measured."""

    __slots__ = ("texts", "key", "future", "arrived", "arrived_ns", "parents", "lengths")

    def __init__(self, texts, key, future):
        self.texts, self.key, self.future = texts, key, future
        self.arrived, self.arrived_ns = time.monotonic(), time.time_ns()
        self.parents = stages.parents()
        self.lengths = None


class Stopping(OverloadedError):
    """A request the server did not finish because it is stopping (`Batcher.abandon`)."""


def forward_passes(lengths, batch_size, max_batch_tokens=None):
    """The forward passes of texts of token counts `lengths`: lists of their indices, shortest texts first.

    Without a budget, `batch_size` texts a pass (the texts sorted by length). With `max_batch_tokens`, a pass
    also holds at most that many padded tokens (its texts times its longest), and only texts of like
    lengths: none more than twice the shortest (or `LIKE_LENGTHS` tokens), so that a short text is never
    padded to a long one.

    Example:
    >>> forward_passes([5, 300, 7, 280], batch_size=32, max_batch_tokens=600)
    [[0, 2], [3, 1]]
    """
    order = [int(row) for row in np.argsort(lengths, kind="stable")]
    if max_batch_tokens is None:
        return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    passes, current = [], []
    for row in order:
        length = max(1, lengths[row])
        if current and (
            len(current) == batch_size
            or (len(current) + 1) * length > max_batch_tokens
            or length > max(2 * lengths[current[0]], LIKE_LENGTHS)
        ):
            passes.append(current)
            current = []
        current.append(row)
    return passes + [current] if current else passes


def encoding(encoder, batch_size=32, max_batch_tokens=None):
    """The `run` of a `Batcher` that encodes with `encoder` (what `gtr_keras.load` returns): key `"query"` or
    `"document"`, `(float32 [n, D] embeddings, token counts)` for `n` texts. The counts are the encoder's
    tokenizer's (EOS included, truncated to the kind's budget); an export that tokenizes inside its graph
    (SavedModel, LiteRT) has none to ask, and counts 0.

    The texts are tokenized (`encoder.prepare`, the `tokenize` stage: the counts and the lengths the passes
    are planned by) and encoded in the forward passes of `forward_passes`, one `encoder.encode` call each
    (`batch_size` texts, sorted by length, so the embeddings `encoder.encode` gives of all; with
    `max_batch_tokens`, at most that many padded tokens each), the `model` stage; `stop` (a
    `threading.Event`) is looked at between two passes: once set, `Stopping`.

    Example:
    >>> run = encoding(gtr_keras.load("gtr-small-distilled"))
    >>> embeddings, counts = run("document", ["lift on a wing"], threading.Event())
    """

    def run(kind, texts, stop):
        if kind not in KINDS:
            raise UserError(f"kind must be one of {KINDS}, got {kind!r}")
        with stages.stage("tokenize", texts=len(texts)):
            items = encoder.prepare(texts, kind)  # token ids, where the encoder takes them
        counts = [len(ids) for ids in items] if hasattr(encoder, "tokenize") else [0] * len(texts)
        passes = forward_passes([len(item) for item in items], batch_size, max_batch_tokens)
        embeddings = np.zeros((len(texts), encoder.embedding_dim), np.float32)
        with stages.stage("model", texts=len(texts), passes=len(passes)):
            for rows in passes:
                if stop.is_set():
                    raise Stopping("the server is stopping: the encoding was abandoned")
                embeddings[rows] = encoder.encode([texts[row] for row in rows], kind, batch_size)
                stages.record("forward_pass", padded_tokens=len(rows) * max(len(items[row]) for row in rows))
        stages.record("embedded", kind=kind, texts=len(texts), tokens=sum(counts))
        return embeddings, counts

    return run


def token_lengths(encoder):
    """The `lengths` of a `Batcher` with a token budget: `lengths(kind, texts)`, each text's token count
    (the tokenizer's, EOS included, truncated to the kind's budget).

    Raises:
        UserError: the encoder tokenizes inside its graph (a SavedModel or LiteRT export): no counts to ask.
    """
    if not hasattr(encoder, "tokenize"):
        raise UserError("--max-batch-tokens: this export tokenizes inside its graph, so its token counts are unknown")

    def lengths(kind, texts):
        return [len(ids) for ids in encoder.tokenize(texts, kind)]

    return lengths


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
        name: the worker thread's name (less its `gtr-keras-` prefix: the batcher's `label` in the metrics).
        max_batch_tokens: a batch's budget of tokens instead of `batch_size` texts (None: texts), measured
            by `lengths(key, texts)` (`token_lengths`).

    The batcher's `observer` (None, or the application's `Metrics`) observes its batches and stages.

    Example:
    >>> batcher = Batcher(encoding(gtr_keras.load("gtr-small-distilled"), 32), batch_size=32, max_wait=0.0)
    >>> embeddings, tokens = batcher.submit(["lift on a wing"], "document").result(timeout=30)
    >>> embeddings.shape, tokens
    ((1, 768), [5])
    >>> batcher.close()
    """

    def __init__(
        self,
        run,
        batch_size=32,
        max_wait=0.0,
        max_queue=4096,
        timeout=60.0,
        name="gtr-keras-batcher",
        max_batch_tokens=None,
        lengths=None,
    ):
        if batch_size < 1 or max_queue < 1 or max_wait < 0 or timeout <= 0:
            raise UserError("batch_size and max_queue must be positive, max_wait >= 0 and timeout > 0")
        if max_batch_tokens is not None and (max_batch_tokens < 1 or lengths is None):
            raise UserError("max_batch_tokens must be positive, with the lengths that measure the texts")
        self.run = run
        self.batch_size = batch_size
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.timeout = timeout
        self.max_batch_tokens = max_batch_tokens
        self.lengths = lengths
        self.label = name.removeprefix("gtr-keras-")
        self.observer = None
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
        """Queues `texts` (a non-empty list of strings) to run with `key` (hashable), in the context of the
        request that submits them (`gateway.stages`: its spans' parents).

        Returns:
            A `concurrent.futures.Future` of the request's rows of `run(key, texts of the batch)`, or None
            when the queue is full or the batcher is closed (refused at once, nothing queued).
        """
        future = concurrent.futures.Future()
        with self._condition:
            if self._closed or self._queued + len(texts) > self.max_queue:
                return None
            self._pending.append(_Item(list(texts), key, future))
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

    def _wait_for_requests(self):
        """Waits (holding the condition) for a request, then up to `max_wait` from its arrival for company;
        False once closed with none pending."""
        self._running = []
        while not self._pending and not self._closed:
            self._condition.wait()
        if not self._pending:
            return False
        deadline = self._pending[0].arrived + self.max_wait
        while self._queued < self.batch_size and not self._closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._condition.wait(remaining)
        return True

    def _take(self, cost, budget):
        """Takes (holding the condition) requests from the queue's head while their `cost`s stay within
        `budget`, the first whatever its cost, and none whose cost is None (not yet measured); returns them,
        less those settled already (a client gone, a failed measure)."""
        batch, spent, taken = [], 0, 0
        while self._pending:
            item = self._pending[0]
            if item.future.done():
                self._queued -= len(self._pending.popleft().texts)
                continue
            price = cost(item)
            if price is None or (taken and spent + price > budget):
                break
            self._queued -= len(self._pending.popleft().texts)
            spent, taken = spent + price, taken + 1
            if item.future.set_running_or_notify_cancel():
                batch.append(item)
        self._running = batch
        return batch

    def _next_batch(self):
        if self.max_batch_tokens is not None:
            return self._next_token_batch()
        with self._condition:
            if not self._wait_for_requests():
                return None
            return self._take(lambda item: len(item.texts), self.batch_size)

    def _next_token_batch(self):
        """The next batch within `max_batch_tokens`: the queue's head measured first (outside the condition,
        so that requests keep coming; each text once), then taken while its tokens fit."""
        with self._condition:
            if not self._wait_for_requests():
                return None
            candidates, size = [], 0
            for item in self._pending:  # every text is a token at least: no more can fit
                if candidates and size + len(item.texts) > self.max_batch_tokens:
                    break
                candidates.append(item)
                size += len(item.texts)
        self._measure([item for item in candidates if item.lengths is None])
        with self._condition:
            return self._take(lambda item: None if item.lengths is None else sum(item.lengths), self.max_batch_tokens)

    def _measure(self, items):
        """Gives `items` their texts' token counts (`lengths`), one call per key (the `measure` stage); a call
        that fails is made for each request alone, and a request that fails alone gets the error."""
        groups = {}
        for item in items:
            groups.setdefault(item.key, []).append(item)
        for key, group in groups.items():
            try:
                with stages.running(self.observer, self.label, [parent for item in group for parent in item.parents]):
                    with stages.stage("measure"):
                        counts = self.lengths(key, [text for item in group for text in item.texts])
            except Exception as error:
                if len(group) == 1:
                    _settle(group[0].future, error=error)
                for item in group if len(group) > 1 else ():
                    self._measure([item])
                continue
            start = 0
            for item in group:
                item.lengths = tuple(counts[start : start + len(item.texts)])
                start += len(item.texts)

    def _work(self):
        while (batch := self._next_batch()) is not None:
            if not batch:  # every request of it was cancelled
                continue
            self.batches += 1
            if self.observer is not None:
                self.observer.record(self.label, "batch", {"texts": sum(len(item.texts) for item in batch)})
            arrivals = [(item.parents, item.arrived_ns) for item in batch]
            stages.waited(self.observer, self.label, arrivals, time.time_ns())
            groups = {}
            for item in batch:
                groups.setdefault(item.key, []).append(item)
            for key, items in groups.items():
                self._run_group(key, items)

    def _run_group(self, key, items):
        """Runs `items` (requests of one key) as one call, in their context; if it fails for several, each
        alone, so that the error goes to the requests whose texts cause it and the others get their answers."""
        if self._stop.is_set():
            return  # abandoned: each has its `Stopping`
        try:
            with stages.running(self.observer, self.label, [parent for item in items for parent in item.parents]):
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
