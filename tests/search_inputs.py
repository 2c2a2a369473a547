"""Unit vectors and ids for the tests of search indexes."""

import os

import numpy as np

from gtr_keras.storage.layout import SCANN_CODES, SCANN_PACKED_CODES, SCANN_PACKED_RECORD
from gtr_keras.storage.scann_codes import CodeRows

DIMS = 64


def unit_rows(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(n, seed, num_clusters=50, noise=1.0):
    """Unit vectors scattered around `num_clusters` fixed random centres."""
    centres = unit_rows(np.random.default_rng(0).standard_normal((num_clusters, DIMS)))
    rng = np.random.default_rng(seed)
    points = centres[rng.integers(num_clusters, size=n)]
    return unit_rows(points + noise * rng.standard_normal((n, DIMS)) / np.sqrt(DIMS))


def recall(found, exact):
    """Recall of each row of `found` against the same row of `exact`, averaged."""
    return np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(found, exact)])


def float32_truth(vectors, queries, k=10):
    """Each query's exact top `k` rows of `vectors` by float32 dot product: numpy brute force, what the recall of
    a search is counted against (equal scores in row order)."""
    return np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :k]


def float32_recall(index, ids, vectors, queries, k=10):
    """`(recall@k, hits, scores)` of `index.search_ids` (its current setting) against `float32_truth` of
    `vectors`, whose rows have `ids`."""
    found, scores = index.search_ids(queries, k)
    row = {doc_id: number for number, doc_id in enumerate(ids)}
    return recall([[row[i] for i in hits] for hits in found], float32_truth(vectors, queries, k)), found, scores


def assert_same_results(actual, expected, atol=1e-6):
    """Two search results alike: ids, titles and every other value exactly, floats (scores) to `atol`.

    Scores of the same vectors computed by another path (a compacted index against its segments, a batch of
    another size, another CPU's kernels) agree to float32 rounding, not bit for bit: on an AVX2-only CPU a
    compacted index's scores differ from its segments' in the 8th digit.
    """
    actual_floats, expected_floats = [], []
    assert _floats_apart(actual, actual_floats) == _floats_apart(expected, expected_floats)
    np.testing.assert_allclose(actual_floats, expected_floats, rtol=0, atol=atol)


def _floats_apart(value, floats):
    """`value` with each float (of nested dicts, lists, tuples and arrays) replaced by a mark, and added to
    `floats`."""
    if isinstance(value, dict):
        return {key: _floats_apart(item, floats) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_floats_apart(item, floats) for item in value]
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        floats.extend(value.ravel().tolist())
        return ("floats", value.shape)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (float, np.floating)):
        floats.append(float(value))
        return "float"
    return value


def unpack_codes_in_place(scann_dir):
    """Rewrites the packed AH codes of the ScaNN searcher in `scann_dir` a byte a code, as the indexes written
    before codes were packed hold them."""
    np.save(os.path.join(scann_dir, SCANN_CODES), CodeRows(scann_dir)[:])
    os.remove(os.path.join(scann_dir, SCANN_PACKED_CODES))
    os.remove(os.path.join(scann_dir, SCANN_PACKED_RECORD))


def doc_ids(n):
    return [f"doc-{i}" for i in range(n)]


# Shared by the tests of search indexes, which only read them.
CORPUS = clustered(3000, seed=1)
QUERIES = clustered(200, seed=2)
