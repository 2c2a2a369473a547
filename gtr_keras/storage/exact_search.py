"""Exact top-k search: batched dot products over float32 vectors, a block of rows at a time.

The vectors may be memory-mapped: no more than `_ROW_BLOCK` rows are read at
once, and no more than `_CHUNK_SCORES` scores held, whatever the corpus size.
"""

import numpy as np

# Exact search scores at most this many (query, passage) pairs at a time:
# 2**25 float32 scores is 128 MiB, whatever the corpus size.
_CHUNK_SCORES = 2**25
# ... and reads at most this many stored vectors at a time (24 MiB at D=768).
_ROW_BLOCK = 8192


def tie_ranks(id_bytes):
    """Each row's place when the ids (a numpy bytes array) are sorted in descending order: the order of
    equal scores in `exact_top_k`, as trec_eval (and `pytrec_eval`) rank tied documents.

    Example:
    >>> tie_ranks(np.array([b"b", b"c", b"a"])).tolist()
    [1, 0, 2]
    """
    ranks = np.empty(len(id_bytes), dtype=np.int64)
    ranks[np.argsort(id_bytes, kind="stable")[::-1]] = np.arange(len(id_bytes))
    return ranks


def _merge_top_k(best, candidates, scores, ranks, k):
    """The best `k` of two candidate lists, by score and then `ranks` (lower first)."""
    if best is not None:
        candidates, scores = np.concatenate([best[0], candidates]), np.concatenate([best[1], scores])
    order = np.lexsort((ranks[candidates], -scores))[:k]
    return candidates[order], scores[order]


def exact_top_k(vectors, queries, k, ranks, excluded=None):
    """Top-`k` rows of `vectors` by dot product, best first.

    Equal scores are ordered by `ranks` (lower first), also at the cut: with
    `tie_ranks` of the ids this is trec_eval's order, so which of several
    tied rows make the top `k` depends on their ids, never on their position
    in the corpus.

    Args:
        vectors: float `[N, D]` array, or a memory map of one.
        queries: float32 `[n, D]`.
        k: results per query, at most `N`.
        ranks: int64 `[N]`, the order of equal scores.
        excluded: bool `[N]` of rows never returned (the deleted rows of a
            segment), or None; `k` must be at most the rows not excluded.

    Returns:
        `(indices, scores)`: int64 `[n, k]` rows of `vectors` and their float32 dot products.

    Example:
    >>> exact_top_k(np.eye(3, dtype="float32"), np.array([[0, 1, 0]], "float32"), 1, np.arange(3))[0]
    array([[1]])
    """
    n = vectors.shape[0]
    indices = np.empty((len(queries), k), dtype=np.int64)
    scores = np.empty((len(queries), k), dtype=np.float32)
    row_chunk = max(k, min(n, _ROW_BLOCK))
    query_chunk = max(1, min(len(queries), _CHUNK_SCORES // row_chunk))
    for q_start in range(0, len(queries), query_chunk):
        block_queries = queries[q_start : q_start + query_chunk]
        best = [None] * len(block_queries)
        for r_start in range(0, n, row_chunk):
            block = block_queries @ np.asarray(vectors[r_start : r_start + row_chunk], dtype=np.float32).T
            if excluded is not None:
                block[:, excluded[r_start : r_start + row_chunk]] = -np.inf
            width = block.shape[1]
            cut = np.partition(block, width - k, axis=1)[:, width - k] if width > k else block.min(axis=1)
            for row, (row_scores, lowest) in enumerate(zip(block, cut)):
                candidates = np.flatnonzero(row_scores >= lowest)  # ties at the cut included
                best[row] = _merge_top_k(best[row], candidates + r_start, row_scores[candidates], ranks, k)
        for row, (row_indices, row_scores) in enumerate(best):
            indices[q_start + row], scores[q_start + row] = row_indices, row_scores
    return indices, scores
