"""`QdrantEngine` in Qdrant's embedded mode (real, no mocks): its searches against NumPy brute force with the same
filters as gtr-keras' own (`MetadataColumns`, the oracle), and the records it keeps."""

import numpy as np
import pytest

from gtr_keras.engines.engine import CollectionInfo, Record
from gtr_keras.engines.qdrant_engine import QdrantEngine, point_id, qdrant_filter
from gtr_keras.engines.targets import parse_target
from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import Filter
from gtr_keras.filters.metadata_columns import MetadataColumns
from tests.engine_oracle import filtered_brute_force

DIMS = 12
N = 60


def _metadata(i):
    if i % 9 == 0:
        return {}  # a document without any field: no clause matches it, `!=` included
    fields = {"lang": ["en", "de", "fr"][i % 3], "year": 1990 + i % 25, "open": i % 2 == 0, "code": f"{i % 4:03d}"}
    fields["tags"] = [] if i % 5 == 0 else [["a", "b", "c", "d"][(i + j) % 4] for j in range(i % 3 + 1)]
    if i % 7 == 0:
        fields["year"] = float(fields["year"]) + 0.5 * (i % 2)  # integers and floats are one type
    if i % 11 == 0:
        del fields["lang"]
    return fields


def _collection(path):
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((N, DIMS))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    ids = [f"d{i}" for i in range(N)]
    metadata = [_metadata(i) for i in range(N)]
    columns = MetadataColumns(ids, metadata)
    engine = QdrantEngine(parse_target(f"qdrant:{path}"), "docs")
    engine.create(CollectionInfo(DIMS, "model-sha", columns.types))
    engine.upsert([Record(i, v, f"title {i}", f"text {i}", m) for i, v, m in zip(ids, vectors, metadata)])
    return engine, ids, vectors, columns


@pytest.fixture
def collection(tmp_path):
    engine, *rest = _collection(tmp_path / "q")
    yield engine, *rest
    engine.close()


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    engine, *rest = _collection(tmp_path_factory.mktemp("qdrant") / "q")
    yield engine, *rest
    engine.close()


FILTERS = [
    None,
    Filter("lang = en"),
    Filter("lang != en"),
    Filter("year >= 2000"),
    Filter("year < 1995.5"),
    Filter("year = 2001"),
    Filter("year != 2001"),
    Filter("year in (1991, 2004, 2011.0)"),
    Filter("tags in (a, b)"),
    Filter("tags = c"),
    Filter("tags != a"),
    Filter("open = true"),
    Filter("open != true"),
    Filter("open in (true, false)"),
    Filter("code = 003"),
    Filter("code in (001, '002')"),
    Filter(["lang in (de, fr)", "year <= 2005", "tags != d"]),
    Filter("lang != en", ids=["d1", "d2", "d3", "d4", "d11", "nope"]),
    Filter(ids=[]),
]


@pytest.mark.parametrize("filter", FILTERS, ids=repr)
def test_search_is_numpy_brute_force_over_the_documents_the_filter_allows(searched, filter):
    engine, ids, vectors, columns = searched
    queries = vectors[:4] * 0.5 + np.random.default_rng(9).standard_normal((4, DIMS)).astype(np.float32) * 0.2
    found = engine.search(queries, 10, filter, columns.types)
    for row, (rows, scores) in zip(found, filtered_brute_force(vectors, columns.allowed(filter), queries, 10)):
        assert [doc_id for doc_id, _ in row] == [ids[r] for r in rows]
        np.testing.assert_allclose([score for _, score in row], scores, atol=1e-5, rtol=0)


def test_the_engine_holds_each_record_once_by_id_with_its_document_id_in_the_payload(collection):
    engine, ids, vectors, _ = collection
    engine.upsert([Record("d1", vectors[2], "new", "replaced", {"lang": "en"})])  # replaces by id
    engine.delete(["d0", "d0", "never"])  # idempotent, unknown ids ignored
    assert sorted(engine.ids()) == sorted(ids[1:])
    assert engine.documents(["d1", "d0"]) == {
        "d1": {"id": "d1", "title": "new", "text": "replaced", "metadata": {"lang": "en"}}
    }
    assert engine.info() == CollectionInfo(DIMS, "model-sha", {**engine.info().metadata_types})
    assert point_id("d1") == point_id("d1") != point_id("d2")


def test_a_collection_of_another_dimension_or_model_is_refused_unless_recreated(collection):
    engine, _, _, columns = collection
    with pytest.raises(UserError, match="holds 12-dimensional vectors of model model-sha, not 8 .*--recreate"):
        engine.create(CollectionInfo(8, "model-sha", {}))
    with pytest.raises(UserError, match="--recreate"):
        engine.create(CollectionInfo(DIMS, "other", {}))
    engine.create(CollectionInfo(DIMS, "model-sha", {"new": "string"}))  # the same model: its types widened
    assert engine.info().metadata_types == {**columns.types, "new": "string"}
    engine.create(CollectionInfo(8, "other", {}), recreate=True)
    assert engine.info() == CollectionInfo(8, "other", {}) and engine.ids() == []


def test_filters_are_checked_as_gtr_keras_checks_them_and_unaddressable_fields_refused():
    types = {"lang": "string", "year": "number", 'a"b': "string", "release year": "number"}
    with pytest.raises(UserError, match="unknown field 'size'"):
        qdrant_filter(Filter("size = 3"), types)
    with pytest.raises(UserError, match="compares numbers, 'lang' is a string"):
        qdrant_filter(Filter("lang > 3"), types)
    with pytest.raises(UserError, match="^filter '`a\"b` = x': Qdrant's key paths cannot address the field 'a\"b'"):
        qdrant_filter(Filter('`a"b` = x'), types)
    condition = qdrant_filter(Filter("`release year` >= 2000"), types)
    assert condition.must[0].key == 'metadata."release year"'
    assert qdrant_filter(None, types) is None


def test_a_field_with_spaces_in_its_name_is_searched_through_a_quoted_key(tmp_path):
    engine = QdrantEngine(parse_target(f"qdrant:{tmp_path / 'q'}"), "odd")
    try:
        engine.create(CollectionInfo(2, "m", {"release year": "number"}))
        vectors = np.eye(2, dtype=np.float32)
        engine.upsert([Record("a", vectors[0], "", "", {"release year": 1999}), Record("b", vectors[1], "", "", {})])
        found = engine.search(vectors, 5, Filter("`release year` != 2000"), {"release year": "number"})
        assert [[doc_id for doc_id, _ in row] for row in found] == [["a"], ["a"]]
    finally:
        engine.close()


def test_an_unreachable_server_is_one_line_after_a_bounded_wait():
    with pytest.raises(UserError, match=r"^qdrant\+http://127\.0\.0\.1:9: Qdrant did not answer within 2 s"):
        QdrantEngine(parse_target("qdrant+http://127.0.0.1:9"), "docs", timeout=2)


def test_a_local_directory_another_client_holds_is_one_line(tmp_path):
    engine = QdrantEngine(parse_target(f"qdrant:{tmp_path / 'q'}"), "docs")
    try:
        with pytest.raises(UserError, match="cannot open Qdrant's local directory"):
            QdrantEngine(parse_target(f"qdrant:{tmp_path / 'q'}"), "docs")
    finally:
        engine.close()


@pytest.mark.parametrize("name", ["..", "a/b", "nul\0"])
def test_a_collection_name_that_is_a_path_is_refused(tmp_path, name):
    with pytest.raises(UserError, match="cannot name a Qdrant collection"):
        QdrantEngine(parse_target(f"qdrant:{tmp_path / 'q'}"), name)
