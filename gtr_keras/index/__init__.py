"""The search index and its lifecycle, with no model and no TensorFlow: `layout` (every file and folder name
of an index, the format version), `exact_search` (batched dot products, ties in trec_eval's order),
`quantized_vectors` (an exact index's float32, int8 or binary vectors and their scoring, rescored with
float32, and the float32 rows that rescore ScaNN's candidates too), `scann_builder` (ScaNN's parameters,
built a chunk at a time), `search_index` (`SearchIndex`: exact or ScaNN, and `write_search_index`),
`embedding_files` (`EmbeddingFiles`, precomputed embedding files as an index's source), `resumable_encoding`
(`ResumableEncoding`, a corpus's embeddings written a piece at a time, resumable), and the updates of an index
in place: `segments` (its manifest, deletion lists and documents), `segmented_index` (`SegmentedIndex`:
segments or shards searched as one) and `segment_writer` (updates and compaction of a search index).

Example:
>>> from gtr_keras.index import SearchIndex
>>> SearchIndex.load("indexes/msmarco").search_ids(query_embeddings, 10)
>>> SearchIndex.load(["indexes/msmarco-a", "indexes/msmarco-b"]).search_ids(query_embeddings, 10)  # shards
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "SearchIndex": "gtr_keras.index.search_index",
        "ArrayRows": "gtr_keras.index.search_index",
        "write_search_index": "gtr_keras.index.search_index",
        "EmbeddingFiles": "gtr_keras.index.embedding_files",
        "scann_params": "gtr_keras.index.scann_builder",
        "exact_top_k": "gtr_keras.index.exact_search",
        "vector_params": "gtr_keras.index.quantized_vectors",
        "read_description": "gtr_keras.index.layout",
        "EMBEDDINGS_NPY": "gtr_keras.index.layout",
        "INDEX_SUBDIR": "gtr_keras.index.layout",
        "BM25_SUBDIR": "gtr_keras.index.layout",
        "update_search_index": "gtr_keras.index.segment_writer",
        "compact_search_index": "gtr_keras.index.segment_writer",
    },
)
