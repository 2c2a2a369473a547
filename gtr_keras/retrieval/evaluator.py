"""`evaluate`: a model, or an `Index`, on a BEIR collection, scored as BEIR scores (pytrec_eval); and
`retrieval_run`, the run of a model over a collection's corpus that `gtr-keras evaluate` scores too."""

import os
from typing import Literal

from gtr_keras.beir.dataset import load_dataset
from gtr_keras.beir.evaluation import evaluate_run
from gtr_keras.errors import UserError
from gtr_keras.lexical.fusion import Fusion
from gtr_keras.retrieval.hybrid_retriever import RETRIEVERS, HybridRetriever
from gtr_keras.retrieval.index import Index
from gtr_keras.retrieval.index_types import ModelLike
from gtr_keras.retrieval.runs import EVALUATION_DEPTH, bm25_run, gtr_run


def retrieval_run(encoder, corpus, queries, retriever="gtr", fusion=None, batch_size=32, ignore_identical_ids=True):
    """A run `{qid: {doc_id: score}}` of `queries` (`{qid: text}`) over `corpus`, indexed in memory (exact
    search), `EVALUATION_DEPTH` deep: by GTR (`gtr_run`), BM25 (`bm25_run`; `encoder` may be None) or both
    fused by `fusion` (`HybridRetriever.of_corpus`). With `ignore_identical_ids`, a document whose id is its
    query's is left out (BEIR's rule).

    Example:
    >>> corpus, queries, qrels, _ = load_dataset("data/scifact")
    >>> run = retrieval_run(gtr_keras.load("gtr_small_distilled_en"), corpus, queries, "hybrid", Fusion())
    """
    if retriever not in RETRIEVERS:
        raise UserError(f"retriever must be one of {RETRIEVERS}, got {retriever!r}")
    if retriever == "bm25":
        return bm25_run(corpus, queries, ignore_identical_ids=ignore_identical_ids)
    if retriever == "gtr":
        return gtr_run(encoder, corpus, queries, batch_size=batch_size, ignore_identical_ids=ignore_identical_ids)
    hybrid = HybridRetriever.of_corpus(encoder, corpus, fusion, batch_size)
    return hybrid.run(queries, ignore_identical_ids=ignore_identical_ids, batch_size=batch_size)


def _index_run(index, queries, retriever, fusion, ignore_identical_ids):
    query_ids = list(queries)
    hits = index.search([queries[q] for q in query_ids], EVALUATION_DEPTH + 1, retriever=retriever, fusion=fusion)
    run = {}
    for qid, row in zip(query_ids, hits):
        kept = [hit for hit in row if not (ignore_identical_ids and hit["id"] == qid)]
        run[qid] = {hit["id"]: hit["score"] for hit in kept[:EVALUATION_DEPTH]}
    return run


def evaluate(
    model: ModelLike | Index | None,
    dataset: str | os.PathLike[str],
    split: str = "test",
    retriever: Literal["gtr", "bm25", "hybrid"] = "gtr",
    fusion: Fusion | None = None,
    batch_size: int = 32,
    ignore_identical_ids: bool = True,
) -> dict[str, float]:
    """NDCG@10, MRR@10, Recall@100, Recall@1000 and MAP of a model, or of an `Index`, on a BEIR collection.

    A model searches the collection's corpus indexed in memory, exactly (what `gtr-keras evaluate` does);
    an `Index` searches its own documents (the collection's corpus, indexed with `Index.build`: with ScaNN
    or quantized vectors, the approximate search is what is measured). Judged documents missing from the
    corpus count as misses, as in BEIR.

    Args:
        model: a model directory or name, a loaded model (`gtr_keras.load(DIR)`), or an `Index`; None with
            `retriever="bm25"` (BM25 over the collection's corpus).
        dataset: a BEIR directory (`corpus.jsonl`, `queries.jsonl`, `qrels/SPLIT.tsv`).
        split: the qrels split.
        retriever: `"gtr"`, `"bm25"` or `"hybrid"`.
        fusion: the `Fusion` of hybrid search (default: the model's own, `fusion.model_fusion`).
        batch_size: texts per forward pass (a model).
        ignore_identical_ids: leave out a document whose id is its query's (BEIR's rule).

    Returns:
        `{metric: value}` (`beir.evaluation.METRICS`), over the judged queries with a relevant document; the
        runs are `EVALUATION_DEPTH` (1,000) deep.

    Example:
    >>> gtr_keras.evaluate("gtr_small_distilled_en", "data/scifact")["ndcg@10"]
    >>> gtr_keras.evaluate(gtr_keras.Index.open("indexes/scifact"), "data/scifact", retriever="hybrid")
    """
    corpus, queries, qrels, _ = load_dataset(dataset, split)
    if isinstance(model, Index):
        return evaluate_run(qrels, _index_run(model, queries, retriever, fusion, ignore_identical_ids))
    if retriever == "hybrid" and fusion is None:
        from gtr_keras.lexical.fusion import Fusion, model_fusion

        fusion = model_fusion(model) if isinstance(model, (str, os.PathLike)) else Fusion()
    if retriever != "bm25":
        from gtr_keras.saving import encoder_of  # the model's stack (Keras, TensorFlow) only for a model

        model = encoder_of(model)
    run = retrieval_run(model, corpus, queries, retriever, fusion, batch_size, ignore_identical_ids)
    return evaluate_run(qrels, run)
