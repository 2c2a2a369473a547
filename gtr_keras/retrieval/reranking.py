"""A second stage: a reranker (a cross-encoder) reorders the first stage's hits of each query.

`rerank` is the one function every path that retrieves calls (`search --rerank`, `evaluate --rerank` through
`rerank_run`, and whatever else reranks hits): the first `depth` hits of every query become (query, document
text) pairs, scored in one call of the reranker's `predict`, which batches all of them by length as the encoders
batch texts (`PairScorer`), so a short hit of one query shares a batch with short hits of another. A document
longer than the reranker's budget is cut there with the query (Hugging Face's `longest_first`,
`RerankerPreprocessor`).
"""

import os
import sys

import numpy as np

from gtr_keras.beir.evaluation import rank_documents
from gtr_keras.beir.readers import joined_document
from gtr_keras.errors import UserError
from gtr_keras.models.text_encoder import TextPairScorer, check_pairs


def hit_text(hit):
    """The text a reranker reads for a hit: `"title text"`, stripped (what BEIR embeds, `Corpus.joined`); for a
    hit of a passages index, its `passage` (the window that scored) in place of the whole text."""
    passage = hit.get("passage")
    text = hit["text"] if passage is None else hit["text"][passage["start"] : passage["end"]]
    return joined_document(hit.get("title", ""), text)


def _is_reranker_model(reranker):
    """Whether `reranker` is a Keras `Reranker` (a callable model, which no process has without its module)."""
    module = sys.modules.get("gtr_keras.models.reranker.reranker")
    return module is not None and isinstance(reranker, module.Reranker)


def _is_keras_layer(value):
    """Whether `value` is a Keras layer or model (callable on tensors, never a function that loads a reranker)."""
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(value, keras.Layer)


def reranker_of(reranker):
    """A reranker's scorer (a `TextPairScorer`), given loaded (`gtr_keras.load`: a model directory or an
    export; or a `Reranker` model, scoring with its `scorer()`), as a function of no arguments that loads one
    of these, or as a reranker's model directory or cross-encoder checkpoint.

    Raises:
        UserError: anything else (an encoder of GTR, a Keras model of another kind, a function that loads one).

    Example:
    >>> reranker_of("models/minilm-reranker").predict([("lift", "lift on a wing")])
    """
    if isinstance(reranker, (str, os.PathLike)):
        from gtr_keras.saving import load_model  # the reranker's stack (Keras, TensorFlow) only for one

        scorer = load_model(reranker)
    elif callable(reranker) and not isinstance(reranker, TextPairScorer) and not _is_keras_layer(reranker):
        scorer = reranker()
    else:
        scorer = reranker
    if _is_reranker_model(scorer):
        scorer = scorer.scorer()
    if not isinstance(scorer, TextPairScorer):
        raise UserError(
            f"rerank: {reranker!r} is not a reranker: give a reranker's scorer (gtr_keras.load of its directory), "
            "a Reranker model, a function of no arguments that loads one, or its model directory"
        )
    return scorer


class FunctionScorer(TextPairScorer):
    """A reranker's scorer whose scores come from a function of the pairs: what a server gives
    `Index.search(rerank=...)` so that a search's pairs are scored in its batches of pairs, shared with other
    requests, by the thread that runs its reranker.

    Args:
        score: `score(pairs)`, float32 scores of a list of `(query, document)` string pairs, in their order.

    Example:
    >>> index.search(["lift"], rerank=FunctionScorer(lambda pairs: batcher.wait(pairs, "pairs")[0]))
    """

    def __init__(self, score):
        self.score = score

    def predict(self, pairs, batch_size=32):
        """Scores of `pairs`: float32 `[len(pairs)]` (`batch_size` is the function's to choose)."""
        return np.asarray(self.score(check_pairs(pairs)), np.float32)


def rerank(scorer, queries, hits, depth=None, batch_size=32):
    """The first `depth` hits of each query, reordered by the reranker's scores of their (query, text) pairs.

    Args:
        scorer: a reranker's scorer (`gtr_keras.load(RERANKER_DIR)`: `predict(pairs, batch_size)` gives a
            float32 score per pair).
        queries: the query texts.
        hits: per query, its first-stage hits, best first: dicts with `"id"`, `"score"` and the document's
            `"text"` (and `"title"`; a passages index's hits their `"passage"`, the window read), as
            `Retriever.search` and `HybridRetriever.search` give them.
        depth: how many of each query's first hits are reranked and returned (None: all).
        batch_size: pairs per forward pass.

    Returns:
        Per query, its reranked hits, best first: each hit as it was, its `"score"` the reranker's
        (ties keep the first stage's order).

    Raises:
        UserError: `len(hits) != len(queries)`, or a hit without its document's text (an index that
            stores no documents), naming the query.

    Example:
    >>> first = retriever.search(["what keeps a wing up?"], k=100)
    >>> best = rerank(gtr_keras.load("models/minilm-reranker"), ["what keeps a wing up?"], first, depth=100)
    """
    queries, hits = list(queries), [list(row[:depth] if depth else row) for row in hits]
    if len(queries) != len(hits):
        raise UserError(f"rerank: {len(queries)} queries but hits for {len(hits)}")
    pairs = []
    for number, (query, row) in enumerate(zip(queries, hits)):
        for hit in row:
            if "text" not in hit:
                raise UserError(
                    f"rerank: hit {hit.get('id')!r} of query {number} has no document text to rerank (the index "
                    "stores no documents: build it from a corpus, or give --bm25-corpus with --embeddings)"
                )
            pairs.append((query, hit_text(hit)))
    scores = scorer.predict(pairs, batch_size=batch_size) if pairs else np.zeros(0, np.float32)
    reranked, start = [], 0
    for row in hits:
        row_scores = scores[start : start + len(row)]
        start += len(row)
        order = np.argsort(-row_scores, kind="stable")
        reranked.append([{**row[i], "score": float(row_scores[i])} for i in order])
    return reranked


def rerank_run(scorer, queries, run, corpus, depth=100, batch_size=32):
    """A run `{qid: {doc_id: score}}` with each query's first `depth` documents reranked (`rerank`): those
    first, by the reranker's scores, then the rest in the first stage's order below every reranked one.

    Args:
        scorer: a reranker's scorer.
        queries: `{qid: text}`.
        run: the first stage's run.
        corpus: the `Corpus` of the run's documents.
        depth: documents reranked per query.
        batch_size: pairs per forward pass.

    Example:
    >>> reranked = rerank_run(scorer, queries, gtr_run(encoder, corpus, queries), corpus, depth=100)
    """
    positions = {doc_id: i for i, doc_id in enumerate(corpus.ids)}
    query_ids = list(run)
    ranked = {qid: rank_documents(run[qid]) for qid in query_ids}
    hits = [
        [
            {"id": d, "title": corpus.titles[positions[d]], "text": corpus.texts[positions[d]]}
            for d in ranked[qid][:depth]
            if d in positions
        ]
        for qid in query_ids
    ]
    reranked = rerank(scorer, [queries[qid] for qid in query_ids], hits, batch_size=batch_size)
    result = {}
    for qid, row in zip(query_ids, reranked):
        scores = {hit["id"]: hit["score"] for hit in row}
        floor = min(scores.values(), default=0.0) - 1.0
        rest = [d for d in ranked[qid] if d not in scores]
        scores.update({d: floor - i / max(len(rest), 1) for i, d in enumerate(rest)})
        result[qid] = scores
    return result
