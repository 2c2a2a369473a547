"""`Batcher`: the texts of concurrent requests run together in batches, by one worker thread.

Requests put their texts on one queue, each with a key, and wait for a future.
The worker takes the oldest request, waits up to `max_wait` seconds (from that
request's arrival) for more until `batch_size` texts are queued, then takes
requests in the queue's order up to `batch_size` texts and makes one
`run(key, texts, stop)` call for each key among them. While it runs, the next
batch fills: under load, batches are full without waiting. A queue holding
`max_queue` texts takes no more (`submit` returns None, which the server
answers with 503 at once), so a burst cannot pile up unbounded work.

A request larger than a batch is taken a batch at a time: its first
`batch_size` texts, then the rest goes back to the end of the queue, behind the
requests that came meanwhile (round robin), so that one client's 2,048 long
documents delay another's query by one batch, not by all of them. Its answer
is its chunks' results joined, once the last has run.

With a token budget (`max_batch_tokens`, `--max-batch-tokens`), a batch is
bounded by tokens instead: the worker measures the queued requests' texts
(`lengths`, the tokenizer's counts; each text once) and takes requests while
their tokens stay within the budget (a larger request a budget's worth at a
time, at least one text), and `encoding` cuts a batch into forward passes of
at most that many padded tokens, texts of like lengths together
(`forward_passes`).

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
from gtr_keras.server.deadlines import LONGEST_WAIT
from gtr_keras.server.gateway import stages

KINDS = ("query", "document")
LIKE_LENGTHS = 16  # tokens: a forward pass of a token budget pads a text to at most twice its length, or to this


class _Item:
    """A request in a `Batcher`'s queue: its texts, key and future, when it came (monotonic, and ns since the
    epoch for its spans), its spans' parents, its texts' token counts once measured, how many of its texts
    batches took (`taken`) and the results of its chunks run so far (`parts`)."""

    __slots__ = ("texts", "key", "future", "arrived", "arrived_ns", "parents", "lengths", "taken", "parts")

    def __init__(self, texts, key, future):
        self.texts, self.key, self.future = texts, key, future
        self.arrived, self.arrived_ns = time.monotonic(), time.time_ns()
        self.parents = stages.parents()
        self.lengths = None
        self.taken = 0
        self.parts = []

    @property
    def left(self):
        """Texts no batch has taken yet."""
        return len(self.texts) - self.taken


class _Part:
    """The texts `start:end` of a request (`_Item`) that a batch took: the whole request, or a chunk of it."""

    __slots__ = ("item", "start", "end")

    def __init__(self, item, start, end):
        self.item, self.start, self.end = item, start, end

    @property
    def texts(self):
        return self.item.texts[self.start : self.end]

    def __len__(self):
        return self.end - self.start


def _joined(parts):
    """A request's result from its chunks' (each a tuple of sequences): arrays concatenated, lists added."""
    if len(parts) == 1:
        return parts[0]
    return tuple(
        np.concatenate(column) if isinstance(column[0], np.ndarray) else [row for piece in column for row in piece]
        for column in zip(*parts)
    )


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
    >>> run = encoding(gtr_keras.load("gtr_small_distilled_en"))
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
    """An encoder whose queries go through an encoding `Batcher`: the encoder it stands for in all else."""

    def __init__(self, batcher, encoder):
        self.batcher = batcher
        self.encoder = encoder

    def __getattr__(self, name):  # the model, its settings and fingerprint: an `Index` checks them
        if name == "encoder":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.encoder, name)

    def encode_queries(self, texts, batch_size=None, progress=None):
        return self.batcher.wait(list(texts), "query")[0]


def query_encoder(batcher, encoder):
    """`encoder` (what `gtr_keras.load` returns) with its queries encoded through `batcher` (`encoding`'s),
    sharing its batches with other requests; `encode_queries` waits at most the batcher's timeout. An `Index`
    takes it as its model: it checks the model's fingerprint as `encoder`'s.

    Example:
    >>> index = gtr_keras.Index.open("indexes/scifact", query_encoder(batcher, encoder))
    """
    return _Queries(batcher, encoder)


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
    >>> batcher = Batcher(encoding(gtr_keras.load("gtr_small_distilled_en"), 32), batch_size=32, max_wait=0.0)
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
        if batch_size < 1 or max_queue < 1 or not 0 <= max_wait <= LONGEST_WAIT or not 0 < timeout <= LONGEST_WAIT:
            raise UserError(
                f"batch_size and max_queue must be positive, max_wait from 0 and timeout above 0 to {LONGEST_WAIT:g} s"
            )
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
        return sum(len(part) for part in self._running)

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
            items = [*self._pending, *(part.item for part in self._running)]
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

    def _take(self, costs, budget):
        """Takes (holding the condition) requests from the queue's head while their texts' `costs` (a list per
        request, None while not measured) stay within `budget`: a request whole, or, the first of a batch
        larger than it, its first texts within it (at least one), the rest queued again at the end (round
        robin). Returns the `_Part`s taken, less requests settled already (a client gone, a failed measure or
        chunk)."""
        batch, spent = [], 0
        while self._pending:
            item = self._pending[0]
            if item.future.done():
                self._queued -= self._pending.popleft().left
                continue
            prices = costs(item)
            if prices is None or (batch and spent + sum(prices) > budget):
                break
            self._pending.popleft()
            count, within = 0, 0
            for price in prices:
                if count and within + price > budget - spent:
                    break
                count, within = count + 1, within + price
            start, spent = item.taken, spent + within
            item.taken += count
            self._queued -= count
            if item.left:
                self._pending.append(item)  # behind the requests that came meanwhile
            elif not item.future.set_running_or_notify_cancel():
                continue
            batch.append(_Part(item, start, item.taken))
        self._running = batch
        return batch

    def _next_batch(self):
        if self.max_batch_tokens is not None:
            return self._next_token_batch()
        with self._condition:
            if not self._wait_for_requests():
                return None
            return self._take(lambda item: [1] * item.left, self.batch_size)

    def _next_token_batch(self):
        """The next batch within `max_batch_tokens`: the queue's head measured first (outside the condition,
        so that requests keep coming; each text once), then taken while its tokens fit."""
        with self._condition:
            if not self._wait_for_requests():
                return None
            candidates, size = [], 0
            for item in self._pending:  # every text is a token at least: no more can fit
                if candidates and size + item.left > self.max_batch_tokens:
                    break
                candidates.append(item)
                size += item.left
        self._measure([item for item in candidates if item.lengths is None])
        with self._condition:
            return self._take(
                lambda item: None if item.lengths is None else list(item.lengths[item.taken :]), self.max_batch_tokens
            )

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
        while True:
            batch = []
            try:
                batch = self._next_batch()
                if batch is None:
                    return
                if batch:  # else every request of it was cancelled
                    self._run_batch(batch)
            except Exception as error:  # a bug here or in the observer: its requests get it, the worker goes on
                with self._condition:
                    items = [part.item for part in batch or ()] or list(self._pending)
                    if not batch:
                        self._pending.clear()
                        self._queued = 0
                for item in items:
                    _settle(item.future, error=error)

    def _run_batch(self, batch):
        self.batches += 1
        if self.observer is not None:
            self.observer.record(self.label, "batch", {"texts": sum(len(part) for part in batch)})
        arrivals = [(part.item.parents, part.item.arrived_ns) for part in batch if part.start == 0]
        stages.waited(self.observer, self.label, arrivals, time.time_ns())
        groups = {}
        for part in batch:
            groups.setdefault(part.item.key, []).append(part)
        for key, parts in groups.items():
            self._run_group(key, parts)

    def _run_group(self, key, parts):
        """Runs `parts` (of requests of one key) as one call, in their context; if it fails for several, each
        alone, so that the error goes to the requests whose texts cause it and the others get their answers.
        A request's answer is given once its last part has run."""
        if self._stop.is_set():
            return  # abandoned: each has its `Stopping`
        try:
            parents = [parent for part in parts for parent in part.item.parents]
            with stages.running(self.observer, self.label, parents):
                result = self.run(key, [text for part in parts for text in part.texts], self._stop)
        except OverloadedError as error:  # the server's state (a full queue, a stop), not a text's fault
            for part in parts:
                _settle(part.item.future, error=error)
            return
        except Exception as error:  # handed to the request, which answers it; the worker goes on
            if len(parts) == 1:
                _settle(parts[0].item.future, error=error)
                return
            for part in parts:
                self._run_group(key, [part])
            return
        start = 0
        for part in parts:
            end = start + len(part)
            part.item.parts.append(tuple(column[start:end] for column in result))
            if part.end == len(part.item.texts):
                _settle(part.item.future, _joined(part.item.parts))
            start = end
