"""Retrieval: `readers` (BEIR collections and text files), the search index in `index_format` (its
files: ids, vectors, the format version), `exact_search` (batched dot products, ties in trec_eval's order),
`scann_builder` (ScaNN's parameters, built a chunk at a time) and `search_index` (`SearchIndex`:
exact or ScaNN, and `write_search_index`), `embedding_files` (`EmbeddingFiles`, precomputed embedding
shards as an index's source), `shards` (`ShardWriter`, resumable encode shards), `retriever` (index
directories: build, load, search), the updates of an index in place: `segments` (its manifest, deletion
lists and documents), `segmented_index` (`SegmentedIndex`: segments or shards searched as one),
`segment_writer` (updates and compaction of a search index) and `index_updates` (of an index directory),
`runs` (runs over a collection, BM25 beside GTR, hard-negative mining), `evaluation` (pytrec_eval metrics,
TREC run files), `bm25` (the bm25s baseline) and `beam_pipeline` (corpus encoding with Apache Beam)."""
