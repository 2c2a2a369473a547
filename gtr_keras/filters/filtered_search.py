"""The planner of filtered search: the top `k` allowed rows of an index, exact or by ScaNN, in each part.

An index's rows (the live rows of its segments or shards, in order) are allowed or not by a bool mask
(`MetadataColumns.allowed`). Each part answers its own top `k` among its allowed rows, and the answers are
merged by score, equal scores ordered by id as `exact_search` does:

- an exact part scores its allowed rows only: gathered when they are few, their float32 vectors scored (the
  answer is brute force over the filtered subset); the others masked out otherwise, in the part's own scoring
  (float32, or int8 or binary codes rescored with float32: `storage/quantized_vectors.py`);
- a ScaNN part whose allowed rows are at most `EXACT_FRACTION` of its rows, or fewer than `EXACT_ROWS`, scores
  them all on its int8 vectors (those ScaNN reorders on), the best rescored with float32 as its searches are;
  above, ScaNN is asked for `k / fraction` candidates and a few more, in its int8 order, of which the allowed
  ones are kept and the best `SearchIndex.rescore_pool(k)` of those rescored with float32 (not the pool of
  every candidate, most of them thrown away); a query left with fewer than `k` allowed ones is asked again for
  twice as many, up to `_WIDENINGS` times, then its allowed rows are scored exactly. No query gets fewer than
  `k` hits while `k` allowed rows exist.

The thresholds come from `benchmarks/filtered_search.py` (benchmarks/RESULTS.md, "Filtered search").
"""

import math
import os
import weakref

import numpy as np

from gtr_keras.errors import UserError
from gtr_keras.storage import exact_search
from gtr_keras.storage.layout import SCANN_DIR, check_embeddings
from gtr_keras.utils import files
from gtr_keras.utils.records import check_positive_int

# A ScaNN part scores its allowed rows exactly when they are at most this fraction of its rows, or fewer than
# EXACT_ROWS: at 1M x 768 the exact plan is as fast or faster at 10% (65 against 46 QPS, 95 against 95) and far
# slower at 50% (12 against 182, 18 against 352): they cross between 10% and 12% (benchmarks/RESULTS.md,
# "Filtered search").
EXACT_FRACTION = 0.125
EXACT_ROWS = 20_000
# An exact part gathers its allowed rows (rather than masking the others) up to this many.
_GATHER_ROWS = 262_144
_MARGIN = 3
_WIDENINGS = 3
_INT8 = weakref.WeakKeyDictionary()


def filtered_search(index, query_embeddings, k, allowed):
    """The top `k` rows of `index` among those `allowed`, per query, best first.

    Args:
        index: a `SearchIndex` or `SegmentedIndex` (`SearchIndex.load`).
        query_embeddings: float `[n, D]`.
        k: int >= 1; `min(k, allowed rows)` are returned.
        allowed: bool `[N]`, the rows of `index` (its `ids`' order) that may be returned.

    Returns:
        `(indices, scores)`: int64 `[n, min(k, allowed rows)]` rows into `index.ids` and their float32 scores.

    Example:
    >>> index = SearchIndex(["d0", "d1", "d2"], np.eye(3, dtype="float32"))
    >>> filtered_search(index, np.array([[1.0, 0.0, 0.0]], "float32"), 1, np.array([False, True, True]))[0]
    array([[2]])
    """
    queries = check_embeddings(query_embeddings, "query_embeddings")
    if queries.shape[1] != index.dims:
        raise UserError(f"query_embeddings have {queries.shape[1]} dims, the index has {index.dims}.")
    allowed = np.asarray(allowed, bool)
    if allowed.shape != (len(index.ids),):
        raise UserError(f"allowed must be a bool mask of the index's {len(index.ids)} rows, got {allowed.shape}")
    k = min(check_positive_int(k, "k"), int(allowed.sum()))
    if not k or not len(queries):
        return np.empty((len(queries), k), np.int64), np.empty((len(queries), k), np.float32)
    rows, scores, offset = [], [], 0
    for part, deleted in index.parts:
        live = np.ones(len(part.ids), bool) if deleted is None else ~deleted
        whole = np.cumsum(live) - 1 + offset
        part_allowed = np.zeros(len(part.ids), bool)
        part_allowed[live] = allowed[offset : offset + int(live.sum())]
        offset += int(live.sum())
        part_k = min(k, int(part_allowed.sum()))
        if part_k:
            part_rows, part_scores = _search_part(part, queries, part_k, part_allowed)
            rows.append(whole[part_rows])
            scores.append(part_scores)
    rows, scores = np.concatenate(rows, axis=1), np.concatenate(scores, axis=1)
    order = np.lexsort((index.tie_ranks[rows], -scores), axis=-1)[:, :k]
    return np.take_along_axis(rows, order, axis=1), np.take_along_axis(scores, order, axis=1)


def plans_exact(num_allowed, num_rows):
    """Whether the planner scores a ScaNN part's `num_allowed` of `num_rows` rows exactly."""
    return num_allowed <= max(EXACT_ROWS, EXACT_FRACTION * num_rows)


def _search_part(part, queries, k, allowed):
    if part.kind == "exact":
        if allowed.sum() <= _GATHER_ROWS:
            return _gathered(part.embeddings, queries, k, allowed, part.tie_ranks)
        return part.vectors.top_k(queries, k, part.tie_ranks, ~allowed)
    n, num_allowed = len(part.ids), int(allowed.sum())
    if plans_exact(num_allowed, n):
        return _exact_int8(part, queries, k, allowed)
    rows = np.empty((len(queries), k), np.int64)
    scores = np.empty((len(queries), k), np.float32)
    pending = np.arange(len(queries))
    fetch = math.ceil(k * n / num_allowed) + _MARGIN
    for _ in range(_WIDENINGS + 1):
        found_rows, found_scores = part.candidates(queries[pending], min(fetch, n), min(fetch, n))
        keep = allowed[found_rows] & ~np.isnan(found_scores)
        first = np.argsort(~keep, axis=1, kind="stable")[:, : part.rescore_pool(k)]  # the allowed, in int8 order
        full = keep.sum(axis=1) >= k
        kept_scores = np.where(
            np.take_along_axis(keep, first, axis=1), np.take_along_axis(found_scores, first, axis=1), np.nan
        )
        rows[pending[full]], scores[pending[full]] = part.rescored(
            queries[pending[full]], np.take_along_axis(found_rows, first, axis=1)[full], kept_scores[full], k
        )
        pending = pending[~full]
        if not len(pending) or fetch >= n:
            break
        fetch *= 2
    if len(pending):
        rows[pending], scores[pending] = _exact_int8(part, queries[pending], k, allowed)
    return rows, scores


def _gathered(vectors, queries, k, allowed, ranks):
    chosen = np.flatnonzero(allowed)
    found, scores = exact_search.exact_top_k(vectors[chosen], queries, k, ranks[chosen])
    return chosen[found], scores


def _exact_int8(part, queries, k, allowed):
    """Exact scores of a ScaNN part's allowed rows on its int8 vectors (ScaNN's reordering scores), the best
    `rescore_pool(k)` rescored with float32 where the part keeps them (`SearchIndex.rescored`)."""
    vectors, multipliers = _int8_vectors(part)
    pool = min(part.rescore_pool(k), int(allowed.sum()))
    return part.rescored(queries, *_gathered(vectors, queries / multipliers, pool, allowed, part.tie_ranks), k)


def _int8_vectors(part):
    """A ScaNN part's int8 vectors and their per-dimension multipliers (vector = int8 / multipliers):
    memory-mapped from a local index, read once otherwise."""
    if part not in _INT8:
        if part.path is not None and files.is_local(part.path):
            _INT8[part] = _read_int8(os.path.join(part.path.removeprefix("file://"), SCANN_DIR), "r")
        elif part.path is not None:
            with files.local_copy(os.path.join(part.path, SCANN_DIR)) as local:
                _INT8[part] = _read_int8(local, None)
        else:
            with files.temporary_directory("gtr-keras-int8-") as scratch:
                part._searcher.serialize(os.fspath(scratch), True)
                _INT8[part] = _read_int8(scratch, None)
    return _INT8[part]


def _read_int8(directory, mmap_mode):
    vectors = np.load(os.path.join(directory, "int8_dataset.npy"), mmap_mode=mmap_mode)
    return vectors, np.load(os.path.join(directory, "int8_multipliers.npy")).astype(np.float32)
