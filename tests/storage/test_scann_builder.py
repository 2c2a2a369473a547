"""ScaNN indexes: the parameters chosen for a corpus, and the recall of the searcher built with them."""

import os

import numpy as np
import pytest
from search_inputs import CORPUS, QUERIES, clustered, doc_ids, float32_truth, recall, unpack_codes_in_place

from gtr_keras.errors import UserError
from gtr_keras.storage.layout import SCANN_CODES, SCANN_PACKED_CODES
from gtr_keras.storage.scann_builder import build_scann_segment, codec_files, load_scann, merge_scann, scann_params
from gtr_keras.storage.scann_codes import CodeRows
from gtr_keras.storage.search_index import ArrayRows, SearchIndex, write_search_index


def test_scann_recall_at_10():
    scann_index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann")
    exact, _ = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact").search(QUERIES, k=10)
    approx, scores = scann_index.search(QUERIES, k=10)
    assert scann_index.kind == "scann"
    assert recall(approx, exact) >= 0.95
    expected_scores = np.sum(QUERIES[:, None] * CORPUS[approx], axis=-1)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)  # rescored with float32 vectors


def test_scann_reads_search_params_at_search_time():
    exact, _ = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact").search(QUERIES, k=10)
    params = {**scann_params(len(CORPUS)), "num_leaves_to_search": 1, "reorder_factor": 1, "rescore_factor": 1}
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="scann", params=params)
    narrow, _ = index.search(QUERIES, k=10)
    index.params.update(num_leaves_to_search=params["num_leaves"], reorder_factor=100, rescore_factor=4)
    wide, _ = index.search(QUERIES, k=10)
    assert recall(narrow, exact) < 0.9
    assert recall(wide, exact) >= 0.995  # all leaves, 1000 candidates reordered on int8, 40 rescored on float32


def test_float32_rescoring_reaches_the_recall_that_int8_reordering_cannot():
    """Neighbours whose scores lie closer than int8 rounding: 20,000 x 64 unit vectors around 200 centres."""
    corpus = clustered(20_000, seed=21, num_clusters=200, noise=0.35)
    queries = clustered(300, seed=22, num_clusters=200, noise=0.35)
    truth = float32_truth(corpus, queries)
    index = SearchIndex(doc_ids(len(corpus)), corpus, kind="scann")
    generous = {"num_leaves_to_search": index.params["num_leaves"], "reorder_factor": 50}
    index.set_search_params({**generous, "rescore_factor": 5})
    assert recall(index.search(queries, 10)[0], truth) >= 0.995
    index.set_search_params({"rescore_factor": 1})  # float32 orders the int8 order's top 10: int8's recall
    int8_order = recall(index.search(queries, 10)[0], truth)
    int8 = SearchIndex(doc_ids(len(corpus)), corpus, kind="scann", params={**generous, "reorder": "int8"})
    assert int8.embeddings is None
    assert recall(int8.search(queries, 10)[0], truth) == pytest.approx(int8_order, abs=0.01) and int8_order < 0.97


def test_scann_params_follow_corpus_size():
    assert scann_params(1_000_000)["reorder"] == "float32" and scann_params(50)["rescore_factor"] == 4
    assert scann_params(1_000_000)["num_leaves"] == 1000
    assert scann_params(1_000_000)["num_leaves_to_search"] == 100
    assert scann_params(3000)["num_leaves"] == 30
    assert scann_params(3000)["num_leaves_to_search"] == 30
    assert scann_params(100_000)["num_leaves_to_search"] == 64
    assert scann_params(50)["num_leaves"] == scann_params(50)["num_leaves_to_search"] == 1
    assert scann_params(3000)["reorder_factor"] == scann_params(1_000_000)["reorder_factor"] == 100
    assert scann_params(8_841_823)["reorder_factor"] == 885  # the candidate pool grows with the corpus


def test_scann_params_refuse_an_empty_corpus():
    with pytest.raises(UserError, match="at least one embedding, got n=0"):
        scann_params(0)


def test_a_segment_with_anothers_codec_scores_alike_and_merges_into_one_searcher(tmp_path):
    params = {"num_leaves": 20, "num_leaves_to_search": 20}
    (tmp_path / "second").mkdir()
    write_search_index(ArrayRows(doc_ids(2000), CORPUS[:2000]), tmp_path / "first", kind="scann", params=params)
    build_scann_segment(tmp_path / "first" / "scann", ArrayRows(doc_ids(1000), CORPUS[2000:]), tmp_path / "second")
    assert codec_files(tmp_path / "second") == codec_files(tmp_path / "first" / "scann")
    keep = np.ones(1000, bool)
    keep[::3] = False
    (tmp_path / "merged").mkdir()
    merge_scann([(tmp_path / "first" / "scann", None), (tmp_path / "second", keep)], tmp_path / "merged")
    merged = load_scann(tmp_path / "merged")
    both = np.concatenate([CORPUS[:2000], CORPUS[2000:][keep]])
    one = SearchIndex([f"r{i}" for i in range(len(both))], both, kind="exact").search(QUERIES, 10)[0]
    found = merged.search_batched(QUERIES, 10, 1000, 20, True, 256)[0]
    assert recall(found, one) > 0.9
    other = tmp_path / "other"
    write_search_index(ArrayRows(doc_ids(1000), CORPUS[:1000]), other, kind="scann", params=params)
    with pytest.raises(ValueError, match="another tree or codebooks"):
        merge_scann([(tmp_path / "first" / "scann", None), (other / "scann", None)], tmp_path / "x")


@pytest.mark.parametrize("first_packed", [True, False])
def test_a_merge_selects_rows_of_packed_codes_and_packs_those_of_an_older_searcher(tmp_path, first_packed):
    """Codes packed in both searchers are merged as stored; a searcher written before codes were packed (a byte a
    code) merges with a newer one into packed codes."""
    params = {"num_leaves": 20, "num_leaves_to_search": 20}
    (tmp_path / "second").mkdir()
    write_search_index(ArrayRows(doc_ids(2000), CORPUS[:2000]), tmp_path / "first", kind="scann", params=params)
    first = tmp_path / "first" / "scann"
    build_scann_segment(first, ArrayRows(doc_ids(1000), CORPUS[2000:]), tmp_path / "second")
    expected = np.concatenate([CodeRows(first)[:], CodeRows(tmp_path / "second")[:]])
    if not first_packed:
        unpack_codes_in_place(first)
    keep = np.arange(1000) % 3 > 0
    (tmp_path / "merged").mkdir()
    merge_scann([(first, None), (tmp_path / "second", keep)], tmp_path / "merged", block_rows=300)
    assert SCANN_PACKED_CODES in os.listdir(tmp_path / "merged") and SCANN_CODES not in os.listdir(tmp_path / "merged")
    np.testing.assert_array_equal(
        CodeRows(tmp_path / "merged")[:], expected[np.concatenate([np.ones(2000, bool), keep])]
    )
