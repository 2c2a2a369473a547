"""Filtered search: metadata predicates over an index's documents (docs/filters.md).

`expressions` (the filter syntax: `FIELD = VALUE`, `!=`, `in (...)`, `<`, `<=`, `>`, `>=`, and `Filter`, clauses
ANDed with an allow-list of ids), `metadata_columns` (`MetadataColumns`: the documents' metadata as one NumPy
column a field, which a filter turns into a mask of allowed rows) and `filtered_search` (the planner: exact
scoring of the allowed rows when they are few, else ScaNN with an over-fetch that widens until `k` allowed
hits are found, in each segment or shard).

Internal: no public names; a filter is `gtr_keras.Filter`, given to `Index.search`.
"""
