"""`gtr_keras.Index`: built from a corpus and a model or from embedding files, searched (texts, vectors, a
filter, BM25, hybrid), updated (added, replaced, deleted), compacted and reopened, each answer the one that
`gtr-keras search --json` prints for the same index."""

import json
import pathlib
import shutil

import numpy as np
import pytest

import gtr_keras
from gtr_keras.cli.main import main
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.integrity import check_directory
from gtr_keras.retrieval.index import Index
from gtr_keras.retrieval.index_types import IndexUpdate

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


def test_wrong_argument_combinations_are_refused_before_any_model_or_reranker_loads(tmp_path, tiny_model_dir):
    Index.build(tmp_path / "idx", _write(tmp_path / "corpus.jsonl", _documents(6)), tiny_model_dir)
    loads = []
    index = Index.open(tmp_path / "idx", lambda: loads.append("model"))
    reranker = lambda: loads.append("reranker")  # noqa: E731
    wrong_calls = [
        ({"retriever": "splade"}, "retriever must be one of"),
        ({"k": 2.0}, "k must be a positive int, got 2.0"),
        ({"k": "5"}, "k must be a positive int"),
        ({"k": 0}, "k must be a positive int"),
        ({"fusion": gtr_keras.Fusion("rrf")}, "fusion fuses the hits of retriever='hybrid'; retriever='gtr'"),
        ({"fusion": gtr_keras.Fusion(), "retriever": "bm25"}, "fusion fuses .* retriever='bm25'"),
        ({"fusion": "rrf", "retriever": "hybrid"}, "fusion must be a gtr_keras.Fusion"),
        ({"rerank_depth": 4}, r"rerank_depth \(4\) must be at least k \(10\)"),
        ({"k": 5, "rerank": reranker, "rerank_depth": 3}, r"rerank_depth \(3\) must be at least k \(5\)"),
        ({"rerank": reranker, "rerank_depth": 0}, "rerank_depth must be a positive int"),
        ({"filter": "year >="}, "filter 'year >=': expected FIELD OP VALUE"),
    ]
    for arguments, message in wrong_calls:
        with pytest.raises(UserError, match=message) as refused:
            index.search(QUERIES, **arguments)
        assert "\n" not in str(refused.value), arguments
    with pytest.raises(UserError, match="rerank: a reranker reads query texts, not vectors"):
        index.search(np.ones((1, 64), np.float32), rerank=reranker)
    with pytest.raises(UserError, match="queries: a list of texts or a float array of query vectors, got a int"):
        index.search([1, 2])
    with pytest.raises(UserError, match="update: nothing to do"):
        index.update()
    with pytest.raises(UserError, match="add a corpus .* or embeddings, not both"):
        index.update(add=str(tmp_path / "corpus.jsonl"), embeddings="e/*.npy")
    with pytest.raises(UserError, match="delete must be an id .* or a list of ids, got bytes"):
        index.delete(b"d1")
    with pytest.raises(UserError, match="delete\\[0\\]: id 'd1' is also among the documents added"):
        index.update(add=str(tmp_path / "corpus.jsonl"), delete="d1")
    with pytest.raises(UserError, match="exact index of float32 vectors has no search setting to tune"):
        index.tune(queries=QUERIES)
    assert loads == [] and len(index) == 6


def test_an_index_says_its_bm25_side_and_search_settings(tmp_path, tiny_model_dir):
    corpus = _write(tmp_path / "corpus.jsonl", _documents(12))
    index = gtr_keras.Index.build(str(tmp_path / "idx"), corpus, tiny_model_dir)
    assert index.search_settings == {} and index.bm25 is index.bm25  # exact float32: no setting; loaded once
    assert index.bm25.search(["wing lift"], 3)[0][0][0] == index.search(["wing lift"], 3, retriever="bm25")[0][0]["id"]
    quantized = gtr_keras.Index.build(str(tmp_path / "int8"), corpus, tiny_model_dir, vectors="int8", bm25=False)
    assert set(quantized.search_settings) == {"rescore"}
    quantized.set_search_settings({"rescore": 7})
    assert quantized.search_settings == {"rescore": 7}
    with pytest.raises(DataError, match="BM25"):
        quantized.bm25  # noqa: B018


def _unit_rows(rng, n, dims=16):
    rows = rng.standard_normal((n, dims)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _embedding_files(directory, ids, vectors):
    """`gtr-keras encode`'s files of `vectors` (`NAME.npy` and `NAME.ids.txt`), with their corpus (`lang` by
    the id's number: en, de, fr): `(embeddings, documents)`."""
    directory.mkdir()
    np.save(directory / "part-0.npy", vectors)
    (directory / "part-0.ids.txt").write_text("".join(f"{doc_id}\n" for doc_id in ids))
    documents = [
        {"_id": doc_id, "title": "", "text": f"text of {doc_id}", "metadata": {"lang": _lang(doc_id)}} for doc_id in ids
    ]
    return str(directory / "part-0.npy"), _write(directory / "corpus.jsonl", documents)


def _lang(doc_id):
    return ["en", "de", "fr"][int(doc_id.lstrip("dn")) % 3]


def _brute_force(vectors_by_id, queries, k, allowed=None):
    """The top `k` ids and cosine scores of each query over the documents (`allowed` ones only), by NumPy."""
    ids = [doc_id for doc_id in vectors_by_id if allowed is None or doc_id in allowed]
    documents = np.stack([vectors_by_id[doc_id] for doc_id in ids]).astype(np.float64)
    documents /= np.linalg.norm(documents, axis=1, keepdims=True)
    scores = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ documents.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return [[ids[j] for j in row] for row in order], np.take_along_axis(scores, order, axis=1)


def test_an_exact_index_answers_as_numpy_brute_force_with_filters_deletes_and_adds(tmp_path):
    rng = np.random.default_rng(0)
    ids = [f"d{i}" for i in range(60)]
    vectors_by_id = dict(zip(ids, _unit_rows(rng, 60)))
    embeddings, documents = _embedding_files(tmp_path / "e", ids, np.stack(list(vectors_by_id.values())))
    index = Index.build(tmp_path / "idx", embeddings=embeddings, documents=documents, exact=True)
    queries = rng.standard_normal((5, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    def agree(k, filter=None, allowed=None):
        found = index.search(queries, k=k, filter=filter)
        expected_ids, expected_scores = _brute_force(vectors_by_id, queries, k, allowed)
        assert [[hit["id"] for hit in row] for row in found] == expected_ids
        np.testing.assert_allclose([[hit["score"] for hit in row] for row in found], expected_scores, atol=1e-5)

    assert index.kind == "exact" and len(index) == 60
    agree(10)
    agree(60)
    allowed = set(rng.choice(ids, 12, replace=False).tolist())
    agree(5, gtr_keras.Filter(ids=sorted(allowed)), allowed)
    agree(20, gtr_keras.Filter(ids=sorted(allowed)), allowed)  # more than allowed: every allowed one
    agree(8, "lang = de", {doc_id for doc_id in ids if _lang(doc_id) == "de"})

    gone = ["d3", "d10", "d41"]
    index.delete(gone)
    for doc_id in gone:
        del vectors_by_id[doc_id]
    agree(10)
    agree(5, gtr_keras.Filter(ids=sorted(allowed)), allowed - set(gone))

    new_ids = ["d0", "d1", "n0", "n1", "n2", "n3"]  # d0 and d1 replaced
    new_vectors = _unit_rows(rng, len(new_ids))
    new_embeddings, new_documents = _embedding_files(tmp_path / "new", new_ids, new_vectors)
    index.add(embeddings=new_embeddings, documents=new_documents)
    vectors_by_id.update(zip(new_ids, new_vectors))
    assert len(index) == 61
    agree(10)
    agree(61)
    agree(6, "lang = en", {doc_id for doc_id in vectors_by_id if _lang(doc_id) == "en"})
    agree(3, gtr_keras.Filter(ids=["d0", "n2", "d3"]), {"d0", "n2"})
    agree(10, gtr_keras.Filter("lang != fr", ids=sorted(allowed)), {i for i in allowed - set(gone) if _lang(i) != "fr"})


def test_delete_takes_one_id_a_list_of_ids_or_a_path_of_a_file_of_ids(tmp_path):
    rng = np.random.default_rng(1)
    ids = [f"d{i}" for i in range(12)]
    embeddings, documents = _embedding_files(tmp_path / "e", ids, _unit_rows(rng, 12))
    index = Index.build(tmp_path / "idx", embeddings=embeddings, documents=documents)
    index.delete("d5")  # one id, not a file named d5, nor the ids "d" and "5"
    assert "d5" not in index.ids and len(index) == 11
    index.delete(iter(["d1", "d2"]))
    index.delete(("d3",))
    withdrawn = tmp_path / "withdrawn.txt"
    withdrawn.write_text("d7\n\nd8\n")
    index.delete(pathlib.Path(withdrawn))  # a file of ids only as an os.PathLike
    assert sorted(index.ids) == sorted(f"d{i}" for i in (0, 4, 6, 9, 10, 11))
    with pytest.raises(DataError, match=f"id {str(withdrawn)!r} is not in the index"):
        index.delete(str(withdrawn))  # a str is one id, whatever it looks like
    withdrawn.write_text("d9\nd0x\n")
    with pytest.raises(DataError, match="withdrawn.txt:2: id 'd0x' is not in the index"):
        index.delete(withdrawn)
    index.delete(["d9", "d0x"], missing_ok=True)
    assert "d9" not in index.ids

    vector = np.stack([_unit_rows(rng, 1)[0]])
    only = index.search(vector, k=5, filter=gtr_keras.Filter(ids="d4"))[0]
    assert [hit["id"] for hit in only] == ["d4"]
    allowed = tmp_path / "allowed.txt"
    allowed.write_text("d6\nd10\n")
    assert {hit["id"] for hit in index.search(vector, k=5, filter=gtr_keras.Filter(ids=allowed))[0]} == {"d6", "d10"}

    numbered = Index.build(
        tmp_path / "numbered", embeddings=_embedding_files(tmp_path / "n", ["7", "42"], _unit_rows(rng, 2))[0]
    )
    numbered.delete(42)  # an integer id, as a corpus's `_id` may be
    assert numbered.ids == ["7"]
    assert [hit["id"] for hit in numbered.search(vector, k=2, filter=gtr_keras.Filter(ids=7))[0]] == ["7"]


def _generation(path):
    """The generation of an index directory: 0 until its first update writes `segments.json`."""
    manifest = pathlib.Path(path) / "index" / "segments.json"
    return json.loads(manifest.read_text())["generation"] if manifest.exists() else 0


def test_an_update_adds_and_deletes_in_one_commit_as_the_command_line_does(tmp_path, tiny_model_dir, capsys):
    index = Index.build(tmp_path / "idx", _write(tmp_path / "corpus.jsonl", _documents(20)), tiny_model_dir)
    shutil.copytree(tmp_path / "idx", tmp_path / "by-cli")
    reader = Index.open(tmp_path / "idx", tiny_model_dir)
    before, generation, found_before = reader.ids, _generation(tmp_path / "idx"), reader.search(QUERIES, k=5)
    added = _write(tmp_path / "added.jsonl", _documents(2, offset=9) + _documents(3, prefix="n"))  # d0, d1 replaced
    withdrawn = tmp_path / "withdrawn.txt"
    withdrawn.write_text("d4\nd9\n")

    index.update(add=added, delete=withdrawn)
    assert _generation(tmp_path / "idx") == generation + 1  # one commit: no version with only one half
    assert reader.ids == before and reader.search(QUERIES, k=5) == found_before  # its version, whole
    after = Index.open(tmp_path / "idx", tiny_model_dir)
    assert after.ids == index.ids and len(after) == 21
    assert {"n0", "n1", "n2"} <= set(after.ids) and not {"d4", "d9"} & set(after.ids)
    assert after.search(QUERIES[:1], k=2, filter=gtr_keras.Filter(ids=["d0", "d1"]))[0][0]["text"] in {
        d["text"] for d in _documents(2, offset=9)
    }

    by_cli = str(tmp_path / "by-cli")
    assert main(["update", by_cli, "--model", tiny_model_dir, "--corpus", added, "--delete", str(withdrawn)]) == 0
    cli = Index.open(by_cli, tiny_model_dir)
    assert _generation(by_cli) == _generation(tmp_path / "idx") and cli.ids == after.ids
    for retriever in ("gtr", "bm25", "hybrid"):
        assert cli.search(QUERIES, k=8, retriever=retriever) == after.search(QUERIES, k=8, retriever=retriever)
    index.update(delete="n0", compact=True)  # the deletion's generation, then the compaction's
    assert _generation(tmp_path / "idx") == generation + 3 and len(Index.open(tmp_path / "idx")) == 20
    assert len(json.loads((tmp_path / "idx" / "index" / "segments.json").read_text())["segments"]) == 1


def test_tune_takes_query_texts_encoded_by_the_index_model(tmp_path, tiny_model_dir, tiny_encoder):
    corpus = _write(tmp_path / "corpus.jsonl", _documents(60))
    index = Index.build(tmp_path / "idx", corpus, tiny_model_dir, vectors="int8", bm25=False)
    texts = [" ".join(WORDS[(i * 5 + j) % len(WORDS)] for j in range(2 + i % 3)) for i in range(40)]
    by_texts = index.tune(queries=texts, target_recall=0.5, k=5, plot=str(tmp_path / "t.png"))
    assert by_texts["tuning_queries"] + by_texts["held_out_queries"] == 40
    assert index.search_settings == by_texts["setting"]
    other = Index.build(tmp_path / "other", corpus, tiny_model_dir, vectors="int8", bm25=False)
    by_vectors = other.tune(
        queries=tiny_encoder.encode_queries(texts), target_recall=0.5, k=5, plot=str(tmp_path / "v.png")
    )
    assert by_texts["queries"] == by_vectors["queries"]

    def recalls(record):
        return {json.dumps(m["setting"], sort_keys=True): m["recall"] for m in record["measurements"]}

    same = recalls(by_texts).keys() & recalls(by_vectors).keys()
    assert same and all(recalls(by_texts)[s] == recalls(by_vectors)[s] for s in same)
    with pytest.raises(UserError, match="not one string"):
        index.tune(queries="queries.jsonl")
    loads = []
    lazy = Index.open(tmp_path / "idx", lambda: loads.append("model"))
    with pytest.raises(UserError, match="tune needs at least 2 queries"):
        lazy.tune(queries=["wing lift"])
    assert loads == []


def test_check_directory_reports_the_integrity_of_an_index_as_gtr_keras_check_does(tmp_path, capsys):
    rng = np.random.default_rng(2)
    embeddings, documents = _embedding_files(tmp_path / "e", [f"d{i}" for i in range(8)], _unit_rows(rng, 8))
    Index.build(tmp_path / "idx", embeddings=embeddings, documents=documents)
    report = check_directory(tmp_path / "idx")
    assert report.ok and report.problems == [] and report.summary().startswith(f"{tmp_path / 'idx'}: an index")
    capsys.readouterr()
    assert main(["check", str(tmp_path / "idx")]) == 0
    assert capsys.readouterr().out.strip() == report.summary()

    [vectors] = [path for path in (tmp_path / "idx").rglob("*.npy") if "embeddings" in path.name]
    data = bytearray(vectors.read_bytes())
    data[-1] ^= 0x01
    vectors.write_bytes(bytes(data))
    report = check_directory(tmp_path / "idx")
    assert not report.ok and report.problems[0].startswith(f"{vectors}: ")
    assert main(["check", str(tmp_path / "idx")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"gtr-keras check: error: {report.problems[0]}"


@pytest.mark.parametrize(
    "commit",
    [
        lambda index, new: index.add(new),
        lambda index, new: index.delete(["d3", "d4"]),
        lambda index, new: index.update(add=new, delete=["d5"]),
        lambda index, new: index.compact(),
    ],
    ids=["add", "delete", "update", "compact"],
)
def test_a_reader_keeps_its_version_for_every_retriever_after_another_writer_commits(tmp_path, tiny_model_dir, commit):
    corpus = _write(tmp_path / "corpus.jsonl", _documents(30))
    new = _write(tmp_path / "new.jsonl", _documents(2, offset=3) + _documents(4, prefix="n", offset=1))
    path = str(Index.build(tmp_path / "idx", corpus, tiny_model_dir).paths[0])
    Index.open(path, tiny_model_dir).delete("d9")  # an updated index: segments and a deletion list
    seen, reader = Index.open(path, tiny_model_dir), Index.open(path, tiny_model_dir)
    before = {retriever: seen.search(QUERIES, k=8, retriever=retriever) for retriever in ("gtr", "bm25", "hybrid")}
    writer = Index.open(path, tiny_model_dir)
    commit(writer, new)
    for retriever, hits in before.items():
        assert reader.search(QUERIES, k=8, retriever=retriever) == hits, retriever
    fresh = Index.open(path, tiny_model_dir)
    assert fresh.ids == writer.ids
    for retriever in before:
        assert fresh.search(QUERIES, k=8, retriever=retriever) == writer.search(QUERIES, k=8, retriever=retriever)


@pytest.mark.parametrize("clock", ["fine", "coarse"])
def test_a_side_not_of_a_readers_version_says_retry_only_where_a_retry_can_succeed(
    tmp_path, tiny_model_dir, monkeypatch, clock
):
    if clock == "coarse":  # every commit within one tick: the manifest's generation tells them apart
        from gtr_keras.utils import files

        monkeypatch.setattr(files, "modified_ns", lambda path: 0)
    path = tmp_path / "idx"
    Index.build(path, _write(tmp_path / "corpus.jsonl", _documents(20)), tiny_model_dir)
    shutil.copytree(path / "bm25", tmp_path / "side-before")
    writer = Index.open(path)
    writer.add(_write(tmp_path / "new.jsonl", _documents(3, prefix="n")))
    (path / "bm25").rename(tmp_path / "side-after")
    shutil.copytree(tmp_path / "side-before", path / "bm25")  # committed, its BM25 side not yet rebuilt
    rebuilding, moved_on = Index.open(path), Index.open(path)
    assert rebuilding.search(QUERIES, k=3) == writer.search(QUERIES, k=3)  # GTR answers meanwhile
    with pytest.raises(MismatchError, match=r"an update is rebuilding it \(retry when it ends\)"):
        rebuilding.search(QUERIES, retriever="bm25")
    shutil.rmtree(path / "bm25")
    (tmp_path / "side-after").rename(path / "bm25")  # the rebuild ends
    assert rebuilding.search(QUERIES, k=3, retriever="bm25") == writer.search(QUERIES, k=3, retriever="bm25")
    writer.delete("n0")
    with pytest.raises(MismatchError, match=r"updated since this Index loaded it.*open the index again") as error:
        moved_on.search(QUERIES, retriever="hybrid")
    assert "retry" not in str(error.value)
    assert Index.open(path).search(QUERIES, k=3, retriever="bm25") == writer.search(QUERIES, k=3, retriever="bm25")


def test_add_delete_update_and_compact_return_what_they_changed(tmp_path):
    rng = np.random.default_rng(3)
    embeddings, documents = _embedding_files(tmp_path / "e", [f"d{i}" for i in range(20)], _unit_rows(rng, 20))
    index = Index.build(tmp_path / "idx", embeddings=embeddings, documents=documents)
    new_embeddings, new_documents = _embedding_files(tmp_path / "new", ["n1", "d2", "n0"], _unit_rows(rng, 3))
    added = index.add(embeddings=new_embeddings, documents=new_documents)
    assert (added.added, added.replaced, added.deleted) == (("n1", "n0"), ("d2",), ())
    assert (
        (added.generation, added.documents, added.segments)
        == (_generation(index.paths[0]), len(index), 2)
        == (1, 22, 2)
    )
    deleted = index.delete(["d5", "gone", "n1"], missing_ok=True)
    assert (deleted.added, deleted.replaced, deleted.deleted, deleted.documents) == ((), (), ("d5", "n1"), 20)
    both = index.update(delete="d6")
    assert both.deleted == ("d6",) and both.generation == 3
    compacted = index.compact()
    assert compacted == IndexUpdate((), (), (), generation=4, documents=19, segments=1)


@pytest.mark.slow
def test_a_reranker_model_given_as_rerank_is_the_reranker_not_a_factory(tmp_path, reranker_dirs):
    from gtr_keras.models.reranker.reranker import Reranker

    rng = np.random.default_rng(4)
    embeddings, documents = _embedding_files(tmp_path / "e", [f"d{i}" for i in range(9)], _unit_rows(rng, 9))
    index = Index.build(tmp_path / "idx", embeddings=embeddings, documents=documents)
    model = Reranker.from_preset(reranker_dirs["bert"])
    by_model = index.search(["text of d4"], k=3, retriever="bm25", rerank=model, rerank_depth=9)
    by_directory = index.search(["text of d4"], k=3, retriever="bm25", rerank=reranker_dirs["bert"], rerank_depth=9)
    assert [hit["id"] for hit in by_model[0]] == [hit["id"] for hit in by_directory[0]]
    np.testing.assert_allclose([h["score"] for h in by_model[0]], [h["score"] for h in by_directory[0]], rtol=1e-5)
    scores = model.scorer().predict([("text of d4", f"text of {hit['id']}") for hit in by_model[0]])
    np.testing.assert_allclose([hit["score"] for hit in by_model[0]], scores, rtol=1e-5)
