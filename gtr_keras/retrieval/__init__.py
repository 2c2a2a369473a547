"""Retrieval, a model over an index: `index` (`Index`, an index directory and its model as one object),
`index_building` (index directories built), `retriever` (`Retriever`: one loaded and searched),
`index_updates` (updates of an index directory: its search index, documents and BM25 side),
`hybrid_retriever` (`HybridRetriever`: GTR, BM25 or both), `runs` (runs over a collection, BM25 beside GTR,
hard-negative mining), `reranking` (a reranker's second stage over any of them), `evaluator` (`evaluate`: a
model or an `Index` on a BEIR collection), `index_handle` (`IndexHandle`, `Index`'s base: documents by id, its
files checked, closing), `index_types` (what `Index` takes and answers, typed), `passages` (a passages index's
window rows, searched as documents) and `encoding/`
(`beam_pipeline`: corpus encoding with Apache Beam).

Public names: what `gtr_keras.Index` answers: `Hit` (a search hit), `Document` (a document by id) and
`IndexUpdate` (what an update changed). `Index` and `evaluate` are `gtr_keras`'; the steps `Index` runs
(`build_index`, `update_index`, `Retriever`, ...) are internal.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "Hit": "gtr_keras.retrieval.index_types",
        "Document": "gtr_keras.retrieval.index_types",
        "IndexUpdate": "gtr_keras.retrieval.index_types",
    },
)
