"""The oracle an engine's search is held to: NumPy float32 dot products over the rows a filter allows."""

import numpy as np


def filtered_brute_force(vectors, allowed, queries, k=None):
    """Per query, `(rows, scores)`: the rows of its `k` best scores (all of them for None) among the `allowed`
    rows, best first, ties in row order, and those scores."""
    results = []
    for query in queries:
        scores = vectors @ query
        rows = [row for row in np.argsort(-scores, kind="stable") if allowed[row]][:k]
        results.append((rows, scores[rows]))
    return results
