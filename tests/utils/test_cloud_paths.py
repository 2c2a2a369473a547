"""Inputs and outputs on a remote file system: TensorFlow's in-memory `ram://` stands in for `gs://`.

Nothing here touches the network. The model directory stays local (the
`tiny_model_dir` fixture); only the data, runs, embeddings and negatives are
on `ram://`.
"""

import gzip
import io
import json
import uuid
import warnings

import numpy as np
import pytest

from gtr_keras.beir.evaluation import read_trec_run, write_trec_run
from gtr_keras.beir.readers import load_corpus, load_qrels, load_queries
from gtr_keras.beir.text_inputs import read_texts
from gtr_keras.cli.main import main
from gtr_keras.errors import DataError
from gtr_keras.training.data import TrainingData
from gtr_keras.training.examples import read_triples, write_tfrecord
from gtr_keras.utils import files

WORDS = ["wing", "lift", "drag", "flow", "heat", "shock", "layer", "plate", "cone", "jet"]
NUM_DOCS = 40


def _write(path, data):
    with files.atomic_file(path) as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def _jsonl(records):
    return "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")


@pytest.fixture
def root():
    """A fresh `ram://` directory, its files deleted afterwards.

    (`ram://` lists no subdirectory, so neither `walk` nor `files.remove` sees nested files: glob each depth.)
    """
    import tensorflow as tf

    path = f"ram://gtr-tests/{uuid.uuid4().hex}"
    yield path
    for depth in range(1, 6):
        for file in tf.io.gfile.glob(path + "/*" * depth):
            tf.io.gfile.remove(file)


@pytest.fixture
def beir(root):
    """A BEIR collection on `ram://`, its corpus gzip-compressed."""
    directory = f"{root}/beir"
    texts = [f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]} {WORDS[(i * 7) % 10]} {i}" for i in range(NUM_DOCS)]
    _write(
        f"{directory}/corpus.jsonl.gz",
        gzip.compress(_jsonl({"_id": f"d{i}", "title": "", "text": t} for i, t in enumerate(texts))),
    )
    _write(f"{directory}/queries.jsonl", _jsonl({"_id": f"q{i}", "text": WORDS[i]} for i in range(10)))
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(10))
    _write(f"{directory}/qrels/test.tsv", qrels)
    _write(f"{directory}/qrels/train.tsv", qrels)
    return directory


def test_collection_is_read_from_ram(beir):
    corpus = load_corpus(beir)
    assert len(corpus) == NUM_DOCS and corpus.ids[:2] == ["d0", "d1"]
    assert load_queries(beir)["q3"] == "flow"
    assert load_qrels(beir, "test")["q1"] == {"d1": 1}
    with pytest.raises(DataError, match=r"^ram://.*/qrels/dev\.tsv: no such file \(splits there: test, train\)$"):
        load_qrels(beir, "dev")
    with pytest.raises(DataError, match=r"^ram://.*/nowhere: no such file or directory$"):
        load_corpus(f"{beir}/nowhere")


def test_read_errors_on_ram_name_the_file_and_line(root):
    _write(f"{root}/bad.jsonl", b'{"_id": "1", "text": "ok"}\n{"_id": "2"}\n')
    with pytest.raises(DataError, match=rf"^{root}/bad\.jsonl:2: missing field `text`$"):
        read_texts(f"{root}/bad.jsonl")
    _write(f"{root}/texts.txt", b"first\n\xff second\n")
    with pytest.warns(UserWarning, match=rf"{root}/texts\.txt:2: invalid UTF-8"):
        assert read_texts(f"{root}/texts.txt") == (["1", "2"], ["first", "\ufffd second"])
    _write(f"{root}/corpus.jsonl.gz", gzip.compress(b'{"_id": "d", "text": "x"}\n')[:-8])
    with pytest.raises(DataError, match=rf"^{root}/corpus\.jsonl\.gz: truncated gzip data"):
        load_corpus(f"{root}/corpus.jsonl.gz")


@pytest.mark.parametrize("reader", [load_corpus, load_queries, load_qrels, read_texts, read_trec_run])
def test_unknown_scheme_is_one_line_naming_the_path(reader):
    with pytest.raises(DataError) as error:
        reader("foo://bucket/data/corpus.jsonl")
    message = str(error.value)
    assert message.startswith("foo://bucket/data/corpus.jsonl: ") and "foo://" in message
    assert "\n" not in message


def test_run_file_round_trip_on_ram(root):
    run = {"q1": {"d1": 0.5, "d2": 0.25}, "q2": {"d3": 1.0}}
    write_trec_run(f"{root}/runs/run.trec", run)
    assert read_trec_run(f"{root}/runs/run.trec") == run


def test_training_data_on_ram(root, beir):
    triples = [{"query": f"q {i}", "positive": f"p {i}", "negatives": [f"n {i}"]} for i in range(6)]
    _write(f"{root}/train.jsonl.gz", gzip.compress(_jsonl(triples)))
    assert TrainingData(f"{root}/train.jsonl.gz").check() == 6
    assert write_tfrecord(read_triples(f"{root}/train.jsonl.gz"), f"{root}/train.tfrecord.gz") == 6
    assert TrainingData(f"{root}/train.tfrecord.gz").check() == 1
    _write(f"{root}/negatives.jsonl", _jsonl({"query_id": f"q{i}", "negative_ids": [f"d{i + 1}"]} for i in range(9)))
    data = TrainingData(beir, split="test", negatives_file=f"{root}/negatives.jsonl")
    assert data.files()["negatives"] == f"{root}/negatives.jsonl"
    assert data.files()["corpus"] == f"{beir}/corpus.jsonl.gz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert data.check() == 10
        examples = {example.query_id: example for example in data.examples()}
    assert examples["q0"].negative_ids == ("d1",) and examples["q9"].negative_ids == ()


def test_cli_encode_evaluate_mine_analyze_on_ram(root, beir, tiny_model_dir, tiny_encoder, capsys):
    out = f"{root}/out/corpus.npy"
    assert main(["encode", "--model", tiny_model_dir, "--input", f"{beir}/corpus.jsonl.gz", "--output", out]) == 0
    embeddings = np.load(io.BytesIO(files.read_bytes(out)))
    assert embeddings.shape == (NUM_DOCS, 64)
    ids = files.read_bytes(f"{root}/out/corpus.ids.txt").decode().split()
    assert ids == [f"d{i}" for i in range(NUM_DOCS)]
    corpus = load_corpus(beir)
    np.testing.assert_allclose(embeddings, tiny_encoder.encode_documents(corpus.joined()), atol=1e-6)

    run_path, json_path = f"{root}/eval/run.trec", f"{root}/eval/metrics.json"
    assert (
        main(["evaluate", "--dataset", beir, "--retriever", "bm25", "--run-out", run_path, "--output-json", json_path])
        == 0
    )
    result = json.loads(files.read_bytes(json_path))
    assert result["retriever"] == "bm25" and result["dataset"] == "beir" and result["num_queries"] == 10
    run = read_trec_run(run_path)
    assert sorted(run) == [f"q{i}" for i in range(10)]
    assert result["metrics"]["recall@100"] == 1.0  # every query word is in its document

    negatives = f"{root}/mined/negatives.jsonl"
    assert (
        main(
            [
                "mine",
                "--model",
                tiny_model_dir,
                "--dataset",
                beir,
                "--split",
                "test",
                "--depth",
                "5",
                "--per-query",
                "2",
                "--out",
                negatives,
            ]
        )
        == 0
    )
    lines = [json.loads(line) for line in files.read_bytes(negatives).decode().splitlines()]
    assert len(lines) == 10 and all(len(line["negative_ids"]) == 2 for line in lines)
    assert all(f"d{line['query_id'][1:]}" not in line["negative_ids"] for line in lines)

    capsys.readouterr()
    assert main(["analyze-lengths", "--run", run_path, "--dataset", beir, "--split", "test"]) == 0
    assert json.loads(capsys.readouterr().out)["num_queries"] == 10


def test_cli_missing_remote_input_is_exit_2_before_loading(root, monkeypatch, capsys):
    import gtr_keras.saving

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(gtr_keras.saving, "load_model", no_loading)
    with pytest.raises(SystemExit) as exit_:
        main(["encode", "--model", "m", "--input", f"{root}/nowhere.txt", "--output", f"{root}/o.npy"])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"argument --input: {root}/nowhere.txt: no such file" in lines[0]
