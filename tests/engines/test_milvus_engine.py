"""MilvusEngine on a real Milvus Lite file: searches against NumPy brute force with gtr-keras' own filter
semantics (`MetadataColumns`, the oracle), writes by id, the collection's record, and refusals."""

import subprocess
import sys
import time

import numpy as np
import pytest

from gtr_keras.engines.engine import CollectionInfo, Record
from gtr_keras.engines.metadata_terms import filterable
from gtr_keras.engines.milvus_engine import MilvusEngine, expression
from gtr_keras.engines.targets import parse_target
from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import Filter
from gtr_keras.filters.metadata_columns import MetadataColumns
from tests.engine_oracle import filtered_brute_force

pytest.importorskip("pymilvus")

D = 16
ODD = ['say "hi"', "back\\slash", "line\nbreak", "tab\tand\rcr", "it's", "ünï ✓", "007"]


def _metadata(rng, i):
    fields = {}
    if i % 5:
        fields["lang"] = ["en", "de", "fr", ODD[i % len(ODD)]][i % 4]
    if i % 7:
        fields["year"] = int(rng.integers(1980, 2030)) if i % 2 else float(rng.integers(1980, 2030)) + 0.5
    if i % 3:
        fields["open"] = bool(i % 2)
    if i % 11:
        fields["tags"] = [t for t in ("a", "b", "c", ODD[i % len(ODD)]) if rng.random() < 0.4]
    if i % 13 == 0:
        fields["lang"] = None  # no value: the document lacks the field
    if i == 4:
        fields["year"] = 2**60 + 1  # compares as its float64, 2**60
    return fields


def _corpus(n, seed):
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, D)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [Record(f"doc-{i}", vectors[i], f"title {i}", f"text {i}", _metadata(rng, i)) for i in range(n)]


def _info(records, model="gtr@1"):
    return CollectionInfo(D, model, MetadataColumns([r.id for r in records], [r.metadata for r in records]).types)


def _brute_force(records, queries, k, filter):
    allowed = MetadataColumns([r.id for r in records], [r.metadata for r in records]).allowed(filter)
    vectors = np.stack([r.vector for r in records])
    return [
        [(records[row].id, float(score)) for row, score in zip(rows, scores)]
        for rows, scores in filtered_brute_force(vectors, allowed, queries, k)
    ]


def _assert_same(found, expected):
    assert [[i for i, _ in hits] for hits in found] == [[i for i, _ in hits] for hits in expected]
    for hits, wanted in zip(found, expected):
        np.testing.assert_allclose([s for _, s in hits], [s for _, s in wanted], atol=1e-5)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    records = _corpus(300, seed=0)
    engine = MilvusEngine(parse_target(f"milvus:{tmp_path_factory.mktemp('milvus')}/m.db"), "docs")
    engine.create(_info(records))
    engine.upsert(records)
    yield engine, records
    engine.close()


FILTERS = [
    None,
    Filter("lang = en"),
    Filter("lang != en"),
    Filter("year >= 2000"),
    Filter("year = 1152921504606846976"),
    Filter("year != 2001.5"),
    Filter("tags in (a, b)"),
    Filter("tags != a"),
    Filter("open = true"),
    Filter("open != true"),
    Filter(['lang in (de, \'say "hi"\', "it\'s", 007)', "year < 2010"]),
    Filter(["tags = 'back\\\\slash'"]),
    Filter("lang in ('line\nbreak', 'tab\tand\rcr', 'ünï ✓')"),
    Filter(ids=[f"doc-{i}" for i in range(0, 300, 3)] + ["missing"]),
    Filter(["open = false", "tags != c"], ids=[f"doc-{i}" for i in range(100)]),
]


@pytest.mark.parametrize("filter", FILTERS, ids=repr)
def test_search_is_exact_search_with_filters(filled, filter):
    engine, records = filled
    queries = _corpus(3, seed=1)
    vectors = np.stack([q.vector for q in queries])
    types = _info(records).metadata_types
    expected = _brute_force(records, vectors, 10, filter)
    assert any(expected), "the filter should allow some documents"
    _assert_same(engine.search(vectors, 10, filter, types), expected)


def test_holds_every_id_once(filled):
    engine, records = filled
    assert sorted(engine.ids()) == sorted(r.id for r in records)


def test_upsert_replaces_and_delete_removes_by_id(tmp_path):
    records = _corpus(40, seed=2)
    engine = MilvusEngine(parse_target(f"milvus:{tmp_path}/m.db"), "docs")
    engine.create(_info(records))
    engine.upsert(records)
    changed = _corpus(40, seed=3)
    replaced = [Record(records[i].id, changed[i].vector, "new", "new", {"lang": "xx"}) for i in range(5)]
    engine.upsert(replaced)
    engine.upsert(replaced)
    engine.delete(["doc-39", "doc-38", "never-there"])
    engine.delete(["doc-39"])
    live = replaced + records[5:38]
    assert sorted(engine.ids()) == sorted(r.id for r in live)
    vectors = np.stack([r.vector for r in replaced[:2]])
    for filter in (None, Filter("lang = xx"), Filter("lang != xx")):
        _assert_same(
            engine.search(vectors, 7, filter, _info(live).metadata_types), _brute_force(live, vectors, 7, filter)
        )
    engine.close()


def test_documents_reads_back_the_records_it_holds(tmp_path):
    records = _corpus(6, seed=4)
    engine = MilvusEngine(parse_target(f"milvus:{tmp_path}/m.db"), "docs")
    assert engine.documents(["doc-0"]) == {}  # no collection yet
    engine.create(_info(records))
    engine.upsert(records)
    engine.delete(["doc-5"])
    assert engine.documents([]) == {}
    found = engine.documents(["doc-5", 'say "hi"', "doc-1", "doc-4", "doc-1"])
    assert sorted(found) == ["doc-1", "doc-4"]
    assert found["doc-1"] == {
        "id": "doc-1",
        "title": "title 1",
        "text": "text 1",
        "metadata": filterable(records[1].metadata),
    }
    assert found["doc-4"]["metadata"]["year"] == float(2**60)
    engine.close()


def test_create_records_info_refuses_another_model_unless_recreate(tmp_path):
    target = parse_target(f"milvus:{tmp_path}/m.db")
    engine = MilvusEngine(target, "docs")
    assert engine.info() is None
    engine.create(CollectionInfo(D, "gtr@1", {"lang": "string"}))
    engine.upsert(_corpus(3, seed=4))
    engine.create(CollectionInfo(D, "gtr@1", {"year": "number"}))
    assert engine.info() == CollectionInfo(D, "gtr@1", {"lang": "string", "year": "number"})
    for other in (CollectionInfo(D + 1, "gtr@1", {}), CollectionInfo(D, "gtr@2", {})):
        with pytest.raises(UserError, match="--recreate"):
            engine.create(other)
    assert len(engine.ids()) == 3
    engine.close()
    reopened = MilvusEngine(target, "docs")
    assert reopened.info() == CollectionInfo(D, "gtr@1", {"lang": "string", "year": "number"})
    reopened.create(CollectionInfo(D + 1, "gtr@2", {}), recreate=True)
    assert reopened.info() == CollectionInfo(D + 1, "gtr@2", {}) and reopened.ids() == []
    reopened.close()


def test_recreate_replaces_a_collection_gtr_keras_did_not_write(tmp_path):
    target = parse_target(f"milvus:{tmp_path}/m.db")
    engine = MilvusEngine(target, "foreign")
    engine._client.create_collection("foreign", dimension=4)  # no gtr-keras record
    with pytest.raises(UserError, match="was not written by gtr-keras"):
        engine.info()
    engine.create(CollectionInfo(D, "gtr@1", {}), recreate=True)
    assert engine.info() == CollectionInfo(D, "gtr@1", {}) and engine.ids() == []
    engine.close()


def test_bad_records_are_refused_before_any_write(tmp_path):
    engine = MilvusEngine(parse_target(f"milvus:{tmp_path}/m.db"), "docs")
    records = _corpus(3, seed=5)
    with pytest.raises(UserError, match="no collection 'docs'"):
        engine.upsert(records)
    engine.create(_info(records))
    bad = Record("bad", np.zeros(D + 1, np.float32), "", "", {})
    with pytest.raises(UserError, match="record 'bad': expected a finite float32 vector of 16 dimensions"):
        engine.upsert(records + [bad])
    assert engine.ids() == []
    with pytest.raises(UserError, match=r"expected \[Q, 16\] query vectors"):
        engine.search(np.zeros((1, D + 1), np.float32), 10, None, {})
    with pytest.raises(UserError, match="at most 16384 hits"):
        engine.search(np.zeros((1, D), np.float32), 20_000, None, {})
    engine.close()


def test_filters_it_cannot_express_or_check_are_refused():
    types = {"year": "number", "lang": "string"}
    with pytest.raises(UserError, match=r"filter 'year < 1e400': Milvus cannot express"):
        expression(Filter("year < 1e400"), types)
    with pytest.raises(UserError, match="unknown field 'genre'"):
        expression(Filter("genre = x"), types)
    with pytest.raises(UserError, match="compares numbers"):
        expression(Filter("lang >= 3"), types)


def test_expression_escapes_and_adds_presence():
    types = {'k"ey': "string", "tags": "list", "y": "number", "b": "boolean"}
    assert expression(Filter(["`k\"ey` != 'a\\\\b\"c'", "tags != x", "y = 2019", "b in (true)"]), types) == (
        '(exists metadata["k\\"ey"] and metadata["k\\"ey"] != "a\\\\b\\"c") and '
        '(exists metadata["tags"] and not json_contains_any(metadata["tags"], ["x"])) and '
        'metadata["y"] == 2019.0 and metadata["b"] == true'
    )
    assert expression(None, types) == "" and expression(Filter(ids=['a"b']), types) == 'id in ["a\\"b"]'


def test_bad_targets_names_and_hosts_are_refused(tmp_path):
    with pytest.raises(UserError, match="Milvus names are ASCII letters"):
        MilvusEngine(parse_target(f"milvus:{tmp_path}/m.db"), "my docs")
    with pytest.raises(UserError, match="Milvus Lite writes a local file"):
        MilvusEngine(parse_target("milvus:gs://bucket/m.db"), "docs")
    start = time.monotonic()
    with pytest.raises(UserError, match="cannot reach Milvus"):
        MilvusEngine(parse_target("milvus+http://127.0.0.1:9"), "docs", timeout=2).info()
    assert time.monotonic() - start < 30


def test_a_file_another_process_holds_is_refused(tmp_path):
    holder = (
        "import sys, time; from gtr_keras.engines.milvus_engine import MilvusEngine; "
        "from gtr_keras.engines.targets import parse_target; "
        f"e = MilvusEngine(parse_target('milvus:{tmp_path}/m.db'), 'docs'); e.info(); print('open', flush=True); "
        "sys.stdin.read()"
    )
    process = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "open\n"
        with pytest.raises(UserError, match="cannot open Milvus Lite's file"):
            MilvusEngine(parse_target(f"milvus:{tmp_path}/m.db"), "docs")
    finally:
        process.stdin.close()
        process.wait(timeout=60)
