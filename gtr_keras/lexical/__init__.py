"""Lexical search and fusion: `bm25` (the bm25s baseline), `bm25_side` (an index's BM25 side, kept in step
with its documents) and `fusion` (`Fusion`, a model's fusion of GTR and BM25 scores)."""
