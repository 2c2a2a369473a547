"""Retrieval, a model over an index: `index` (`Index`, an index directory and its model as one object),
`index_building` (index directories built), `retriever` (`Retriever`: one loaded and searched),
`index_updates` (updates of an index directory: its search index, documents and BM25 side),
`hybrid_retriever` (`HybridRetriever`: GTR, BM25 or both), `runs` (runs over a collection, BM25 beside GTR,
hard-negative mining), `reranking` (a reranker's second stage over any of them), `evaluator` (`evaluate`: a
model or an `Index` on a BEIR collection), `index_handle` (`IndexHandle`, `Index`'s base: documents by id, its
files checked, closing), `index_types` (what `Index` takes and answers, typed) and `encoding/`
(`beam_pipeline`: corpus encoding with Apache Beam).

Public names: `Index` (the one object of an index directory), `Hit`, `Document` and `IndexUpdate` (what it
answers: a search hit, a document by id, what an update changed), `evaluate`, `retrieval_run`, `load_dataset`,
`gtr_run`, `bm25_run`, `mine_negatives`, `EVALUATION_DEPTH`, and the steps `Index` runs: `build_index`,
`index_embeddings`, `index_metadata`, `update_index`, `Retriever`, `HybridRetriever`, `RETRIEVERS`,
`encode_corpus_with_beam`, `index_from_shards`, `rerank`.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "Index": "gtr_keras.retrieval.index",
        "Hit": "gtr_keras.retrieval.index_types",
        "Document": "gtr_keras.retrieval.index_types",
        "IndexUpdate": "gtr_keras.retrieval.index_types",
        "evaluate": "gtr_keras.retrieval.evaluator",
        "retrieval_run": "gtr_keras.retrieval.evaluator",
        "load_dataset": "gtr_keras.retrieval.runs",
        "gtr_run": "gtr_keras.retrieval.runs",
        "bm25_run": "gtr_keras.retrieval.runs",
        "mine_negatives": "gtr_keras.retrieval.runs",
        "EVALUATION_DEPTH": "gtr_keras.retrieval.runs",
        "build_index": "gtr_keras.retrieval.index_building",
        "index_embeddings": "gtr_keras.retrieval.index_building",
        "index_metadata": "gtr_keras.retrieval.index_building",
        "update_index": "gtr_keras.retrieval.index_updates",
        "Retriever": "gtr_keras.retrieval.retriever",
        "HybridRetriever": "gtr_keras.retrieval.hybrid_retriever",
        "RETRIEVERS": "gtr_keras.retrieval.hybrid_retriever",
        "encode_corpus_with_beam": "gtr_keras.retrieval.encoding.beam_pipeline",
        "index_from_shards": "gtr_keras.retrieval.encoding.beam_pipeline",
        "rerank": "gtr_keras.retrieval.reranking",
    },
)
