import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from search_inputs import CORPUS, QUERIES, clustered, doc_ids, recall

from gtr_keras.errors import UserError
from gtr_keras.filters import filtered_search as planner
from gtr_keras.filters.filtered_search import filtered_search, plans_exact
from gtr_keras.storage.search_index import SearchIndex
from gtr_keras.storage.segmented_index import SegmentedIndex

SELECTIVITIES = [1.0, 0.5, 0.1, 0.01, 0.001, 1 / 3000]


def _brute_force(vectors, allowed, queries, k):
    """The top `k` allowed rows by score, ties by id descending (ids `doc-i`)."""
    rows = np.flatnonzero(allowed)
    scores = queries @ vectors[rows].T
    ids = np.array(doc_ids(len(vectors)), dtype="S")[rows]
    order = np.array([np.lexsort((-np.argsort(np.argsort(ids)), -row))[:k] for row in scores]).reshape(len(queries), -1)
    return rows[order], np.take_along_axis(scores, order, axis=1)


def _mask(n, selectivity, seed=0):
    allowed = np.random.default_rng(seed).random(n) < selectivity
    allowed[seed % n] = True
    return allowed


@pytest.mark.parametrize("selectivity", SELECTIVITIES)
def test_exact_filtered_search_is_brute_force_over_the_allowed_rows(selectivity):
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact")
    allowed = _mask(len(CORPUS), selectivity)
    rows, scores = filtered_search(index, QUERIES[:50], 10, allowed)
    expected_rows, expected_scores = _brute_force(CORPUS, allowed, QUERIES[:50], 10)
    assert rows.shape == (50, min(10, int(allowed.sum())))
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-6)


def test_exact_filtered_search_masks_rather_than_gathers_many_rows(monkeypatch):
    monkeypatch.setattr(planner, "_GATHER_ROWS", 10)
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact")
    allowed = _mask(len(CORPUS), 0.3)
    np.testing.assert_array_equal(
        filtered_search(index, QUERIES[:20], 10, allowed)[0], _brute_force(CORPUS, allowed, QUERIES[:20], 10)[0]
    )


@pytest.mark.parametrize("vectors", ["int8", "binary"])
@pytest.mark.parametrize("gather_rows", [10, 262_144])
def test_a_quantized_exact_index_filters_within_its_allowed_rows(monkeypatch, vectors, gather_rows):
    monkeypatch.setattr(planner, "_GATHER_ROWS", gather_rows)
    params = {"vectors": vectors, "rescore": len(CORPUS)}  # a pool of every row: rescoring is exact
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact", params=params)
    allowed = _mask(len(CORPUS), 0.3)
    rows, scores = filtered_search(index, QUERIES[:20], 10, allowed)
    expected_rows, expected_scores = _brute_force(CORPUS, allowed, QUERIES[:20], 10)
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-6)


def test_a_quantized_index_with_a_small_pool_returns_allowed_rows_only(monkeypatch):
    monkeypatch.setattr(planner, "_GATHER_ROWS", 10)
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact", params={"vectors": "binary", "rescore": 20})
    allowed = _mask(len(CORPUS), 0.3)
    rows, _ = filtered_search(index, QUERIES[:20], 10, allowed)
    assert rows.shape == (20, 10) and allowed[rows].all()
    assert recall(rows, _brute_force(CORPUS, allowed, QUERIES[:20], 10)[0]) > 0.5


@pytest.mark.parametrize("selectivity", [0.5, 0.01])
def test_segments_with_deletions_and_shards_filter_their_live_rows(selectivity):
    ids = doc_ids(len(CORPUS))
    deleted = np.zeros(1000, bool)
    deleted[::3] = True
    parts = [
        (SearchIndex(ids[:1000], CORPUS[:1000], kind="exact"), deleted),
        (SearchIndex(ids[1000:], CORPUS[1000:], kind="exact"), None),
    ]
    index = SegmentedIndex(parts)
    live = np.concatenate([~deleted, np.ones(2000, bool)])
    allowed = _mask(len(index.ids), selectivity)
    whole_allowed = np.zeros(len(CORPUS), bool)
    whole_allowed[np.flatnonzero(live)[allowed]] = True
    rows, _ = filtered_search(index, QUERIES[:30], 10, allowed)
    expected, _ = _brute_force(CORPUS, whole_allowed, QUERIES[:30], 10)
    assert [[index.ids[r] for r in row] for row in rows] == [[ids[r] for r in row] for row in expected]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 400), st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_random_masks_of_an_exact_index_give_brute_force(num_allowed, k, seed):
    rng = np.random.default_rng(seed)
    vectors = clustered(400, seed % 1000)
    allowed = np.zeros(400, bool)
    allowed[rng.choice(400, num_allowed, replace=False)] = True
    index = SearchIndex(doc_ids(400), vectors, kind="exact")
    rows, scores = filtered_search(index, QUERIES[:5], k, allowed)
    expected_rows, expected_scores = _brute_force(vectors, allowed, QUERIES[:5], k)
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def scann_index():
    return SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann", params={"num_leaves": 30, "num_leaves_to_search": 5})


@pytest.mark.parametrize("selectivity", SELECTIVITIES)
@pytest.mark.parametrize("exact_rows", [0, 10**9])
def test_scann_filtered_search_fills_k_with_allowed_rows_by_either_plan(
    scann_index, selectivity, exact_rows, monkeypatch
):
    monkeypatch.setattr(planner, "EXACT_ROWS", exact_rows)
    monkeypatch.setattr(planner, "EXACT_FRACTION", 0.0 if exact_rows == 0 else 1.0)
    allowed = _mask(len(CORPUS), selectivity)
    rows, _ = filtered_search(scann_index, QUERIES[:50], 10, allowed)
    assert rows.shape == (50, min(10, int(allowed.sum()))) and allowed[rows].all()
    assert all(len(set(row)) == len(row) for row in rows)
    assert recall(rows, _brute_force(CORPUS, allowed, QUERIES[:50], 10)[0]) >= 0.8  # 5 of 30 leaves searched


@pytest.mark.parametrize("plan", ["exact", "scann"])
def test_scann_filtered_search_rescored_with_float32_gives_exact_filtered_search(plan, monkeypatch):
    """Neighbours closer than int8 rounding, each plan forced: recall@10 against float32 brute force over the
    allowed rows, at each selectivity, and float32 scores; only the best `rescore_pool(k)` allowed candidates
    of a query are rescored with float32 (not every candidate fetched, most of them not allowed)."""
    corpus, queries = (
        clustered(4000, seed=41, num_clusters=40, noise=0.35),
        clustered(50, seed=42, num_clusters=40, noise=0.35),
    )
    params = {"num_leaves": 20, "num_leaves_to_search": 20, "reorder_factor": 50}
    index = SearchIndex(doc_ids(len(corpus)), corpus, kind="scann", params=params)
    monkeypatch.setattr(planner, "EXACT_ROWS", 10**9 if plan == "exact" else 0)
    monkeypatch.setattr(planner, "EXACT_FRACTION", 1.0 if plan == "exact" else 0.0)
    rescore, rescored = index.float_rows.rescore, []
    monkeypatch.setattr(index.float_rows, "rescore", lambda q, c, *args: rescored.append(c) or rescore(q, c, *args))
    for selectivity in (0.5, 0.1, 0.01):
        allowed = _mask(len(corpus), selectivity)
        rescored.clear()
        rows, scores = filtered_search(index, queries, 10, allowed)
        assert allowed[rows].all() and rescored
        assert all(c.shape[1] <= index.rescore_pool(10) and allowed[c[c >= 0]].all() for c in rescored)
        assert recall(rows, _brute_force(corpus, allowed, queries, 10)[0]) >= 0.995, selectivity
        np.testing.assert_allclose(scores, np.sum(queries[:, None] * corpus[rows], axis=-1), atol=1e-5)


def test_a_widening_that_falls_short_is_scored_exactly(scann_index, monkeypatch):
    monkeypatch.setattr(planner, "EXACT_ROWS", 0)
    monkeypatch.setattr(planner, "EXACT_FRACTION", 0.0)
    monkeypatch.setattr(planner, "_WIDENINGS", 0)
    allowed = np.zeros(len(CORPUS), bool)
    allowed[np.argsort(CORPUS @ QUERIES[0])[:200]] = True  # the rows farthest from the query
    rows, _ = filtered_search(scann_index, QUERIES[:1], 10, allowed)
    assert rows.shape == (1, 10) and allowed[rows].all()


def test_the_planner_scores_few_rows_exactly():
    assert plans_exact(planner.EXACT_ROWS, 10**6) and not plans_exact(10**6 // 2, 10**6)


def test_a_mask_of_another_length_or_no_allowed_row():
    index = SearchIndex(doc_ids(3), np.eye(3, dtype="float32"))
    with pytest.raises(UserError, match="bool mask of the index's 3 rows"):
        filtered_search(index, np.eye(3, dtype="float32"), 1, np.ones(2, bool))
    assert filtered_search(index, np.eye(3, dtype="float32"), 2, np.zeros(3, bool))[0].shape == (3, 0)


def test_scann_segments_with_deletions_return_allowed_live_rows_only(scann_index):
    ids = doc_ids(len(CORPUS))
    other = SearchIndex([f"x-{i}" for i in range(500)], clustered(500, seed=7), kind="scann", params={"num_leaves": 5})
    deleted = np.zeros(len(CORPUS), bool)
    deleted[::2] = True
    index = SegmentedIndex([(scann_index, deleted), (other, None)])
    allowed = _mask(len(index.ids), 0.2)
    rows, _ = filtered_search(index, QUERIES[:40], 10, allowed)
    assert rows.shape == (40, 10) and allowed[rows].all()
    assert not {index.ids[r] for r in rows.ravel()} & {ids[i] for i in np.flatnonzero(deleted)}
