"""Unit vectors and ids for the tests of search indexes."""

import numpy as np

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


def doc_ids(n):
    return [f"doc-{i}" for i in range(n)]


# Shared by the tests of search indexes, which only read them.
CORPUS = clustered(3000, seed=1)
QUERIES = clustered(200, seed=2)
