"""`HybridRetriever`: text queries answered from an index directory by GTR, by its BM25 side, or by both
fused (`fusion.Fusion`)."""

from gtr_keras.errors import UserError
from gtr_keras.lexical.bm25_side import load_bm25_side
from gtr_keras.lexical.fusion import Fusion
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.retrieval.runs import EVALUATION_DEPTH
from gtr_keras.utils.records import check_positive_int

RETRIEVERS = ("gtr", "bm25", "hybrid")


class HybridRetriever:
    """Searches an index with GTR, BM25 or both.

    For `"hybrid"`, each side retrieves `max(k, depth)` documents per query
    (default 1000, the depth `evaluate` fuses at, so that a search's ranking
    is the evaluated one cut at `k`), `fusion` fuses them, and the fused list
    is cut at `k`.

    Args:
        retriever: the index's `Retriever` (GTR; its encoder may be None for BM25 search alone).
        bm25: the index's `BM25Retriever` (`bm25_side.load_bm25_side`).
        fusion: the `Fusion` of the two (default `Fusion()`; `fusion.model_fusion` gives a model's).
        depth: documents each side retrieves before fusion.

    Example:
    >>> encoder = gtr_keras.load("gtr-small-distilled")
    >>> hybrid = HybridRetriever.load("indexes/scifact", encoder, model_fusion("gtr-small-distilled"))
    >>> hybrid.search(["does vitamin D prevent fractures?"], k=5)[0][0]["id"]
    """

    def __init__(self, retriever, bm25, fusion=None, depth=EVALUATION_DEPTH):
        self.retriever = retriever
        self.bm25 = bm25
        self.fusion = fusion or Fusion()
        self.depth = check_positive_int(depth, "depth")

    def get_config(self):
        return {"fusion": self.fusion.get_config(), "depth": self.depth}

    @classmethod
    def load(cls, index_dir, encoder, fusion=None, depth=EVALUATION_DEPTH):
        """A `HybridRetriever` of an index directory with a BM25 side (`encoder` None: BM25 search alone).

        Raises:
            DataError: a missing or malformed index directory, or one without a BM25 side.
            MismatchError: the index was built with another model, or its BM25 side holds other ids or texts.
        """
        retriever = Retriever.load(index_dir, encoder)
        return cls(retriever, load_bm25_side(index_dir, retriever.index.ids, retriever.corpus), fusion, depth)

    def search(self, queries, k=10, retriever="hybrid"):
        """Top-`k` hits per query by `retriever` (`"gtr"`, `"bm25"` or `"hybrid"`): lists of
        `{"id", "score", "title", "text"}`; a hybrid hit's score is its fused score."""
        if retriever not in RETRIEVERS:
            raise UserError(f"retriever must be one of {RETRIEVERS}, got {retriever!r}")
        if retriever != "bm25" and self.retriever.encoder is None:
            raise UserError(f"{retriever} search needs the model the index was built with")
        queries, k = list(queries), check_positive_int(k, "k")
        if retriever == "gtr":
            return self.retriever.search(queries, k)
        if retriever == "bm25":
            return self.retriever.hits(*self.bm25.search(queries, k))
        depth = max(k, self.depth)
        gtr_ids, gtr_scores = self.retriever.index.search_ids(self.retriever.encoder.encode_queries(queries), depth)
        bm25_ids, bm25_scores = self.bm25.search(queries, depth)
        ids, scores = [], []
        for row in zip(gtr_ids, gtr_scores, bm25_ids, bm25_scores):
            fused = list(self.fusion.fuse(dict(zip(row[0], row[1].tolist())), dict(zip(row[2], row[3]))).items())
            ids.append([doc_id for doc_id, _ in fused[:k]])
            scores.append([score for _, score in fused[:k]])
        return self.retriever.hits(ids, scores)
