"""Retrieval, a model over an index: `retriever` (index directories: build, load, search), `index_updates`
(updates of an index directory: its search index, documents and BM25 side), `hybrid_retriever`
(`HybridRetriever`: GTR, BM25 or both), `runs` (runs over a collection, BM25 beside GTR, hard-negative
mining), `reranking` (a reranker's second stage over any of them) and `beam_pipeline` (corpus encoding with
Apache Beam)."""
