import numpy as np

import gtr_keras.storage
from gtr_keras.storage import scann_builder, search_index


def test_the_public_alias_names_the_retrieval_index_objects():
    assert gtr_keras.storage.SearchIndex is search_index.SearchIndex
    assert gtr_keras.storage.write_search_index is search_index.write_search_index
    assert gtr_keras.storage.scann_params is scann_builder.scann_params


def test_an_index_made_through_the_alias_searches(tmp_path):
    from gtr_keras.storage import SearchIndex

    vectors = np.eye(3, dtype="float32")
    SearchIndex(["a", "b", "c"], vectors, "exact").save(str(tmp_path / "index"))
    ids, scores = SearchIndex.load(str(tmp_path / "index")).search_ids(vectors[[2]], 1)
    assert ids == [["c"]] and np.allclose(scores, [[1.0]])
