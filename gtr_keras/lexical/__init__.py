"""Lexical search and fusion: `bm25` (the bm25s baseline), `bm25_side` (an index's BM25 side, kept in step
with its documents) and `fusion` (`Fusion`, a model's fusion of GTR and BM25 scores).

Public names: `BM25Retriever` (BM25 alone, over a corpus); `Fusion` is `gtr_keras`'.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "BM25Retriever": "gtr_keras.lexical.bm25",
    },
)
