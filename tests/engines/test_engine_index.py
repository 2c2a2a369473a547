"""`Index.open(TARGET, model=, collection=)`: a Qdrant collection (embedded mode, real) searched and updated as an
`Index`, with the hits of the local exact index it was pushed from."""

import numpy as np
import pytest
from search_inputs import assert_same_results

from gtr_keras.beir.readers import Corpus
from gtr_keras.engines.engine_index import EngineIndex, EngineUpdate
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.retrieval.index import Index

FILTERS = [None, "lang = en", "lang != en", "year >= 2000", "tags in (a, b)", ["tags != a", "year < 2010"]]


def _corpus(ids, seed=0):
    rng = np.random.default_rng(seed)
    words = "wing lift drag shock boundary layer heat transfer flutter nozzle jet".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(3, 9)))) for _ in ids]
    metadata = [
        {"lang": ["en", "de", "fr"][n % 3], "year": 1995 + n, "tags": ["a", "b", "c"][: n % 4]} if n % 6 else {}
        for n in range(len(ids))
    ]
    return Corpus(list(ids), [f"title {i}" for i in ids], texts, metadata)


@pytest.fixture
def pushed(tmp_path, tiny_encoder, tiny_model_dir):
    index = Index.build(tmp_path / "idx", _corpus([f"d{i}" for i in range(24)]), tiny_model_dir)
    index.push(f"qdrant:{tmp_path / 'q'}", "c")
    return index, f"qdrant:{tmp_path / 'q'}"


def test_an_engine_collection_answers_as_the_local_exact_index_through_updates(pushed, tiny_encoder):
    index, target = pushed
    queries = ["boundary layer heat", "wing lift", "nozzle jet shock"]
    with Index.open(target, model=tiny_encoder, collection="c") as engine_index:
        assert isinstance(engine_index, EngineIndex) and len(engine_index) == 24 and "d3" in engine_index
        for filter in FILTERS:
            assert_same_results(engine_index.search(queries, 5, filter), index.search(queries, 5, filter), atol=1e-5)
        vectors = tiny_encoder.encode_queries(queries)
        assert_same_results(engine_index.search(vectors, 3), index.search(vectors, 3), atol=1e-5)
        change = engine_index.update(add=_corpus(["d2", "n1"], seed=5), delete=["d5"])
        assert change == EngineUpdate(("n1",), ("d2",), ("d5",))
        index.update(add=_corpus(["d2", "n1"], seed=5), delete=["d5"])
        for filter in FILTERS:
            assert_same_results(engine_index.search(queries, 5, filter), index.search(queries, 5, filter), atol=1e-5)
        assert engine_index.get(["n1", "d5"]) == [index.get(["n1"])[0], None]
        with pytest.raises(DataError, match="^delete: id 'zz' is not in the collection 'c'"):
            engine_index.delete(["zz"])
        assert engine_index.delete(["zz", "d1"], missing_ok=True) == EngineUpdate((), (), ("d1",))


def test_what_an_engine_cannot_do_is_refused_in_one_line(pushed, tiny_encoder):
    _, target = pushed
    engine_index = Index.open(target, model=tiny_encoder, collection="c")
    for call, message in [
        (lambda: engine_index.search(["x"], retriever="bm25"), "^retriever 'bm25' .*: not on an engine's collection"),
        (lambda: engine_index.search(["x"], rerank="model"), "^rerank: not on an engine's collection"),
        (engine_index.compact, "^compact: not on an engine's collection"),
        (engine_index.tune, "^tune: not on an engine's collection"),
        (lambda: engine_index.search(["x"], filter="size = 2"), "unknown field 'size'"),
        (lambda: engine_index.search(np.ones((1, 3), np.float32)), r"query vectors: a \[queries, \d+\] array"),
    ]:
        with pytest.raises(UserError, match=message):
            call()
    engine_index.close()
    with pytest.raises(UserError, match="is closed"):
        engine_index.search(["x"])
    with pytest.raises(UserError, match="no collection 'other': push an index there first"):
        Index.open(target, collection="other")
    with pytest.raises(UserError, match="name the collection to search"):
        Index.open(target)
    with pytest.raises(UserError, match="^collection: names a collection of an engine target"):
        Index.open("indexes/papers", collection="c")


def test_a_collection_of_another_model_is_refused_before_a_query_is_encoded(tmp_path):
    ids = [f"d{i}" for i in range(4)]
    np.save(tmp_path / "e.npy", np.eye(4, dtype=np.float32))
    (tmp_path / "e.ids.txt").write_text("".join(f"{i}\n" for i in ids))
    index = Index.build(tmp_path / "idx", embeddings=str(tmp_path / "e.npy"), documents=_corpus(ids))
    index.push(f"qdrant:{tmp_path / 'q'}", "c")
    engine_index = Index.open(f"qdrant:{tmp_path / 'q'}", model=lambda: pytest.fail("loaded"), collection="c")
    with pytest.raises(UserError, match="unknown field"):
        engine_index.search(["x"], filter="size = 1")
    assert [hit["id"] for hit in engine_index.search(np.eye(4, dtype=np.float32)[:1], 2)[0]] == ["d0", "d3"]
    engine_index._load_encoder = lambda: object()
    with pytest.raises(MismatchError, match="records no model .*search it with query vectors"):
        engine_index.search(["x"])


def _tied_collection(tmp_path, engine):
    """A collection of 10 documents of one vector (every score ties), written by the engine's own class."""
    from gtr_keras.engines.engine import CollectionInfo, Record
    from gtr_keras.engines.registry import open_engine
    from gtr_keras.engines.targets import parse_target

    target = {"qdrant": f"qdrant:{tmp_path / 'q'}", "milvus": f"milvus:{tmp_path / 'm.db'}"}[engine]
    opened = open_engine(parse_target(target), "c")
    opened.create(CollectionInfo(4, "m", {}))
    vector = np.full(4, 0.5, np.float32)
    opened.upsert([Record(f"d{i}", vector, f"t{i}", f"x{i}", {}) for i in range(10)])
    opened.close()
    return target, vector


def test_tied_scores_are_asked_again_no_further_than_the_engine_max_k(tmp_path, monkeypatch):
    from gtr_keras.engines import milvus_engine

    target, vector = _tied_collection(tmp_path, "milvus")
    monkeypatch.setattr(milvus_engine, "MAX_K", 4)
    monkeypatch.setattr(milvus_engine.MilvusEngine, "max_k", 4, raising=False)
    with EngineIndex(target, "c") as engine_index:
        hits = engine_index.search(vector[None], k=2)[0]
    assert len(hits) == 2 and hits[0]["score"] == hits[1]["score"]


def test_a_hit_deleted_between_the_search_and_its_documents_is_left_out(tmp_path, monkeypatch):
    target, vector = _tied_collection(tmp_path, "qdrant")
    ranked = EngineIndex._ranked

    def then_deleted(self, vectors, k, filter):
        found = ranked(self, vectors, k, filter)
        self._engine.delete([found[0][0][0]])  # another writer, between the two requests
        return found

    monkeypatch.setattr(EngineIndex, "_ranked", then_deleted)
    with EngineIndex(target, "c") as engine_index:
        hits = engine_index.search(vector[None], k=3)[0]
    assert [hit["id"] for hit in hits] == ["d8", "d7"]
