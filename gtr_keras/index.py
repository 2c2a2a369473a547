"""`gtr_keras.index`: the name under which earlier releases kept `SearchIndex` (now `gtr_keras.retrieval.search_index`).

Example:
>>> from gtr_keras.index import SearchIndex
>>> SearchIndex.load("indexes/msmarco").search_ids(query_embeddings, 10)
>>> SearchIndex.load(["indexes/msmarco-a", "indexes/msmarco-b"]).search_ids(query_embeddings, 10)  # shards
"""

from gtr_keras.retrieval.scann_builder import scann_params  # noqa: F401
from gtr_keras.retrieval.search_index import SearchIndex, write_search_index  # noqa: F401

__all__ = ["SearchIndex", "scann_params", "write_search_index"]
