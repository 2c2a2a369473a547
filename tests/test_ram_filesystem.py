"""Every step of the workflow from and to a remote file system, with no local file in between.

TensorFlow's in-memory `ram://` file system stands in for `gs://` (nothing
here touches the network): a model directory, a BEIR collection and training
data on `ram://`; training, the index (interrupted and resumed), the exports
and the evaluation's outputs written there. Each test runs in an empty
working directory that must stay empty, so a URL mistaken for a local path
(a folder named `ram:`) fails it. A scheme TensorFlow does not know is a
`DataError` naming the path, never a local folder named `foo:`.
"""

import json
import os
import uuid

import keras_hub
import numpy as np
import pytest
import tensorflow as tf

import gtr_keras
from gtr_keras.beir.dataset import load_dataset
from gtr_keras.beir.evaluation import evaluate_run
from gtr_keras.beir.readers import Corpus
from gtr_keras.cli.main import main
from gtr_keras.errors import CheckpointError, DataError
from gtr_keras.exports.savedmodel.export import export_all
from gtr_keras.exports.savedmodel.loader import load_export
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.model_files.fingerprint import fingerprint
from gtr_keras.models.model_files.model_directory import check_model_directory
from gtr_keras.retrieval.index_building import build_index, work_dir_for
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.retrieval.runs import gtr_run
from gtr_keras.saving import convert_sentence_transformers
from gtr_keras.storage.resumable_encoding import ResumableEncoding
from gtr_keras.storage.search_index import SearchIndex
from gtr_keras.training.loop import train
from gtr_keras.training.resume import RUN_RECORD
from gtr_keras.utils import files

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
NUM_DOCS = 40


def _write(path, data):
    with files.atomic_file(path) as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def _jsonl(records):
    return "".join(json.dumps(record) + "\n" for record in records)


def _corpus():
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(4, 20))) for _ in range(NUM_DOCS)]
    return Corpus([f"d{i}" for i in range(NUM_DOCS)], [f"title {i}" for i in range(NUM_DOCS)], texts)


def _write_beir(directory, corpus):
    """A BEIR collection on any file system: query `qN` is document `dN`'s first words, judged relevant to it."""
    _write(
        f"{directory}/corpus.jsonl",
        _jsonl({"_id": i, "title": t, "text": x} for i, t, x in zip(corpus.ids, corpus.titles, corpus.texts)),
    )
    queries = {f"q{n}": " ".join(corpus.texts[n].split()[:3]) for n in range(0, NUM_DOCS, 5)}
    _write(f"{directory}/queries.jsonl", _jsonl({"_id": q, "text": text} for q, text in queries.items()))
    _write(
        f"{directory}/qrels/test.tsv", "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\td{q[1:]}\t1\n" for q in queries)
    )
    return queries


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A fresh `ram://` directory; the (empty) working directory must stay empty."""
    monkeypatch.chdir(tmp_path)
    yield f"ram://gtr-ram-tests/{uuid.uuid4().hex}"
    assert os.listdir(tmp_path) == []


@pytest.fixture(scope="module")
def ram_model_dir(tiny_model_dir):
    """The tiny model directory, copied to `ram://` by `save(load(...))`."""
    path = f"ram://gtr-ram-tests/models/{uuid.uuid4().hex}/tiny"
    gtr_keras.save(gtr_keras.load(tiny_model_dir), path)
    return path


def test_a_model_directory_saves_and_loads_on_ram(ram_model_dir, tiny_encoder, root, tmp_path_factory, monkeypatch):
    assert {"config.json", "model.weights.h5", "task.json", "assets"} <= set(files.listdir(ram_model_dir))
    encoder = gtr_keras.load(ram_model_dir, document_length=32)
    assert fingerprint(encoder) == fingerprint(tiny_encoder) and encoder.document_length == 32
    assert fingerprint(GTRTextEmbedder.from_preset(ram_model_dir)) == fingerprint(tiny_encoder)
    # keras-hub's own loader downloads remote presets to a cache under KERAS_HOME, file by file.
    monkeypatch.setenv("KERAS_HOME", str(tmp_path_factory.mktemp("keras_home")))
    embedder = keras_hub.models.TextEmbedder.from_preset(ram_model_dir)
    assert fingerprint(embedder) == fingerprint(tiny_encoder)
    check_model_directory(ram_model_dir)


def test_a_sentence_transformers_checkpoint_on_ram_converts(tiny_st_dir, tiny_encoder, root):
    for directory, _, names in os.walk(tiny_st_dir):
        for name in names:
            with open(os.path.join(directory, name), "rb") as f:
                _write(f"{root}/st/{os.path.relpath(os.path.join(directory, name), tiny_st_dir)}", f.read())
    gtr_keras.save(convert_sentence_transformers(f"{root}/st"), f"{root}/converted")
    assert fingerprint(gtr_keras.load(f"{root}/converted")) == fingerprint(tiny_encoder)
    assert fingerprint(gtr_keras.load(f"{root}/st")) == fingerprint(tiny_encoder)


def test_errors_about_a_remote_model_directory_name_its_remote_files(ram_model_dir, root):
    broken = f"{root}/broken"
    for name in files.listdir(ram_model_dir):
        if files.isfile(f"{ram_model_dir}/{name}"):
            _write(f"{broken}/{name}", files.read_bytes(f"{ram_model_dir}/{name}"))
    config = json.loads(files.read_bytes(f"{ram_model_dir}/preprocessor.json"))
    config["config"]["sequence_length"] = 1
    _write(f"{broken}/preprocessor.json", json.dumps(config))
    with pytest.raises(CheckpointError, match=rf"^{broken}/preprocessor\.json: sequence_length must be at least 2"):
        gtr_keras.load(broken)
    with pytest.raises(CheckpointError, match=rf"^{root}/none: no such model directory$"):
        gtr_keras.load(f"{root}/none")


@pytest.mark.large
@pytest.mark.slow
def test_train_index_export_and_evaluate_all_on_ram(ram_model_dir, root, monkeypatch):
    # A collection and training data on ram://.
    corpus = _corpus()
    queries = _write_beir(f"{root}/beir", corpus)
    loaded_corpus, loaded_queries, qrels, report = load_dataset(f"{root}/beir")
    assert report.ok and loaded_corpus.ids == corpus.ids and loaded_queries == queries
    triples = [
        {"query": " ".join(text.split()[:3]), "positive": text, "negatives": [corpus.texts[(n + 1) % NUM_DOCS]]}
        for n, text in enumerate(corpus.texts[:16])
    ]
    _write(f"{root}/triples.jsonl", _jsonl(triples))

    # Training from and to ram://, then resuming the finished run.
    run = f"{root}/run"
    config = {
        "init": ram_model_dir,
        "output_dir": run,
        "data": {"source": f"{root}/triples.jsonl"},
        "steps": 2,
        "batch_size": 4,
        "checkpoint_every": 1,
        "learning_rate": 1e-4,
        "verbose": 0,
    }
    trained = train(config)
    assert tf.train.latest_checkpoint(f"{run}/checkpoints").endswith("-2")
    assert files.isfile(f"{run}/{RUN_RECORD}")
    assert fingerprint(train(config)) == fingerprint(trained)  # resumed: nothing left to train
    # (Loaded after `train`, whose `keras.utils.set_random_seed` drops the SentencePiece resources of
    # tokenizers built before it.)
    model_dir = f"{run}/model"
    encoder = gtr_keras.load(model_dir)
    assert fingerprint(encoder) == fingerprint(trained)

    # An index on ram://, interrupted after one piece and resumed from its ram:// work directory.
    monkeypatch.setattr("gtr_keras.storage.search_index.EXACT_MAX_N", 10)  # ScaNN even for 40 documents
    index_dir = f"{root}/index"
    work_dir = work_dir_for(index_dir)
    assert work_dir == f"{index_dir}.partial"
    calls = []
    encode = encoder.encode_documents

    def killed_after_one_piece(texts, *args):
        if calls:
            raise RuntimeError("killed")
        calls.append(len(texts))
        return encode(texts, *args)

    monkeypatch.setattr(encoder, "encode_documents", killed_after_one_piece)
    with pytest.raises(RuntimeError, match="killed"):
        build_index(encoder, loaded_corpus, index_dir, model_dir=model_dir, piece_size=16)
    # (`files.exists` would not do: ram:// takes `index` for a directory as `index.partial` exists.)
    assert files.listdir(work_dir) == ["manifest.json", "piece-00000.npz"] and "index" not in files.listdir(root)
    calls.clear()
    monkeypatch.setattr(
        encoder, "encode_documents", lambda texts, *args: calls.append(len(texts)) or encode(texts, *args)
    )
    built = build_index(encoder, loaded_corpus, index_dir, model_dir=model_dir, piece_size=16)
    assert calls == [16, 8] and built.kind == "scann" and "index.partial" not in files.listdir(root)
    retriever = Retriever.load(index_dir, encoder)
    assert json.loads(files.read_bytes(f"{index_dir}/retriever.json"))["model_dir"] == model_dir
    hits = retriever.search([queries["q5"]], k=3)[0]
    exact = SearchIndex(corpus.ids, encode(corpus.joined()), "exact")
    best = exact.search_ids(encoder.encode_queries([queries["q5"]]), 1)[0][0][0]
    assert best in [hit["id"] for hit in hits]  # ScaNN scores int8 vectors: near-equal scores may swap
    assert all(hit["title"] == f"title {hit['id'][1:]}" for hit in hits)

    # Encoder and ScaNN searcher exports on ram://, loaded from there.
    written = export_all(encoder, f"{root}/export", index_dir, searcher="scann", k=3)
    assert written == {"encoder": f"{root}/export/encoder/1", "searcher": f"{root}/export/searcher/1"}
    embeddings = (
        load_export(written["encoder"])
        .signatures["encode_documents"](texts=tf.constant(corpus.texts[:2]))["embeddings"]
        .numpy()
    )
    np.testing.assert_allclose(embeddings, encode(corpus.texts[:2]), atol=1e-5)
    searched = load_export(written["searcher"]).signatures["serving_default"](queries=tf.constant([queries["q5"]]))
    assert [i.decode() for i in searched["ids"].numpy()[0]] == [hit["id"] for hit in hits]

    # Evaluation: a run from the ram:// index, and the command line reading and writing ram://.
    metrics = evaluate_run(qrels, gtr_run(encoder, loaded_corpus, loaded_queries, depth=10, index=retriever.index))
    assert (
        main(
            [
                "evaluate",
                "--dataset",
                f"{root}/beir",
                "--model",
                model_dir,
                "--output-json",
                f"{root}/eval/metrics.json",
                "--run-out",
                f"{root}/eval/run.trec",
            ]
        )
        == 0
    )
    recorded = json.loads(files.read_bytes(f"{root}/eval/metrics.json"))
    assert recorded["num_queries"] == len(queries)
    assert recorded["metrics"]["ndcg@10"] == pytest.approx(metrics["ndcg@10"], abs=1e-4)
    lines = files.read_bytes(f"{root}/eval/run.trec").decode().splitlines()
    assert {line.split()[0] for line in lines} == set(queries) and lines[0].split()[1] == "Q0"


def test_search_index_and_resumable_encoding_on_ram(root):
    rng = np.random.default_rng(1)
    embeddings = rng.normal(size=(200, 16)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    ids = [f"d{i}" for i in range(200)]
    for kind in ("exact", "scann"):
        SearchIndex(ids, embeddings, kind=kind).save(f"{root}/{kind}")
        loaded = SearchIndex.load(f"{root}/{kind}")
        assert loaded.kind == kind and loaded.ids == ids
        np.testing.assert_array_equal(loaded.search(embeddings[:5], 1)[0][:, 0], np.arange(5))

    texts = [f"text {i}" for i in range(200)]
    writer = ResumableEncoding(f"{root}/work", ids, texts, 64, {"model_sha256": "0" * 64})
    writer.write(0, embeddings[:64])
    _write(f"{root}/work/.piece-00001.npz.upload-1-x", "killed mid-upload")
    resumed = ResumableEncoding(f"{root}/work", ids, texts, 64, {"model_sha256": "0" * 64})
    assert files.listdir(f"{root}/work") == ["manifest.json", "piece-00000.npz"]
    assert [piece.number for piece in resumed.pending_pieces()] == [1, 2, 3]
    for piece in resumed.pending_pieces():
        resumed.write(piece.number, embeddings[piece.start : piece.end])
    np.testing.assert_array_equal(resumed.assemble(), embeddings)
    with pytest.raises(DataError, match=rf"^{root}/nothing: not a search index"):
        SearchIndex.load(f"{root}/nothing")


def test_an_unknown_scheme_is_a_data_error_naming_the_path(tiny_encoder, tiny_model_dir, root):
    index = SearchIndex(["d0", "d1"], np.eye(2, dtype=np.float32))
    corpus = Corpus(["d0", "d1"], ["", ""], ["lift on a wing", "drag"])
    unknown = "foo://b/x"
    attempts = [
        lambda: gtr_keras.save(tiny_encoder, unknown),
        lambda: gtr_keras.load(unknown),
        lambda: GTRTextEmbedder.from_preset(unknown),
        lambda: index.save(unknown),
        lambda: SearchIndex.load(unknown),
        lambda: build_index(tiny_encoder, corpus, unknown),
        lambda: Retriever.load(unknown, tiny_encoder),
        lambda: export_all(tiny_encoder, unknown),
        lambda: load_export(unknown),
        lambda: train({"init": unknown, "output_dir": f"{root}/run", "data": {"source": f"{root}/t.jsonl"}}),
        lambda: train({"init": tiny_model_dir, "output_dir": unknown, "data": {"source": f"{root}/t.jsonl"}}),
    ]
    _write(f"{root}/t.jsonl", _jsonl([{"query": "q", "positive": "p"}]))
    for attempt in attempts:
        with pytest.raises(DataError, match=r"^foo://b/x[^ ]*: TensorFlow has no file system for foo://"):
            attempt()
