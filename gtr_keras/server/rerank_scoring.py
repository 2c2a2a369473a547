"""The reranker of `gtr-keras serve --reranker`: its batches of (query, document) pairs, shared by
`/v1/rerank` requests and the searches that ask to rerank, and the answer of `/v1/rerank`.

A `Batcher` of pairs runs `scoring`, the reranker's only thread, as the encoder's runs `encoding`: the pairs
of concurrent requests are tokenised together (the reranker's `prepare`: packed and cut at its budget),
planned into forward passes by length (`batcher.forward_passes`: `--batch-size` pairs a pass, or at most
`--max-batch-tokens` padded tokens of like lengths) and scored one pass at a time (`score_batch`), the stop
looked at between two passes. Without a token budget the passes are those of the reranker's `predict`
(`length_sorted_batches`): a request alone gets `predict`'s scores.
"""

import numpy as np

from gtr_keras.errors import CheckpointError
from gtr_keras.server.batcher import Stopping, forward_passes
from gtr_keras.server.gateway import stages

PAIRS = "pairs"  # the key of every request of the reranker's batcher: one scorer, no kinds


def scoring(scorer, batch_size=32, max_batch_tokens=None):
    """The `run` of a `Batcher` that scores pairs with `scorer` (a reranker's, `gtr_keras.load(RERANKER_DIR)`):
    `(float32 [n] scores, token counts)` of `n` pairs, each count the packed pair's tokens (specials included,
    after the cut).

    Raises:
        CheckpointError: the reranker gives a non-finite score (the server's fault: a 500, not the client's).

    Example:
    >>> run = scoring(gtr_keras.load("models/minilm-reranker"))
    >>> scores, counts = run(PAIRS, [("what keeps a wing up?", "lift")], threading.Event())
    """

    def run(key, pairs, stop):
        with stages.stage("tokenize", pairs=len(pairs)):
            items = scorer.prepare(pairs)
        counts = [len(item) for item in items]
        passes = forward_passes(counts, batch_size, max_batch_tokens)
        scores = np.zeros(len(pairs), np.float32)
        with stages.stage("model", pairs=len(pairs), passes=len(passes)):
            for rows in passes:
                if stop.is_set():
                    raise Stopping("the server is stopping: the reranking was abandoned")
                batch = [items[row] for row in rows]
                scores[rows] = np.asarray(scorer.score_batch(batch, batch_size), np.float32)[: len(rows)]
        broken = np.flatnonzero(~np.isfinite(scores))
        if broken.size:
            raise CheckpointError(f"the reranker gives non-finite scores for {broken.size} of {len(pairs)} pairs")
        stages.record("reranked", pairs=len(pairs), tokens=sum(counts))
        return scores, counts

    return run


def pair_lengths(scorer):
    """The `lengths` of a reranker's `Batcher` with a token budget: each pair's tokens, packed and cut."""

    def lengths(key, pairs):
        return [len(item) for item in scorer.prepare(pairs)]

    return lengths


def ranked(scores, documents, top_n, return_documents):
    """The `results` of a `/v1/rerank` answer: the best `top_n` documents (all: None), by score, ties in the
    request's order, each `{"index", "relevance_score"}` and, with `return_documents`, `"document": {"text"}`.

    Example:
    >>> ranked(np.array([0.2, 0.9], np.float32), ["drag", "lift"], 1, True)
    [{'index': 1, 'relevance_score': 0.8999999761581421, 'document': {'text': 'lift'}}]
    """
    order = np.argsort(-np.asarray(scores), kind="stable")[:top_n]
    results = []
    for i in order:
        result = {"index": int(i), "relevance_score": float(scores[i])}
        if return_documents:
            result["document"] = {"text": documents[i]}
        results.append(result)
    return results
