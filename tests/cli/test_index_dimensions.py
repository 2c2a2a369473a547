"""`--dimensions N` of `encode`, `index`, `update` and `export`: the first N coordinates, renormalised."""

import json

import numpy as np
import pytest

from gtr_keras.cli.main import main
from gtr_keras.utils.dimensions import truncate

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
QUERIES = ["boundary layer heat transfer", "shock on a cone", "flutter of a panel"]


def _corpus_file(path, n=30, start=0):
    with open(path, "w") as f:
        for i in range(start, start + n):
            text = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 5))
            f.write(json.dumps({"_id": f"d{i}", "title": f"title {i}", "text": text}) + "\n")
    return path


def _search(index, model_dir, capsys, query):
    capsys.readouterr()
    assert main(["search", query, "--index", str(index), "--model", model_dir, "-k", "5", "--json"]) == 0
    return [(hit["id"], hit["score"]) for hit in json.loads(capsys.readouterr().out)[0]["hits"]]


def _exact_search(tiny_encoder, corpus, dimensions, query):
    records = [json.loads(line) for line in open(corpus)]
    documents = tiny_encoder.encode_documents([f"{r['title']} {r['text']}" for r in records])
    scores = truncate(documents, dimensions) @ truncate(tiny_encoder.encode_queries([query]), dimensions)[0]
    order = np.argsort(-scores, kind="stable")[:5]
    return [(records[i]["_id"], float(scores[i])) for i in order]


@pytest.mark.slow
def test_index_with_dimensions_searches_as_exact_search_over_the_truncated_vectors(
    tmp_path, tiny_model_dir, tiny_encoder, capsys
):
    corpus = _corpus_file(tmp_path / "corpus.jsonl")
    out = tmp_path / "index"
    assert (
        main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(out), "--dimensions", "16"])
        == 0
    )
    record = json.loads((out / "retriever.json").read_text())
    assert (record["dimensions"], record["embedding_dim"]) == (16, 16)
    for query in QUERIES:
        hits, expected = _search(out, tiny_model_dir, capsys, query), _exact_search(tiny_encoder, corpus, 16, query)
        assert [doc_id for doc_id, _ in hits] == [doc_id for doc_id, _ in expected]
        np.testing.assert_allclose([s for _, s in hits], [s for _, s in expected], atol=1e-5)


@pytest.mark.slow
def test_encode_with_dimensions_then_index_equals_index_with_dimensions(tmp_path, tiny_model_dir, tiny_encoder, capsys):
    corpus = _corpus_file(tmp_path / "corpus.jsonl")
    (tmp_path / "cut").mkdir()
    (tmp_path / "full").mkdir()
    encode = ["encode", "--model", tiny_model_dir, "--input", str(corpus), "--output"]
    assert main([*encode, str(tmp_path / "cut" / "e.npy"), "--dimensions", "16"]) == 0
    assert main([*encode, str(tmp_path / "full" / "e.npy")]) == 0
    cut = np.load(tmp_path / "cut" / "e.npy")
    np.testing.assert_allclose(cut, truncate(np.load(tmp_path / "full" / "e.npy"), 16), atol=1e-6)
    assert json.loads((tmp_path / "cut" / "e.json").read_text())["model"]["dimensions"] == 16
    assert main(["index", "--embeddings", str(tmp_path / "cut" / "*.npy"), "--out", str(tmp_path / "by-cut")]) == 0
    full = ["index", "--embeddings", str(tmp_path / "full" / "*.npy"), "--out", str(tmp_path / "by-full")]
    assert main([*full, "--dimensions", "16"]) == 0  # D-wide embeddings truncated as they are indexed
    for query in QUERIES:
        expected = _exact_search(tiny_encoder, corpus, 16, query)
        for index in ("by-cut", "by-full"):
            hits = _search(tmp_path / index, tiny_model_dir, capsys, query)
            assert [doc_id for doc_id, _ in hits] == [doc_id for doc_id, _ in expected]


@pytest.mark.slow
def test_an_update_or_search_with_other_dimensions_is_refused_naming_the_setting(tmp_path, tiny_model_dir, capsys):
    import gtr_keras
    from gtr_keras.errors import MismatchError

    out = tmp_path / "index"
    corpus = _corpus_file(tmp_path / "corpus.jsonl")
    assert (
        main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(out), "--dimensions", "16"])
        == 0
    )
    more = _corpus_file(tmp_path / "more.jsonl", 5, start=30)
    capsys.readouterr()
    update = ["update", str(out), "--model", tiny_model_dir, "--corpus", str(more)]
    assert main([*update, "--dimensions", "32"]) == 2
    error = capsys.readouterr().err.splitlines()  # the warning of a model not trained for 32, then the error
    assert "not trained for embeddings of 32 dimensions" in error[0]
    assert "built with --dimensions 16, but dimensions 32 are given" in error[1] and len(error) == 2
    assert main([*update, "--dimensions", "16"]) == 0
    assert main(update) == 0  # the index's dimensions by default
    index = gtr_keras.Index.open(out, tiny_model_dir)
    assert len(index) == 35 and index.encoder.embedding_dim == 16
    with pytest.raises(MismatchError, match="built with --dimensions 16, but dimensions 8 are given"):
        gtr_keras.Index.open(out, gtr_keras.load(tiny_model_dir).truncated(8)).search(["lift"])


@pytest.mark.parametrize("value", ["0", "x", "1.5", "-2"])
def test_bad_dimensions_are_exit_2_and_one_line_before_any_work(tmp_path, tiny_model_dir, capsys, value):
    corpus = _corpus_file(tmp_path / "corpus.jsonl")
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "index",
                "--model",
                tiny_model_dir,
                "--corpus",
                str(corpus),
                "--out",
                str(tmp_path / "i"),
                "--dimensions",
                value,
            ]
        )
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and len(error.splitlines()) == 1
    assert "argument --dimensions: must be an integer of at least 1, got" in error
    assert not (tmp_path / "i").exists()


def test_dimensions_above_d_are_exit_2_before_any_encoding(tmp_path, tiny_model_dir, capsys):
    corpus = _corpus_file(tmp_path / "corpus.jsonl")
    out = tmp_path / "e.npy"
    assert (
        main(["encode", "--model", tiny_model_dir, "--input", str(corpus), "--output", str(out), "--dimensions", "65"])
        == 2
    )
    error = capsys.readouterr().err
    assert "--dimensions: must be an integer from 1 to 64, got 65" in error and len(error.splitlines()) == 1
    assert not out.exists()
