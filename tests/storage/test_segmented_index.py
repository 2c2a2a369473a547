"""`SegmentedIndex` and `SearchIndex.load` of several directories: shards searched as one index."""

import json

import numpy as np
import pytest
from search_inputs import CORPUS, QUERIES, clustered, doc_ids, float32_truth, recall

from gtr_keras.errors import DataError, MismatchError
from gtr_keras.storage.search_index import ArrayRows, SearchIndex, write_search_index
from gtr_keras.storage.segmented_index import SegmentedIndex

IDS = doc_ids(len(CORPUS))


@pytest.mark.parametrize("k", [1, 10, 100])
def test_exact_shards_give_the_top_k_of_one_index_over_their_union(tmp_path, k):
    for name, rows in (("a", slice(0, 1700)), ("b", slice(1700, None))):
        write_search_index(ArrayRows(IDS[rows], CORPUS[rows]), tmp_path / name, kind="exact")
    shards = SearchIndex.load([tmp_path / "a", tmp_path / "b"])
    whole = SearchIndex(IDS, CORPUS, kind="exact")
    got, want = shards.search_ids(QUERIES, k), whole.search_ids(QUERIES, k)
    assert got[0] == want[0]
    np.testing.assert_allclose(got[1], want[1], atol=1e-6)


def test_ties_across_shards_follow_the_id_rule():
    same = CORPUS[:1]
    a = SearchIndex(["b", "x"], np.concatenate([same, CORPUS[1:2]]), kind="exact")
    b = SearchIndex(["c", "a"], np.concatenate([same, same]), kind="exact")
    assert SegmentedIndex([(a, None), (b, None)]).search_ids(same, 2)[0] == [["c", "b"]]


def test_scann_shards_find_what_one_scann_index_finds(tmp_path):
    params = {"num_leaves": 30, "num_leaves_to_search": 15}
    for name, rows in (("a", slice(0, 1500)), ("b", slice(1500, None))):
        write_search_index(ArrayRows(IDS[rows], CORPUS[rows]), tmp_path / name, kind="scann", params=params)
    exact = SearchIndex(IDS, CORPUS, kind="exact").search_ids(QUERIES, 10)[0]
    one = SearchIndex(IDS, CORPUS, kind="scann", params=dict(params, num_leaves=60, num_leaves_to_search=30))
    shards = SearchIndex.load([tmp_path / "a", tmp_path / "b"])
    assert shards.kind == "scann"
    # ScaNN's partitions differ from build to build (its k-means): 6 builds put the two recalls up to 0.0165 apart.
    assert recall(shards.search_ids(QUERIES, 10)[0], exact) >= recall(one.search_ids(QUERIES, 10)[0], exact) - 0.05


def test_scann_shards_rescored_with_float32_reach_float32_recall_and_scores(tmp_path):
    """Shards of neighbours closer than int8 rounding: their merged answers, rescored with float32 in each
    shard, against numpy float32 brute force over the union; shards without float32 vectors stop below."""
    corpus, queries = (
        clustered(4000, seed=31, num_clusters=40, noise=0.35),
        clustered(100, seed=32, num_clusters=40, noise=0.35),
    )
    ids = doc_ids(len(corpus))
    truth = float32_truth(corpus, queries)
    recalls = {}
    for reorder in ("float32", "int8"):
        params = {"num_leaves": 20, "num_leaves_to_search": 20, "reorder_factor": 50, "reorder": reorder}
        for name, rows in (("a", slice(0, 2500)), ("b", slice(2500, None))):
            write_search_index(ArrayRows(ids[rows], corpus[rows]), tmp_path / reorder / name, "scann", params)
        shards = SearchIndex.load([tmp_path / reorder / "a", tmp_path / reorder / "b"])
        rows, scores = shards.search(queries, 10)
        recalls[reorder] = recall(rows, truth)
        if reorder == "float32":
            np.testing.assert_allclose(scores, np.sum(queries[:, None] * corpus[rows], axis=-1), atol=1e-5)
            assert np.all(np.diff(scores, axis=1) <= 0)  # merged by their float32 scores
    assert recalls["float32"] >= 0.995 > recalls["int8"]


def test_a_scann_part_with_most_rows_deleted_still_fills_k():
    index = SearchIndex(IDS, CORPUS, kind="scann", params={"num_leaves": 30, "num_leaves_to_search": 30})
    deleted = np.ones(len(IDS), bool)
    deleted[::50] = False  # 60 rows live
    rows, scores = SegmentedIndex([(index, deleted)]).search(QUERIES, 20)
    assert rows.shape == (len(QUERIES), 20) and np.isfinite(scores).all()
    live = np.flatnonzero(~deleted)
    exact = SearchIndex([IDS[i] for i in live], CORPUS[live], kind="exact").search(QUERIES, 20)[0]
    assert recall(rows, exact) > 0.95


def test_shards_must_not_share_ids_nor_differ_in_dims():
    a = SearchIndex(["d0", "d1"], np.eye(2, dtype="float32"))
    with pytest.raises(DataError, match="shard-b: id 'd1' is also in shard-a"):
        SegmentedIndex([(a, None), (SearchIndex(["d1"], np.eye(2, dtype="float32")[:1]), None)], ["shard-a", "shard-b"])
    with pytest.raises(DataError, match="shard-b: 3 dims, but shard-a has 2"):
        SegmentedIndex([(a, None), (SearchIndex(["d2"], np.eye(3, dtype="float32")[:1]), None)], ["shard-a", "shard-b"])


def test_shards_of_another_model_are_refused_naming_the_shard(tmp_path):
    for name, sha in (("a", "1" * 64), ("b", "2" * 64)):
        write_search_index(ArrayRows([f"{name}0"], CORPUS[:1]), tmp_path / name / "index", kind="exact")
        record = {"embedding_dim": 64, "compute_dtype": "float32", "model_sha256": sha, "kind": "exact"}
        record.update(num_documents=1, document_length=512, query_length=64)
        (tmp_path / name / "retriever.json").write_text(json.dumps(record))
    with pytest.raises(MismatchError, match=r"b/retriever.json: a shard of another model than .*a/retriever.json"):
        SearchIndex.load([tmp_path / "a", tmp_path / "b"])


def test_a_search_index_and_a_segmented_index_answer_one_interface():
    one = SearchIndex(["d0", "d1"], np.eye(2, dtype="float32"), "exact")
    segmented = SegmentedIndex(
        [(one, np.array([False, True])), (SearchIndex(["d2"], np.eye(1, 2, 1, "float32")), None)]
    )
    for index in (one, segmented):
        assert [part for part, _ in index.parts][0] is one
        assert index.live_embeddings().shape == (len(index.ids), 2)
        assert index.search_ids(np.eye(1, 2, dtype="float32"), 1)[0] == [["d0"]]
    assert one.parts == [(one, None)]
