"""Acceptance of `gtr-keras push` and of `search --index TARGET --collection C`: an index built with
`gtr-keras index`, pushed into Qdrant's embedded mode, answers through the engine what the local exact index
answers, with and without filters, before and after an update and a second push; bad input is exit 2 and one
line before any write."""

import json
import re

import pytest
from command_line import one_line_error

from gtr_keras.cli.main import main

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
QUERIES = ["boundary layer heat transfer", "shock wave on a cone"]
FILTERS = [[], ["lang = en"], ["lang != en"], ["year >= 2000"], ["tags in (a, b)"]]


def _documents(n, prefix="d", shift=0):
    documents = []
    for i in range(n):
        text = " ".join(WORDS[(i * 7 + j + shift) % len(WORDS)] for j in range(3 + i % 5))
        metadata = {"lang": ["en", "de", "fr"][i % 3], "year": 1995 + i % 10, "tags": [["a"], ["b", "c"], []][i % 3]}
        if i % 4 == 0:
            del metadata["lang"]  # a document without the field: `lang != en` does not match it
        documents.append({"_id": f"{prefix}{i}", "title": f"title {prefix}{i}", "text": text, "metadata": metadata})
    return documents


def _write(path, documents):
    path.write_text("".join(json.dumps(document) + "\n" for document in documents))
    return str(path)


def _status(argv):
    """`main(argv)`'s exit status, a parser's error (`SystemExit`) included."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def _search(capsys, index, model, filters, *flags):
    capsys.readouterr()
    argv = ["search", "--index", index, *flags, "--model", model, "-k", "10", "--json"]
    assert main([*argv, *[arg for clause in filters for arg in ("--filter", clause)], *QUERIES]) == 0
    return json.loads(capsys.readouterr().out)


def _assert_same_answers(capsys, index, qdrant, model):
    for filters in FILTERS:
        local = _search(capsys, index, model, filters)
        engine = _search(capsys, qdrant, model, filters, "--collection", "c")
        for mine, theirs in zip(engine, local):
            assert mine["query"] == theirs["query"]
            assert [(h["id"], h["title"], h["text"]) for h in mine["hits"]] == [
                (h["id"], h["title"], h["text"]) for h in theirs["hits"]
            ]
            assert all(abs(a["score"] - b["score"]) <= 1e-5 for a, b in zip(mine["hits"], theirs["hits"]))


@pytest.mark.large
def test_an_index_pushed_to_qdrant_answers_as_the_local_exact_index_through_an_update(tmp_path, capsys, tiny_model_dir):
    index, qdrant = str(tmp_path / "idx"), f"qdrant:{tmp_path / 'q'}"
    corpus = _write(tmp_path / "corpus.jsonl", _documents(40))
    assert main(["index", "--model", tiny_model_dir, "--corpus", corpus, "--out", index, "--exact"]) == 0
    capsys.readouterr()
    assert main(["push", "--index", index, "--to", qdrant, "--collection", "c"]) == 0
    assert capsys.readouterr().out == "pushed to 'c': 40 upserted, 0 deleted\n"
    _assert_same_answers(capsys, index, qdrant, tiny_model_dir)
    changed = _write(tmp_path / "new.jsonl", _documents(3, shift=5) + _documents(4, prefix="n"))  # 3 replaced, 4 new
    (tmp_path / "gone.txt").write_text("d5\nd9\n")
    gone = str(tmp_path / "gone.txt")
    assert main(["update", index, "--model", tiny_model_dir, "--corpus", changed, "--delete", gone]) == 0
    capsys.readouterr()
    assert main(["push", "--index", index, "--to", qdrant, "--collection", "c"]) == 0
    assert capsys.readouterr().out == "pushed to 'c': 7 upserted, 2 deleted\n"
    _assert_same_answers(capsys, index, qdrant, tiny_model_dir)
    assert main(["check", index]) == 0


@pytest.mark.large
def test_bad_input_is_exit_2_and_one_line_before_any_write(tmp_path, capsys, tiny_model_dir):
    index, qdrant = str(tmp_path / "idx"), f"qdrant:{tmp_path / 'q'}"
    corpus = _write(tmp_path / "corpus.jsonl", _documents(6))
    assert main(["index", "--model", tiny_model_dir, "--corpus", corpus, "--out", index, "--dimensions", "16"]) == 0
    assert main(["push", "--index", index, "--to", qdrant, "--collection", "c"]) == 0
    wide = str(tmp_path / "wide")
    assert main(["index", "--model", tiny_model_dir, "--corpus", corpus, "--out", wide]) == 0
    capsys.readouterr()
    for argv, message in [
        (["--to", "redis://localhost:6379"], "argument --to: target 'redis://localhost:6379': expected qdrant:PATH"),
        (["--to", qdrant, "--collection", "c"], "collection 'c' holds 16-dimensional vectors .* --recreate"),
        (["--to", "qdrant+http://127.0.0.1:9", "--timeout", "1"], "Qdrant did not answer within 1 s"),
    ]:
        assert _status(["push", "--index", wide, *argv]) == 2
        assert re.search(message, one_line_error(capsys))
    assert not list((tmp_path / "wide").glob("pushed-*"))
    assert _status(["search", "--index", index, "--collection", "c", "--model", tiny_model_dir, "lift"]) == 2
    assert "--collection: names a collection of an engine's target" in one_line_error(capsys)
    assert _status(["search", "--index", qdrant, "--model", tiny_model_dir, "lift"]) == 2
    assert "--collection: required with an engine's target" in one_line_error(capsys)
    assert _status(["search", "--index", qdrant, "--collection", "c", "--retriever", "bm25", "lift"]) == 2
    assert "not with an engine's collection" in one_line_error(capsys)
    assert main(["push", "--index", wide, "--to", qdrant, "--collection", "c", "--recreate"]) == 0
    assert capsys.readouterr().out == "pushed to 'c': 6 upserted, 0 deleted\n"
