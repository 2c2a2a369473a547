import gzip
import json

import numpy as np
import pytest
from search_inputs import assert_same_results

import gtr_keras
from gtr_keras.cli.main import main


def _encode(model_dir, path, *extra):
    out = path.parent / "out.npy"
    code = main(["encode", "--model", model_dir, "--input", str(path), "--output", str(out), *extra])
    return code, out


def test_encode_beir_corpus_joins_title_and_text_and_writes_ids(tmp_path, tiny_model_dir, tiny_encoder):
    path = tmp_path / "corpus.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"_id": "d2", "title": "Wing", "text": "lift in a slipstream"}) + "\n")
        f.write(json.dumps({"_id": "d1", "title": "", "text": "heat transfer"}) + "\n")
    code, out = _encode(tiny_model_dir, path)
    assert code == 0
    assert (tmp_path / "out.ids.txt").read_text().split() == ["d2", "d1"]
    expected = tiny_encoder.encode_documents(["Wing lift in a slipstream", "heat transfer"])
    np.testing.assert_allclose(np.load(out), expected, atol=1e-6)


def test_queries_file_defaults_to_query_kind(tmp_path, tiny_model_dir, tiny_encoder):
    path = tmp_path / "queries.jsonl"
    text = "what is the lift " * 20
    path.write_text(json.dumps({"_id": "q1", "text": text}) + "\n")
    code, out = _encode(tiny_model_dir, path)
    assert code == 0
    np.testing.assert_allclose(np.load(out), tiny_encoder.encode_queries([text]), atol=1e-6)


def test_empty_input_file_gives_empty_output(tmp_path, tiny_model_dir):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    code, out = _encode(tiny_model_dir, path)
    assert code == 0
    assert np.load(out).shape == (0, 64)
    assert (tmp_path / "out.ids.txt").read_text() == ""


def test_non_utf8_line_and_nul_byte_are_kept_with_warnings(tmp_path, tiny_model_dir, capsys, shown_warnings):
    path = tmp_path / "texts.txt"
    path.write_bytes(b"good line\nbad \xff\xfe byte\nnul \x00 inside\n")
    code, out = _encode(tiny_model_dir, path)
    assert code == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gtr-keras encode: warning: ")]
    assert any(f"{path}:2" in line for line in warnings) and any(f"{path}:3" in line for line in warnings)
    assert np.load(out).shape == (3, 64)


def test_malformed_json_names_file_and_line_and_keeps_earlier_output(tmp_path, tiny_model_dir, capsys):
    good = tmp_path / "good.txt"
    good.write_text("a\nb\n")
    code, out = _encode(tiny_model_dir, good)
    assert code == 0
    before = np.load(out)
    bad = tmp_path / "corpus.jsonl"
    bad.write_text('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": \n')
    code, _ = _encode(tiny_model_dir, bad)
    assert code == 2
    assert f"{bad}:2" in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(out), before)  # the earlier output is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "corpus.jsonl",
        "good.txt",
        "out.ids.txt",
        "out.json",
        "out.npy",
    ]


def test_encode_in_bfloat16_is_close_to_float32(tmp_path, tiny_model_dir, tiny_encoder):
    path = tmp_path / "texts.txt"
    texts = ["what is the lift of a wing?", "boundary layer transition " * 30]
    path.write_text("\n".join(texts) + "\n")
    code, out = _encode(tiny_model_dir, path, "--precision", "bfloat16")
    assert code == 0
    embeddings, expected = np.load(out), tiny_encoder.encode_documents(texts)
    assert embeddings.dtype == np.float32
    assert not np.array_equal(embeddings, expected)
    np.testing.assert_allclose(np.sum(embeddings * expected, axis=1), 1.0, atol=1e-3)


def test_document_length_overrides_the_model_directory(tmp_path, tiny_model_dir, tiny_encoder):
    path = tmp_path / "texts.txt"
    long_text = "boundary layer transition on a swept wing " * 20
    path.write_text(long_text + "\n")
    code, out = _encode(tiny_model_dir, path, "--document-length", "8")
    assert code == 0
    cut = gtr_keras.load(tiny_model_dir, document_length=8).encode_documents([long_text])
    np.testing.assert_allclose(np.load(out), cut, atol=1e-6)
    assert np.sum(cut * tiny_encoder.encode_documents([long_text])) < 0.999


def test_token_budget_below_two_is_refused(tmp_path, tiny_model_dir, capsys):
    (tmp_path / "texts.txt").write_text("a\n")
    with pytest.raises(SystemExit):
        _encode(tiny_model_dir, tmp_path / "texts.txt", "--query-length", "1")
    assert "--query-length: must be at least 2" in capsys.readouterr().err


def test_encode_replaces_the_npy_and_ids_together_or_not_at_all(tmp_path, tiny_model_dir, monkeypatch, capsys):
    import pathlib

    good = tmp_path / "good.txt"
    good.write_text("a\nb\n")
    code, out = _encode(tiny_model_dir, good)
    assert code == 0
    before = {p.name: p.read_bytes() for p in (out, tmp_path / "out.ids.txt")}

    def failing_write(self, data):
        raise OSError(28, "No space left on device", str(self))

    monkeypatch.setattr(pathlib.Path, "write_bytes", failing_write)
    other = tmp_path / "other.txt"
    other.write_text("c\nd\ne\n")
    code, _ = _encode(tiny_model_dir, other)
    assert code == 2
    assert "No space left on device" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (out, tmp_path / "out.ids.txt")} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.txt", "other.txt", "out.ids.txt", "out.json", "out.npy"]


def test_encode_refuses_a_directory_where_its_ids_file_goes(tmp_path, tiny_model_dir, capsys):
    good = tmp_path / "good.txt"
    good.write_text("a\nb\n")
    (tmp_path / "out.ids.txt").mkdir()
    (tmp_path / "out.ids.txt" / "keep.me").write_text("user data")
    code, out = _encode(tiny_model_dir, good)
    assert code == 2 and "out.ids.txt: is a directory, expected a file name" in capsys.readouterr().err
    assert (tmp_path / "out.ids.txt" / "keep.me").read_text() == "user data" and not out.exists()


@pytest.mark.large
def test_evaluate_outputs_survive_a_write_that_fails_midway(tmp_path):
    """RLIMIT_FSIZE stops the run file midway: the previous run file and JSON stay byte-identical."""
    import subprocess
    import sys

    from beir_files import write_beir

    from gtr_keras.beir.readers import Corpus

    words = ["wing", "lift", "drag", "flow", "heat", "shock", "layer", "plate", "cone", "jet"]
    texts = [f"{words[i % 10]} {words[(i * 3) % 10]} {words[(i * 7) % 10]} {i}" for i in range(60)]
    dataset = write_beir(
        tmp_path / "beir",
        Corpus([f"d{i}" for i in range(60)], [""] * 60, texts),
        {f"q{i}": words[i] for i in range(10)},
        [(f"q{i}", f"d{i}", 1) for i in range(10)],
    )
    outputs = [tmp_path / "run.trec", tmp_path / "metrics.json"]
    argv = [
        "evaluate",
        "--dataset",
        str(dataset),
        "--retriever",
        "bm25",
        "--run-out",
        str(outputs[0]),
        "--output-json",
        str(outputs[1]),
    ]
    for path, old in zip(outputs, (b"old run\n", b"{}\n")):
        path.write_bytes(old)
    limited = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "from gtr_keras.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run([sys.executable, "-c", limited, *argv], capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert "File too large" in result.stderr.strip().splitlines()[-1]
    assert [p.read_bytes() for p in outputs] == [b"old run\n", b"{}\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beir", "metrics.json", "run.trec"]
    result = subprocess.run(
        [sys.executable, "-c", limited.replace("4096", "10**9"), *argv], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert outputs[0].stat().st_size > 4096 and json.loads(outputs[1].read_text())["retriever"] == "bm25"


def test_a_missing_model_is_exit_2_and_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "texts.txt").write_text("a\n")
    assert main(["encode", "--model", "./no-such-dir", "--input", "texts.txt", "--output", "o.npy"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "gtr-keras encode: error: ./no-such-dir: no such model directory"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt"]


def test_a_missing_model_is_named_before_the_input_is_read(tmp_path, monkeypatch, capsys):
    import gtr_keras.beir.text_inputs

    monkeypatch.setattr(gtr_keras.beir.text_inputs, "read_texts", lambda path: pytest.fail("the input was read"))
    (tmp_path / "texts.txt").write_text("a\n")
    assert (
        main(
            [
                "encode",
                "--model",
                str(tmp_path / "typo"),
                "--input",
                str(tmp_path / "texts.txt"),
                "--output",
                str(tmp_path / "o.npy"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.strip() == f"gtr-keras encode: error: {tmp_path / 'typo'}: no such model directory"


def _collection(tmp_path, grades, doc_ids=("d0", "d1", "d2")):
    from beir_files import write_beir

    from gtr_keras.beir.readers import Corpus

    corpus = Corpus(list(doc_ids), [""] * len(doc_ids), [f"text {i}" for i in range(len(doc_ids))])
    queries = {f"q{i}": f"query {i}" for i in range(len(grades))}
    return write_beir(tmp_path / "ds", corpus, queries, [(f"q{i}", "d0", g) for i, g in enumerate(grades)])


def test_qrels_without_a_relevant_document_are_exit_2_before_any_encoding(tmp_path, monkeypatch, capsys):
    from gtr_keras.cli.helpers import handler_inputs

    monkeypatch.setattr(handler_inputs, "encoder", lambda args: pytest.fail("the model was loaded"))
    dataset = _collection(tmp_path, [0, 0])
    (tmp_path / "run.trec").write_text("q0 Q0 d0 1 0.5 x\n")
    qrels = dataset / "qrels" / "test.tsv"
    for argv in (
        ["evaluate", "--dataset", str(dataset), "--model", str(tmp_path)],
        ["analyze-lengths", "--run", str(tmp_path / "run.trec"), "--dataset", str(dataset)],
    ):
        assert main(argv) == 2
        assert (
            capsys.readouterr()
            .err.strip()
            .endswith(f"error: {qrels}: no judgement of grade 1 or more: no query to evaluate")
        )


def test_the_metrics_say_how_many_queries_the_means_are_over_and_warn_of_the_rest(tmp_path, capsys, shown_warnings):
    dataset = _collection(tmp_path, [1, 0, 2])
    out = tmp_path / "m.json"
    assert main(["evaluate", "--dataset", str(dataset), "--retriever", "bm25", "--output-json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["num_queries"], result["num_judged_queries"]) == (2, 3)
    assert "warning: 1 of 3 judged queries have no document of grade 1 or more" in capsys.readouterr().err


def test_ids_holding_whitespace_are_refused_at_read_naming_the_line(tmp_path, capsys):
    dataset = _collection(tmp_path, [1], doc_ids=("d0", "d 1"))
    assert main(["evaluate", "--dataset", str(dataset), "--retriever", "bm25"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            f"error: {dataset / 'corpus.jsonl'}:2: `_id` 'd 1' holds whitespace, which TREC run files (and so "
            "evaluation) cannot keep"
        )
    )
    (dataset / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0 x\t1\n")
    from gtr_keras.beir.readers import load_qrels
    from gtr_keras.errors import DataError

    with pytest.raises(DataError, match=r"test.tsv:2: corpus-id 'd0 x' holds whitespace"):
        load_qrels(str(dataset))


def _corpus_file(path, n=30):
    words = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 5))
            f.write(json.dumps({"_id": f"d{i}", "title": f"title {i}", "text": text}) + "\n")
    return path


def _search(index, model_dir, capsys, query="boundary layer heat transfer"):
    capsys.readouterr()
    assert main(["search", query, "--index", str(index), "--model", model_dir, "-k", "5", "--json"]) == 0
    return [(hit["id"], hit["score"]) for hit in json.loads(capsys.readouterr().out)[0]["hits"]]


def test_index_from_embeddings_equals_index_from_the_corpus(tmp_path, tiny_model_dir, capsys):
    corpus = _corpus_file(tmp_path / "corpus.jsonl")
    (tmp_path / "emb").mkdir()
    assert (
        main(
            [
                "encode",
                "--model",
                tiny_model_dir,
                "--input",
                str(corpus),
                "--output",
                str(tmp_path / "emb" / "part-0.npy"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "emb" / "part-0.json").read_text())["kind"] == "document"
    assert main(["index", "--embeddings", str(tmp_path / "emb" / "*.npy"), "--out", str(tmp_path / "by-emb")]) == 0
    assert (
        main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(tmp_path / "by-corpus")]) == 0
    )
    assert "wrote" in capsys.readouterr().out
    assert_same_results(
        _search(tmp_path / "by-emb", tiny_model_dir, capsys), _search(tmp_path / "by-corpus", tiny_model_dir, capsys)
    )
    from gtr_keras.storage.search_index import SearchIndex

    queries = np.load(tmp_path / "emb" / "part-0.npy")[:4]
    by_emb, by_corpus = SearchIndex.load(tmp_path / "by-emb"), SearchIndex.load(tmp_path / "by-corpus")
    assert by_emb.search_ids(queries, 3)[0] == by_corpus.search_ids(queries, 3)[0]


def test_embeddings_without_a_model_record_index_but_search_needs_the_model_declared(
    tmp_path, tiny_model_dir, tiny_encoder, capsys
):
    texts = ["wing lift", "heat transfer", "shock cone"]
    np.save(tmp_path / "part.npy", tiny_encoder.encode_documents(texts))
    (tmp_path / "part.ids.txt").write_text("a\nb\nc\n")
    assert main(["index", "--embeddings", str(tmp_path / "part.npy"), "--out", str(tmp_path / "idx")]) == 0
    capsys.readouterr()
    assert main(["search", "heat", "--index", str(tmp_path / "idx"), "--model", tiny_model_dir]) == 2
    assert "built from embeddings with no record of their model" in capsys.readouterr().err
    assert (
        main(
            [
                "index",
                "--embeddings",
                str(tmp_path / "part.npy"),
                "--model",
                tiny_model_dir,
                "--out",
                str(tmp_path / "idx"),
            ]
        )
        == 0
    )
    assert _search(tmp_path / "idx", tiny_model_dir, capsys, "heat transfer")[0][0] == "b"


def test_embeddings_of_another_model_are_refused(tmp_path, tiny_model_dir, capsys):
    corpus = _corpus_file(tmp_path / "corpus.jsonl", n=3)
    assert main(["encode", "--model", tiny_model_dir, "--input", str(corpus), "--output", str(tmp_path / "e.npy")]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "index",
                "--embeddings",
                str(tmp_path / "e.npy"),
                "--model",
                "gtr_small_distilled_en",
                "--out",
                str(tmp_path / "idx"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "e.npy" in err and ("another model" in err or "dims" in err)
    assert not (tmp_path / "idx").exists()


def _encode_in_bfloat16(tmp_path, model_dir, **corpus):
    """`encode --precision bfloat16` of a small corpus into `tmp_path / "e.npy"` (its record `e.json`); the
    corpus file."""
    corpus = _corpus_file(tmp_path / "corpus.jsonl", **corpus)
    argv = ["encode", "--model", model_dir, "--input", str(corpus), "--output", str(tmp_path / "e.npy")]
    assert main([*argv, "--precision", "bfloat16"]) == 0
    return corpus


def _index_declaring_the_model(tmp_path, model_dir):
    """`index --embeddings e.npy --model MODEL` into `tmp_path / "declared"`; the exit status."""
    return main(
        ["index", "--embeddings", str(tmp_path / "e.npy"), "--model", model_dir, "--out", str(tmp_path / "declared")]
    )


def test_bfloat16_embeddings_are_of_the_same_model_and_search_with_it_in_float32(tmp_path, tiny_model_dir, capsys):
    corpus = _encode_in_bfloat16(tmp_path, tiny_model_dir)
    assert main(["index", "--embeddings", str(tmp_path / "e.npy"), "--out", str(tmp_path / "idx")]) == 0
    assert _index_declaring_the_model(tmp_path, tiny_model_dir) == 0
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(tmp_path / "f32")]) == 0
    recorded = json.loads((tmp_path / "declared" / "retriever.json").read_text())
    assert recorded["compute_dtype"] == "bfloat16" and recorded["model_dir"] == tiny_model_dir
    expected = _search(tmp_path / "f32", tiny_model_dir, capsys)
    for index in ("idx", "declared"):
        found = _search(tmp_path / index, tiny_model_dir, capsys)
        assert found[0][0] == expected[0][0] and {hit for hit, _ in found[:3]} == {hit for hit, _ in expected[:3]}
        np.testing.assert_allclose([score for _, score in found], [score for _, score in expected], atol=0.02)


def test_bfloat16_embeddings_of_another_model_are_refused(tmp_path, tiny_model_dir, capsys):
    _encode_in_bfloat16(tmp_path, tiny_model_dir, n=3)
    record = json.loads((tmp_path / "e.json").read_text())
    record["model"]["bfloat16_sha256"] = "0" * 64  # as a bfloat16 model of other weights records it
    (tmp_path / "e.json").write_text(json.dumps(record))
    assert main(["index", "--embeddings", str(tmp_path / "e.npy"), "--out", str(tmp_path / "idx")]) == 0
    capsys.readouterr()
    assert _index_declaring_the_model(tmp_path, tiny_model_dir) == 2
    assert "encoded by another model than --model (bfloat16_sha256 000000000000… recorded" in capsys.readouterr().err
    assert main(["search", "heat", "--index", str(tmp_path / "idx"), "--model", tiny_model_dir]) == 2
    assert "built with another model (bfloat16_sha256 000000000000… recorded" in capsys.readouterr().err


def test_an_embedding_file_replaced_during_index_embeddings_is_exit_2_naming_it(tmp_path, monkeypatch, capsys):
    from gtr_keras.retrieval import index

    vectors = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(tmp_path / "e.npy", vectors)
    (tmp_path / "e.ids.txt").write_text("".join(f"d{i}\n" for i in range(300)))
    build = index.index_embeddings

    def replaced_after_the_check(embedding_files, *args):
        np.save(tmp_path / "e.npy", vectors[::-1].copy())
        return build(embedding_files, *args)

    monkeypatch.setattr(index, "index_embeddings", replaced_after_the_check)
    assert main(["index", "--embeddings", str(tmp_path / "e.npy"), "--out", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'e.npy'}: changed since it was checked (rows 0-299 differ)" in err
    assert not (tmp_path / "idx").exists()


def test_a_bad_embedding_file_is_exit_2_naming_it_before_the_model_loads(tmp_path, tiny_model_dir, capsys, monkeypatch):
    np.save(tmp_path / "e.npy", np.full((2, 4), 0.5, np.float32))
    (tmp_path / "e.ids.txt").write_text("a\na\n")
    monkeypatch.setattr("gtr_keras.saving.load_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    assert (
        main(
            [
                "index",
                "--embeddings",
                str(tmp_path / "e.npy"),
                "--model",
                tiny_model_dir,
                "--out",
                str(tmp_path / "idx"),
            ]
        )
        == 2
    )
    assert f"{tmp_path / 'e.ids.txt'}:2: id 'a' duplicates" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--embeddings", "e.npy", "--corpus", "c.jsonl", "--model", "m"], "one of the arguments --corpus"),
        ([], "one of the arguments --corpus"),
        (["--corpus", "c.jsonl"], "argument --model: required with --corpus"),
        (["--embeddings", "e.npy", "--runner", "DirectRunner"], "argument --runner: encodes a corpus"),
        (["--corpus", "c.jsonl", "--model", "m", "--bm25-corpus", "c.jsonl"], "argument --bm25-corpus: only with"),
    ],
)
def test_index_takes_a_corpus_or_embeddings(tmp_path, monkeypatch, capsys, flags, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e.npy").write_bytes(b"")
    (tmp_path / "c.jsonl").write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["index", *flags, "--out", "idx"])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_corpus_line_nested_deeper_than_python_can_parse_is_exit_2_naming_the_file_and_line(
    tiny_model_dir, tmp_path, capsys
):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "1", "text": "a wing"}\n{"_id": "2", "text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    status = main(["encode", "--model", tiny_model_dir, "--input", str(corpus), "--output", str(tmp_path / "e.npy")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert f"{corpus}:2: malformed JSON (maximum recursion depth exceeded" in err


def _embedded_corpus(tmp_path, model_dir):
    corpus = _corpus_file(tmp_path / "corpus.jsonl")
    (tmp_path / "emb").mkdir()
    assert (
        main(["encode", "--model", model_dir, "--input", str(corpus), "--output", str(tmp_path / "emb" / "p.npy")]) == 0
    )
    return corpus, str(tmp_path / "emb" / "p.npy")


def _hits(capsys, *argv):
    capsys.readouterr()
    assert main(["search", "boundary layer heat transfer", "-k", "5", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)[0]["hits"]


def test_index_of_embeddings_with_their_corpus_searches_by_bm25_and_hybrid(tmp_path, tiny_model_dir, capsys):
    corpus, embeddings = _embedded_corpus(tmp_path, tiny_model_dir)
    out = tmp_path / "idx"
    assert main(["index", "--embeddings", embeddings, "--bm25-corpus", str(corpus), "--out", str(out)]) == 0
    assert "and a BM25 side" in capsys.readouterr().out
    bm25 = _hits(capsys, "--index", str(out), "--retriever", "bm25")
    assert bm25 and {"id", "score", "title", "text"} <= set(bm25[0])
    hybrid = _hits(capsys, "--index", str(out), "--model", tiny_model_dir, "--retriever", "hybrid", "--fusion", "rrf")
    assert len(hybrid) == 5 and hybrid[0]["id"] in {hit["id"] for hit in bm25} | {
        hit["id"] for hit in _hits(capsys, "--index", str(out), "--model", tiny_model_dir)
    }


def test_hybrid_search_of_an_index_without_texts_is_refused_in_one_line(tmp_path, tiny_model_dir, capsys):
    _, embeddings = _embedded_corpus(tmp_path, tiny_model_dir)
    assert main(["index", "--embeddings", embeddings, "--out", str(tmp_path / "idx")]) == 0
    assert "no BM25 side" in capsys.readouterr().out
    argv = ["search", "heat", "--index", str(tmp_path / "idx"), "--retriever", "hybrid", "--model", tiny_model_dir]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no BM25 side" in err and "--bm25-corpus" in err
    with pytest.raises(SystemExit) as exit_:
        main(argv[:-2])
    assert exit_.value.code == 2 and "argument --model: required with --retriever hybrid" in capsys.readouterr().err


def test_a_bm25_corpus_of_other_documents_is_exit_2_naming_the_file_and_id(tmp_path, tiny_model_dir, capsys):
    _, embeddings = _embedded_corpus(tmp_path, tiny_model_dir)
    other = _corpus_file(tmp_path / "other.jsonl", n=29)
    argv = ["index", "--embeddings", embeddings, "--bm25-corpus", str(other), "--out", str(tmp_path / "idx")]
    assert main(argv) == 2
    assert f"{other}: lacks document 'd29' of the index" in capsys.readouterr().err
    _corpus_file(other, n=31)
    assert main(argv) == 2
    assert f"{other}: document 'd30' is not in the index" in capsys.readouterr().err
    assert not (tmp_path / "idx").exists()


def test_evaluate_hybrid_writes_the_metric_keys_of_the_other_retrievers(tmp_path, tiny_model_dir):
    from beir_files import write_beir

    from gtr_keras.beir.readers import load_corpus

    dataset = write_beir(
        tmp_path / "beir",
        load_corpus(_corpus_file(tmp_path / "corpus.jsonl")),
        {"q1": "wing lift drag", "q2": "heat transfer", "d3": "nozzle jet"},
        [("q1", "d0", 1), ("q2", "d4", 2), ("d3", "d3", 1), ("d3", "d10", 1)],
    )
    results = {}
    for retriever in ("gtr", "bm25", "hybrid"):
        out = tmp_path / f"{retriever}.json"
        argv = ["evaluate", "--dataset", str(dataset), "--retriever", retriever, "--output-json", str(out)]
        assert main([*argv, "--model", tiny_model_dir, "--run-out", str(tmp_path / f"{retriever}.trec")]) == 0
        results[retriever] = json.loads(out.read_text())
    assert set(results["hybrid"]["metrics"]) == set(results["gtr"]["metrics"]) == set(results["bm25"]["metrics"])
    assert 0 <= results["hybrid"]["metrics"]["ndcg@10"] <= 1
    assert results["hybrid"]["fusion"] == {"method": "weighted", "gtr_weight": 0.5, "rrf_k": 60}
    run = (tmp_path / "hybrid.trec").read_text().splitlines()
    assert not [line for line in run if line.split()[0] == line.split()[2]]  # identical ids dropped, as BEIR does


def test_bm25_and_hybrid_search_take_one_index(tmp_path, tiny_model_dir, capsys):
    corpus = _corpus_file(tmp_path / "corpus.jsonl")
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(tmp_path / "a")]) == 0
    argv = ["search", "heat", "--index", str(tmp_path / "a"), "--index", str(tmp_path / "a"), "--retriever", "bm25"]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "--retriever bm25 searches one index (several are shards of --retriever gtr)" in capsys.readouterr().err


def test_a_query_argument_of_invalid_utf8_is_searched_as_u_fffd_by_every_retriever(tmp_path, tiny_model_dir, capsys):
    corpus = _corpus_file(tmp_path / "corpus.jsonl")
    index = str(tmp_path / "idx")
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", index, "--exact"]) == 0
    broken = b"wing \xff lift".decode("utf-8", "surrogateescape")  # how Python passes such an argument
    for retriever in ("gtr", "bm25", "hybrid"):
        argv = ["--index", index, "--model", tiny_model_dir, "--retriever", retriever]
        capsys.readouterr()
        assert main(["search", broken, "-k", "5", "--json", *argv]) == 0
        searched = json.loads(capsys.readouterr().out)[0]
        assert searched["query"] == "wing \ufffd lift"
        assert main(["search", "wing \ufffd lift", "-k", "5", "--json", *argv]) == 0
        assert searched["hits"] == json.loads(capsys.readouterr().out)[0]["hits"]


@pytest.mark.large
def test_acceptance_index_vectors_int8_and_binary_of_cranfield_with_the_bundled_model(tmp_path, capsys):
    from gtr_keras.beir.dataset import load_dataset
    from gtr_keras.beir.evaluation import evaluate_run
    from gtr_keras.cli.helpers.demo_steps import DEMO_DATASET, DEMO_MODEL
    from gtr_keras.retrieval.retriever import Retriever
    from gtr_keras.retrieval.runs import gtr_run

    corpus, queries, qrels, _ = load_dataset(DEMO_DATASET, "test")
    encoder = gtr_keras.load(DEMO_MODEL)
    ndcg = {}
    for vectors in ("float32", "int8", "binary"):
        out = tmp_path / vectors
        argv = ["index", "--model", DEMO_MODEL, "--corpus", DEMO_DATASET, "--out", str(out), "--vectors", vectors]
        assert main(argv + (["--exact"] if vectors == "float32" else [])) == 0
        assert ("exact search over" in capsys.readouterr().out) == (vectors != "float32")
        index = Retriever.load(str(out), encoder).index
        assert index.kind == "exact" and (index.params or {}).get("vectors", "float32") == vectors
        run = gtr_run(encoder, corpus, queries, depth=10, index=index)
        ndcg[vectors] = evaluate_run(qrels, run)["ndcg@10"]
    assert ndcg["int8"] >= 0.99 * ndcg["float32"] and ndcg["binary"] >= 0.96 * ndcg["float32"], ndcg
