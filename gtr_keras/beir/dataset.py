"""A BEIR dataset read for evaluation: its corpus, the judged queries of a split, and its qrels checked against
both (`load_dataset`, `gtr_keras.load_dataset`)."""

import os

from gtr_keras.beir.qrels_checks import QrelsReport, check_qrels
from gtr_keras.beir.readers import Corpus, Qrels, load_corpus, load_qrels, load_queries


def load_dataset(
    dataset: str | os.PathLike[str], split: str = "test"
) -> tuple[Corpus, dict[str, str], Qrels, QrelsReport]:
    """A BEIR dataset's corpus, the judged queries of `split`, and checked qrels.

    The qrels are evaluated as BEIR does: judgements of documents missing
    from the corpus are kept, and count as relevant documents never
    retrieved. Judgements of queries missing from the queries file are
    dropped, as such a query has no text to search with. Both are reported
    in the returned `QrelsReport` (`report.ok` is false).

    Args:
        dataset: a BEIR directory.
        split: the qrels split, read from `qrels/<split>.tsv`.

    Returns:
        `(corpus, queries, qrels, report)`: the `Corpus`, `{qid: text}` of the
        judged queries in qrels order, `{qid: {docid: score}}` and the
        `QrelsReport`.

    Raises:
        DataError: a missing, unreadable, empty or malformed file.

    Example:
    >>> corpus, queries, qrels, report = load_dataset("data/scifact")  # doctest: +SKIP
    >>> print(report)  # doctest: +SKIP
    qrels: all 300 queries and 339 judgements match the collection
    """
    qrels = load_qrels(dataset, split)  # small: a wrong split fails before the corpus is read
    corpus = load_corpus(dataset)
    queries = load_queries(dataset)
    qrels, report = check_qrels(qrels, corpus.ids, queries, unknown_documents="keep")
    return corpus, {qid: queries[qid] for qid in qrels}, qrels, report
