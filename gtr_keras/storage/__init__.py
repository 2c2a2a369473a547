"""An index's storage, with no model and no TensorFlow (the `Index` over it is `gtr_keras.retrieval.index`):
`layout` (every file and folder name of an index, the format version), `exact_search` (batched dot products,
ties in trec_eval's order), `quantized_vectors` (an exact index's float32, int8 or binary vectors and their
scoring, rescored with float32, and the float32 rows that rescore ScaNN's candidates too), `scann_builder`
(ScaNN's parameters, built a chunk at a time), `search_index` (`SearchIndex`: exact or ScaNN, and
`write_search_index`), `embedding_files` (`EmbeddingFiles`, precomputed embedding files as an index's source),
`resumable_encoding` (`ResumableEncoding`, a corpus's embeddings written a piece at a time, resumable), and the
updates of an index in place: `segments` (its manifest, deletion lists and documents), `segmented_index`
(`SegmentedIndex`: segments or shards searched as one) and `segment_writer` (updates and compaction of a search
index).

Internal: no public names. An index is opened, searched and updated through `gtr_keras.Index`, which imports
neither TensorFlow nor Keras to search query vectors.

Example:
>>> from gtr_keras import Index
>>> Index.open("indexes/msmarco").search(query_embeddings, k=10)
>>> Index.open(["indexes/msmarco-a", "indexes/msmarco-b"]).search(query_embeddings, k=10)  # shards
"""
