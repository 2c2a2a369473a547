import contextlib
import threading
import time

import numpy as np
import pytest

from gtr_keras.errors import OverloadedError, UserError
from gtr_keras.server.batcher import Batcher, Stopping, encoding, forward_passes, query_encoder, token_lengths


class Recorder:
    """A `run` that records each call's key and texts, answering each text with its length."""

    def __init__(self, gate=None):
        self.calls, self.gate = [], gate

    def __call__(self, key, texts, stop):
        if self.gate is not None:
            assert self.gate.wait(10)
        self.calls.append((key, list(texts)))
        return [len(text) for text in texts], [key] * len(texts)


def test_requests_queued_together_run_as_one_batch_per_key_in_arrival_order():
    run = Recorder(threading.Event())
    batcher = Batcher(run, batch_size=8, max_wait=0.0)
    try:
        blocker = batcher.submit(["x"], "a")  # the worker takes it and waits on the gate
        while batcher.queued:
            time.sleep(0.001)
        futures = [batcher.submit(texts, key) for texts, key in ((["aa", "b"], "a"), (["ccc"], "b"), (["dddd"], "a"))]
        run.gate.set()
        assert blocker.result(10) == ([1], ["a"])
        assert [f.result(10) for f in futures] == [([2, 1], ["a", "a"]), ([3], ["b"]), ([4], ["a"])]
        assert run.calls[1:] == [("a", ["aa", "b", "dddd"]), ("b", ["ccc"])]
        assert batcher.batches == 2
    finally:
        batcher.close()


def test_a_batch_takes_at_most_batch_size_texts_and_a_larger_request_a_batch_at_a_time():
    run = Recorder(threading.Event())
    batcher = Batcher(run, batch_size=3, max_wait=0.0)
    try:
        first = batcher.submit(["x"], "k")
        while batcher.queued:
            time.sleep(0.001)
        futures = [batcher.submit(texts, "k") for texts in (["a", "b"], ["c", "d"], ["e", "f", "g", "hh"], ["i"])]
        run.gate.set()
        assert [future.result(10) for future in futures][2] == ([1, 1, 1, 2], ["k"] * 4)  # its chunks joined
        first.result(10)
        # its rest behind the request queued meanwhile, in one batch with it
        assert [texts for _, texts in run.calls] == [["x"], ["a", "b"], ["c", "d"], ["e", "f", "g"], ["i", "hh"]]
    finally:
        batcher.close()


@contextlib.contextmanager
def _running_the_first_batch_of(texts, key):
    """A batcher of batches of 2 whose worker runs the first batch of a request of `texts` and waits on its
    `run`'s gate; yields `(run, batcher, the request's future)`."""
    run = Recorder(threading.Event())
    batcher = Batcher(run, batch_size=2, max_wait=0.0)
    try:
        future = batcher.submit(texts, key)
        while not batcher.running:
            time.sleep(0.001)
        yield run, batcher, future
    finally:
        batcher.close()


def test_a_large_request_delays_a_later_one_by_at_most_two_batches():
    documents = [f"document {number}" for number in range(40)]
    with _running_the_first_batch_of(documents, "document") as (run, batcher, large):
        query = batcher.submit(["a query"], "query")
        run.gate.set()
        assert query.result(10) == ([7], ["query"])
        assert large.result(10) == ([len(document) for document in documents], ["document"] * 40)
        assert [key for key, _ in run.calls][:4] == ["document", "document", "query", "document"]
        assert len(run.calls) == 21 and batcher.queued == 0


def test_a_large_request_cancelled_between_its_chunks_runs_no_more_of_them():
    with _running_the_first_batch_of([f"t{number}" for number in range(10)], "k") as (run, batcher, large):
        assert large.cancel()  # its client went away (a timeout) while its first chunk ran
        run.gate.set()
        assert batcher.submit(["next"], "k").result(10) == ([4], ["k"])
        assert [texts for _, texts in run.calls] == [["t0", "t1"], ["next"]] and batcher.queued == 0


def test_the_worker_waits_up_to_max_wait_for_a_fuller_batch():
    run = Recorder()
    batcher = Batcher(run, batch_size=4, max_wait=0.3)
    try:
        start = time.monotonic()
        first = batcher.submit(["a"], "k")
        second = batcher.submit(["b"], "k")
        first.result(10), second.result(10)
        assert run.calls == [("k", ["a", "b"])]  # shared, after the wait
        assert time.monotonic() - start >= 0.25
        start = time.monotonic()
        full = batcher.submit(["a", "b", "c", "d"], "k")  # a full batch does not wait
        full.result(10)
        assert time.monotonic() - start < 0.25
    finally:
        batcher.close()


def test_a_full_queue_is_refused_at_once_and_a_closed_batcher_takes_nothing():
    run = Recorder(threading.Event())
    batcher = Batcher(run, batch_size=1, max_wait=0.0, max_queue=2)
    running = batcher.submit(["x"], "k")
    while batcher.queued:
        time.sleep(0.001)
    queued = batcher.submit(["a", "b"], "k")
    assert batcher.submit(["c"], "k") is None
    with pytest.raises(OverloadedError, match="queue is full"):
        batcher.wait(["c"], "k")
    run.gate.set()
    batcher.close()
    assert running.result(10) and queued.result(10) == ([1, 1], ["k", "k"])  # drained before it closed
    assert batcher.submit(["d"], "k") is None


def test_a_failed_batch_runs_again_request_by_request_so_only_the_culprit_fails():
    calls = []

    def run(key, texts, stop):
        calls.append(list(texts))
        if "bad" in texts:
            raise ValueError("a bad text")
        return (texts,)

    batcher = Batcher(run, batch_size=8, max_wait=0.3)
    try:
        good, bad, other = (batcher.submit(texts, "k") for texts in (["ok", "fine"], ["bad"], ["also"]))
        assert good.result(10) == (["ok", "fine"],) and other.result(10) == (["also"],)
        with pytest.raises(ValueError, match="a bad text"):
            bad.result(10)
        assert calls == [["ok", "fine", "bad", "also"], ["ok", "fine"], ["bad"], ["also"]]
        assert batcher.submit(["later"], "k").result(10) == (["later"],)
    finally:
        batcher.close()


def test_an_overloaded_error_goes_to_every_request_of_the_batch_without_a_retry():
    calls = []

    def run(key, texts, stop):
        calls.append(list(texts))
        raise OverloadedError("the encoder's queue is full")

    batcher = Batcher(run, batch_size=8, max_wait=0.3)
    try:
        futures = [batcher.submit([text], "k") for text in ("a", "b")]
        for future in futures:
            with pytest.raises(OverloadedError, match="queue is full"):
                future.result(10)
        assert calls == [["a", "b"]]
    finally:
        batcher.close()


def test_a_cancelled_request_is_left_out_and_a_wait_past_the_timeout_is_refused():
    run = Recorder(threading.Event())
    batcher = Batcher(run, batch_size=8, max_wait=0.0, timeout=0.2)
    try:
        batcher.submit(["x"], "k")
        while batcher.queued:
            time.sleep(0.001)
        cancelled = batcher.submit(["gone"], "k")
        assert cancelled.cancel()
        with pytest.raises(OverloadedError, match="no answer within 0.2 s"):
            batcher.wait(["late"], "k")
        run.gate.set()
        assert batcher.submit(["y"], "k").result(10) == ([1], ["k"])
        assert ["gone"] not in [texts for _, texts in run.calls]
    finally:
        batcher.close()


@pytest.mark.parametrize(
    "settings",
    [{"batch_size": 0}, {"max_wait": float("inf")}, {"max_wait": 1e300}, {"timeout": 1e300}, {"timeout": 0}],
)
def test_settings_are_checked(settings):
    with pytest.raises(UserError, match="must be"):
        Batcher(Recorder(), **settings)  # a wait past a day would overflow a thread's wait and end the worker


class FailingObserver:
    """An observer (the application's metrics) whose first `record` raises: a bug, not a text's fault."""

    def __init__(self):
        self.failed = False

    def record(self, batcher, event, values):
        if not self.failed:
            self.failed = True
            raise RuntimeError("an observer's bug")

    def stage(self, batcher, name, seconds):
        pass


def test_an_error_outside_the_run_fails_its_batch_s_requests_and_the_worker_goes_on():
    batcher = Batcher(Recorder(), batch_size=4, max_wait=0.0)
    batcher.observer = FailingObserver()
    try:
        with pytest.raises(RuntimeError, match="an observer's bug"):
            batcher.submit(["a"], "k").result(10)
        assert batcher.submit(["bb"], "k").result(10) == ([2], ["k"])
    finally:
        batcher.close()


def test_an_error_taking_a_batch_fails_the_queued_requests_and_the_worker_goes_on(monkeypatch):
    batcher = Batcher(Recorder(), batch_size=4, max_wait=0.0)
    take = batcher._take
    calls = []

    def failing_once(*args):
        calls.append(args)
        if len(calls) == 1:
            raise OverflowError("timeout value is too large")  # what a wait of 1e300 s raised
        return take(*args)

    monkeypatch.setattr(batcher, "_take", failing_once)
    try:
        with pytest.raises(OverflowError):
            batcher.submit(["a"], "k").result(10)  # answered, not left waiting for the request's timeout
        assert batcher.submit(["bb"], "k").result(10) == ([2], ["k"]) and batcher.queued == 0
    finally:
        batcher.close()


def test_encoding_gives_the_encoder_s_embeddings_and_token_counts(tiny_encoder):
    texts = ["lift on a wing", "a much longer text about shock waves in supersonic nozzles"]
    batcher = Batcher(encoding(tiny_encoder, 32), batch_size=32, max_wait=0.0)
    try:
        embeddings, counts = batcher.wait(texts, "document")
        np.testing.assert_allclose(embeddings, tiny_encoder.encode_documents(texts), atol=1e-6, rtol=0)
        assert counts == [len(ids) for ids in tiny_encoder.tokenize(texts, "document")]
        queries = query_encoder(batcher, tiny_encoder).encode_queries(texts[:1])
        np.testing.assert_allclose(queries, tiny_encoder.encode_queries(texts[:1]), atol=1e-6, rtol=0)
        with pytest.raises(UserError, match="kind must be one of"):
            batcher.wait(texts, "passage")
    finally:
        batcher.close()


class SlowEncoder:
    """An encoder whose every forward pass waits for `gate` (texts: their length is their token count)."""

    embedding_dim = 2

    def __init__(self):
        self.gate, self.passes, self.begun = threading.Semaphore(0), [], 0

    def tokenize(self, texts, kind):
        return [[1] * len(text) for text in texts]

    prepare = tokenize

    def encode(self, texts, kind, batch_size):
        self.begun += 1
        assert self.gate.acquire(timeout=10)
        self.passes.append(list(texts))
        return np.array([[len(text), 0] for text in texts], np.float32)


def test_abandon_answers_every_request_at_once_and_the_encoding_ends_at_its_next_pass():
    encoder = SlowEncoder()
    batcher = Batcher(encoding(encoder, 2), batch_size=2, max_wait=0.0)
    running = batcher.submit(["aaa", "b", "cc", "dddd", "e", "ff"], "document")  # three batches of two
    while not batcher.running:
        time.sleep(0.001)
    queued = batcher.submit(["later"], "document")
    encoder.gate.release()  # the first pass
    while encoder.begun < 2:
        time.sleep(0.001)
    batcher.abandon()  # during the second pass
    for future in (running, queued):
        with pytest.raises(Stopping, match="stopping"):
            future.result(0)  # answered at once, not when the pass running ends
    encoder.gate.release()  # the second pass, running when it was abandoned, ends; no third begins
    assert batcher.join(10)
    assert encoder.passes == [["b", "aaa"], ["cc", "dddd"]]  # a batch (two texts) of the request at a time
    assert batcher.submit(["x"], "document") is None
    with pytest.raises(Stopping):
        batcher.wait(["x"], "document")


def test_encoding_gives_the_embeddings_of_one_encode_call_in_length_sorted_passes(tiny_encoder):
    texts = [" ".join(["wing"] * n) for n in (9, 1, 30, 4, 4, 17, 2, 60, 8, 3)]
    embeddings, counts = encoding(tiny_encoder, 3)("document", texts, threading.Event())
    np.testing.assert_allclose(embeddings, tiny_encoder.encode(texts, "document", 3), atol=1e-6, rtol=0)
    assert counts == [len(ids) for ids in tiny_encoder.tokenize(texts, "document")]


@pytest.mark.parametrize("seed", range(5))
def test_forward_passes_of_a_token_budget_hold_like_lengths_within_the_budget(seed):
    rng = np.random.default_rng(seed)
    lengths = [int(n) for n in rng.choice([3, 9, 40, 130, 512], size=200)]
    passes = forward_passes(lengths, batch_size=64, max_batch_tokens=2048)
    assert sorted(row for rows in passes for row in rows) == list(range(200))
    for rows in passes:
        longest, shortest = max(lengths[row] for row in rows), min(lengths[row] for row in rows)
        assert len(rows) <= 64 and len(rows) * longest <= 2048
        assert longest <= max(2 * shortest, 16)  # a short text is never padded to a long one
    padded = sum(len(rows) * max(lengths[row] for row in rows) for rows in passes)
    by_count = sum(len(rows) * max(lengths[row] for row in rows) for rows in forward_passes(lengths, 64))
    assert padded < by_count
    assert forward_passes([5, 1, 3], batch_size=2) == [[1, 2], [0]]  # without a budget: sorted, batch_size each


def test_a_token_budget_takes_requests_while_their_tokens_fit_measuring_each_text_once():
    measured = []

    def lengths(key, texts):
        measured.extend(texts)
        return [len(text) for text in texts]

    run = Recorder(threading.Event())
    batcher = Batcher(run, batch_size=2, max_wait=0.0, max_batch_tokens=10, lengths=lengths)
    try:
        first = batcher.submit(["x"], "k")
        while batcher.queued:
            time.sleep(0.001)
        sizes = (["aaaa", "bbb"], ["cc"], ["dddd"], ["e" * 15], ["f", "g"], ["h" * 9])
        futures = [batcher.submit(texts, "k") for texts in sizes]
        run.gate.set()
        for future in [first, *futures]:
            future.result(10)
        taken = [texts for _, texts in run.calls]
        assert taken == [["x"], ["aaaa", "bbb", "cc"], ["dddd"], ["e" * 15], ["f", "g"], ["h" * 9]]
        assert sorted(measured) == sorted(["x", *[text for texts in sizes for text in texts]])  # once each
    finally:
        batcher.close()


def test_a_text_that_cannot_be_measured_fails_its_own_request_alone():
    def lengths(key, texts):
        if "bad" in texts:
            raise ValueError("cannot tokenize")
        return [len(text) for text in texts]

    batcher = Batcher(Recorder(), max_wait=0.3, max_batch_tokens=100, lengths=lengths)
    try:
        good, bad, other = (batcher.submit(texts, "k") for texts in (["ok"], ["bad"], ["fine"]))
        assert good.result(10) == ([2], ["k"]) and other.result(10) == ([4], ["k"])
        with pytest.raises(ValueError, match="cannot tokenize"):
            bad.result(10)
    finally:
        batcher.close()
    with pytest.raises(UserError, match="lengths"):
        Batcher(Recorder(), max_batch_tokens=100)


def test_encoding_with_a_token_budget_gives_the_same_embeddings(tiny_encoder):
    texts = [" ".join(["wing"] * n) for n in (9, 1, 300, 4, 4, 17, 2, 60, 8, 3)]
    lengths = token_lengths(tiny_encoder)("document", texts)
    assert lengths == [len(ids) for ids in tiny_encoder.tokenize(texts, "document")]
    batcher = Batcher(
        encoding(tiny_encoder, 32, 512), 32, 0.0, max_batch_tokens=512, lengths=token_lengths(tiny_encoder)
    )
    try:
        embeddings, counts = batcher.wait(texts, "document")
    finally:
        batcher.close()
    np.testing.assert_allclose(embeddings, tiny_encoder.encode_documents(texts), atol=1e-6, rtol=0)
    assert counts == lengths
