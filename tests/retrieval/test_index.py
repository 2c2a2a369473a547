"""`gtr_keras.Index`: built from a corpus and a model or from embedding files, searched (texts, vectors, a
filter, BM25, hybrid), updated (added, replaced, deleted), compacted and reopened, each answer the one that
`gtr-keras search --json` prints for the same index."""

import json

import numpy as np
import pytest

import gtr_keras
from gtr_keras.cli.main import main
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.retrieval.index import Index

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
QUERIES = ["boundary layer heat transfer", "wing flutter at mach one"]


def _documents(n, prefix="d", offset=0):
    documents = []
    for i in range(n):
        text = " ".join(WORDS[(i * 7 + j + offset) % len(WORDS)] for j in range(3 + i % 5))
        metadata = {"lang": ["en", "de", "fr"][i % 3], "year": 2000 + i % 10}
        documents.append({"_id": f"{prefix}{i}", "title": f"title {i}", "text": text, "metadata": metadata})
    return documents


def _write(path, documents):
    path.write_text("".join(json.dumps(document) + "\n" for document in documents))
    return str(path)


def _command_line(capsys, index_dirs, model, *flags, k=5):
    """What `gtr-keras search --json` answers: per query, its hits."""
    index_flags = [flag for directory in index_dirs for flag in ("--index", str(directory))]
    capsys.readouterr()
    assert main(["search", *index_flags, "--model", model, "--json", "-k", str(k), *flags, *QUERIES]) == 0
    return [result["hits"] for result in json.loads(capsys.readouterr().out)]


def _as_printed(hits):
    return json.loads(json.dumps(hits))


def test_an_index_answers_as_the_command_line_through_build_search_updates_and_reopening(
    tmp_path, tiny_model_dir, tiny_encoder, capsys
):
    corpus = _write(tmp_path / "corpus.jsonl", _documents(40))
    path = str(tmp_path / "idx")
    index = gtr_keras.Index.build(path, corpus, tiny_model_dir)
    assert len(index) == 40 and index.kind == "exact" and (tmp_path / "idx" / "bm25").is_dir()

    def agree(index, *flags, **search):
        found = index.search(QUERIES, k=5, **search)
        assert _as_printed(found) == _command_line(capsys, index.paths, tiny_model_dir, *flags)
        assert all(len(hits) == 5 for hits in found)
        return found

    found = agree(index)
    assert set(found[0][0]) == {"id", "score", "title", "text"}
    by_vectors = index.search(tiny_encoder.encode_queries(QUERIES), k=5)
    assert [[h["id"] for h in row] for row in by_vectors] == [[h["id"] for h in row] for row in found]
    np.testing.assert_allclose([[h["score"] for h in r] for r in by_vectors], [[h["score"] for h in r] for r in found])
    in_french = agree(index, "--filter", "lang = fr", filter="lang = fr")
    assert {hit["id"] for row in in_french for hit in row} <= {f"d{i}" for i in range(2, 40, 3)}
    agree(
        index, "--filter", "lang in (en, de)", "--filter", "year >= 2004", filter=["lang in (en, de)", "year >= 2004"]
    )
    agree(index, "--retriever", "bm25", retriever="bm25")
    agree(index, "--retriever", "hybrid", retriever="hybrid")
    agree(index, "--retriever", "hybrid", "--filter", "lang = de", retriever="hybrid", filter="lang = de")
    agree(
        index,
        *("--retriever", "hybrid", "--fusion", "rrf"),
        retriever="hybrid",
        fusion=gtr_keras.Fusion("rrf", index.fusion.gtr_weight),
    )

    changed = _documents(3, offset=5)  # d0, d1, d2 replaced
    index.add(_write(tmp_path / "changed.jsonl", changed + _documents(2, prefix="n")))
    assert len(index) == 42 and {"n0", "n1"} <= set(index.ids)
    replaced = index.search(QUERIES[:1], k=3, filter=gtr_keras.Filter(ids=["d0", "d1", "d2"]))[0]
    assert {hit["id"]: hit["text"] for hit in replaced} == {d["_id"]: d["text"] for d in changed}
    agree(index)
    agree(index, "--retriever", "hybrid", retriever="hybrid")
    index.delete(["d3", "n1"])
    assert len(index) == 40 and not {"d3", "n1"} & set(index.ids)
    with pytest.raises(DataError, match="id 'd3' is not in the index"):
        index.delete(["d3"])
    agree(index, "--filter", "lang = en", filter="lang = en")
    before = agree(index, "--retriever", "bm25", retriever="bm25")
    index.compact()
    segments = json.loads((tmp_path / "idx" / "index" / "segments.json").read_text())["segments"]
    assert len(segments) == 1 and segments[0]["num_deleted"] == 0
    assert agree(index, "--retriever", "bm25", retriever="bm25") == before

    reopened = Index.open(path)  # the model it records, loaded for the texts
    assert _as_printed(reopened.search(QUERIES, k=5)) == agree(index)
    assert reopened.ids == index.ids

    main(["encode", "--model", tiny_model_dir, "--input", corpus, "--output", str(tmp_path / "e.npy")])
    from_embeddings = Index.build(str(tmp_path / "emb"), embeddings=str(tmp_path / "e.npy"), documents=corpus)
    again = agree(from_embeddings)  # the documents of the first build, encoded by `gtr-keras encode`
    assert [[h["id"] for h in row] for row in again] == [[h["id"] for h in row] for row in found]
    np.testing.assert_allclose([[h["score"] for h in r] for r in again], [[h["score"] for h in r] for r in found])
    agree(from_embeddings, "--retriever", "hybrid", "--filter", "lang = fr", retriever="hybrid", filter="lang = fr")


def test_shards_are_searched_as_one_index(tmp_path, tiny_model_dir, capsys):
    documents = _documents(30)
    halves = [_write(tmp_path / f"part{i}.jsonl", documents[i * 15 : (i + 1) * 15]) for i in range(2)]
    paths = [str(Index.build(tmp_path / f"shard{i}", half, tiny_model_dir).paths[0]) for i, half in enumerate(halves)]
    whole = Index.build(tmp_path / "whole", _write(tmp_path / "all.jsonl", documents), tiny_model_dir)
    shards = Index.open(paths, tiny_model_dir)
    found = shards.search(QUERIES, k=5, filter="year < 2005")
    assert _as_printed(found) == _command_line(capsys, paths, tiny_model_dir, "--filter", "year < 2005")
    assert [[h["id"] for h in row] for row in found] == [
        [h["id"] for h in row] for row in whole.search(QUERIES, k=5, filter="year < 2005")
    ]
    with pytest.raises(UserError, match="searches one index"):
        shards.search(QUERIES, retriever="bm25")
    with pytest.raises(UserError, match="an update goes to one index directory"):
        shards.delete(["d1"])


def test_wrong_calls_are_one_line_user_errors(tmp_path, tiny_model_dir):
    corpus = _write(tmp_path / "corpus.jsonl", _documents(6))
    with pytest.raises(UserError, match="a corpus is encoded by a model"):
        Index.build(tmp_path / "idx", corpus)
    with pytest.raises(UserError, match="from a corpus .* or from embeddings: one of them, not both"):
        Index.build(tmp_path / "idx", corpus, tiny_model_dir, embeddings="e/*.npy")
    with pytest.raises(UserError, match="rescore applies to int8 or binary vectors only"):
        Index.build(tmp_path / "idx", corpus, tiny_model_dir, rescore=10)
    with pytest.raises(DataError, match="not an index directory"):
        Index.open(tmp_path)
    index = Index.build(tmp_path / "idx", corpus, tiny_model_dir, bm25=False)
    with pytest.raises(UserError, match="not one string"):
        index.search("wing lift")
    with pytest.raises(UserError, match="retriever must be one of"):
        index.search(QUERIES, retriever="splade")
    with pytest.raises(UserError, match="searches texts"):
        index.search(np.ones((1, 64), np.float32), retriever="bm25")
    with pytest.raises(UserError, match="unknown field"):
        index.search(QUERIES, filter="colour = red")
    with pytest.raises(DataError, match="no BM25 side"):
        index.search(QUERIES, retriever="hybrid")
    other = gtr_keras.load(tiny_model_dir)
    other.model.weights[-1].assign(other.model.weights[-1].numpy() + 1e-3)
    with pytest.raises(MismatchError, match="built with another model"):
        Index.open(tmp_path / "idx", other).search(QUERIES)


def test_an_index_says_its_bm25_side_and_search_settings(tmp_path, tiny_model_dir):
    corpus = _write(tmp_path / "corpus.jsonl", _documents(12))
    index = gtr_keras.Index.build(str(tmp_path / "idx"), corpus, tiny_model_dir)
    assert index.search_settings == {} and index.bm25 is index.bm25  # exact float32: no setting; loaded once
    assert index.bm25.search(["wing lift"], 3)[0][0][0] == index.search(["wing lift"], 3, retriever="bm25")[0][0]["id"]
    quantized = gtr_keras.Index.build(str(tmp_path / "int8"), corpus, tiny_model_dir, vectors="int8", bm25=False)
    assert set(quantized.search_settings) == {"rescore"}
    quantized.set_search_params({"rescore": 7})
    assert quantized.search_settings == {"rescore": 7}
    with pytest.raises(DataError, match="BM25"):
        quantized.bm25  # noqa: B018
