"""The search index and its lifecycle, with no model and no TensorFlow: `layout` (every file and folder name
of an index, the format version), `exact_search` (batched dot products, ties in trec_eval's order),
`quantized_vectors` (an exact index's float32, int8 or binary vectors and their scoring, rescored with
float32, and the float32 rows that rescore ScaNN's candidates too), `scann_builder` (ScaNN's parameters,
built a chunk at a time), `search_index` (`SearchIndex`: exact or ScaNN, and `write_search_index`),
`embedding_files` (`EmbeddingFiles`, precomputed embedding files as an index's source), `resumable_encoding`
(`ResumableEncoding`, a corpus's embeddings written a piece at a time, resumable), and the updates of an index
in place: `segments` (its manifest, deletion lists and documents), `segmented_index` (`SegmentedIndex`:
segments or shards searched as one) and `segment_writer` (updates and compaction of a search index).

`gtr_keras.index.SearchIndex` is also the name of earlier releases.

Example:
>>> from gtr_keras.index import SearchIndex
>>> SearchIndex.load("indexes/msmarco").search_ids(query_embeddings, 10)
>>> SearchIndex.load(["indexes/msmarco-a", "indexes/msmarco-b"]).search_ids(query_embeddings, 10)  # shards
"""

import importlib

_EXPORTS = {
    "SearchIndex": "gtr_keras.index.search_index",
    "write_search_index": "gtr_keras.index.search_index",
    "scann_params": "gtr_keras.index.scann_builder",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):  # imported on first use: `index.layout` alone costs no searcher
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gtr_keras.index' has no attribute {name!r}")
