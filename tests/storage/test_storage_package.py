import numpy as np
import pytest

import gtr_keras.storage
from gtr_keras.storage.search_index import SearchIndex


def test_the_storage_package_exports_nothing_an_index_is_opened_through_index():
    assert not hasattr(gtr_keras.storage, "__all__")
    with pytest.raises(ImportError):
        exec("from gtr_keras.storage import SearchIndex")


def test_a_search_index_of_the_storage_layer_searches(tmp_path):
    vectors = np.eye(3, dtype="float32")
    SearchIndex(["a", "b", "c"], vectors, "exact").save(str(tmp_path / "index"))
    ids, scores = SearchIndex.load(str(tmp_path / "index")).search_ids(vectors[[2]], 1)
    assert ids == [["c"]] and np.allclose(scores, [[1.0]])
