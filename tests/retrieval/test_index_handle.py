"""`IndexHandle`, what every `Index` is (from `build` or `open`): documents by id (`get`, `in`), its files
checked as `gtr-keras check` checks them (`check`), and closing (`close`, `with`)."""

import json
import pathlib

import numpy as np
import pytest

from gtr_keras.cli.main import main
from gtr_keras.errors import UserError
from gtr_keras.retrieval.index import Index

DOCUMENTS = [
    {"_id": "a", "title": "Wings", "text": "lift on a wing", "metadata": {"lang": "en", "year": 2019}},
    {"_id": "b", "title": "", "text": "heat transfer in a boundary layer", "metadata": {"lang": "de", "year": 2001}},
    {"_id": "c", "title": "Jets", "text": "nozzle flow", "metadata": {"lang": "fr", "year": 2010}},
]


def _embeddings(directory, ids, documents=None):
    """`gtr-keras encode`'s files of random unit rows for `ids` (`part-0.npy`, its ids), and their corpus."""
    directory.mkdir()
    rows = np.random.default_rng(len(ids)).standard_normal((len(ids), 8)).astype(np.float32)
    np.save(directory / "part-0.npy", rows / np.linalg.norm(rows, axis=1, keepdims=True))
    (directory / "part-0.ids.txt").write_text("".join(f"{doc_id}\n" for doc_id in ids))
    (directory / "corpus.jsonl").write_text("".join(json.dumps(document) + "\n" for document in documents or []))
    return str(directory / "part-0.npy"), str(directory / "corpus.jsonl")


@pytest.fixture
def built(tmp_path):
    embeddings, corpus = _embeddings(tmp_path / "e", [d["_id"] for d in DOCUMENTS], DOCUMENTS)
    return Index.build(tmp_path / "idx", embeddings=embeddings, documents=corpus)


@pytest.mark.parametrize("how", ["build", "open"])
def test_get_answers_the_documents_in_the_order_asked_and_none_for_an_id_not_in_the_index(built, how):
    index = built if how == "build" else Index.open(built.paths[0])
    b, missing, a = index.get(["b", "no-such-id", "a"])
    assert b == {"id": "b", "title": "", "text": DOCUMENTS[1]["text"], "metadata": {"lang": "de", "year": 2001}}
    assert missing is None and a["title"] == "Wings" and a["metadata"] == {"lang": "en", "year": 2019}
    c = {"id": "c", "title": "Jets", "text": "nozzle flow", "metadata": {"lang": "fr", "year": 2010}}
    assert index.get("c") == index.get(["c"]) == [c]
    assert index.get([]) == []
    a["metadata"]["lang"] = "xx"  # a copy: the index's documents stay as they are
    assert index.get(["a"])[0]["metadata"]["lang"] == "en"
    with pytest.raises(UserError, match="get must be strings or integers"):
        index.get([b"a"])
    with pytest.raises(UserError, match=r"^get\[1\]: id 'a\\ud800' holds a lone surrogate \(U\+D800 at character 1\)"):
        index.get(["a", "a\ud800"])


def test_in_asks_whether_a_document_is_in_the_index_and_follows_updates(built):
    assert "a" in built and "b" in built and "z" not in built
    assert 3 not in built and None not in built and b"a" not in built  # no such id; no such type of id
    assert "a\udcff" not in built  # no id holds a lone surrogate
    built.delete("b")
    assert "b" not in built and built.get(["b", "a"])[0] is None
    assert Index.open(built.paths[0]).get(["b"]) == [None]


def test_an_index_of_embeddings_without_documents_gets_empty_fields(tmp_path):
    embeddings, _ = _embeddings(tmp_path / "e", ["7", "42"])
    index = Index.build(tmp_path / "idx", embeddings=embeddings)
    assert 42 in index and "42" in index  # an integer id, as a corpus's `_id` may be
    assert index.get([42, "8"]) == [{"id": "42", "title": "", "text": "", "metadata": {}}, None]


def test_check_returns_the_report_that_gtr_keras_check_prints(built, capsys):
    report = built.check()
    assert report.ok and report.problems == []
    capsys.readouterr()
    assert main(["check", built.paths[0]]) == 0
    assert capsys.readouterr().out.strip() == report.summary()
    [vectors] = [path for path in pathlib.Path(built.paths[0]).rglob("*.npy") if "embeddings" in path.name]
    data = bytearray(vectors.read_bytes())
    data[-1] ^= 0x01
    vectors.write_bytes(bytes(data))
    damaged = built.check()
    assert not damaged.ok and damaged.problems[0].startswith(f"{vectors}: ")
    assert main(["check", built.paths[0]]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"gtr-keras check: error: {damaged.problems[0]}"


def test_check_of_shards_reports_every_shard(tmp_path):
    first, _ = _embeddings(tmp_path / "e1", ["a", "b"])
    second, _ = _embeddings(tmp_path / "e2", ["c"])
    Index.build(tmp_path / "one", embeddings=first)
    Index.build(tmp_path / "two", embeddings=second)
    shards = Index.open([tmp_path / "one", tmp_path / "two"])
    report = shards.check()
    assert report.ok and report.kind == "2 index directories (shards of one index)"
    assert f"{tmp_path / 'one'}: " in report.summary() and f"{tmp_path / 'two'}: " in report.summary()
    (tmp_path / "two" / "retriever.json").write_text("{}")
    problems = shards.check().problems
    assert problems and all(problem.startswith(str(tmp_path / "two")) for problem in problems)


def test_close_releases_the_index_and_any_use_afterwards_is_a_user_error(built):
    path = built.paths[0]
    with Index.open(path) as index:
        assert len(index) == 3 and not index.closed
    assert index.closed and repr(index) == f"Index({path!r}: closed)"
    built.close()
    built.close()  # a second close does nothing
    closed = f"Index\\({path!r}\\) is closed"
    for use in (
        lambda: built.search(np.ones((1, 8), np.float32)),
        lambda: built.get(["a"]),
        lambda: "a" in built,
        lambda: len(built),
        lambda: built.ids,
        lambda: built.check(),
        lambda: built.search_settings,
        lambda: built.encoder,
        lambda: built.bm25,
        lambda: built.set_search_settings({"rescore": 2}),
        lambda: built.tune(sample=10),
        lambda: built.delete("a"),
        lambda: built.__enter__(),
    ):
        with pytest.raises(UserError, match=closed):
            use()
    assert Index.open(path).ids == ["a", "b", "c"]  # the directory is as it was, "a" not deleted


def test_with_closes_the_index_when_its_block_raises(built):
    with pytest.raises(RuntimeError), built as index:
        raise RuntimeError("in the block")
    assert index.closed
