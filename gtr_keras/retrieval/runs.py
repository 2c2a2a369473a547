"""Runs over a BEIR collection: GTR's and BM25's runs for evaluation (the hybrid run is `HybridRetriever.run`'s),
and hard negatives mined from the model's own retrieval.
"""

from gtr_keras.beir.evaluation import Run, cut_run, results_from_scores
from gtr_keras.beir.readers import Corpus, Qrels
from gtr_keras.models.text_encoder import TextEncoder
from gtr_keras.storage.search_index import SearchIndex

EVALUATION_DEPTH = 1000


def gtr_run(
    encoder: TextEncoder,
    corpus: Corpus,
    queries: dict[str, str],
    depth: int = EVALUATION_DEPTH,
    batch_size: int = 32,
    ignore_identical_ids: bool = True,
    progress: bool | None = None,
    index: SearchIndex | None = None,
) -> Run:
    """A run `{qid: {docid: score}}` from GTR search of `corpus` (exact, unless `index` is given)."""
    query_ids = list(queries)
    if index is None:
        index = SearchIndex(corpus.ids, encoder.encode_documents(corpus.joined(), batch_size, progress), "exact")
    indices, scores = index.search(encoder.encode_queries([queries[q] for q in query_ids], batch_size), depth + 1)
    return cut_run(results_from_scores(query_ids, corpus.ids, indices, scores, ignore_identical_ids), depth)


def bm25_run(
    corpus: Corpus, queries: dict[str, str], depth: int = EVALUATION_DEPTH, ignore_identical_ids: bool = True
) -> Run:
    """A run from the `bm25s` baseline (English stemming and stopwords)."""
    from gtr_keras.lexical.bm25 import BM25Retriever

    retriever = BM25Retriever()
    retriever.index(corpus.joined(), corpus.ids)
    query_ids = list(queries)
    ids, scores = retriever.search([queries[q] for q in query_ids], depth + 1)
    run = {}
    for qid, row_ids, row_scores in zip(query_ids, ids, scores):
        run[qid] = {d: float(s) for d, s in zip(row_ids, row_scores) if not (ignore_identical_ids and d == qid)}
    return cut_run(run, depth)


def mine_negatives(
    encoder: TextEncoder,
    corpus: Corpus,
    queries: dict[str, str],
    qrels: Qrels,
    depth: int = 100,
    skip_top: int = 0,
    per_query: int = 10,
    batch_size: int = 32,
    progress: bool | None = None,
) -> dict[str, list[str]]:
    """Hard negatives from the model's own retrieval, judged positives excluded.

    For each judged query, the top `depth` documents of exact GTR search are
    taken, documents judged relevant (score > 0) are removed, the first
    `skip_top` of the rest are skipped (they are the likeliest unjudged
    positives), and the next `per_query` are kept.

    Args:
        encoder: the `Encoder` to retrieve with.
        corpus: the `Corpus`.
        queries: `{qid: text}` of the queries to mine for.
        qrels: `{qid: {docid: score}}`.
        depth: documents retrieved per query.
        skip_top: non-positive documents skipped at the top of each ranking.
        per_query: negatives kept per query.

    Returns:
        `{qid: [docid, ...]}` in rank order.

    Example:
    >>> corpus, queries, qrels, _ = load_dataset("nfcorpus", "train")
    >>> mined = mine_negatives(encoder, corpus, queries, qrels, depth=100, skip_top=3, per_query=5)
    """
    run = gtr_run(encoder, corpus, queries, depth, batch_size, ignore_identical_ids=True, progress=progress)
    mined = {}
    for qid in queries:
        positives = {d for d, score in qrels.get(qid, {}).items() if score > 0}
        ranked = [d for d in sorted(run[qid], key=lambda d: -run[qid][d]) if d not in positives]
        mined[qid] = ranked[skip_top : skip_top + per_query]
    return mined
