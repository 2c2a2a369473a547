"""`SearchIndex` and `write_search_index`: search, save and load, streamed builds."""

import os

import numpy as np
import pytest
from search_inputs import CORPUS, DIMS, QUERIES, clustered, doc_ids, float32_truth, recall

from gtr_keras.errors import UserError
from gtr_keras.storage import quantized_vectors, search_index
from gtr_keras.storage.search_index import ArrayRows, SearchIndex, rescore_pool_size, write_search_index


@pytest.fixture(scope="module")
def scann_index():
    return SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann")


@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_k_larger_than_corpus_returns_every_row(kind):
    corpus = clustered(300, seed=3)
    index = SearchIndex(doc_ids(300), corpus, kind=kind)
    indices, scores = index.search(corpus[:4], k=1000)
    assert indices.shape == scores.shape == (4, 300)
    assert all(sorted(row) == list(range(300)) for row in indices)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)


def test_search_ids_maps_rows_to_ids():
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact")
    ids, scores = index.search_ids(CORPUS[[7, 42]], k=1)
    assert ids == [["doc-7"], ["doc-42"]]
    np.testing.assert_allclose(scores, 1.0, rtol=1e-5)


def test_auto_kind_uses_exact_for_small_corpora():
    assert SearchIndex(doc_ids(len(CORPUS)), CORPUS).kind == "exact"


@pytest.mark.parametrize("kind", ["exact", "scann", "scann-int8"])
def test_save_load_round_trip(kind, scann_index, tmp_path):
    if kind == "scann-int8":
        index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann", params={"reorder": "int8"})
    else:
        index = scann_index if kind == "scann" else SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact")
    index.save(tmp_path / "index")
    loaded = SearchIndex.load(tmp_path / "index")
    assert loaded.kind == kind.removesuffix("-int8")
    assert loaded.ids == index.ids
    assert loaded.params == index.params
    if kind == "exact":
        assert isinstance(loaded.embeddings, np.memmap)
    if kind == "scann-int8":
        assert loaded.embeddings is None and loaded.float_rows is None and "rescore_factor" not in loaded.params
        assert not (tmp_path / "index" / "embeddings.npy").exists()
    else:  # a ScaNN index rescores with its float32 vectors, memory-mapped
        np.testing.assert_array_equal(loaded.embeddings, CORPUS)
        np.testing.assert_array_equal(np.load(tmp_path / "index" / "embeddings.npy"), CORPUS)
    for want, got in zip(index.search(QUERIES, k=10), loaded.search(QUERIES, k=10)):
        np.testing.assert_array_equal(want, got)
    assert os.listdir(tmp_path) == ["index"]


@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_streamed_build_equals_the_in_memory_index(kind, tmp_path, monkeypatch):
    monkeypatch.setattr("gtr_keras.storage.search_index._BUILD_CHUNK_ROWS", 700)  # 5 chunks, the last one short
    params = None if kind == "exact" else {"num_leaves_to_search": 30, "reorder_factor": 300}
    assert write_search_index(ArrayRows(doc_ids(len(CORPUS)), CORPUS), tmp_path / "index", kind, params) == kind
    written = SearchIndex.load(tmp_path / "index")
    exact, _ = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact").search(QUERIES, k=10)
    indices, scores = written.search(QUERIES, k=10)
    if kind == "exact":
        np.testing.assert_array_equal(indices, exact)
    else:
        assert recall(indices, exact) >= 0.995  # rescored with float32: int8 alone swaps near-equal scores
        np.testing.assert_allclose(scores, np.sum(QUERIES[:, None] * CORPUS[indices], axis=-1), atol=1e-5)
    scann_files = sorted(os.listdir(tmp_path / "index" / "scann")) if kind == "scann" else []
    assert "dataset.npy" not in scann_files  # ScaNN keeps its int8 copy; the float32 one is `embeddings.npy`
    assert sorted(os.listdir(tmp_path)) == ["index"]


def test_rejects_mismatched_queries():
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact")
    with pytest.raises(UserError, match="query_embeddings have 65 dims, the index has 64"):
        index.search(np.ones((1, DIMS + 1), np.float32), k=1)
    with pytest.raises(ValueError, match="k must be"):
        index.search(CORPUS[:1], k=0)


@pytest.mark.parametrize(
    "kind, params, message",
    [
        ("fast", None, r"kind must be one of \('auto', 'exact', 'scann'\), got 'fast'"),
        ("exact", {"reorder_factor": 10}, "an exact index takes params 'vectors' and 'rescore' only"),
        ("exact", {"vectors": "int4"}, "vectors must be one of"),
    ],
)
def test_a_bad_kind_or_params_is_a_user_error(kind, params, message):
    with pytest.raises(UserError, match=message):
        SearchIndex(doc_ids(2), np.eye(2, dtype=np.float32), kind=kind, params=params)


def test_array_rows_refuse_ids_that_do_not_match_the_rows():
    with pytest.raises(UserError, match="Got 3 ids for 2 embedding rows"):
        ArrayRows(doc_ids(3), np.eye(2, dtype=np.float32))
    rows = ArrayRows(doc_ids(5), np.eye(5, dtype=np.float32), chunk_rows=2)
    assert [len(chunk) for chunk in rows.chunks()] == [2, 2, 1]


def test_a_scann_index_rescores_with_float32_or_reorders_on_int8_only():
    with pytest.raises(UserError, match="reorder must be 'float32' .* or 'int8' .*, got 'bfloat16'"):
        SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann", params={"reorder": "bfloat16"})
    with pytest.raises(UserError, match="rescore_factor needs the float32 vectors"):
        SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann", params={"reorder": "int8", "rescore_factor": 2})
    with pytest.raises(ValueError, match="rescore_factor must be an int >= 0 .0: no float32 rescoring., got -1"):
        SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann", params={"rescore_factor": -1})


def test_rescore_factor_0_answers_in_int8_order_reading_no_float32_row(scann_index, monkeypatch):
    """Issue 62: `rescore_factor` 0 (built so, or set) rescores nothing: ScaNN's top `k` in int8 order, its int8
    scores, the rows that rescoring int8's own top `k` (1) finds; every other setting stays a positive int."""
    built = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann", params={"rescore_factor": 0})
    assert built.params["rescore_factor"] == 0 and built.embeddings is not None
    scann_index.set_search_params({"rescore_factor": 1})
    rescored = scann_index.search(QUERIES, 10)
    scann_index.set_search_params({"rescore_factor": 0})
    monkeypatch.setattr(quantized_vectors.FloatRows, "rescore", lambda *args: pytest.fail("float32 read"))
    found, scores = scann_index.search(QUERIES, 10)
    assert scann_index.rescore_pool(10) == 10 and not scann_index.rescores
    np.testing.assert_array_equal(np.sort(found, axis=1), np.sort(rescored[0], axis=1))
    candidates, int8 = scann_index.candidates(QUERIES, 10, 10)
    np.testing.assert_array_equal(found, candidates)
    np.testing.assert_array_equal(scores, int8)
    for setting, message in (
        ({"rescore_factor": -1}, "rescore_factor must be an int >= 0"),
        ({"reorder_factor": 0}, "reorder_factor must be a positive int, got 0"),
        ({"num_leaves_to_search": 0}, "num_leaves_to_search must be a positive int"),
        ({"rescore_factor": 1.5}, "rescore_factor must be an int >= 0"),
    ):
        with pytest.raises(UserError, match=message):
            scann_index.set_search_params(setting)
    scann_index.set_search_params({"rescore_factor": search_index.scann_params(1)["rescore_factor"]})


@pytest.mark.parametrize("rescore_factor", [0, 4])
def test_a_batch_is_searched_in_chunks_of_bounded_candidates_with_the_answers_of_one_call(
    scann_index, monkeypatch, rescore_factor
):
    """Issue 62: ScaNN's working memory grows with queries times candidates reordered; `search` gives it a
    batch in chunks of at most `_SEARCH_CANDIDATES` of them, and answers as one call does."""
    scann_index.set_search_params({"rescore_factor": rescore_factor, "reorder_factor": 20})
    queries = np.concatenate([QUERIES] * 7)
    whole = scann_index.search(queries, 10)
    calls = []
    search = scann_index._scann_search
    monkeypatch.setattr(scann_index, "_scann_search", lambda *args: calls.append(len(args[0])) or search(*args))
    monkeypatch.setattr(search_index, "_SEARCH_CANDIDATES", 20 * 10 * 3)  # 3 queries a chunk
    chunked = scann_index.search(queries, 10)
    assert len(calls) == -(-len(queries) // 3) and max(calls) == 3
    np.testing.assert_array_equal(chunked[0], whole[0])
    np.testing.assert_array_equal(chunked[1], whole[1])
    scann_index.set_search_params(
        {name: search_index.scann_params(len(CORPUS))[name] for name in ("reorder_factor", "rescore_factor")}
    )


def test_the_search_params_of_an_index_without_float32_vectors_have_no_rescore_factor(scann_index):
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann", params={"reorder": "int8"})
    with pytest.raises(UserError, match="has no search parameter 'rescore_factor' .*reorder_factor\\)"):
        index.set_search_params({"rescore_factor": 2})
    with pytest.raises(UserError, match="keeps no float32 vectors"):
        index.live_embeddings()
    scann_index.set_search_params({"num_leaves_to_search": 3, "reorder_factor": 20})  # the keys of before
    scann_index.set_search_params({"rescore_factor": scann_index.params["rescore_factor"]})
    np.testing.assert_array_equal(scann_index.live_embeddings(), CORPUS)


def test_the_rescoring_pool_grows_by_at_most_a_band_past_k_and_keeps_recall_at_depth():
    """At depth 500 a rescore_factor of 2 rescores 600 candidates, not 1,000: recall@500 against numpy float32
    brute force stays what the full pool gives, on neighbours closer than int8 rounding (200 centres, noise
    0.35), where int8 order alone loses some."""
    corpus = clustered(6000, seed=5, num_clusters=200, noise=0.35)
    queries = clustered(50, seed=6, num_clusters=200, noise=0.35)
    index = SearchIndex(doc_ids(6000), corpus, kind="scann", params={"num_leaves": 20, "num_leaves_to_search": 20})
    index.set_search_params({"reorder_factor": 10, "rescore_factor": 2})
    assert (index.rescore_pool(10), index.rescore_pool(500), rescore_pool_size(500, 11)) == (20, 600, 1500)
    truth = float32_truth(corpus, queries, 500)
    assert recall(index.search(queries, 500)[0], truth) >= 0.999
    index.set_search_params({"rescore_factor": 1})
    assert recall(index.search(queries, 500)[0], truth) < 0.999


def test_leaves_that_fill_the_top_k_but_not_the_pool_are_not_searched_again(monkeypatch):
    """A pool larger than the rows of the leaves searched: the unfilled places are no candidates (not row 0,
    ScaNN's filler), and the query is not searched again over every leaf while its top `k` is filled."""
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann", params={"num_leaves": 30})
    index.set_search_params({"num_leaves_to_search": 1, "reorder_factor": 1, "rescore_factor": 20})
    leaves = []
    search = index._scann_search
    monkeypatch.setattr(index, "_scann_search", lambda *args: leaves.append(args[-1]) or search(*args))
    found, scores = index.search(CORPUS[[5, 6]], 10)
    assert np.isnan(search(CORPUS[[5, 6]], 200, 10, 1)[1]).any()  # the one leaf holds fewer than 200 rows
    # ScaNN's filler is row 0 again and again: ten distinct rows a query are candidates only (which leaf a
    # query's own row lies in varies with k-means from build to build, so its own row need not be among them).
    assert leaves == [1] and all(len(set(row)) == 10 for row in found)
    assert np.isfinite(scores).all() and (np.diff(scores, axis=1) <= 0).all()
    index.set_search_params({"rescore_factor": 1})
    found = index.search(CORPUS[[5, 6]], 300)[0]  # more than the leaf holds: every leaf searched
    assert leaves[1:] == [1, 30] and all(len(set(row)) == 300 for row in found)


@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_save_of_a_loaded_index_writes_its_float32_rows_a_chunk_at_a_time(kind, tmp_path, monkeypatch):
    write_search_index(
        ArrayRows(doc_ids(len(CORPUS)), CORPUS),
        tmp_path / "a",
        kind,
        {"num_leaves": 10} if kind == "scann" else {"vectors": "int8"},
    )
    written = []
    write = search_index.write_embeddings
    monkeypatch.setattr(search_index, "_BUILD_CHUNK_ROWS", 1000)
    monkeypatch.setattr(
        search_index,
        "write_embeddings",
        lambda path, chunks, *a: write(path, [written.append(len(c)) or c for c in chunks], *a),
    )
    if kind == "exact":
        monkeypatch.setattr(quantized_vectors, "write_embeddings", search_index.write_embeddings)
    SearchIndex.load(tmp_path / "a").save(tmp_path / "b")
    assert written == [1000, 1000, 1000]
    np.testing.assert_array_equal(np.load(tmp_path / "b" / "embeddings.npy"), CORPUS)
    for want, got in zip(
        SearchIndex.load(tmp_path / "a").search(QUERIES, 10), SearchIndex.load(tmp_path / "b").search(QUERIES, 10)
    ):
        np.testing.assert_array_equal(want, got)
