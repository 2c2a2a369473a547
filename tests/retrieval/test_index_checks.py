"""Indexing refuses what would give a silently wrong index, and never loses the previous one."""

import errno
import gzip
import json
import os
import re
import shutil

import numpy as np
import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.retrieval.index_building import build_index, index_metadata, work_dir_for, write_index
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.saving import load_model
from gtr_keras.storage.layout import RETRIEVER_JSON
from gtr_keras.storage.search_index import ArrayRows

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()


def _corpus(n, seed=0, words=(3, 40)):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(*words))) for _ in range(n)]
    return Corpus([f"d{i}" for i in range(n)], [f"title {i}" for i in range(n)], texts)


def _count_encodes(monkeypatch, encoder, crash_after=None):
    """Sizes of the `encode_documents` calls to come; the call after `crash_after` of them raises."""
    calls = []
    encode = type(encoder).encode_documents.__get__(encoder)

    def counted(texts, *args):
        if len(calls) == crash_after:
            raise RuntimeError("killed")
        calls.append(len(texts))
        return encode(texts, *args)

    monkeypatch.setattr(encoder, "encode_documents", counted)
    return calls


def _interrupt(encoder, corpus, index_dir, monkeypatch, pieces_done):
    _count_encodes(monkeypatch, encoder, crash_after=pieces_done)
    with pytest.raises(RuntimeError, match="killed"):
        build_index(encoder, corpus, index_dir, piece_size=4)


@pytest.fixture(scope="module")
def other_encoder(tiny_model_dir):
    """The tiny model with one weight changed: same architecture, same D."""
    encoder = load_model(tiny_model_dir)
    weight = encoder.model.weights[-1]
    weight.assign(weight.numpy() + 1e-3)
    return encoder


def test_resume_reuses_finished_pieces_and_matches_a_clean_build(tmp_path, tiny_encoder, monkeypatch):
    corpus = _corpus(10)
    _interrupt(tiny_encoder, corpus, tmp_path / "idx", monkeypatch, pieces_done=2)
    calls = _count_encodes(monkeypatch, tiny_encoder)
    resumed = build_index(tiny_encoder, corpus, tmp_path / "idx", piece_size=4)
    assert calls == [2]  # only piece 2, rows 8-9
    clean = build_index(tiny_encoder, corpus, tmp_path / "clean", piece_size=4)
    np.testing.assert_allclose(resumed.embeddings, clean.embeddings, atol=1e-6)


def test_resume_after_a_document_changed_names_the_piece(tmp_path, tiny_encoder, monkeypatch):
    corpus = _corpus(10)
    _interrupt(tiny_encoder, corpus, tmp_path / "idx", monkeypatch, pieces_done=2)
    corpus.texts[5] += " edited"
    calls = _count_encodes(monkeypatch, tiny_encoder)
    work_dir = work_dir_for(tmp_path / "idx")
    message = (
        f"{work_dir}: piece 1 was encoded from other texts (documents 4-7: one or more changed since); "
        f"delete {work_dir} to start over"
    )
    with pytest.raises(MismatchError, match=re.escape(message)):
        build_index(tiny_encoder, corpus, tmp_path / "idx", piece_size=4)
    assert calls == [] and len(os.listdir(work_dir)) == 3  # nothing encoded, nothing deleted


@pytest.mark.parametrize(
    "settings, change",
    [
        ({}, r"model_sha256 \w{12}… recorded, this run has \w{12}…"),
        ({"document_length": 32}, "document_length 512 recorded, this run has 32"),
        ({"dtype": "bfloat16"}, "compute_dtype float32 recorded, this run has bfloat16"),
    ],
)
def test_resume_with_another_model_is_refused(
    tmp_path, tiny_encoder, other_encoder, tiny_model_dir, monkeypatch, settings, change
):
    corpus = _corpus(10)
    _interrupt(tiny_encoder, corpus, tmp_path / "idx", monkeypatch, pieces_done=1)
    encoder = load_model(tiny_model_dir, **settings) if settings else other_encoder
    work_dir = re.escape(work_dir_for(tmp_path / "idx"))
    with pytest.raises(
        MismatchError,
        match=f"^{work_dir}: these pieces were encoded from other inputs or settings "
        rf"\({change}\); delete {work_dir} to start over$",
    ):
        build_index(encoder, corpus, tmp_path / "idx", piece_size=4)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"kind": "approximate"}, "kind must be one of"),
        ({"batch_size": 0}, "batch_size must be a positive int, got 0"),
        ({"piece_size": -4}, "piece_size must be a positive int, got -4"),
    ],
)
def test_build_index_checks_arguments_before_encoding(tmp_path, tiny_encoder, monkeypatch, arguments, message):
    calls = _count_encodes(monkeypatch, tiny_encoder)
    with pytest.raises(UserError, match=message):
        build_index(tiny_encoder, _corpus(3), tmp_path / "idx", **arguments)
    assert calls == [] and not os.path.exists(work_dir_for(tmp_path / "idx"))


def test_build_and_write_index_refuse_an_empty_corpus_other_rows_and_incomplete_metadata(tmp_path, tiny_encoder):
    with pytest.raises(UserError, match="^the corpus is empty: nothing to index$"):
        build_index(tiny_encoder, _corpus(0), tmp_path / "idx")
    corpus = _corpus(3)
    rows = _unit_rows(corpus, seed=0)
    metadata = index_metadata(tiny_encoder, None)
    with pytest.raises(UserError, match="^the index rows must hold the corpus documents, in corpus order$"):
        write_index(tmp_path / "idx", ArrayRows(rows.ids[::-1], rows.embeddings), corpus, metadata)
    del metadata["model_sha256"]
    with pytest.raises(UserError, match=r"^metadata lacks \['model_sha256'\]: pass index_metadata"):
        write_index(tmp_path / "idx", rows, corpus, metadata)
    assert not os.path.exists(tmp_path / "idx")


@pytest.fixture(scope="module")
def built_index(tmp_path_factory, tiny_encoder, tiny_model_dir):
    index_dir = tmp_path_factory.mktemp("built") / "idx"
    build_index(tiny_encoder, _corpus(12), index_dir, model_dir=tiny_model_dir)
    return index_dir


@pytest.fixture
def index_copy(built_index, tmp_path):
    return shutil.copytree(built_index, tmp_path / "idx")


def _edit_retriever_json(index_dir, **fields):
    path = index_dir / RETRIEVER_JSON
    recorded = {**json.loads(path.read_text()), **fields}
    path.write_text(json.dumps({key: value for key, value in recorded.items() if value is not None}))


def test_search_with_another_model_of_the_same_size_is_refused(
    built_index, tiny_encoder, other_encoder, tiny_model_dir
):
    assert other_encoder.embedding_dim == tiny_encoder.embedding_dim
    message = (
        rf"^{re.escape(str(built_index))}: built with another model \(model_sha256 \w{{12}}… recorded, "
        r"the model given has \w{12}…\); search with the model the index was built with "
        rf"\(recorded model_dir: {re.escape(os.path.abspath(tiny_model_dir))}\) or rebuild the index$"
    )
    with pytest.raises(MismatchError, match=message):
        Retriever.load(built_index, other_encoder)
    retriever = Retriever.load(built_index, tiny_encoder)
    assert len(retriever.search(["wing lift"], k=3)[0]) == 3
    with pytest.raises(UserError, match="k must be a positive int, got 0"):
        retriever.search(["wing lift"], k=0)


def test_search_with_another_embedding_size_is_refused(index_copy, tiny_encoder):
    _edit_retriever_json(index_copy, embedding_dim=32)
    with pytest.raises(
        MismatchError,
        match=r"built with another model \(embedding_dim 32 recorded, "
        r"the model given has 64\); search with the model",
    ):
        Retriever.load(index_copy, tiny_encoder)


def test_index_without_a_model_fingerprint_is_refused(index_copy, tiny_encoder):
    _edit_retriever_json(index_copy, model_sha256=None)
    with pytest.raises(
        MismatchError,
        match=f"^{re.escape(str(index_copy))}: built from embeddings with no record of their model",
    ):
        Retriever.load(index_copy, tiny_encoder)


def test_not_an_index_or_a_damaged_one_is_named(index_copy, tiny_encoder):
    with pytest.raises(
        DataError,
        match=f"^{re.escape(str(index_copy.parent))}: not an index directory "
        r"\(no retriever\.json\); build one with `gtr-keras index`$",
    ):
        Retriever.load(index_copy.parent, tiny_encoder)
    (index_copy / RETRIEVER_JSON).write_text('{"embedding_dim": 64,')
    with pytest.raises(DataError, match=r"retriever\.json: unreadable \(.*\); rebuild the index"):
        Retriever.load(index_copy, tiny_encoder)


def _snapshot(directory):
    return {
        os.path.relpath(os.path.join(root, name), directory): open(os.path.join(root, name), "rb").read()
        for root, _, names in os.walk(directory)
        for name in names
    }


def _unit_rows(corpus, seed):
    embeddings = np.random.default_rng(seed).standard_normal((len(corpus), 16)).astype(np.float32)
    return ArrayRows(corpus.ids, embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True))


@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_a_failed_write_leaves_the_previous_index_byte_identical(tmp_path, tiny_encoder, monkeypatch, kind):
    metadata = index_metadata(tiny_encoder, None)
    old = _corpus(300, seed=1)
    write_index(tmp_path / "idx", _unit_rows(old, seed=1), old, metadata, kind)
    assert os.listdir(tmp_path) == ["idx"]  # every file, ScaNN assets included, is inside the index
    before = _snapshot(tmp_path / "idx")
    assert ("index/scann/scann_assets.pbtxt" in before) == (kind == "scann")

    new = _corpus(300, seed=2, words=(100, 200))
    written = []
    write = gzip.GzipFile.write

    def write_until_the_disk_is_full(self, data):
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(len(data))
        return write(self, data)

    monkeypatch.setattr(gzip.GzipFile, "write", write_until_the_disk_is_full)
    with pytest.raises(OSError, match="No space left"):
        write_index(tmp_path / "idx", _unit_rows(new, seed=2), new, metadata, kind)
    assert written  # the new index and part of its documents were written before the failure
    assert _snapshot(tmp_path / "idx") == before
    assert os.listdir(tmp_path) == ["idx"]
