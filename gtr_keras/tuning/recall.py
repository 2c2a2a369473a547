"""Recall of a search setting measured against exact search: the exact twin of an index (its float32 vectors,
or its int8 copy decoded), the queries split into tuning and held-out halves with their exact answers, and
recall@k and QPS measured on them.
"""

import math
import os
import time

import numpy as np

from gtr_keras.storage.layout import (
    EMBEDDINGS_NPY,
    SCANN_DIR,
    SCANN_INT8_DATASET,
    SCANN_INT8_MULTIPLIERS,
)
from gtr_keras.storage.quantized_vectors import FloatVectors
from gtr_keras.storage.search_index import SearchIndex
from gtr_keras.storage.segmented_index import SegmentedIndex

# A setting is tried on the held-out queries when its recall on the tuning queries is at least the target
# plus this many standard errors of their mean (one-sided 95%): `needed_recall`.
MARGIN_Z = 1.645


class DecodedRows:
    """The int8 rows of a ScaNN searcher decoded to float32 (`int8 / multiplier`, per dimension), a slice at a
    time: what ScaNN reorders with, and the truth of an index that keeps no float32 vectors."""

    def __init__(self, scann_dir):
        self.codes = np.load(os.path.join(scann_dir, SCANN_INT8_DATASET), mmap_mode="r")
        self.multipliers = np.load(os.path.join(scann_dir, SCANN_INT8_MULTIPLIERS))
        self.shape = self.codes.shape

    def __getitem__(self, rows):
        return np.asarray(self.codes[rows], dtype=np.float32) / self.multipliers


def read_in_order(index):
    """The float32 vectors of one loaded index to read through, block by block: its `embeddings.npy` mapped
    anew (a search's map reads at random, without read-ahead), or the array it holds; None without them."""
    if index.embeddings is None or index.path is None:
        return index.embeddings
    return np.load(os.path.join(index.path, EMBEDDINGS_NPY), mmap_mode="r")


def exact_twin(index):
    """`(twin, float32)`: an exact index over the float32 vectors of `index` (where a ScaNN part keeps none, its
    int8 copy decoded; `float32` is then False), its rows numbered as `index`'s."""
    twins, float32 = [], True
    for part, deleted in index.parts:
        floats = read_in_order(part)
        if floats is None:
            floats, float32 = DecodedRows(os.path.join(part.path, SCANN_DIR)), False
        twins.append((SearchIndex.from_vectors(part.ids, FloatVectors(floats)), deleted))
    return (twins[0][0] if not isinstance(index, SegmentedIndex) else SegmentedIndex(twins, index.names)), float32


def _sampled_rows(twin, rows):
    """The float32 vectors of live rows `rows` (sorted) of an exact index or `SegmentedIndex`."""
    out, first = [], 0
    for part, deleted in twin.parts:
        live = np.arange(len(part.ids)) if deleted is None else np.flatnonzero(~deleted)
        mine = rows[(rows >= first) & (rows < first + len(live))] - first
        out.append(np.asarray(part.embeddings[live[mine]], dtype=np.float32))
        first += len(live)
    return np.concatenate(out)


def _best_others(rows, own, k):
    """Each query's first `k` result rows that are not its own row (`own`; None: no query is an indexed row)."""
    if own is None:
        return rows[:, :k]
    others = rows != own[:, None]
    others[others.sum(axis=1) > k, -1] = False  # own row absent: the last one is the (k + 1)-th
    return rows[others].reshape(len(rows), k)


def per_query_recall(found, truth):
    """Each query's fraction of its true top `k` (`truth`, `[n, k]` rows) among its `found` rows (distinct)."""
    found, truth = np.asarray(found), np.asarray(truth)
    return (found[:, :, None] == truth[:, None, :]).any(axis=1).sum(axis=1) / truth.shape[1]


def recall_at_k(found, truth):
    """The mean fraction of each query's true top `k` (`truth`, `[n, k]` rows) among its `found` rows."""
    return float(np.mean(per_query_recall(found, truth)))


def needed_recall(target, recalls, k):
    """The recall on the tuning queries (their per-query `recalls`) a setting needs to be tried held out: the
    target plus `MARGIN_Z` standard errors of their mean, the per-query variance taken as at least that of `k`
    independent neighbours found each with probability `target`, so that a sample too small to tell is refused.

    Example:
    >>> round(needed_recall(0.97, np.ones(100), 10), 4)
    0.9789
    """
    variance = max(float(np.var(recalls, ddof=1)) if len(recalls) > 1 else 0.0, target * (1 - target) / k)
    return target + MARGIN_Z * math.sqrt(variance / len(recalls))


class QuerySet:
    """Queries and their exact answers: `vectors`, `own` (each one's own row of the index, or None) and
    `truth` (`[n, k]` rows of the exact top `k`, own rows left out)."""

    def __init__(self, twin, vectors, own, k):
        self.vectors, self.own = vectors, own
        self.truth = _best_others(twin.search(vectors, k + (own is not None))[0], own, k)

    def __len__(self):
        return len(self.vectors)

    def found(self, index, k):
        return _best_others(index.search(self.vectors, k + (self.own is not None))[0], self.own, k)


def split_queries(twin, queries, sample, k):
    """`(tuning, held_out, description)`: two `QuerySet`s of one distribution, from held-out `queries` (float32
    `[n, D]`, n >= 2, shuffled with seed 0, then halved) or, without, from `sample` (>= 2) of `twin`'s rows (seed
    0)."""
    rng = np.random.default_rng(0)
    if queries is None:
        picked = rng.choice(len(twin.ids), min(sample, len(twin.ids)), replace=False)
        halves = [np.sort(picked[: len(picked) - len(picked) // 2]), np.sort(picked[len(picked) - len(picked) // 2 :])]
        sets = [QuerySet(twin, _sampled_rows(twin, half), half, k) for half in halves]
        described = (
            f"{len(picked)} of the index's rows as queries, sampled (seed 0): document rows, each left out of its "
            "own answer, not real queries"
        )
    else:
        order = rng.permutation(len(queries))
        cut = len(queries) - len(queries) // 2
        sets = [QuerySet(twin, queries[np.sort(half)], None, k) for half in np.split(order, [cut])]
        described = f"{len(queries)} held-out query vectors"
    return sets[0], sets[1], described


def measure(index, queries, k, repeats=2):
    """`(per-query recall@k, QPS)` of `index`'s current setting on a `QuerySet` (QPS None for `repeats=0`)."""
    recalls = per_query_recall(queries.found(index, k), queries.truth)
    elapsed = []
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(queries.vectors, k)
        elapsed.append(time.perf_counter() - start)
    return recalls, len(queries) / max(min(elapsed), 1e-9) if elapsed else None
