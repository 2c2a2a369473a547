import numpy as np

import gtr_keras.index
import gtr_keras.retrieval.index


def test_the_public_alias_names_the_retrieval_index_objects():
    for name in gtr_keras.index.__all__:
        assert getattr(gtr_keras.index, name) is getattr(gtr_keras.retrieval.index, name)


def test_an_index_made_through_the_alias_searches(tmp_path):
    from gtr_keras.index import SearchIndex

    vectors = np.eye(3, dtype="float32")
    SearchIndex(["a", "b", "c"], vectors, "exact").save(str(tmp_path / "index"))
    ids, scores = SearchIndex.load(str(tmp_path / "index")).search_ids(vectors[[2]], 1)
    assert ids == [["c"]] and np.allclose(scores, [[1.0]])
