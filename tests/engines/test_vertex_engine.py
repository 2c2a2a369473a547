"""VertexEngine's batch folders checked field by field against Vertex AI's input format and replayed as Vertex
applies them, and `find_neighbors_request`'s bodies for each kind of clause, with the refusals; where
`google-cloud-aiplatform` is installed, both parsed by its protos."""

import json
import os
import re

import numpy as np
import pytest
from vertex_batches import batch_folders, replay

from gtr_keras.engines.engine import CollectionInfo, Record
from gtr_keras.engines.targets import parse_target
from gtr_keras.engines.vertex_engine import RECORD, VertexEngine, find_neighbors_request
from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import Filter

D = 8
TYPES = {"lang": "string", "year": "number", "open": "boolean", "tags": "list"}
DOCUMENTED = {"id", "embedding", "restricts", "numeric_restricts", "crowding_tag", "embedding_metadata"}


def _records(ids, seed):
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((len(ids), D)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    metadata = [
        {"lang": "en", "year": 2019, "open": True, "tags": ["a", "b"], "note": None},
        {"lang": 'dé "q"', "year": 1999.25, "tags": [], "nested": {"x": 1}},
        {},
    ]
    return [Record(i, vectors[n], f"title {i}", f"text {i}", metadata[n % 3]) for n, i in enumerate(ids)]


def _engine(tmp_path, collection="docs"):
    engine = VertexEngine(parse_target(f"vertex-ai:{tmp_path}/vertex"), collection)
    engine.create(CollectionInfo(D, "gtr@1", TYPES))
    return engine


def _push(tmp_path, upserts=(), deletes=()):
    engine = VertexEngine(parse_target(f"vertex-ai:{tmp_path}/vertex"), "docs")
    if upserts:
        engine.upsert(upserts)
    if deletes:
        engine.delete(deletes)
    engine.flush()
    engine.close()


def test_upsert_lines_are_vertex_input_format(tmp_path):
    engine = _engine(tmp_path)
    records = _records(["d0", "d1", "d2"], seed=0)
    engine.upsert(records)
    assert batch_folders(tmp_path / "vertex") == []  # written when the push ends
    engine.flush()
    engine.close()
    (folder,) = batch_folders(tmp_path / "vertex")
    assert re.fullmatch(r"00000001-[0-9]{8}T[0-9]{6}Z", folder)
    assert sorted(os.listdir(tmp_path / "vertex" / folder)) == ["upserts-00000.json"]
    lines = (tmp_path / "vertex" / folder / "upserts-00000.json").read_text("utf-8").split("\n")
    assert lines[-1] == "" and all(line.isascii() for line in lines)
    points = [json.loads(line) for line in lines[:-1]]
    for point, record in zip(points, records):
        assert set(point) <= DOCUMENTED and point["id"] == record.id
        assert all(type(x) is float for x in point["embedding"])
        assert np.array_equal(np.asarray(point["embedding"], np.float32), record.vector)
        assert np.array_equal(np.asarray(point["embedding"], np.float64), record.vector.astype(np.float64))
        assert point["embedding_metadata"] == {"title": record.title, "text": record.text, "metadata": record.metadata}
        for restrict in point["restricts"]:
            assert set(restrict) == {"namespace", "allow"} and all(type(t) is str for t in restrict["allow"])
    assert points[0]["restricts"] == [
        {"namespace": "lang", "allow": ["en"]},
        {"namespace": "gtr_keras.has.lang", "allow": ["1"]},
        {"namespace": "gtr_keras.has.year", "allow": ["1"]},
        {"namespace": "open", "allow": ["true"]},
        {"namespace": "gtr_keras.has.open", "allow": ["1"]},
        {"namespace": "tags", "allow": ["a", "b"]},
        {"namespace": "gtr_keras.has.tags", "allow": ["1"]},
        {"namespace": "gtr_keras.id", "allow": ["d0"]},
    ]
    assert points[0]["numeric_restricts"] == [{"namespace": "year", "value_double": 2019.0}]
    assert points[1]["restricts"] == [
        {"namespace": "lang", "allow": ['dé "q"']},
        {"namespace": "gtr_keras.has.lang", "allow": ["1"]},
        {"namespace": "gtr_keras.has.year", "allow": ["1"]},
        {"namespace": "gtr_keras.has.tags", "allow": ["1"]},  # an empty list is present, with no tokens
        {"namespace": "gtr_keras.id", "allow": ["d1"]},
    ]
    assert points[1]["numeric_restricts"] == [{"namespace": "year", "value_double": 1999.25}]
    assert (
        points[2]["restricts"] == [{"namespace": "gtr_keras.id", "allow": ["d2"]}]
        and "numeric_restricts" not in points[2]
    )


def test_replaying_the_batch_folders_gives_the_live_rows(tmp_path):
    _engine(tmp_path).close()
    first = _records([f"d{i}" for i in range(30)], seed=1)
    _push(tmp_path, first)
    replaced = _records([f"d{i}" for i in range(5)] + ["n1", "n2", "n3"], seed=2)
    _push(tmp_path, replaced, ["d10", "d11", "d12", "never-pushed"])
    _push(tmp_path, deletes=["d20", "n3"])
    _push(tmp_path)  # nothing changed: no folder
    engine = VertexEngine(parse_target(f"vertex-ai:{tmp_path}/vertex"), "docs")
    again = _records(["d21", "d22"], seed=3)
    engine.upsert(again[:1])
    engine.delete(["d21", "d22"])
    engine.upsert(again[1:])  # the later call wins: d21 deleted, d22 upserted
    engine.flush()
    engine.close()
    root = tmp_path / "vertex"
    folders = batch_folders(root)
    assert [name[:8] for name in folders] == ["00000001", "00000002", "00000003", "00000004"]
    live = {r.id: r.vector for r in first}
    live.update({r.id: r.vector for r in replaced})
    for gone in ("d10", "d11", "d12", "d20", "n3", "d21"):
        live.pop(gone)
    live["d22"] = again[1].vector
    replayed = replay(root)
    assert sorted(replayed) == sorted(live)
    assert all(np.array_equal(replayed[i], live[i]) for i in live)
    assert sorted(VertexEngine(parse_target(f"vertex-ai:{root}"), "docs").ids()) == sorted(live)
    last = root / folders[-1]
    upserted = {json.loads(line)["id"] for line in (last / "upserts-00000.json").read_text("utf-8").splitlines()}
    deleted = set((last / "delete" / "ids.txt").read_text("utf-8").split())
    assert upserted == {"d22"} and deleted == {"d21"}


def test_create_records_info_refuses_another_model_or_collection_unless_recreate(tmp_path):
    target = parse_target(f"vertex-ai:{tmp_path}/vertex")
    engine = VertexEngine(target, "docs")
    assert engine.info() is None
    with pytest.raises(UserError, match="no collection 'docs'"):
        engine.upsert(_records(["d0"], seed=4))
    engine.create(CollectionInfo(D, "gtr@1", {"lang": "string"}))
    engine.create(CollectionInfo(D, "gtr@1", {"year": "number"}))
    assert engine.info() == CollectionInfo(D, "gtr@1", {"lang": "string", "year": "number"})
    assert json.loads((tmp_path / "vertex" / RECORD).read_text())["collection"] == "docs"
    _push(tmp_path, _records(["d0", "d1"], seed=4))
    for other in (CollectionInfo(D + 1, "gtr@1", {}), CollectionInfo(D, "gtr@2", {})):
        with pytest.raises(UserError, match="--recreate"):
            engine.create(other)
    with pytest.raises(UserError, match="holds collection 'docs', not 'other'"):
        VertexEngine(target, "other").info()
    engine.create(CollectionInfo(D + 1, "gtr@2", {}), recreate=True)
    assert engine.info() == CollectionInfo(D + 1, "gtr@2", {}) and engine.ids() == []
    assert batch_folders(tmp_path / "vertex") == []


def test_bad_records_are_refused_before_any_write(tmp_path):
    engine = _engine(tmp_path)
    good = _records(["d0"], seed=5)
    with pytest.raises(UserError, match="record 'bad': expected a finite float32 vector of 8 dimensions"):
        engine.upsert(good + [Record("bad", np.zeros(D, np.float64), "", "", {})])
    with pytest.raises(UserError, match=r"field 'gtr_keras.id': Vertex AI restricts reserve gtr_keras\.\*"):
        engine.upsert([Record("r", good[0].vector, "", "", {"gtr_keras.id": "x"})])
    with pytest.raises(UserError, match="searched through its index endpoint"):
        engine.search(good[0].vector[None], 10, None, TYPES)
    engine.flush()
    engine.close()
    assert batch_folders(tmp_path / "vertex") == []


def _body(filter, k=10, queries=None):
    queries = np.eye(2, D, dtype=np.float32) if queries is None else queries
    return find_neighbors_request(queries, k, filter, TYPES, "gtr_docs")


def test_request_body_without_filter():
    queries = _records(["q0", "q1"], seed=6)
    vectors = np.stack([q.vector for q in queries])
    body = _body(None, k=7, queries=vectors)
    assert set(body) == {"deployed_index_id", "queries"} and body["deployed_index_id"] == "gtr_docs"
    for row, query in enumerate(body["queries"]):
        assert set(query) == {"datapoint", "neighbor_count"} and query["neighbor_count"] == 7
        assert set(query["datapoint"]) == {"datapoint_id", "feature_vector"}
        assert np.array_equal(np.asarray(query["datapoint"]["feature_vector"], np.float32), vectors[row])


@pytest.mark.parametrize(
    "clause, restricts, numeric",
    [
        ("lang = en", [{"namespace": "lang", "allow_list": ["en"]}], []),
        ("lang in (en, 'd\"e', 007)", [{"namespace": "lang", "allow_list": ["en", 'd"e', "007"]}], []),
        (
            "lang != en",
            [
                {"namespace": "lang", "deny_list": ["en"]},
                {"namespace": "gtr_keras.has.lang", "allow_list": ["1"]},
            ],
            [],
        ),
        ("tags in (a, b)", [{"namespace": "tags", "allow_list": ["a", "b"]}], []),
        (
            "tags != a",
            [
                {"namespace": "tags", "deny_list": ["a"]},
                {"namespace": "gtr_keras.has.tags", "allow_list": ["1"]},
            ],
            [],
        ),
        ("open = true", [{"namespace": "open", "allow_list": ["true"]}], []),
        (
            "open != false",
            [
                {"namespace": "open", "deny_list": ["false"]},
                {"namespace": "gtr_keras.has.open", "allow_list": ["1"]},
            ],
            [],
        ),
    ]
    + [
        (
            f"year {op} 2000",
            [{"namespace": "gtr_keras.has.year", "allow_list": ["1"]}],
            [{"namespace": "year", "value_double": 2000.0, "op": name}],
        )
        for op, name in [
            ("<", "LESS"),
            ("<=", "LESS_EQUAL"),
            ("=", "EQUAL"),
            (">=", "GREATER_EQUAL"),
            (">", "GREATER"),
            ("!=", "NOT_EQUAL"),
        ]
    ],
)
def test_request_restricts_for_each_kind_of_clause(clause, restricts, numeric):
    for query in _body(Filter(clause))["queries"]:
        assert query["datapoint"]["restricts"] == restricts
        assert query["datapoint"].get("numeric_restricts", []) == numeric


def test_request_ands_clauses_numbers_as_float64_and_ids():
    body = _body(Filter(["lang = en", "year in (9007199254740993)"], ids=["d1", "d 2"]))
    point = body["queries"][0]["datapoint"]
    assert point["restricts"] == [
        {"namespace": "lang", "allow_list": ["en"]},
        {"namespace": "gtr_keras.has.year", "allow_list": ["1"]},
        {"namespace": "gtr_keras.id", "allow_list": ["d1", "d 2"]},
    ]
    assert point["numeric_restricts"] == [{"namespace": "year", "value_double": 9007199254740992.0, "op": "EQUAL"}]
    assert json.loads(json.dumps(body)) == body


@pytest.mark.parametrize(
    "filter, message",
    [
        (Filter(["year >= 2000", "year < 2010"]), "a second clause on 'year': Vertex AI"),
        (Filter(["tags = a", "tags = b"]), "a second clause on 'tags': Vertex AI"),
        (Filter("year in (2019, 2020)"), "Vertex AI's numeric restricts cannot express an `in`"),
        (Filter("year < 1e400"), "Vertex AI cannot express a number past float64's range"),
        (Filter(ids=[]), "empty ids allow-list: Vertex AI"),
        (Filter("genre = x"), "unknown field 'genre'"),
        (Filter("open = 1"), "'open' holds boolean"),
    ],
)
def test_request_refuses_what_vertex_cannot_express(filter, message):
    with pytest.raises(UserError, match=message):
        _body(filter)


def test_files_and_requests_parse_as_aiplatform_protos(tmp_path):
    types = pytest.importorskip("google.cloud.aiplatform_v1.types")
    from google.protobuf import json_format

    engine = _engine(tmp_path)
    engine.upsert(_records(["d0", "d1", "d2"], seed=7))
    engine.flush()
    engine.close()
    (folder,) = batch_folders(tmp_path / "vertex")
    names = {"id": "datapoint_id", "embedding": "feature_vector", "allow": "allow_list", "deny": "deny_list"}
    for line in (tmp_path / "vertex" / folder / "upserts-00000.json").read_text("utf-8").splitlines():
        point = json.loads(line)
        as_proto = {names.get(key, key): value for key, value in point.items()}
        as_proto["restricts"] = [{names.get(k, k): v for k, v in r.items()} for r in point["restricts"]]
        message = json_format.ParseDict(as_proto, types.IndexDatapoint.pb(types.IndexDatapoint()))
        assert list(message.feature_vector) == point["embedding"]
        assert [r.value_double for r in message.numeric_restricts] == [
            r["value_double"] for r in point.get("numeric_restricts", [])
        ]
    for filter in (Filter(["lang != en", "year >= 2000.5", "tags in (a, b)"], ids=["d1"]), None):
        request = json_format.ParseDict(_body(filter), types.FindNeighborsRequest.pb(types.FindNeighborsRequest()))
        assert request.queries[0].neighbor_count == 10 and request.deployed_index_id == "gtr_docs"
    assert request.queries[1].datapoint.datapoint_id == "query-1"


def test_batch_folders_on_a_remote_file_system():
    target = parse_target("vertex-ai:ram://vertex-test/papers")
    engine = VertexEngine(target, "docs")
    engine.create(CollectionInfo(D, "gtr@1", TYPES))
    engine.upsert(_records(["d0", "d1", "d2"], seed=8))
    engine.flush()
    engine.close()
    engine = VertexEngine(target, "docs")
    engine.upsert(_records(["d3"], seed=9))
    engine.delete(["d0"])
    engine.flush()
    engine.close()
    assert sorted(VertexEngine(target, "docs").ids()) == ["d1", "d2", "d3"]
    engine.create(CollectionInfo(D, "gtr@2", TYPES), recreate=True)
    assert engine.ids() == []


def test_a_batch_folder_is_written_holding_the_folder_lock(tmp_path, monkeypatch):
    import fcntl

    from gtr_keras.utils import locks

    engine, commit, held = _engine(tmp_path), VertexEngine._commit, []

    def checking(self, operations):
        descriptor = os.open(locks._lock_path(self.directory), os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # another push's flush would wait for this one
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(True)
        finally:
            os.close(descriptor)
        commit(self, operations)

    monkeypatch.setattr(VertexEngine, "_commit", checking)
    engine.upsert(_records(["d0"], seed=10))
    engine.flush()
    engine.close()
    assert held == [True] and len(batch_folders(tmp_path / "vertex")) == 1
