"""Filtered search: metadata predicates over an index's documents (docs/filters.md).

`expressions` (the filter syntax: `FIELD = VALUE`, `!=`, `in (...)`, `<`, `<=`, `>`, `>=`, and `Filter`, clauses
ANDed with an allow-list of ids), `metadata_columns` (`MetadataColumns`: the documents' metadata as one NumPy
column a field, which a filter turns into a mask of allowed rows) and `filtered_search` (the planner: exact
scoring of the allowed rows when they are few, else ScaNN with an over-fetch that widens until `k` allowed
hits are found, in each segment or shard).

Public names: `Filter`, `MetadataColumns`, `filtered_search`.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "Filter": "gtr_keras.filters.expressions",
        "MetadataColumns": "gtr_keras.filters.metadata_columns",
        "filtered_search": "gtr_keras.filters.filtered_search",
    },
)
