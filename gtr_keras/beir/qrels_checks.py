"""Judgements checked against their collection: `check_qrels` matches qrels with the corpus and the queries
and reports (`QrelsReport`) what it dropped or refused.
"""

import dataclasses

from gtr_keras.beir.readers import MAX_EXAMPLES
from gtr_keras.errors import UserError


@dataclasses.dataclass
class QrelsReport:
    """How `check_qrels` matched the judgements with the collection.

    Attributes:
        num_queries: queries in the qrels before checking.
        num_judgements: judgements in the qrels before checking.
        unknown_query_ids: judged queries missing from the queries, in order.
        unknown_doc_ids: judged documents missing from the corpus, in order.
        num_dropped_judgements: judgements removed from the qrels.
        num_kept_unknown_doc_judgements: judgements of documents missing
            from the corpus kept in the qrels (BEIR's rule: relevant
            documents never retrieved, so misses).
    """

    num_queries: int
    num_judgements: int
    unknown_query_ids: list
    unknown_doc_ids: list
    num_dropped_judgements: int
    num_kept_unknown_doc_judgements: int

    @property
    def ok(self):
        """True when every judged query and document is known."""
        return not (self.unknown_query_ids or self.unknown_doc_ids)

    def __str__(self):
        if self.ok:
            return f"qrels: all {self.num_queries} queries and {self.num_judgements} judgements match the collection"
        problems = []
        for ids, what in (
            (self.unknown_query_ids, "query id(s) not in the queries"),
            (self.unknown_doc_ids, "document id(s) not in the corpus"),
        ):
            if ids:
                examples = ", ".join(repr(i) for i in ids[:MAX_EXAMPLES])
                problems.append(f"{len(ids)} {what} (e.g. {examples})")
        if self.num_dropped_judgements:
            problems.append(f"dropped {self.num_dropped_judgements} of {self.num_judgements} judgements")
        if self.num_kept_unknown_doc_judgements:
            problems.append(
                f"kept {self.num_kept_unknown_doc_judgements} judgement(s) of "
                "absent documents as relevant, counted as misses (BEIR's rule)"
            )
        return f"qrels: {'; '.join(problems)}"


def check_qrels(qrels, corpus_ids, query_ids, unknown_documents="drop"):
    """Checks judgements against a collection, dropping what cannot be used.

    Judgements of queries missing from `query_ids` are dropped: a query
    without text has no results, and BEIR scores only queries with results.
    Judgements of documents missing from the corpus are dropped for training
    (`unknown_documents="drop"`: there is no text to train on), or kept for
    evaluation (`"keep"`) as BEIR and MTEB keep them: `pytrec_eval` counts
    them as relevant documents never retrieved, so dropping them would
    inflate the scores. Queries left with no judgement are removed. The
    report says what was found.

    Args:
        qrels: dict from query id to a dict from document id to score.
        corpus_ids: the ids of the corpus documents.
        query_ids: the ids of the queries.
        unknown_documents: `"drop"` or `"keep"` the judgements of documents
            missing from the corpus.

    Returns:
        `(checked_qrels, QrelsReport)`.

    Raises:
        UserError: `unknown_documents` is neither `"drop"` nor `"keep"`.

    Example:
    >>> qrels = {"q1": {"d1": 1, "d9": 1}, "q7": {"d1": 1}}
    >>> check_qrels(qrels, ["d1"], ["q1"])[0]
    {'q1': {'d1': 1}}
    >>> checked, report = check_qrels(qrels, ["d1"], ["q1"], unknown_documents="keep")
    >>> checked
    {'q1': {'d1': 1, 'd9': 1}}
    >>> report.unknown_query_ids, report.unknown_doc_ids
    (['q7'], ['d9'])
    """
    if unknown_documents not in ("drop", "keep"):
        raise UserError(f'unknown_documents must be "drop" or "keep", got {unknown_documents!r}')
    corpus_ids = set(corpus_ids)
    query_ids = set(query_ids)
    checked = {}
    unknown_queries = []
    unknown_docs = {}
    num_judgements = 0
    num_kept = 0
    num_kept_unknown = 0
    for query_id, judgements in qrels.items():
        num_judgements += len(judgements)
        if query_id not in query_ids:
            unknown_queries.append(query_id)
            continue
        kept = {}
        for doc_id, score in judgements.items():
            known = doc_id in corpus_ids
            if not known:
                unknown_docs.setdefault(doc_id, None)
            if known or unknown_documents == "keep":
                kept[doc_id] = score
                num_kept_unknown += not known
        if kept:
            checked[query_id] = kept
            num_kept += len(kept)
    report = QrelsReport(
        num_queries=len(qrels),
        num_judgements=num_judgements,
        unknown_query_ids=unknown_queries,
        unknown_doc_ids=list(unknown_docs),
        num_dropped_judgements=num_judgements - num_kept,
        num_kept_unknown_doc_judgements=num_kept_unknown,
    )
    return checked, report
