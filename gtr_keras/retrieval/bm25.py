"""BM25 sparse baseline on `bm25s`."""

import bm25s
import numpy as np
import Stemmer

from gtr_keras.errors import UserError


class BM25Retriever:
    """Lexical BM25 retrieval with English stopwords and Snowball stemming.

    Args:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        method: the `bm25s` scoring variant (`"lucene"`, `"robertson"`, ...).
        show_progress: show `bm25s` progress bars.

    Example:
    >>> retriever = BM25Retriever()
    >>> retriever.index(["cats purr", "dogs bark"], ["d1", "d2"])
    >>> retriever.search(["barking dog"], k=1)[0]
    [['d2']]
    """

    def __init__(self, k1=1.5, b=0.75, method="lucene", show_progress=False):
        self._bm25 = bm25s.BM25(k1=k1, b=b, method=method)
        self._stemmer = Stemmer.Stemmer("english")
        self._show_progress = show_progress
        self._doc_ids = None

    def _tokenize(self, texts):
        return bm25s.tokenize(
            list(texts),
            stopwords="en",
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=self._show_progress,
        )

    def index(self, corpus_texts, corpus_ids):
        """Builds the index.

        Args:
            corpus_texts: document texts.
            corpus_ids: document ids, aligned with `corpus_texts`.
        """
        corpus_ids = list(corpus_ids)
        corpus_texts = list(corpus_texts)
        if len(corpus_texts) != len(corpus_ids):
            raise UserError(f"got {len(corpus_texts)} texts but {len(corpus_ids)} ids")
        if not corpus_ids:
            raise UserError("cannot index an empty corpus")
        self._bm25.index(self._tokenize(corpus_texts), show_progress=self._show_progress)
        self._doc_ids = np.asarray(corpus_ids, dtype=object)

    def search(self, queries, k):
        """Retrieves the best documents for each query.

        Only documents sharing a term with the query are returned (as in
        Lucene or Elasticsearch), so a query can get fewer than `k` results;
        `k` larger than the corpus is allowed.

        Args:
            queries: query texts.
            k: the most documents to return per query.

        Returns:
            `(ids, scores)`: per query, a list of at most `k` document ids,
            best first, and the list of their scores.
        """
        if self._doc_ids is None:
            raise RuntimeError("call index() before search()")
        if not queries:
            return [], []
        k = min(k, len(self._doc_ids))
        indices, scores = self._bm25.retrieve(self._tokenize(queries), k=k, show_progress=self._show_progress)
        ids, kept_scores = [], []
        for row_indices, row_scores in zip(indices, scores):
            matched = row_scores > 0
            ids.append(self._doc_ids[row_indices[matched]].tolist())
            kept_scores.append(row_scores[matched].tolist())
        return ids, kept_scores
