"""`HybridRetriever`: text queries answered by GTR, by BM25, or by both fused (`fusion.Fusion`): the one
hybrid path of `search` (an index directory and its BM25 side), `evaluate` (a collection's corpus, indexed in
memory: `of_corpus`) and the Python API."""

from gtr_keras.errors import UserError
from gtr_keras.lexical.bm25 import BM25Retriever
from gtr_keras.lexical.bm25_side import load_bm25_side
from gtr_keras.lexical.fusion import Fusion
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.retrieval.runs import EVALUATION_DEPTH
from gtr_keras.storage.search_index import SearchIndex
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
    >>> encoder = gtr_keras.load("gtr_small_distilled_en")
    >>> hybrid = HybridRetriever.load("indexes/scifact", encoder, model_fusion("gtr_small_distilled_en"))
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

    @classmethod
    def of_corpus(cls, encoder, corpus, fusion=None, batch_size=32, progress=None, depth=EVALUATION_DEPTH):
        """A `HybridRetriever` of a `Corpus` indexed in memory: exact GTR search and BM25 (what `evaluate` runs).

        Example:
        >>> corpus, queries, qrels, _ = load_dataset("data/scifact")
        >>> run = HybridRetriever.of_corpus(encoder, corpus, model_fusion("gtr_small_distilled_en")).run(queries)
        """
        index = SearchIndex(corpus.ids, encoder.encode_documents(corpus.joined(), batch_size, progress), "exact")
        bm25 = BM25Retriever()
        bm25.index(corpus.joined(), corpus.ids)
        return cls(Retriever(encoder, index, corpus), bm25, fusion, depth)

    def run(self, queries, depth=None, retriever="hybrid", ignore_identical_ids=True, batch_size=32, allowed=None):
        """A run `{qid: {doc_id: score}}` of `queries` (`{qid: text}`) by `retriever`, `depth` deep (default:
        this retriever's), in rank order. With `ignore_identical_ids`, a document whose id is its query's is
        left out before each side is cut at `depth` (BEIR's rule); the hybrid run fuses the two sides' runs.
        With `allowed` (`Retriever.allowed` of a filter), each side sees only the documents it allows.
        """
        self._check(retriever)
        depth = check_positive_int(depth or self.depth, "depth")
        query_ids = list(queries)
        texts, extra = [queries[q] for q in query_ids], int(ignore_identical_ids)
        sides = {}
        if retriever != "bm25":
            embeddings = self.retriever.encoder.encode_queries(texts, batch_size)
            sides["gtr"] = self.retriever.search_ids(embeddings, depth + extra, allowed)
        if retriever != "gtr":
            sides["bm25"] = self.bm25.search(texts, depth + extra, allowed)
        runs = {}
        for side, (ids, scores) in sides.items():
            runs[side] = {}
            for qid, row_ids, row_scores in zip(query_ids, ids, scores):
                kept = [(d, float(s)) for d, s in zip(row_ids, row_scores) if not (ignore_identical_ids and d == qid)]
                runs[side][qid] = dict(kept[:depth])
        if retriever != "hybrid":
            return runs[retriever]
        return self.fusion.fuse_runs(runs["gtr"], runs["bm25"], depth)

    def search(self, queries, k=10, retriever="hybrid", filter=None):
        """Top-`k` hits per query by `retriever` (`"gtr"`, `"bm25"` or `"hybrid"`): lists of
        `{"id", "score", "title", "text"}`; a hybrid hit's score is its fused score.

        With `filter` (as `Retriever.search` takes), each side sees only the documents it allows, so the
        fusion ranks within the filter."""
        self._check(retriever)
        queries, k = list(queries), check_positive_int(k, "k")
        if retriever == "gtr":
            return self.retriever.search(queries, k, filter)
        allowed = self.retriever.allowed(filter)
        if retriever == "bm25":
            return self.retriever.hits(*self.bm25.search(queries, k, allowed))
        run = self.run(
            dict(enumerate(queries)), max(k, self.depth), retriever, ignore_identical_ids=False, allowed=allowed
        )
        ids = [list(run[i])[:k] for i in range(len(queries))]
        return self.retriever.hits(ids, [[run[i][d] for d in row] for i, row in enumerate(ids)])

    def _check(self, retriever):
        if retriever not in RETRIEVERS:
            raise UserError(f"retriever must be one of {RETRIEVERS}, got {retriever!r}")
        if retriever != "bm25" and self.retriever.encoder is None:
            raise UserError(f"{retriever} search needs the model the index was built with")
