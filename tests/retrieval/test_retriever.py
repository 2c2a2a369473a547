import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from beir_files import write_beir

from gtr_keras.beir.readers import Corpus
from gtr_keras.cli.main import main
from gtr_keras.lexical.bm25_side import load_bm25_side
from gtr_keras.retrieval.index_building import MODEL_FIELDS, build_index, work_dir_for
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.storage.resumable_encoding import ResumableEncoding
from gtr_keras.storage.search_index import SearchIndex

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()


def _corpus(n=60, seed=0):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 40))) for _ in range(n)]
    return Corpus([f"d{i}" for i in range(n)], [f"title {i}" for i in range(n)], texts)


def test_index_then_search_returns_the_best_document_with_its_text(tmp_path, tiny_encoder, tiny_model_dir):
    corpus = _corpus()
    build_index(tiny_encoder, corpus, tmp_path / "idx", model_dir=tiny_model_dir)
    retriever = Retriever.load(tmp_path / "idx", tiny_encoder)
    query = corpus.texts[7]
    hits = retriever.search([query], k=3)[0]
    expected = np.argsort(-(tiny_encoder.encode_documents(corpus.joined()) @ tiny_encoder.encode_queries([query])[0]))
    assert [h["id"] for h in hits] == [corpus.ids[i] for i in expected[:3]]
    assert hits[0]["title"] == corpus.titles[expected[0]]
    assert not os.path.exists(work_dir_for(tmp_path / "idx"))


def test_search_cli_prints_json(tmp_path, tiny_model_dir, capsys):
    directory = write_beir(tmp_path / "beir", _corpus(), {"q1": "wing lift"}, [("q1", "d1", 1)])
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(directory), "--out", str(tmp_path / "i")]) == 0
    capsys.readouterr()
    assert (
        main(["search", "--index", str(tmp_path / "i"), "--model", tiny_model_dir, "wing lift", "-k", "4", "--json"])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result[0]["query"] == "wing lift" and len(result[0]["hits"]) == 4
    assert {"id", "score", "title", "text"} <= set(result[0]["hits"][0])


def _index_command(model_dir, corpus_dir, out):
    code = "import sys; from gtr_keras.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return [
        sys.executable,
        "-c",
        code,
        "index",
        "--model",
        model_dir,
        "--corpus",
        str(corpus_dir),
        "--out",
        str(out),
        "--piece-size",
        "40",
        "--batch-size",
        "8",
    ]


@pytest.mark.large
@pytest.mark.slow
def test_killed_index_resumes_and_matches_an_uninterrupted_one(tmp_path, tiny_model_dir, tiny_encoder):
    corpus = _corpus(n=600, seed=3)
    directory = write_beir(tmp_path / "beir", corpus, {"q": "x"}, [("q", "d0", 1)])
    out = tmp_path / "idx"
    process = subprocess.Popen(_index_command(tiny_model_dir, directory, out), stderr=subprocess.DEVNULL)
    partial = work_dir_for(out)
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.exists(os.path.join(partial, "piece-00002.npz")):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = sorted(f for f in os.listdir(partial) if f.startswith("piece-"))
    assert 3 <= len(finished) < 15, finished
    assert not out.exists()  # no half-written index is visible
    manifest = json.load(open(os.path.join(partial, "manifest.json")))
    writer = ResumableEncoding(
        partial, corpus.ids, corpus.joined(), 40, {field: manifest[field] for field in MODEL_FIELDS}
    )
    assert len(writer.pending_pieces()) == 15 - len(finished)  # the rerun only encodes what is missing

    subprocess.run(_index_command(tiny_model_dir, directory, out), check=True, stderr=subprocess.DEVNULL)
    assert not os.path.exists(partial)
    resumed = SearchIndex.load(out / "index")
    reference = build_index(tiny_encoder, corpus, tmp_path / "clean", piece_size=40, batch_size=8)
    assert resumed.ids == reference.ids == corpus.ids
    np.testing.assert_allclose(resumed.embeddings, reference.embeddings, atol=1e-6)
    queries = corpus.texts[:5]
    bm25 = load_bm25_side(out, resumed.ids, corpus)  # the resumed build wrote its BM25 side too
    assert bm25.search(queries, 5) == load_bm25_side(tmp_path / "clean", reference.ids, corpus).search(queries, 5)


def test_rebuilding_keeps_old_index_until_the_new_one_is_complete(tmp_path, tiny_encoder, monkeypatch):
    build_index(tiny_encoder, _corpus(n=30), tmp_path / "idx")
    before = SearchIndex.load(tmp_path / "idx" / "index").embeddings.copy()

    def crash(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(tiny_encoder, "encode_documents", crash)
    with pytest.raises(RuntimeError):
        build_index(tiny_encoder, _corpus(n=50, seed=9), tmp_path / "idx")
    np.testing.assert_array_equal(SearchIndex.load(tmp_path / "idx" / "index").embeddings, before)


def test_duplicate_corpus_ids_are_listed(tmp_path, tiny_model_dir, capsys):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": i, "text": "t"}) + "\n" for i in ["a", "b", "a", "c", "b"]))
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(path), "--out", str(tmp_path / "i")]) == 2
    err = capsys.readouterr().err
    assert "duplicate" in err and "'a'" in err and "'b'" in err


@pytest.mark.parametrize(
    "line, message",
    [('{"_id": "2", "text": ', ":2: malformed JSON"), ('{"_id": "2", "title": "no text"}', ":2:.*text")],
)
def test_bad_corpus_line_names_file_and_line(tmp_path, tiny_model_dir, capsys, line, message):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"_id": "1", "text": "ok"}) + "\n" + line + "\n")
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(path), "--out", str(tmp_path / "i")]) == 2
    assert re.search(re.escape(str(path)) + message, capsys.readouterr().err)


def test_empty_documents_are_kept_and_embedded(tmp_path, tiny_encoder):
    corpus = Corpus(["a", "b", "c"], ["", "", "x"], ["", "wing", ""])
    index = build_index(tiny_encoder, corpus, tmp_path / "i")
    assert index.ids == ["a", "b", "c"]
    np.testing.assert_allclose(np.linalg.norm(index.embeddings, axis=1), 1.0, rtol=1e-5)


def test_evaluate_reports_unknown_qrels_and_writes_json_and_run(tmp_path, tiny_model_dir, capsys):
    corpus = _corpus()
    queries = {"q1": corpus.texts[3], "q2": corpus.texts[10], "q3": "flutter"}
    qrels = [("q1", "d3", 2), ("q2", "d10", 1), ("q2", "ghost-doc", 1), ("q9", "d1", 1), ("q3", "d5", 1)]
    directory = write_beir(tmp_path / "beir", corpus, queries, qrels)
    out_json, run = tmp_path / "m.json", tmp_path / "run.trec"
    for retriever in ("gtr", "bm25"):
        assert (
            main(
                [
                    "evaluate",
                    "--model",
                    tiny_model_dir,
                    "--dataset",
                    str(directory),
                    "--retriever",
                    retriever,
                    "--output-json",
                    str(out_json),
                    "--run-out",
                    str(run),
                ]
            )
            == 0
        )
        captured = capsys.readouterr()
        assert "ghost-doc" in captured.err and "q9" in captured.err
        result = json.loads(out_json.read_text())
        assert result["retriever"] == retriever and result["num_queries"] == 3 and result["split"] == "test"
        if retriever == "gtr":
            assert (result["precision"], result["query_length"], result["document_length"]) == ("float32", 64, 512)
        assert set(result["metrics"]) == {"ndcg@10", "mrr@10", "recall@100", "recall@1000", "map"}
        assert result["metrics"]["recall@100"] == pytest.approx((1 + 1 / 2 + 1) / 3)
        lines = run.read_text().splitlines()
        assert lines[0].split()[1] == "Q0" and lines[0].split()[3] == "1"
    assert main(["analyze-lengths", "--run", str(run), "--dataset", str(directory)]) == 0
    analysis = json.loads(capsys.readouterr().out)
    assert analysis["num_queries"] == 3 and analysis["median_words_top10"] > 0


def test_queries_retrieving_themselves_are_ignored(tmp_path, tiny_model_dir, capsys):
    corpus = Corpus(["q1", "d1", "d2"], ["", "", ""], ["wing lift", "wing lift drag", "heat"])
    directory = write_beir(tmp_path / "beir", corpus, {"q1": "wing lift"}, [("q1", "d1", 1)])
    run = tmp_path / "run"
    main(["evaluate", "--model", tiny_model_dir, "--dataset", str(directory), "--run-out", str(run)])
    assert "q1 Q0 q1" not in run.read_text()
    main(
        [
            "evaluate",
            "--model",
            tiny_model_dir,
            "--dataset",
            str(directory),
            "--run-out",
            str(run),
            "--keep-identical-ids",
        ]
    )
    assert "q1 Q0 q1 1 " in run.read_text()


def test_mine_excludes_positives_and_skips_the_top(tmp_path, tiny_model_dir, tiny_encoder):
    corpus = _corpus(n=80, seed=4)
    queries = {"q1": corpus.texts[5], "q2": corpus.texts[9]}
    directory = write_beir(tmp_path / "beir", corpus, queries, [("q1", "d5", 1), ("q2", "d9", 2), ("q2", "d1", 0)])
    (directory / "qrels" / "train.tsv").write_text((directory / "qrels" / "test.tsv").read_text())
    out = tmp_path / "neg.jsonl"
    assert (
        main(
            [
                "mine",
                "--model",
                tiny_model_dir,
                "--dataset",
                str(directory),
                "--depth",
                "20",
                "--skip-top",
                "2",
                "--per-query",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    mined = {r["query_id"]: r["negative_ids"] for r in map(json.loads, out.read_text().splitlines())}
    scores = tiny_encoder.encode_documents(corpus.joined()) @ tiny_encoder.encode_queries(list(queries.values())).T
    for column, (qid, positive) in enumerate((("q1", "d5"), ("q2", "d9"))):
        ranked = [corpus.ids[i] for i in np.argsort(-scores[:, column]) if corpus.ids[i] != positive]
        assert mined[qid] == ranked[2:6]
    from gtr_keras.training.examples import read_mined_negatives

    assert read_mined_negatives(out, set(corpus.ids)) == mined
