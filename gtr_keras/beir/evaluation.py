"""Retrieval metrics (through `pytrec_eval`), TREC run files and analyses.

A *run* maps a query id to a dict from document id to score; *qrels* map a
query id to a dict from document id to an integer relevance grade.
"""

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError, UserError
from gtr_keras.utils import files
from gtr_keras.utils.files import tf  # TensorFlow on first use: BM25 runs and their analyses need none
from gtr_keras.utils.text_files import iter_lines

# A run: per query id, the score of each document id retrieved.
Run = dict[str, dict[str, float]]
# Judgements: per query id, the relevance grade of each document id judged.
Qrels = Mapping[str, Mapping[str, int]]
METRICS = ("ndcg@10", "mrr@10", "recall@100", "recall@1000", "map")

_TREC_MEASURES = {"ndcg_cut.10", "recall.100,1000", "map"}
_TREC_NAMES = {
    "ndcg_cut_10": "ndcg@10",
    "recall_100": "recall@100",
    "recall_1000": "recall@1000",
    "map": "map",
}
_MRR_DEPTH = 10
_RELEVANCE_LEVEL = 1


def rank_documents(scores: Mapping[str, float]) -> list[str]:
    """Document ids of one query, best first, in the order trec_eval uses.

    Ties in score are broken by document id in descending order, as
    trec_eval does, so ranks written to a run file agree with the ranks
    `pytrec_eval` scores.

    Args:
        scores: dict from document id to score.

    Returns:
        A list of document ids.
    """
    return sorted(scores, key=lambda doc_id: (scores[doc_id], doc_id), reverse=True)


def cut_run(run: Mapping[str, Mapping[str, float]], depth: int) -> Run:
    """Keeps the `depth` best documents of each query (ranked by `rank_documents`)."""
    return {
        query_id: {doc_id: scores[doc_id] for doc_id in rank_documents(scores)[:depth]}
        for query_id, scores in run.items()
    }


def _as_pytrec(qrels, run):
    qrels = {
        query_id: {doc_id: int(score) for doc_id, score in judgements.items()} for query_id, judgements in qrels.items()
    }
    run = {query_id: {doc_id: float(score) for doc_id, score in scores.items()} for query_id, scores in run.items()}
    return qrels, run


def per_query_metrics(qrels: Qrels, run: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Per-query values of `METRICS`, computed by `pytrec_eval`.

    Only queries with at least one relevant document (grade >= 1) in `qrels`
    are scored, as BEIR's collections are built; a scored query missing from
    `run` gets 0 for every metric. Every judged document counts, retrieved or
    not: one that is absent from the corpus is a relevant document never
    retrieved, a miss, as in BEIR and MTEB (`load_dataset` keeps such
    judgements for this reason). nDCG uses the grades as gains; the other
    metrics count grade >= 1 as relevant. `mrr@10` is `recip_rank` on the run
    cut to its top 10 documents per query; `map` uses the whole run.

    Args:
        qrels: dict from query id to a dict from document id to integer grade.
        run: dict from query id to a dict from document id to score.

    Returns:
        A dict from query id to a dict from metric name to value.
    """
    import pytrec_eval

    qrels, run = _as_pytrec(qrels, run)
    qrels = {
        query_id: judgements
        for query_id, judgements in qrels.items()
        if any(grade >= _RELEVANCE_LEVEL for grade in judgements.values())
    }
    full = pytrec_eval.RelevanceEvaluator(qrels, _TREC_MEASURES, relevance_level=_RELEVANCE_LEVEL).evaluate(run)
    top = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}, relevance_level=_RELEVANCE_LEVEL).evaluate(
        cut_run(run, _MRR_DEPTH)
    )
    results = {}
    for query_id in qrels:
        values = dict.fromkeys(METRICS, 0.0)
        for trec_name, name in _TREC_NAMES.items():
            values[name] = full.get(query_id, {}).get(trec_name, 0.0)
        values["mrr@10"] = top.get(query_id, {}).get("recip_rank", 0.0)
        results[query_id] = values
    return results


def evaluate_run(qrels: Qrels, run: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Mean retrieval metrics of a run.

    The means are over the queries that have at least one relevant document
    (grade >= 1) in `qrels`, the queries BEIR evaluates on; such a query
    missing from `run` counts as 0. See `per_query_metrics` for the metric
    definitions.

    Args:
        qrels: dict from query id to a dict from document id to integer grade.
        run: dict from query id to a dict from document id to score.

    Returns:
        A dict with keys `METRICS`:
        `"ndcg@10", "mrr@10", "recall@100", "recall@1000", "map"`.

    Example:
    >>> evaluate_run({"q": {"a": 1}}, {"q": {"a": 0.9, "b": 0.1}})["mrr@10"]
    1.0
    """
    per_query = per_query_metrics(qrels, run)
    if not per_query:
        raise UserError("no query in the qrels has a relevant document")
    return {name: float(np.mean([values[name] for values in per_query.values()])) for name in METRICS}


def write_trec_run(
    path: str | os.PathLike[str], run: Mapping[str, Mapping[str, float]], tag: str = "gtr-keras"
) -> None:
    """Writes a run in TREC format: `qid Q0 docid rank score tag`.

    Queries keep the order of `run`; documents are ranked by `rank_documents`.
    Scores are written with full float precision.

    Args:
        path: the output file, local or `gs://...` (any `tf.io.gfile` path),
            written in place; wrap the call in `gtr_keras.utils.files.atomic_file`
            or `atomic_outputs` for a file that appears whole or not at all.
        run: dict from query id to a dict from document id to score.
        tag: the run name written in the last column (no whitespace).

    Raises:
        DataError: the file cannot be written (the message names it and
            says why, e.g. `No space left on device`).
    """
    if not tag or any(c.isspace() for c in tag):
        raise UserError(f"run tag must be a non-empty word, got {tag!r}")
    path = str(path)
    try:
        with files.open(path, "wb") as f:
            for query_id, scores in run.items():
                lines = (
                    f"{query_id} Q0 {doc_id} {rank} {float(scores[doc_id])!r} {tag}\n"
                    for rank, doc_id in enumerate(rank_documents(scores), start=1)
                )
                f.write("".join(lines).encode("utf-8"))
    except tf.errors.OpError as error:
        reason = (error.message.strip().splitlines() or [type(error).__name__])[0]
        raise DataError(f"{path}: cannot write ({reason})") from None


def read_trec_run(path: str | os.PathLike[str]) -> Run:
    """Reads a TREC run file written by `write_trec_run` or any TREC tool.

    Args:
        path: a file of `qid Q0 docid rank score tag` lines, local or
            `gs://...` (any `tf.io.gfile` path).

    Returns:
        A dict from query id to a dict from document id to score.

    Raises:
        DataError: a missing or unreadable file, invalid UTF-8, a line
            without 6 columns, a non-numeric score, or a document listed
            twice for a query.
    """
    run: Run = {}
    for line_no, line in iter_lines(path):
        columns = line.split()
        if not columns:
            continue
        if len(columns) != 6:
            raise DataError(f"{path}:{line_no}: expected 6 columns (qid Q0 docid rank score tag), got {len(columns)}")
        query_id, _, doc_id, _, score, _ = columns
        try:
            score = float(score)
        except ValueError:
            raise DataError(f"{path}:{line_no}: field `score` must be a number, got {score!r}") from None
        scores = run.setdefault(query_id, {})
        if doc_id in scores:
            raise DataError(f"{path}:{line_no}: document {doc_id!r} listed twice for query {query_id!r}")
        scores[doc_id] = score
    return run


def results_from_scores(
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    top_indices: Any,
    top_scores: Any,
    ignore_identical_ids: bool = True,
) -> Run:
    """Builds a run from top-k search results.

    Args:
        query_ids: the ids of the `n` queries.
        doc_ids: the ids of the indexed documents.
        top_indices: `[n, k]` integer indices into `doc_ids`; negative
            entries (padding) are skipped.
        top_scores: `[n, k]` scores matching `top_indices`.
        ignore_identical_ids: drop a document whose id equals the query id,
            as BEIR does for collections where queries are also documents
            (ArguAna, Quora). Search `k + 1` to keep `k` results.

    Returns:
        A dict from query id to a dict from document id to score.

    Example:
    >>> results_from_scores(["q"], ["q", "d"], [[0, 1]], [[0.9, 0.5]])
    {'q': {'d': 0.5}}
    """
    top_indices = np.asarray(top_indices)
    top_scores = np.asarray(top_scores, dtype=np.float64)
    if top_indices.shape != top_scores.shape or top_indices.shape[:1] != (len(query_ids),):
        raise UserError(
            f"expected top_indices and top_scores of shape [{len(query_ids)}, k], "
            f"got {top_indices.shape} and {top_scores.shape}"
        )
    run = {}
    for query_id, indices, scores in zip(query_ids, top_indices, top_scores):
        results = {}
        for index, score in zip(indices.tolist(), scores.tolist()):
            if index < 0:
                continue
            doc_id = doc_ids[index]
            if not (ignore_identical_ids and doc_id == query_id):
                results[doc_id] = score
        run[query_id] = results
    return run


def format_table(rows: Sequence[tuple[str, Mapping[str, float]]], digits: int = 4) -> str:
    """Formats metrics of several runs as an aligned text table.

    Args:
        rows: list of `(name, metrics)` pairs, `metrics` a dict from metric
            name to value. Columns are the metric names in first-seen order;
            a missing value shows as `-`.
        digits: decimals shown.

    Returns:
        The table as a string, one line per row after a header line.

    Example:
    >>> print(format_table([("bm25", {"ndcg@10": 0.665})]))
    run   ndcg@10
    bm25   0.6650
    """
    columns = list(dict.fromkeys(name for _, metrics in rows for name in metrics))
    table = [["run", *columns]] + [
        [name, *(f"{metrics[c]:.{digits}f}" if c in metrics else "-" for c in columns)] for name, metrics in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(
            [line[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(line[1:], widths[1:])]
        ).rstrip()
        for line in table
    )


def median_length_analysis(
    run: Mapping[str, Mapping[str, float]], qrels: Qrels, corpus: Corpus, k: int = 10
) -> dict[str, float]:
    """Median document length, retrieved vs relevant (GTR paper, section 6.4).

    For every query with a relevant document (grade >= 1) in `qrels` and
    results in `run`, pools the top `k` retrieved documents and the relevant
    documents, and takes the median word count (whitespace split of
    `corpus.joined()`) of each pool. Documents missing from the corpus are
    skipped.

    Args:
        run: dict from query id to a dict from document id to score.
        qrels: dict from query id to a dict from document id to grade.
        corpus: the `Corpus` the run retrieved from.
        k: how many top documents per query to pool.

    Returns:
        `{f"median_words_top{k}": float, "median_words_relevant": float,
        "num_queries": int}`.

    Raises:
        UserError: no query has both relevant documents and results.
    """
    words = dict(zip(corpus.ids, (len(text.split()) for text in corpus.joined())))
    retrieved: list[int] = []
    relevant: list[int] = []
    num_queries = 0
    for query_id, judgements in qrels.items():
        gold = [d for d, grade in judgements.items() if grade >= _RELEVANCE_LEVEL]
        if not gold or not run.get(query_id):
            continue
        num_queries += 1
        top = rank_documents(run[query_id])[:k]
        retrieved.extend(words[d] for d in top if d in words)
        relevant.extend(words[d] for d in gold if d in words)
    if not num_queries:
        raise UserError("no query has both relevant documents and retrieved results")
    return {
        f"median_words_top{k}": float(np.median(retrieved)),
        "median_words_relevant": float(np.median(relevant)),
        "num_queries": num_queries,
    }
