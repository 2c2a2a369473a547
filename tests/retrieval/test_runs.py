import numpy as np
import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.lexical.fusion import Fusion
from gtr_keras.retrieval.hybrid_retriever import HybridRetriever
from gtr_keras.retrieval.runs import bm25_run, gtr_run, mine_negatives
from gtr_keras.storage.search_index import SearchIndex

CORPUS = Corpus(["d1", "d2", "d3", "d4", "d5"], ["", "", "", "", ""], ["t1", "t2", "t3", "t4", "t5"])
DOCUMENTS = np.eye(5, dtype=np.float32)  # document i scores query[i]
QUERIES = {"query one": [0.9, 0.8, 0.7, 0.6, 0.5], "query two": [0.1, 0.2, 0.3, 0.4, 0.95]}


class FixedEncoder:
    """An encoder with set embeddings: document `di` is the i-th unit vector, a query its row of `QUERIES`."""

    def __init__(self, encodes_documents=True):
        self.encodes_documents = encodes_documents

    def encode_documents(self, texts, batch_size=32, progress=None):
        assert self.encodes_documents, "the corpus was encoded although an index was given"
        return DOCUMENTS[[CORPUS.texts.index(text) for text in texts]]

    def encode_queries(self, texts, batch_size=32):
        return np.array([QUERIES[text] for text in texts], dtype=np.float32)


def test_gtr_run_keeps_the_best_depth_documents_with_their_scores():
    run = gtr_run(FixedEncoder(), CORPUS, {"q1": "query one", "q2": "query two"}, depth=3)
    assert list(run) == ["q1", "q2"]
    assert list(run["q1"]) == ["d1", "d2", "d3"] and run["q1"]["d1"] == pytest.approx(0.9)
    assert list(run["q2"]) == ["d5", "d4", "d3"]


def test_gtr_run_drops_a_document_with_the_query_id_and_still_returns_depth_documents():
    run = gtr_run(FixedEncoder(), CORPUS, {"d1": "query one"}, depth=3)
    assert list(run["d1"]) == ["d2", "d3", "d4"]
    kept = gtr_run(FixedEncoder(), CORPUS, {"d1": "query one"}, depth=3, ignore_identical_ids=False)
    assert list(kept["d1"]) == ["d1", "d2", "d3"]


def test_gtr_run_searches_a_given_index_without_encoding_the_corpus():
    index = SearchIndex(CORPUS.ids, DOCUMENTS, "exact")
    run = gtr_run(FixedEncoder(encodes_documents=False), CORPUS, {"q2": "query two"}, depth=2, index=index)
    assert list(run["q2"]) == ["d5", "d4"]


def test_bm25_run_ranks_documents_sharing_the_query_terms():
    corpus = Corpus(["cats", "dogs", "birds"], ["", "", ""], ["cats purr softly", "dogs bark loudly", "birds sing"])
    run = bm25_run(corpus, {"q1": "why do cats purr", "dogs": "dogs bark"}, depth=10)
    assert list(run["q1"]) == ["cats"] and run["q1"]["cats"] > 0
    assert "dogs" not in run["dogs"]  # a document with the query's id is not its own result
    assert "dogs" in bm25_run(corpus, {"dogs": "dogs bark"}, ignore_identical_ids=False)["dogs"]


def test_mine_negatives_leaves_out_positives_skips_the_top_and_keeps_per_query():
    qrels = {"q1": {"d1": 1, "d3": 0}, "q2": {"d5": 2}}
    mined = mine_negatives(
        FixedEncoder(), CORPUS, {"q1": "query one", "q2": "query two"}, qrels, depth=5, skip_top=1, per_query=2
    )
    assert mined == {"q1": ["d3", "d4"], "q2": ["d3", "d2"]}  # d3, judged 0 for q1, is a negative


def test_the_hybrid_run_fuses_both_sides_after_dropping_identical_ids():
    corpus = Corpus(CORPUS.ids, CORPUS.titles, ["wing lift", "drag", "wing drag", "shock", "lift"])
    queries = {"d1": "wing lift"}  # the query's id is a document's

    class Encoder(FixedEncoder):
        def encode_documents(self, texts, batch_size=32, progress=None):
            return DOCUMENTS

        def encode_queries(self, texts, batch_size=32):
            return np.array([QUERIES["query one"]], dtype=np.float32)

    fusion = Fusion("weighted", gtr_weight=0.5)
    hybrid = HybridRetriever.of_corpus(Encoder(), corpus, fusion)
    run = hybrid.run(queries, depth=100)
    assert run == fusion.fuse_runs(gtr_run(Encoder(), corpus, queries, 100), bm25_run(corpus, queries, 100), 100)
    assert set(run["d1"]) == {"d2", "d3", "d4", "d5"}  # k beyond both sides: every document either retrieved
    assert len(hybrid.run(queries, depth=2)["d1"]) == 2
    assert "d1" in hybrid.run(queries, ignore_identical_ids=False)["d1"]
    assert hybrid.run(queries, depth=3, retriever="gtr") == gtr_run(Encoder(), corpus, queries, 3)
    assert hybrid.run(queries, depth=3, retriever="bm25") == bm25_run(corpus, queries, 3)
