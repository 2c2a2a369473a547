"""Exact search: every stored vector scored, a block at a time, ties in trec_eval's order."""

import numpy as np
from search_inputs import CORPUS, QUERIES, doc_ids

from gtr_keras.storage.quantized_vectors import FloatVectors
from gtr_keras.storage.search_index import SearchIndex


def test_exact_search_matches_naive_argsort():
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact")
    indices, scores = index.search(QUERIES, k=10)
    all_scores = QUERIES @ CORPUS.T
    expected = np.argsort(-all_scores, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(all_scores, expected, axis=1), rtol=1e-6)
    assert indices.dtype == np.int64 and scores.dtype == np.float32


def _assert_same_results(expected, got):
    """The same documents in the same order; scores equal to float32 rounding (BLAS may round a product of
    other block shapes differently in the last bit, on some CPUs)."""
    np.testing.assert_array_equal(expected[0], got[0])
    np.testing.assert_allclose(expected[1], got[1], rtol=0, atol=1e-6)


def test_exact_search_chunks_queries(monkeypatch):
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact")
    expected = index.search(QUERIES, k=5)
    monkeypatch.setattr("gtr_keras.storage.exact_search._CHUNK_SCORES", 7 * len(CORPUS))
    _assert_same_results(expected, index.search(QUERIES, k=5))


def test_exact_search_breaks_ties_by_id_descending_as_trec_eval():
    embeddings = np.array([[1, 0], [0, 1], [1, 0], [1, 0]], dtype=np.float32)
    index = SearchIndex(["b", "x", "a", "c"], embeddings, kind="exact")
    indices, _ = index.search(embeddings[:1], k=2)
    np.testing.assert_array_equal(indices, [[3, 0]])  # c, then b; a is cut


def test_ties_at_the_depth_cut_do_not_depend_on_corpus_order():
    """1,005 documents tied for every query, one judged relevant: the metrics at depth 1,000 are those of
    pytrec_eval on the full ranking, whatever the order of the corpus file."""
    import pytrec_eval

    from gtr_keras.beir.evaluation import evaluate_run, results_from_scores

    ids = [f"d{i:04d}" for i in range(1005)]
    qrels = {"q": {"d1004": 1}}
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate({"q": {i: 1.0 for i in ids}})
    for order in (ids, ids[::-1], list(np.random.default_rng(0).permutation(ids))):
        index = SearchIndex(order, np.tile([[1.0, 0.0]], (1005, 1)).astype("float32"), kind="exact")
        indices, scores = index.search(np.array([[1.0, 0.0]], "float32"), k=1000)
        metrics = evaluate_run(qrels, results_from_scores(["q"], order, indices, scores))
        assert metrics["ndcg@10"] == full["q"]["ndcg_cut_10"] == 1.0


def test_exact_search_reads_the_vectors_in_row_blocks(monkeypatch):
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact")
    expected = index.search(QUERIES, k=10)
    monkeypatch.setattr("gtr_keras.storage.exact_search._ROW_BLOCK", 97)
    blocks = []

    class Recorded:
        shape = CORPUS.shape

        def __getitem__(self, rows):
            blocks.append(rows.stop - rows.start)
            return CORPUS[rows]

    index.vectors = FloatVectors(Recorded())
    got = index.search(QUERIES, k=10)
    assert max(blocks) < len(CORPUS) // 10
    _assert_same_results(expected, got)


def test_row_blocks_keep_trec_ties_across_block_edges(monkeypatch):
    vectors = np.tile(np.eye(4, dtype=np.float32)[:1], (40, 1))
    ids = [f"d{i:02d}" for i in range(40)]
    monkeypatch.setattr("gtr_keras.storage.exact_search._ROW_BLOCK", 7)
    got, _ = SearchIndex(ids, vectors, kind="exact").search_ids(vectors[:1], k=5)
    assert got == [["d39", "d38", "d37", "d36", "d35"]]
