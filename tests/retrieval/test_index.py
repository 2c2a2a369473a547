import json
import os

import numpy as np
import pytest

from gtr_keras.errors import DataError, MismatchError
from gtr_keras.retrieval.index import ArrayRows, SearchIndex, scann_params, write_search_index

DIMS = 64


def _unit_rows(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _clustered(n, seed, num_clusters=50, noise=1.0):
    """Unit vectors scattered around `num_clusters` fixed random centres."""
    centres = _unit_rows(np.random.default_rng(0).standard_normal((num_clusters, DIMS)))
    rng = np.random.default_rng(seed)
    points = centres[rng.integers(num_clusters, size=n)]
    return _unit_rows(points + noise * rng.standard_normal((n, DIMS)) / np.sqrt(DIMS))


def _recall(found, exact):
    return np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(found, exact)])


def _ids(n):
    return [f"doc-{i}" for i in range(n)]


@pytest.fixture(scope="module")
def corpus():
    return _clustered(3000, seed=1)


@pytest.fixture(scope="module")
def queries():
    return _clustered(200, seed=2)


@pytest.fixture(scope="module")
def scann_index(corpus):
    return SearchIndex(_ids(len(corpus)), corpus, kind="scann")


def test_exact_search_matches_naive_argsort(corpus, queries):
    index = SearchIndex(_ids(len(corpus)), corpus, kind="exact")
    indices, scores = index.search(queries, k=10)
    all_scores = queries @ corpus.T
    expected = np.argsort(-all_scores, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(all_scores, expected, axis=1), rtol=1e-6)
    assert indices.dtype == np.int64 and scores.dtype == np.float32


def _assert_same_results(expected, got):
    """The same documents in the same order; scores equal to float32 rounding (BLAS may round a product of
    other block shapes differently in the last bit, on some CPUs)."""
    np.testing.assert_array_equal(expected[0], got[0])
    np.testing.assert_allclose(expected[1], got[1], rtol=0, atol=1e-6)


def test_exact_search_chunks_queries(corpus, queries, monkeypatch):
    index = SearchIndex(_ids(len(corpus)), corpus, kind="exact")
    expected = index.search(queries, k=5)
    monkeypatch.setattr("gtr_keras.retrieval.index._EXACT_CHUNK_SCORES", 7 * len(corpus))
    _assert_same_results(expected, index.search(queries, k=5))


def test_exact_search_breaks_ties_by_id_descending_as_trec_eval():
    embeddings = np.array([[1, 0], [0, 1], [1, 0], [1, 0]], dtype=np.float32)
    index = SearchIndex(["b", "x", "a", "c"], embeddings, kind="exact")
    indices, _ = index.search(embeddings[:1], k=2)
    np.testing.assert_array_equal(indices, [[3, 0]])  # c, then b; a is cut


def test_ties_at_the_depth_cut_do_not_depend_on_corpus_order():
    """1,005 documents tied for every query, one judged relevant: the metrics at depth 1,000 are those of
    pytrec_eval on the full ranking, whatever the order of the corpus file."""
    import pytrec_eval

    from gtr_keras.retrieval.evaluation import evaluate_run, results_from_scores

    ids = [f"d{i:04d}" for i in range(1005)]
    qrels = {"q": {"d1004": 1}}
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate({"q": {i: 1.0 for i in ids}})
    for order in (ids, ids[::-1], list(np.random.default_rng(0).permutation(ids))):
        index = SearchIndex(order, np.tile([[1.0, 0.0]], (1005, 1)).astype("float32"), kind="exact")
        indices, scores = index.search(np.array([[1.0, 0.0]], "float32"), k=1000)
        metrics = evaluate_run(qrels, results_from_scores(["q"], order, indices, scores))
        assert metrics["ndcg@10"] == full["q"]["ndcg_cut_10"] == 1.0


def test_scann_recall_at_10(corpus, queries, scann_index):
    exact, _ = SearchIndex(_ids(len(corpus)), corpus, kind="exact").search(queries, k=10)
    approx, scores = scann_index.search(queries, k=10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact)])
    assert scann_index.kind == "scann"
    assert recall >= 0.95
    expected_scores = np.sum(queries[:, None] * corpus[approx], axis=-1)
    np.testing.assert_allclose(scores, expected_scores, atol=5e-3)  # reordered on int8 vectors


def test_scann_reads_search_params_at_search_time(corpus, queries):
    exact, _ = SearchIndex(_ids(len(corpus)), corpus, kind="exact").search(queries, k=10)
    params = {**scann_params(len(corpus)), "num_leaves_to_search": 1, "reorder_factor": 1}
    index = SearchIndex(_ids(len(corpus)), corpus, kind="scann", params=params)
    narrow, _ = index.search(queries, k=10)
    index.params.update(num_leaves_to_search=params["num_leaves"], reorder_factor=100)
    wide, _ = index.search(queries, k=10)
    assert _recall(narrow, exact) < 0.9
    assert _recall(wide, exact) > 0.98  # all leaves, 1000 candidates reordered on int8 vectors


@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_k_larger_than_corpus_returns_every_row(kind):
    corpus = _clustered(300, seed=3)
    index = SearchIndex(_ids(300), corpus, kind=kind)
    indices, scores = index.search(corpus[:4], k=1000)
    assert indices.shape == scores.shape == (4, 300)
    assert all(sorted(row) == list(range(300)) for row in indices)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)


def test_search_ids_maps_rows_to_ids(corpus):
    index = SearchIndex(_ids(len(corpus)), corpus, kind="exact")
    ids, scores = index.search_ids(corpus[[7, 42]], k=1)
    assert ids == [["doc-7"], ["doc-42"]]
    np.testing.assert_allclose(scores, 1.0, rtol=1e-5)


def test_auto_kind_uses_exact_for_small_corpora(corpus):
    assert SearchIndex(_ids(len(corpus)), corpus).kind == "exact"


def test_scann_params_follow_corpus_size():
    assert scann_params(1_000_000)["num_leaves"] == 1000
    assert scann_params(1_000_000)["num_leaves_to_search"] == 100
    assert scann_params(3000)["num_leaves"] == 30
    assert scann_params(3000)["num_leaves_to_search"] == 30
    assert scann_params(100_000)["num_leaves_to_search"] == 64
    assert scann_params(50)["num_leaves"] == scann_params(50)["num_leaves_to_search"] == 1
    assert scann_params(3000)["reorder_factor"] == scann_params(1_000_000)["reorder_factor"] == 100
    assert scann_params(8_841_823)["reorder_factor"] == 885  # the candidate pool grows with the corpus


@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_save_load_round_trip(kind, corpus, queries, scann_index, tmp_path):
    index = scann_index if kind == "scann" else SearchIndex(_ids(len(corpus)), corpus, kind="exact")
    index.save(tmp_path / "index")
    loaded = SearchIndex.load(tmp_path / "index")
    assert loaded.kind == kind
    assert loaded.ids == index.ids
    assert loaded.params == index.params
    if kind == "exact":
        assert isinstance(loaded.embeddings, np.memmap)
        np.testing.assert_array_equal(loaded.embeddings, corpus)
    else:
        assert loaded.embeddings is None
        assert not (tmp_path / "index" / "embeddings.npy").exists()
    for want, got in zip(index.search(queries, k=10), loaded.search(queries, k=10)):
        np.testing.assert_array_equal(want, got)
    assert os.listdir(tmp_path) == ["index"]


def test_exact_search_reads_the_vectors_in_row_blocks(corpus, queries, monkeypatch):
    index = SearchIndex(_ids(len(corpus)), corpus, kind="exact")
    expected = index.search(queries, k=10)
    monkeypatch.setattr("gtr_keras.retrieval.index._EXACT_ROW_BLOCK", 97)
    blocks = []

    class Recorded:
        shape = corpus.shape

        def __getitem__(self, rows):
            blocks.append(rows.stop - rows.start)
            return corpus[rows]

    index.embeddings = Recorded()
    got = index.search(queries, k=10)
    assert max(blocks) < len(corpus) // 10
    _assert_same_results(expected, got)


def test_row_blocks_keep_trec_ties_across_block_edges(monkeypatch):
    vectors = np.tile(np.eye(4, dtype=np.float32)[:1], (40, 1))
    ids = [f"d{i:02d}" for i in range(40)]
    monkeypatch.setattr("gtr_keras.retrieval.index._EXACT_ROW_BLOCK", 7)
    got, _ = SearchIndex(ids, vectors, kind="exact").search_ids(vectors[:1], k=5)
    assert got == [["d39", "d38", "d37", "d36", "d35"]]


@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_streamed_build_equals_the_in_memory_index(kind, corpus, queries, tmp_path, monkeypatch):
    monkeypatch.setattr("gtr_keras.retrieval.index._BUILD_CHUNK_ROWS", 700)  # 5 chunks, the last one short
    params = None if kind == "exact" else {"num_leaves_to_search": 30, "reorder_factor": 300}
    assert write_search_index(ArrayRows(_ids(len(corpus)), corpus), tmp_path / "index", kind, params) == kind
    written = SearchIndex.load(tmp_path / "index")
    exact, _ = SearchIndex(_ids(len(corpus)), corpus, kind="exact").search(queries, k=10)
    indices, scores = written.search(queries, k=10)
    if kind == "exact":
        np.testing.assert_array_equal(indices, exact)
    else:
        assert _recall(indices, exact) > 0.98  # int8 reordering swaps near-equal scores at the cut
        np.testing.assert_allclose(scores, np.sum(queries[:, None] * corpus[indices], axis=-1), atol=5e-3)
    scann_files = sorted(os.listdir(tmp_path / "index" / "scann")) if kind == "scann" else []
    assert "dataset.npy" not in scann_files  # one copy of the vectors: ScaNN's int8 one
    assert sorted(os.listdir(tmp_path)) == ["index"]


@pytest.mark.parametrize("version, error", [
    (1, r"'format_version' is 1, .* reads 2 .*; rebuild the index"),  # float32 vectors kept twice
    (99, r"index\.json: field 'format_version'"),
])
def test_an_index_of_another_format_is_refused_with_the_remedy(corpus, tmp_path, version, error):
    directory = tmp_path / "index"
    SearchIndex(_ids(len(corpus)), corpus, kind="exact").save(directory)
    config = json.loads((directory / "index.json").read_text())
    (directory / "index.json").write_text(json.dumps({**config, "format_version": version}))
    with pytest.raises(MismatchError, match=error):
        SearchIndex.load(directory)


@pytest.mark.parametrize(
    "text, error",
    [
        ("doc-0\n\ndoc-2\n", r"ids\.txt: line 2: ids must be non-empty"),
        ("doc-0\ndoc-1\ndoc-0\n", r"ids\.txt: line 3: id 'doc-0' duplicates .*ids\.txt: line 1"),
        ("doc-0\ndoc-1", r"ids\.txt: line 2 is not terminated"),
        ("doc-0\ndoc-1\n", r"ids\.txt has 2 ids, expected 3"),
    ],
)
def test_load_names_bad_ids_file(tmp_path, text, error):
    directory = tmp_path / "index"
    SearchIndex(_ids(3), np.eye(3, dtype=np.float32), kind="exact").save(directory)
    (directory / "ids.txt").write_text(text)
    with pytest.raises(ValueError, match=error):
        SearchIndex.load(directory)


@pytest.mark.parametrize("bad_id", ["a\nb", "a\rb", ""])
def test_rejects_unstorable_ids(bad_id):
    with pytest.raises(ValueError, match=r"ids\[1\]"):
        SearchIndex(["ok", bad_id], np.eye(2, dtype=np.float32))


def test_rejects_duplicate_ids():
    with pytest.raises(ValueError, match=r"ids\[1\]: id 'a' duplicates ids\[0\]"):
        SearchIndex(["a", "a"], np.eye(2, dtype=np.float32))


def test_rejects_mismatched_queries(corpus):
    index = SearchIndex(_ids(len(corpus)), corpus, kind="exact")
    with pytest.raises(ValueError, match="dims"):
        index.search(np.ones((1, DIMS + 1), np.float32), k=1)
    with pytest.raises(ValueError, match="k must be"):
        index.search(corpus[:1], k=0)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("index.json", None, r"index: not a search index \(no index\.json\); rebuild the index"),
        ("index.json", "{", r"index\.json: unreadable \(.*\); rebuild the index"),
        ("index.json", "[]", r"index\.json: holds a JSON list, not an object; rebuild the index"),
        ("embeddings.npy", "x", r"embeddings\.npy: unreadable \(.*\); rebuild the index"),
        ("ids.txt", None, r"ids\.txt: unreadable \(.*\); rebuild the index"),
    ],
)
def test_load_names_a_damaged_index(tmp_path, name, content, message):
    directory = tmp_path / "index"
    SearchIndex(_ids(3), np.eye(3, dtype=np.float32), kind="exact").save(directory)
    if content is None:
        (directory / name).unlink()
    else:
        (directory / name).write_text(content)
    with pytest.raises(DataError, match=message):
        SearchIndex.load(directory)


def test_a_stored_index_with_non_finite_rows_is_refused_naming_the_file(tmp_path):
    index = SearchIndex(_ids(3), np.eye(3, dtype=np.float32), kind="exact")
    index.save(str(tmp_path / "index"))
    embeddings = np.load(tmp_path / "index" / "embeddings.npy")
    embeddings[1, 0] = np.nan
    np.save(tmp_path / "index" / "embeddings.npy", embeddings)
    with pytest.raises(DataError, match=r"embeddings.npy: 1 rows hold NaN or infinity; rebuild the index"):
        SearchIndex.load(str(tmp_path / "index"))
    with pytest.raises(ValueError, match="hold NaN or infinity in 1 rows"):
        SearchIndex(_ids(3), embeddings, kind="exact")
