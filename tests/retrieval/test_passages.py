"""`retrieval.passages`: an `Index` built with passages stores token windows and answers documents (MaxP), with
the window that scored; its documents, filters, updates, BM25 and evaluation speak of documents."""

import json
import os
import re

import numpy as np
import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.filters.expressions import Filter
from gtr_keras.models.token_windows import piece_spans_of
from gtr_keras.retrieval.evaluator import evaluate
from gtr_keras.retrieval.index import Index
from gtr_keras.retrieval.passages import Passages, split_row_id, window_corpus
from gtr_keras.retrieval.reranking import FunctionScorer

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()


def _corpus(n=8, seed=0):
    rng = np.random.default_rng(seed)
    texts = ["  " + "  ".join(" ".join(rng.choice(WORDS, size=12)) for _ in range(6)) + " ½ end. " for _ in range(n)]
    texts[min(3, n - 1)] += " zeppelin hangar"  # past the first windows: words only d3 (of 8) holds, at its end
    return Corpus(
        [f"d{i}" for i in range(n)],
        [f"title {i}" if i % 2 else "" for i in range(n)],
        texts,
        [{"year": 2015 + i} for i in range(n)],
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_encoder):
    corpus = _corpus()
    index = Index.build(tmp_path_factory.mktemp("passages") / "idx", corpus, tiny_encoder, passages="16:8")
    return index, corpus


def _joined(title, window):
    return f"{title} {window}".strip()


def test_a_search_answers_k_distinct_documents_each_scored_by_its_best_window(built, tiny_encoder):
    index, corpus = built
    rows, _ = window_corpus(corpus, tiny_encoder, index.passages)
    assert len(rows) > 3 * len(corpus)  # several windows a document
    query = "boundary layer heat transfer on a wing"
    hits = index.search([query], k=5)[0]
    assert len(hits) == 5 and len({hit["id"] for hit in hits}) == 5
    q = tiny_encoder.encode_queries([query])[0]
    row_scores = tiny_encoder.encode_documents(rows.joined()) @ q
    for hit in hits:
        doc = corpus.ids.index(hit["id"])
        start, end = hit["passage"]["start"], hit["passage"]["end"]
        assert hit["text"] == corpus.texts[doc] and hit["title"] == corpus.titles[doc]
        window = tiny_encoder.encode_documents([_joined(corpus.titles[doc], corpus.texts[doc][start:end])])[0]
        assert abs(float(window @ q) - hit["score"]) < 1e-5  # text[start:end] is the window that scored
        windows = [i for i, row in enumerate(rows.ids) if split_row_id(row)[0] == hit["id"]]
        assert abs(row_scores[windows].max() - hit["score"]) < 1e-5  # its best window (MaxP)
    assert [hit["score"] for hit in hits] == sorted((hit["score"] for hit in hits), reverse=True)


def test_every_window_row_is_read_whole_by_the_model(tiny_encoder):
    words = "IL-6 β-catenin (CD4+) T-cells 10.5% p<0.001 mRNA-expression HIF-1α in vivo, BRCA1/2 [n=312] cells'".split()
    texts = [" ".join(np.random.default_rng(seed).choice(words, size=300)) for seed in range(3)]
    corpus = Corpus(["a", "b", "c"], ["HIF-1α and IL-6", "", "T-cells"], texts)
    spans = piece_spans_of(tiny_encoder)
    for setting in ("64:32", f"{tiny_encoder.document_length - 1}"):
        rows, _ = window_corpus(corpus, tiny_encoder, setting)
        assert max(spans.count(joined) for joined in rows.joined()) <= tiny_encoder.document_length - 1


@pytest.mark.parametrize("late_chunking", [None, 512])
def test_empty_and_blank_texts_are_one_window_each(tmp_path, tiny_encoder, late_chunking):
    corpus = Corpus(["e", "b", "t"], ["", "", "Only a title"], ["", "   ", ""])
    index = Index.build(tmp_path / "idx", corpus, tiny_encoder, passages="8", late_chunking=late_chunking)
    assert [document["text"] for document in index.get(["e", "b", "t"])] == ["", "   ", ""]
    assert sorted(hit["id"] for hit in index.search(["title"], k=3)[0]) == ["b", "e", "t"]


def test_k_past_the_documents_answers_every_document_once(built):
    index, corpus = built
    hits = index.search(["lift"], k=50)[0]
    assert sorted(hit["id"] for hit in hits) == sorted(corpus.ids)


def test_documents_by_id_are_the_corpus_documents_not_the_windows(built):
    index, corpus = built
    assert len(index) == len(corpus) and index.ids == corpus.ids
    assert "d3" in index and "d3@0-1" not in index and index.get(["d3@0-1"]) == [None]
    for doc_id, title, text, metadata in zip(corpus.ids, corpus.titles, corpus.texts, corpus.metadata):
        assert index.get(doc_id) == [{"id": doc_id, "title": title, "text": text, "metadata": metadata}]
    assert index.records[0]["passages"] == {"tokens": 16, "stride": 8}
    assert index.check().ok  # what `gtr-keras check` verifies


def test_a_filter_allows_documents_by_their_metadata(built):
    index, _ = built
    hits = index.search(["lift on a wing"], k=3, filter="year >= 2019")[0]
    assert {hit["id"] for hit in hits} <= {"d4", "d5", "d6", "d7"} and len(hits) == 3
    assert len(index.search(["lift"], k=10, filter="year >= 2022")[0]) == 1


@pytest.mark.parametrize("retriever", ["gtr", "bm25", "hybrid"])
def test_an_allow_list_of_document_ids_allows_exactly_those_documents(built, tiny_encoder, retriever):
    index, corpus = built
    allowed = ["d1", "d3", "d6", "unknown"]
    query = "zeppelin hangar wing lift"
    hits = index.search([query], k=2, filter=Filter(ids=allowed), retriever=retriever)[0]
    every = index.search([query], k=len(corpus.ids), filter=Filter(ids=allowed), retriever=retriever)[0]
    assert sorted(hit["id"] for hit in every) == ["d1", "d3", "d6"] and len(hits) == 2
    if retriever == "hybrid":
        return
    if retriever == "gtr":
        rows, _ = window_corpus(corpus, tiny_encoder, index.passages)
        scores = tiny_encoder.encode_documents(rows.joined()) @ tiny_encoder.encode_queries([query])[0]
    else:
        rows = index._retriever.corpus
        scores = index.bm25.search([query], len(rows.ids))
        scores = dict(zip(scores[0][0], scores[1][0]))
        scores = np.array([scores.get(row, 0.0) for row in rows.ids])
    best = {doc: max(s for row, s in zip(rows.ids, scores) if split_row_id(row)[0] == doc) for doc in allowed[:3]}
    expected = sorted(best, key=best.get, reverse=True)[:2]
    assert [hit["id"] for hit in hits] == expected
    assert np.allclose([hit["score"] for hit in hits], [best[doc] for doc in expected], atol=1e-5)


def test_bm25_and_hybrid_answer_documents_with_the_window_that_scored(built):
    index, corpus = built
    for retriever in ("bm25", "hybrid"):
        hits = index.search(["zeppelin hangar wing"], k=4, retriever=retriever)[0]
        assert len({hit["id"] for hit in hits}) == 4 and hits[0]["id"] == "d3"
        passage = hits[0]["passage"]
        assert "zeppelin" in corpus.texts[3][passage["start"] : passage["end"]] and passage["start"] > 0


def test_a_reranker_reads_the_window_that_scored_with_its_title(built):
    index, corpus = built
    read = []

    def score(pairs):
        read.extend(document for _, document in pairs)
        return np.array([float("zeppelin" in document) for _, document in pairs], np.float32)

    first = index.search(["zeppelin hangar wing"], k=4, retriever="bm25")[0]
    hits = index.search(["zeppelin hangar wing"], k=2, retriever="bm25", rerank=FunctionScorer(score), rerank_depth=4)
    assert read == [
        _joined(hit["title"], hit["text"][hit["passage"]["start"] : hit["passage"]["end"]]) for hit in first
    ]
    assert hits[0][0]["id"] == "d3" and hits[0][0]["score"] == 1.0 and hits[0][0]["passage"] == first[0]["passage"]


def test_evaluate_scores_documents_against_the_qrels(built, tmp_path):
    index, corpus = built
    (tmp_path / "qrels").mkdir()
    with open(tmp_path / "corpus.jsonl", "w") as f:
        for doc_id, title, text in zip(corpus.ids, corpus.titles, corpus.texts):
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "zeppelin hangar"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\n")
    assert evaluate(index, tmp_path, retriever="bm25")["ndcg@10"] == 1.0
    assert 0 < evaluate(index, tmp_path)["recall@100"] == 1.0  # every document in the run, once


def test_an_update_replaces_and_a_delete_removes_all_of_a_documents_windows(tmp_path, tiny_encoder):
    corpus = _corpus()
    index = Index.build(tmp_path / "idx", corpus, tiny_encoder, passages=(16, 8))

    change = index.update(add=Corpus(["d3", "n1"], ["", "new"], ["short now", corpus.texts[0]]), delete=["d5"])
    assert (change.added, change.replaced, change.deleted, change.documents) == (("n1",), ("d3",), ("d5",), 8)
    assert len(index) == 8 and "d5" not in index and index.get("d3")[0]["text"] == "short now"
    assert sorted(index.ids) == sorted({*corpus.ids, "n1"} - {"d5"})
    assert [hit["id"] for hit in index.search(["zeppelin hangar"], k=8, retriever="bm25")[0]] != ["d3"]
    assert all(hit["id"] != "d5" for hit in index.search(["lift"], k=8)[0])
    assert Passages(index._retriever.index.ids, None).rows["d3"] == ["d3@0-9"]
    reopened = Index.open(tmp_path / "idx", tiny_encoder)
    assert reopened.get("n1")[0]["text"] == corpus.texts[0] and len(reopened) == 8
    assert index.delete("n1").deleted == ("n1",) and "n1" not in Index.open(tmp_path / "idx")
    assert index.check().ok


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda index: index.delete("nope"), DataError, "delete[0]: id 'nope' is not in the index"),
        (
            lambda index: index.update(add=Corpus(["d1"], [""], ["x"]), delete=["d1"]),
            UserError,
            "both added and deleted",
        ),
        (
            lambda index: index.update(delete=["d1"], passages="32"),
            MismatchError,
            "built with --passages 16:8, but --passages 32:32",
        ),
        (lambda index: index.update(embeddings="emb/*.npy"), UserError, "updated from a corpus"),
    ],
)
def test_an_update_a_passages_index_cannot_take_is_refused_before_any_change(
    tmp_path, tiny_encoder, call, error, message
):
    index = Index.build(tmp_path / "idx", _corpus(3), tiny_encoder, passages="16:8")
    before = index.get(index.ids)
    with pytest.raises(error, match=re.escape(message)):
        call(index)
    assert Index.open(tmp_path / "idx").get(["d0", "d1", "d2"]) == before


def test_an_index_without_passages_refuses_an_update_that_asks_for_them(tmp_path, tiny_encoder):
    index = Index.build(tmp_path / "idx", _corpus(2), tiny_encoder)
    with pytest.raises(MismatchError, match="built with no --passages, but --passages 16:8 is given"):
        index.update(delete="d0", passages="16:8")
    assert "d0" in index


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"passages": "600"}, "TOKENS 600 is above the model's document budget"),
        ({"passages": "16:17"}, "STRIDE must be from 1 to TOKENS"),
        ({"passages": "4"}, "TOKENS must be at least 8"),
    ],
)
def test_a_bad_passages_setting_is_refused_before_anything_is_written(tmp_path, tiny_encoder, kwargs, message):
    with pytest.raises(UserError, match=message):
        Index.build(tmp_path / "idx", _corpus(2), tiny_encoder, **kwargs)
    assert not (tmp_path / "idx").exists() and not (tmp_path / "idx.partial").exists()


def test_passages_are_cut_from_a_corpus_only(tmp_path):
    with pytest.raises(UserError, match="passages: a corpus's documents are cut into windows"):
        Index.build(tmp_path / "idx", embeddings="emb/*.npy", passages="64")


def test_shards_of_other_passages_settings_are_refused_naming_them(tmp_path, tiny_encoder):
    Index.build(tmp_path / "a", _corpus(2), tiny_encoder, passages="16:8")
    Index.build(tmp_path / "b", Corpus(["e1"], [""], ["jet"]), tiny_encoder)
    with pytest.raises(MismatchError, match="b: built with no --passages, but the shard .*a with --passages 16:8"):
        Index.open([tmp_path / "a", tmp_path / "b"])
    Index.build(tmp_path / "c", Corpus(["e1"], [""], ["jet " * 30]), tiny_encoder, passages="16:8")
    shards = Index.open([tmp_path / "a", tmp_path / "c"], tiny_encoder)
    assert sorted(shards.ids) == ["d0", "d1", "e1"] and len(shards.search(["jet"], k=3)[0]) == 3


class Killed(Exception):
    pass


def test_a_killed_passages_build_resumes_from_its_last_finished_piece(tmp_path, tiny_encoder, monkeypatch):
    corpus, encode, calls, killed_at = _corpus(), tiny_encoder.encode_documents, [], [3]

    def encode_until_killed(texts, *args):
        calls.append(len(texts))
        if len(calls) == killed_at[0]:
            raise Killed  # while encoding the third piece
        return encode(texts, *args)

    monkeypatch.setattr(tiny_encoder, "encode_documents", encode_until_killed)
    with pytest.raises(Killed):
        Index.build(tmp_path / "idx", corpus, tiny_encoder, passages="16:8", piece_size=10)
    assert not (tmp_path / "idx").exists() and (tmp_path / "idx.partial").exists()
    calls.clear()
    killed_at[0] = 0
    resumed = Index.build(tmp_path / "idx", corpus, tiny_encoder, passages="16:8", piece_size=10)
    assert sum(calls) == len(window_corpus(corpus, tiny_encoder, "16:8")[0]) - 20  # two pieces were finished
    monkeypatch.undo()
    clean = Index.build(tmp_path / "clean", corpus, tiny_encoder, passages="16:8")
    got, expected = resumed.search(["shock boundary layer"], k=8)[0], clean.search(["shock boundary layer"], k=8)[0]
    assert [(h["id"], h["passage"]) for h in got] == [(h["id"], h["passage"]) for h in expected]
    np.testing.assert_allclose([h["score"] for h in got], [h["score"] for h in expected], atol=1e-6)


def _late(tiny_encoder):
    return 2 * tiny_encoder.document_length  # a forward pass longer than the model's budget


def _stored(index):
    """`{row id: stored vector}` of an index's live rows."""
    search_index = index._retriever.index
    return dict(zip(search_index.ids, search_index.live_embeddings()))


@pytest.fixture(scope="module")
def late_built(tmp_path_factory, tiny_encoder):
    corpus = _corpus(4)
    path = tmp_path_factory.mktemp("late") / "idx"
    return Index.build(path, corpus, tiny_encoder, passages="16:8", late_chunking=_late(tiny_encoder)), corpus


def test_a_late_chunking_index_stores_each_windows_late_vector(late_built, tiny_encoder):
    from gtr_keras.models.late_chunking import LateChunks

    index, corpus = late_built
    assert index.late_chunking == _late(tiny_encoder) and index.passages == {"tokens": 16, "stride": 8}
    with open(os.path.join(index.paths[0], "retriever.json")) as f:
        record = json.load(f)
    assert record["late_chunking"] == _late(tiny_encoder) and index.check().ok  # `gtr-keras check` takes it
    stored = _stored(index)
    rows, _ = window_corpus(corpus, tiny_encoder, "16:8")
    assert sorted(stored) == sorted(rows.ids)
    late = LateChunks(tiny_encoder, _late(tiny_encoder))
    plain = dict(zip(rows.ids, tiny_encoder.encode_documents(rows.joined())))
    for i, doc_id in enumerate(corpus.ids):
        windows = [split_row_id(row)[1:] for row in rows.ids if split_row_id(row)[0] == doc_id]
        assert len(windows) > 3  # a document of several windows
        expected = late.encode([corpus.titles[i]], [corpus.texts[i]], [windows])
        got = np.stack([stored[f"{doc_id}@{start}-{end}"] for start, end in windows])
        np.testing.assert_allclose(got, expected, atol=1e-5)
        differences = [np.abs(stored[f"{doc_id}@{s}-{e}"] - plain[f"{doc_id}@{s}-{e}"]).max() for s, e in windows]
        assert max(differences) > 1e-3  # each window sees its document: not the plain passages vector


def test_a_late_chunking_index_searches_documents_with_their_late_windows(late_built, tiny_encoder):
    index, _ = late_built
    query = "shock boundary layer"
    hits = index.search([query], k=4)[0]
    assert len({hit["id"] for hit in hits}) == 4
    stored, q = _stored(index), tiny_encoder.encode_queries([query])[0]
    for hit in hits:
        row = f"{hit['id']}@{hit['passage']['start']}-{hit['passage']['end']}"
        assert abs(float(stored[row] @ q) - hit["score"]) < 1e-5


def test_an_update_of_a_late_chunking_index_late_chunks_what_it_adds(tmp_path, tiny_encoder):
    from gtr_keras.models.late_chunking import LateChunks

    corpus = _corpus(3)
    index = Index.build(tmp_path / "idx", corpus, tiny_encoder, passages="16:8", late_chunking=_late(tiny_encoder))
    new = Corpus(["d1", "n"], ["", "New"], [corpus.texts[2] + " glider", corpus.texts[0]], [{"year": 1}, {"year": 2}])
    change = index.update(new, delete=["d0"], late_chunking=_late(tiny_encoder))
    assert change.added == ("n",) and change.replaced == ("d1",) and change.deleted == ("d0",)
    stored, late = _stored(index), LateChunks(tiny_encoder, _late(tiny_encoder))
    rows, _ = window_corpus(new, tiny_encoder, "16:8")
    windows = [[split_row_id(row)[1:] for row in rows.ids if split_row_id(row)[0] == doc] for doc in new.ids]
    expected = late.encode(new.titles, new.texts, windows)
    np.testing.assert_allclose(np.stack([stored[row] for row in rows.ids]), expected, atol=1e-5)
    assert not any(split_row_id(row)[0] == "d0" for row in stored)


def test_an_update_with_another_late_chunking_setting_is_refused_naming_it(tmp_path, tiny_encoder):
    plain = Index.build(tmp_path / "plain", _corpus(2), tiny_encoder, passages="16:8")
    with pytest.raises(MismatchError, match="built with no --late-chunking, but --late-chunking --document-length"):
        plain.update(delete="d0", late_chunking=_late(tiny_encoder))
    late = Index.build(tmp_path / "late", _corpus(2), tiny_encoder, passages="16:8", late_chunking=_late(tiny_encoder))
    message = f"built with --late-chunking --document-length {_late(tiny_encoder)}, but --late-chunking "
    with pytest.raises(MismatchError, match=message + "--document-length 999 is given"):
        late.update(delete="d0", late_chunking=999)
    assert "d0" in plain and "d0" in late


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"late_chunking": 2048}, "late_chunking: pools the windows of passages"),
        ({"passages": "16:8", "late_chunking": True}, "late_chunking: the tokens of a forward pass, an integer"),
        ({"passages": "16:8", "late_chunking": "2048"}, "late_chunking: the tokens of a forward pass, an integer"),
        ({"passages": "16:8", "late_chunking": 16}, "late chunking reads at least the model's"),
        (
            {"passages": "16:8", "late_chunking": 2048, "runner": "DirectRunner"},
            "late_chunking: not with a Beam runner",
        ),
    ],
)
def test_a_bad_late_chunking_setting_is_refused_before_anything_is_written(tmp_path, tiny_encoder, kwargs, message):
    with pytest.raises(UserError, match=message):
        Index.build(tmp_path / "idx", _corpus(2), tiny_encoder, **kwargs)
    assert not (tmp_path / "idx").exists() and not (tmp_path / "idx.partial").exists()


def test_a_killed_build_resumes_only_into_the_same_late_chunking_setting(tmp_path, tiny_encoder, monkeypatch):
    from gtr_keras.models.late_chunking import LateChunks

    corpus, n = _corpus(), _late(tiny_encoder)
    encode, calls, killed_at = LateChunks.encode, [], [2]

    def encode_until_killed(self, titles, *args):
        calls.append(len(titles))
        if len(calls) == killed_at[0]:
            raise Killed  # while late-chunking the second piece
        return encode(self, titles, *args)

    monkeypatch.setattr(LateChunks, "encode", encode_until_killed)
    with pytest.raises(Killed):
        Index.build(tmp_path / "idx", corpus, tiny_encoder, passages="16:8", late_chunking=n, piece_size=10)
    with pytest.raises(MismatchError, match=f"late_chunking {n} recorded, this run has None"):
        Index.build(tmp_path / "idx", corpus, tiny_encoder, passages="16:8", piece_size=10)
    calls.clear()
    killed_at[0] = 0
    resumed = Index.build(tmp_path / "idx", corpus, tiny_encoder, passages="16:8", late_chunking=n, piece_size=10)
    assert len(calls) == -(-len(window_corpus(corpus, tiny_encoder, "16:8")[0]) // 10) - 1  # one piece was finished
    monkeypatch.undo()
    clean = Index.build(tmp_path / "clean", corpus, tiny_encoder, passages="16:8", late_chunking=n)
    expected, got = _stored(clean), _stored(resumed)
    np.testing.assert_allclose(np.stack([got[row] for row in expected]), np.stack(list(expected.values())), atol=1e-6)


def test_a_killed_plain_passages_build_does_not_resume_into_late_chunking(tmp_path, tiny_encoder, monkeypatch):
    def killed(*args):
        raise Killed

    monkeypatch.setattr(tiny_encoder, "encode_documents", killed)
    with pytest.raises(Killed):
        Index.build(tmp_path / "idx", _corpus(), tiny_encoder, passages="16:8", piece_size=10)
    monkeypatch.undo()
    with pytest.raises(MismatchError, match="no late_chunking recorded"):
        Index.build(
            tmp_path / "idx", _corpus(), tiny_encoder, passages="16:8", late_chunking=_late(tiny_encoder), piece_size=10
        )
