import os

import numpy as np
import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError, DataWarning, MismatchError
from gtr_keras.lexical.bm25_side import (
    BM25_SUBDIR,
    corpus_in_index_order,
    has_bm25_side,
    load_bm25_side,
    write_bm25_side,
)
from gtr_keras.retrieval.index_building import build_index, index_embeddings, work_dir_for, write_index
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.storage.search_index import ArrayRows, SearchIndex

CORPUS = Corpus(
    ["cats", "rockets", "bread", "tides"],
    ["", "Rockets", "", ""],
    [
        "Cats purr when they are happy and sleep all day.",
        "Rockets burn liquid fuel to reach orbit around the Earth.",
        "Bakers knead dough and bake bread in a hot oven.",
        "The Moon's gravity pulls the oceans and causes tides.",
    ],
)
METADATA = {
    "model_dir": None,
    "embedding_dim": 4,
    "document_length": 8,
    "query_length": 8,
    "compute_dtype": "float32",
    "model_sha256": None,
}


def test_written_side_loads_with_the_ids_and_searches(tmp_path):
    write_bm25_side(tmp_path, CORPUS)
    assert has_bm25_side(tmp_path)
    ids, scores = load_bm25_side(tmp_path, CORPUS.ids).search(["orbiting rocket fuel", "kneading"], 2)
    assert [row[0] for row in ids] == ["rockets", "bread"] and scores[0][0] > 0


def test_a_side_of_other_ids_or_order_is_refused(tmp_path):
    write_bm25_side(tmp_path, CORPUS)
    with pytest.raises(MismatchError, match=r"bm25: not the documents of the index .*row 0 holds 'cats'"):
        load_bm25_side(tmp_path, ["rockets", "cats", "bread", "tides"])
    with pytest.raises(MismatchError, match="4 ids for 5"):
        load_bm25_side(tmp_path, [*CORPUS.ids, "extra"])


def test_a_written_side_is_a_unit_of_its_own_and_verify_names_a_changed_byte(tmp_path):
    from gtr_keras.utils.checksums import verify_checksums

    write_bm25_side(tmp_path, CORPUS)
    assert verify_checksums(tmp_path / "bm25") == ([], 7)
    load_bm25_side(tmp_path, CORPUS.ids, verify=True)
    data = bytearray((tmp_path / "bm25" / "data.csc.index.npy").read_bytes())
    data[-1] ^= 0x01
    (tmp_path / "bm25" / "data.csc.index.npy").write_bytes(bytes(data))
    load_bm25_side(tmp_path, CORPUS.ids)  # the cheap checks pass
    with pytest.raises(DataError, match=r"bm25/data.csc.index.npy: its SHA-256 is not the one recorded"):
        load_bm25_side(tmp_path, CORPUS.ids, verify=True)


def test_a_side_of_other_texts_than_the_stored_documents_is_refused(tmp_path):
    write_bm25_side(tmp_path, CORPUS)
    assert load_bm25_side(tmp_path, CORPUS.ids, CORPUS).ids == CORPUS.ids
    changed = Corpus(CORPUS.ids, CORPUS.titles, [*CORPUS.texts[:3], "The Sun's gravity too."])
    with pytest.raises(MismatchError, match="bm25: indexed other texts than the documents the index stores"):
        load_bm25_side(tmp_path, CORPUS.ids, changed)


def test_an_index_without_a_side_is_refused_in_one_line(tmp_path):
    with pytest.raises(DataError, match="no BM25 side .*--bm25-corpus") as error:
        load_bm25_side(tmp_path, CORPUS.ids)
    assert "\n" not in str(error.value)


def test_write_index_writes_the_side_beside_the_dense_part_on_ram():
    index_dir = "ram://bm25-side/index"
    write_index(index_dir, ArrayRows(CORPUS.ids, np.eye(4, dtype="float32")), CORPUS, METADATA)
    retriever = load_bm25_side(index_dir, SearchIndex.load(index_dir).ids)
    assert retriever.search(["tides of the oceans"], 1)[0] == [["tides"]]
    write_index(index_dir, ArrayRows(CORPUS.ids, np.eye(4, dtype="float32")), CORPUS, METADATA, bm25=False)
    assert not has_bm25_side(index_dir)  # replaced as a whole


def test_corpus_in_index_order_reorders_and_names_a_missing_or_extra_id():
    reordered = corpus_in_index_order(CORPUS, "c.jsonl", ["tides", "cats", "rockets", "bread"])
    assert reordered.ids == ["tides", "cats", "rockets", "bread"] and reordered.titles[2] == "Rockets"
    with pytest.raises(DataError, match=r"c.jsonl: lacks document 'comets' of the index"):
        corpus_in_index_order(CORPUS, "c.jsonl", ["cats", "comets"])
    with pytest.raises(DataError, match=r"c.jsonl: document 'rockets' is not in the index"):
        corpus_in_index_order(CORPUS, "c.jsonl", ["cats", "bread", "tides"])


def test_index_embeddings_with_their_corpus_gets_a_side(tmp_path):
    npy = tmp_path / "emb.npy"
    np.save(npy, np.eye(4, dtype="float32"))
    (tmp_path / "emb.ids.txt").write_text("".join(f"{i}\n" for i in reversed(CORPUS.ids)))
    ordered = corpus_in_index_order(CORPUS, "corpus", list(reversed(CORPUS.ids)))
    index_embeddings(str(npy), tmp_path / "idx", corpus=ordered)
    assert load_bm25_side(tmp_path / "idx", list(reversed(CORPUS.ids))).ids == ordered.ids
    index_embeddings(str(npy), tmp_path / "bare")
    assert not has_bm25_side(tmp_path / "bare")


class _Failure(Exception):
    pass


def test_a_build_killed_after_its_pieces_completes_with_its_side_when_rerun(
    tmp_path, tiny_encoder, tiny_model_dir, monkeypatch
):
    from gtr_keras.lexical import bm25

    out = tmp_path / "idx"
    save = bm25.BM25Retriever.save

    def fail(self, directory):
        raise _Failure

    monkeypatch.setattr(bm25.BM25Retriever, "save", fail)
    with pytest.raises(_Failure):
        build_index(tiny_encoder, CORPUS, out, model_dir=tiny_model_dir, piece_size=2)
    assert not os.path.exists(out) and sorted(os.listdir(work_dir_for(out)))[-1] == "piece-00001.npz"

    monkeypatch.setattr(bm25.BM25Retriever, "save", save)
    encoded = []
    monkeypatch.setattr(
        tiny_encoder, "encode_documents", lambda *a, **k: encoded.append(a) or pytest.fail("re-encoded")
    )
    index = build_index(tiny_encoder, CORPUS, out, model_dir=tiny_model_dir, piece_size=2)
    assert not encoded and not os.path.exists(work_dir_for(out))
    assert load_bm25_side(out, index.ids).search(["bread"], 1)[0] == [["bread"]]
    assert os.path.isdir(out / BM25_SUBDIR)


def test_updates_rebuild_the_side_from_the_updated_documents(tmp_path, tiny_encoder, tiny_model_dir):
    from gtr_keras.retrieval.hybrid_retriever import HybridRetriever
    from gtr_keras.retrieval.index_updates import update_index

    out = tmp_path / "idx"
    build_index(tiny_encoder, CORPUS, out, model_dir=tiny_model_dir)
    added = Corpus(["comets", "bread"], ["", ""], ["Comets grow icy tails near the Sun.", "Rye bread, sour."])
    update_index(out, corpus=added, encoder=tiny_encoder, delete=["tides"])
    hybrid = HybridRetriever.load(out, tiny_encoder)
    assert sorted(hybrid.bm25.ids) == ["bread", "cats", "comets", "rockets"]
    assert hybrid.search(["icy comet tails"], 1, "bm25")[0][0]["id"] == "comets"
    assert hybrid.search(["sour rye"], 1, "bm25")[0][0]["text"] == "Rye bread, sour."
    np.save(tmp_path / "e.npy", tiny_encoder.encode_documents(["Orbits of moons."]))
    (tmp_path / "e.ids.txt").write_text("moons\n")
    with pytest.warns(DataWarning, match="its BM25 side is removed: embeddings bring no texts"):
        update_index(out, embeddings=str(tmp_path / "e.npy"), encoder=tiny_encoder)
    assert not has_bm25_side(out)
    assert "moons" in Retriever.load(out, tiny_encoder).index.ids


def test_an_update_killed_before_its_side_was_rebuilt_is_put_right_by_the_next(
    tmp_path, tiny_encoder, tiny_model_dir, monkeypatch
):
    from gtr_keras.retrieval import index_updates
    from gtr_keras.retrieval.hybrid_retriever import HybridRetriever

    out = tmp_path / "idx"
    build_index(tiny_encoder, CORPUS, out, model_dir=tiny_model_dir)

    def killed(index_dir, index):
        raise KeyboardInterrupt

    monkeypatch.setattr(index_updates, "rebuild_bm25_side", killed)
    with pytest.raises(KeyboardInterrupt):
        index_updates.update_index(out, delete=["tides"])
    with pytest.raises(MismatchError):
        HybridRetriever.load(out, tiny_encoder)
    monkeypatch.undo()
    (out / ".bm25.tmp-removed").mkdir()  # what a kill while removing a side leaves
    index_updates.update_index(out, compact=True)
    assert not (out / ".bm25.tmp-removed").exists()
    hybrid = HybridRetriever.load(out, tiny_encoder)
    assert "tides" not in hybrid.bm25.ids and hybrid.bm25.ids == list(hybrid.retriever.index.ids)
