"""`push` into Qdrant's embedded mode, Milvus Lite and Vertex AI batch folders (real, no mocks): the engine holds
exactly the index's live rows, a push after an update sends only the diff, a push stopped in a batch (or, for
Vertex AI, in writing its folder) converges when run again, and a collection of another dimension or model is
refused before any write."""

import os

import numpy as np
import pytest
from qdrant_client import QdrantClient
from vertex_batches import batch_folders, replay

from gtr_keras.beir.readers import Corpus
from gtr_keras.engines.engine_index import EngineIndex
from gtr_keras.engines.push import PushSummary, default_collection, ledger_path, push
from gtr_keras.engines.registry import engine_class, open_engine
from gtr_keras.engines.targets import parse_target
from gtr_keras.engines.vertex_engine import VertexEngine
from gtr_keras.errors import UserError
from gtr_keras.integrity.index_checker import check_index
from gtr_keras.retrieval.index import Index
from gtr_keras.storage.layout import read_push_ledger

DIMS = 8


def _unit(n, seed, dims=DIMS):
    x = np.random.default_rng(seed).standard_normal((n, dims))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _embeddings(path, ids, vectors):
    np.save(path, vectors)
    path.with_suffix(".ids.txt").write_text("".join(f"{i}\n" for i in ids))
    return str(path)


def _corpus(ids, tag=""):
    metadata = [{"lang": ["en", "de"][n % 2], "year": 1998 + n, "tags": ["a", "b"][: n % 3]} for n in range(len(ids))]
    return Corpus(list(ids), [f"title {i}{tag}" for i in ids], [f"text {i}{tag}" for i in ids], metadata)


def _index(tmp_path, n=30, name="papers", dims=DIMS):
    ids = [f"d{i}" for i in range(n)]
    embeddings = _embeddings(tmp_path / f"{name}.npy", ids, _unit(n, 0, dims))
    return Index.build(tmp_path / name, embeddings=embeddings, documents=_corpus(ids))


def _held(path, collection):
    """`{id: (vector, payload)}` of every point of the collection, read by a client of its own."""
    client = QdrantClient(path=str(path))
    try:
        points, _ = client.scroll(collection, limit=10_000, with_payload=True, with_vectors=True)
        held = {p.payload["id"]: (np.array(p.vector["dense"], np.float32), p.payload) for p in points}
        assert len(held) == len(points)  # one point per id
        return held
    finally:
        client.close()


def _live(index):
    rows = {doc_id: i for i, doc_id in enumerate(index.ids)}
    vectors = index._retriever.index.live_embeddings()
    return {doc_id: (vectors[rows[doc_id]], document) for doc_id, document in zip(index.ids, index.get(index.ids))}


def _assert_mirrors(index, path, collection):
    held, live = _held(path, collection), _live(index)
    assert sorted(held) == sorted(live)
    for doc_id, (vector, document) in live.items():
        np.testing.assert_array_equal(held[doc_id][0], vector)
        assert {key: held[doc_id][1][key] for key in ("id", "title", "text", "metadata")} == document


def test_a_push_then_a_push_after_an_update_sends_only_the_diff(tmp_path):
    index, target = _index(tmp_path), f"qdrant:{tmp_path / 'q'}"
    assert index.push(target) == PushSummary("papers", 30, 0)  # the index directory's name by default
    _assert_mirrors(index, tmp_path / "q", "papers")
    assert index.push(target) == PushSummary("papers", 0, 0)
    new_ids = ["d3", "d4", "n1", "n2"]  # two replaced, two added
    update = {"embeddings": _embeddings(tmp_path / "new.npy", new_ids, _unit(4, 1))}
    index.update(**update, documents=_corpus(new_ids, tag=" v2"), delete=["d0", "d7", "d9"])
    assert index.push(target) == PushSummary("papers", 4, 3)
    _assert_mirrors(index, tmp_path / "q", "papers")
    index.update(delete=["n1"], compact=True)
    assert index.push(target, "papers") == PushSummary("papers", 0, 1)
    _assert_mirrors(index, tmp_path / "q", "papers")
    assert check_index([str(tmp_path / "papers")]).ok  # the ledger is recorded in checksums.json and readable


def _target(engine, tmp_path):
    return {"qdrant": f"qdrant:{tmp_path / 'q'}", "milvus": f"milvus:{tmp_path / 'm.db'}"}.get(
        engine, f"vertex-ai:{tmp_path / 'v'}"
    )


def _assert_holds(index, target, collection="papers"):
    """The engine of `target` holds exactly `index`'s live rows (for Vertex AI: its batch folders replayed)."""
    parsed = parse_target(target)
    if parsed.engine == "qdrant":
        return _assert_mirrors(index, parsed.location, collection)
    live = _live(index)
    if parsed.engine == "vertex-ai":
        replayed = replay(parsed.location)
        assert sorted(replayed) == sorted(live)
        assert all(np.array_equal(replayed[doc_id], vector) for doc_id, (vector, _) in live.items())
        return None
    engine = open_engine(parsed, collection)
    try:
        assert sorted(engine.ids()) == sorted(live)
    finally:
        engine.close()
    return None


@pytest.mark.parametrize("engine", ["qdrant", "milvus", "vertex-ai"])
def test_a_push_stopped_inside_a_batch_converges_when_run_again(tmp_path, monkeypatch, engine):
    index, target = _index(tmp_path), _target(engine, tmp_path)
    push(index.paths[0], target, batch_size=8)
    index.update(
        embeddings=_embeddings(tmp_path / "new.npy", [f"n{i}" for i in range(20)], _unit(20, 2)),
        documents=_corpus([f"n{i}" for i in range(20)]),
        delete=[f"d{i}" for i in range(10)],
    )
    ledger = read_push_ledger(ledger_path(index.paths[0], parse_target(target), "papers"))
    folders = batch_folders(tmp_path / "v") if engine == "vertex-ai" else None
    cls = engine_class(engine)
    real_upsert, calls = cls.upsert, []

    def stopped_in_the_second_batch(self, records):
        calls.append(len(records))
        if len(calls) == 2:
            real_upsert(self, records[:3])
            raise KeyboardInterrupt
        real_upsert(self, records)

    monkeypatch.setattr(cls, "upsert", stopped_in_the_second_batch)
    with pytest.raises(KeyboardInterrupt):
        push(index.paths[0], target, batch_size=8)
    assert read_push_ledger(ledger_path(index.paths[0], parse_target(target), "papers")) == ledger  # not written
    if engine == "vertex-ai":
        assert batch_folders(tmp_path / "v") == folders  # a failed push writes no partial folder
    monkeypatch.setattr(cls, "upsert", real_upsert)
    assert push(index.paths[0], target, batch_size=8) == PushSummary("papers", 20, 10)
    _assert_holds(index, target)
    assert push(index.paths[0], target) == PushSummary("papers", 0, 0)


def test_a_vertex_push_whose_batch_folder_fails_records_no_ledger_and_converges(tmp_path, monkeypatch):
    index, target = _index(tmp_path), _target("vertex-ai", tmp_path)
    push(index.paths[0], target)
    index.update(delete=["d0", "d1"])
    ledger = read_push_ledger(ledger_path(index.paths[0], parse_target(target), "papers"))

    def failing(self, operations):
        raise OSError("disk full")

    monkeypatch.setattr(VertexEngine, "_commit", failing)
    with pytest.raises(OSError, match="disk full"):
        push(index.paths[0], target)
    assert read_push_ledger(ledger_path(index.paths[0], parse_target(target), "papers")) == ledger
    monkeypatch.undo()
    assert push(index.paths[0], target) == PushSummary("papers", 0, 2)
    _assert_holds(index, target)


def test_a_collection_without_this_index_ledger_is_diffed_against_the_engine_ids(tmp_path):
    index, target = _index(tmp_path), f"qdrant:{tmp_path / 'q'}"
    push(index.paths[0], target, "shared")
    rebuilt = _index(tmp_path)  # a rebuild replaces the directory, its ledgers with it
    assert not list((tmp_path / "papers").glob("pushed-*")) and check_index([rebuilt.paths[0]]).ok
    assert push(rebuilt.paths[0], target, "shared") == PushSummary("shared", 30, 0)  # digests unknown: all sent
    other = _index(tmp_path, n=12, name="rebuilt")  # the same model and dimensions, fewer documents
    assert push(other.paths[0], target, "shared") == PushSummary("shared", 12, 18)
    _assert_mirrors(other, tmp_path / "q", "shared")


@pytest.mark.parametrize("engine", ["qdrant", "milvus", "vertex-ai"])
def test_a_collection_another_writer_changed_is_reconciled_whole(tmp_path, engine):
    index, other, target = _index(tmp_path), _index(tmp_path, n=40, name="other"), _target(engine, tmp_path)
    push(index.paths[0], target, "papers")
    other_vectors = _embeddings(tmp_path / "o.npy", [f"o{i}" for i in range(5)], _unit(5, 3))
    other.update(embeddings=other_vectors, documents=_corpus([f"o{i}" for i in range(5)]), delete=["d1", "d2"])
    push(other.paths[0], target, "papers")  # the same model and dimensions: its rows replace and extend these
    assert push(index.paths[0], target, "papers") == PushSummary("papers", 30, 5 + 10)
    _assert_holds(index, target)
    if engine != "vertex-ai":
        with EngineIndex(target, "papers") as engine_index:
            engine_index.delete(["d3"])
        assert push(index.paths[0], target, "papers") == PushSummary("papers", 30, 0)
        _assert_holds(index, target)
    assert push(index.paths[0], target, "papers") == PushSummary("papers", 0, 0)


@pytest.mark.parametrize(
    "engine, document, message",
    [
        ("milvus", ("t", "x" * 1_048_577, {}), "record 'bad': its text is past Milvus' 1048576 bytes"),
        ("vertex-ai", ("t", "x", {"gtr_keras.id": "y"}), "record 'bad': field 'gtr_keras.id': Vertex AI restricts"),
    ],
)
def test_a_record_the_engine_refuses_is_refused_before_any_write(tmp_path, engine, document, message):
    index, target = _index(tmp_path), _target(engine, tmp_path)
    push(index.paths[0], target)
    folders = batch_folders(tmp_path / "v") if engine == "vertex-ai" else None
    title, text, metadata = document
    bad = Corpus(["bad"], [title], [text], [metadata])
    index.update(embeddings=_embeddings(tmp_path / "bad.npy", ["bad"], _unit(1, 5)), documents=bad, delete=["d0"])
    with pytest.raises(UserError, match=message):
        push(index.paths[0], target)
    opened = open_engine(parse_target(target), "papers")
    try:
        assert sorted(opened.ids()) == sorted(f"d{i}" for i in range(30))  # d0 not deleted
    finally:
        opened.close()
    if engine == "vertex-ai":
        assert batch_folders(tmp_path / "v") == folders


def test_a_push_records_the_index_metadata_types_not_widened(tmp_path):
    index, target = _index(tmp_path), _target("qdrant", tmp_path)
    push(index.paths[0], target)
    index.update(
        embeddings=_embeddings(tmp_path / "new.npy", ["n0"], _unit(1, 4)),
        documents=Corpus(["n0"], ["t"], ["x"], [{"venue": "acl"}]),
        delete=[f"d{i}" for i in range(30)],
    )
    push(index.paths[0], target)
    engine = open_engine(parse_target(target), "papers")
    try:
        assert engine.info().metadata_types == {"venue": "string"}
    finally:
        engine.close()


def test_a_collection_of_another_dimension_or_model_is_refused_before_any_write_unless_recreated(tmp_path):
    index, target = _index(tmp_path), f"qdrant:{tmp_path / 'q'}"
    push(index.paths[0], target, "c")
    narrow = _index(tmp_path, n=5, name="narrow", dims=6)
    with pytest.raises(UserError, match="^qdrant:.*collection 'c' holds 8-dimensional vectors .* --recreate"):
        push(narrow.paths[0], target, "c")
    assert not os.path.exists(ledger_path(narrow.paths[0], parse_target(target), "c"))
    _assert_mirrors(index, tmp_path / "q", "c")
    assert push(narrow.paths[0], target, "c", recreate=True) == PushSummary("c", 5, 0)
    _assert_mirrors(narrow, tmp_path / "q", "c")
    assert push(index.paths[0], target, "c", recreate=True) == PushSummary("c", 30, 0)
    assert push(index.paths[0], target, "c") == PushSummary("c", 0, 0)


def test_bad_input_is_one_line_before_the_index_is_read(tmp_path):
    with pytest.raises(UserError, match="^target 'qdrnt:q': expected qdrant:PATH"):
        push(tmp_path / "nowhere", "qdrnt:q")
    assert default_collection("indexes/papers/") == "papers"


def test_a_passages_index_is_refused_before_any_write(tmp_path, tiny_encoder):
    from gtr_keras.retrieval.index import Index

    Index.build(tmp_path / "idx", Corpus(["a"], [""], ["wing lift " * 20]), tiny_encoder, passages="8")
    with pytest.raises(UserError, match="a passages index .--passages.: its windows are not pushed to an engine yet"):
        push(tmp_path / "idx", f"qdrant:{tmp_path / 'q'}", "c")
    assert not (tmp_path / "q").exists()
