import numpy as np
import pytest
import pytrec_eval

from gtr_keras.beir.evaluation import (
    METRICS,
    evaluate_run,
    format_table,
    median_length_analysis,
    per_query_metrics,
    read_trec_run,
    results_from_scores,
    write_trec_run,
)
from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError, UserError


def random_collection(graded, num_queries=30, num_docs=200, seed=0):
    """Random qrels and a run in which scores are rounded to create ties."""
    rng = np.random.default_rng(seed)
    doc_ids = [f"d{i}" for i in range(num_docs)]
    qrels, run = {}, {}
    for q in range(num_queries):
        query_id = f"q{q}"
        judged = rng.choice(num_docs, size=12, replace=False)
        grades = rng.integers(0, 4 if graded else 2, size=len(judged))
        grades[0] = max(grades[0], 1)
        qrels[query_id] = {doc_ids[d]: int(g) for d, g in zip(judged, grades)}
        retrieved = rng.choice(num_docs, size=150, replace=False)
        scores = np.round(rng.random(len(retrieved)), 2)
        run[query_id] = {doc_ids[d]: float(s) for d, s in zip(retrieved, scores)}
    return qrels, run


def pytrec_eval_on_file(qrels, path):
    """Metrics computed with pytrec_eval directly from a TREC run file."""
    run = read_trec_run(path)
    top10 = {}
    with open(path) as f:
        for line in f:
            query_id, _, doc_id, rank, score, _ = line.split()
            if int(rank) <= 10:
                top10.setdefault(query_id, {})[doc_id] = float(score)
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100,1000", "map"}).evaluate(run)
    mrr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    per_query = {
        query_id: {
            "ndcg@10": full[query_id]["ndcg_cut_10"],
            "mrr@10": mrr[query_id]["recip_rank"],
            "recall@100": full[query_id]["recall_100"],
            "recall@1000": full[query_id]["recall_1000"],
            "map": full[query_id]["map"],
        }
        for query_id in full
    }
    means = {m: np.mean([v[m] for v in per_query.values()]) for m in METRICS}
    return means, per_query


@pytest.mark.parametrize("graded", [True, False], ids=["graded", "binary"])
def test_metrics_match_pytrec_eval_on_written_run_file(tmp_path, graded):
    qrels, run = random_collection(graded)
    path = tmp_path / "run.trec"
    write_trec_run(path, run, tag="test")

    expected_means, expected_per_query = pytrec_eval_on_file(qrels, path)
    metrics = evaluate_run(qrels, run)
    per_query = per_query_metrics(qrels, run)

    assert tuple(metrics) == METRICS
    assert metrics == pytest.approx(expected_means, abs=1e-6)
    assert per_query.keys() == expected_per_query.keys()
    for query_id, values in expected_per_query.items():
        assert per_query[query_id] == pytest.approx(values, abs=1e-6)
    assert 0 < metrics["mrr@10"] < 1 and 0 < metrics["ndcg@10"] < 1


def test_write_trec_run_ranks_by_score_then_docid_and_round_trips(tmp_path):
    run = {"q2": {"a": 0.5, "b": 0.5, "c": 0.9, "d": 1 / 3}, "q1": {"x": -1.0}}
    path = tmp_path / "run.trec"
    write_trec_run(path, run, tag="dense")
    lines = path.read_text().splitlines()
    assert [line.split()[:4] for line in lines] == [
        ["q2", "Q0", "c", "1"],
        ["q2", "Q0", "b", "2"],
        ["q2", "Q0", "a", "3"],
        ["q2", "Q0", "d", "4"],
        ["q1", "Q0", "x", "1"],
    ]
    assert all(line.endswith(" dense") for line in lines)
    assert read_trec_run(path) == run


def test_write_trec_run_rejects_tag_with_space(tmp_path):
    with pytest.raises(UserError, match="run tag"):
        write_trec_run(tmp_path / "run.trec", {}, tag="my run")


@pytest.mark.parametrize(
    "content, message",
    [
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 t\n", r":2: expected 6 columns"),
        ("q1 Q0 d1 1 high t\n", r":1: field `score` must be a number, got 'high'"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n", r":2: document 'd1' listed twice"),
    ],
)
def test_read_trec_run_errors(tmp_path, content, message):
    path = tmp_path / "run.trec"
    path.write_text(content)
    with pytest.raises(DataError, match=f"run.trec{message}"):
        read_trec_run(path)


def test_queries_without_relevant_documents_are_not_averaged():
    qrels = {"q1": {"a": 1}, "q2": {"b": 0}, "q3": {"c": 2}}
    run = {"q1": {"a": 1.0, "z": 0.5}, "q2": {"b": 1.0}}
    per_query = per_query_metrics(qrels, run)
    assert list(per_query) == ["q1", "q3"]
    assert per_query["q3"] == dict.fromkeys(METRICS, 0.0)
    assert evaluate_run(qrels, run) == pytest.approx(
        {"ndcg@10": 0.5, "mrr@10": 0.5, "recall@100": 0.5, "recall@1000": 0.5, "map": 0.5}
    )


def test_evaluate_run_without_relevant_documents_raises():
    with pytest.raises(UserError, match="^no query in the qrels has a relevant document$"):
        evaluate_run({"q": {"a": 0}}, {"q": {"a": 1.0}})


@pytest.mark.parametrize("relevant_rank, expected", [(10, 0.1), (11, 0.0)])
def test_mrr_is_cut_at_rank_10(relevant_rank, expected):
    run = {"q": {f"d{r:02d}": 100.0 - r for r in range(1, 21)}}
    qrels = {"q": {f"d{relevant_rank:02d}": 1}}
    metrics = evaluate_run(qrels, run)
    assert metrics["mrr@10"] == pytest.approx(expected)
    assert metrics["map"] == pytest.approx(1 / relevant_rank)


def test_results_from_scores_drops_identical_ids_and_padding():
    doc_ids = ["q1", "d1", "q2", "d2"]
    indices = [[0, 1, -1], [2, 0, 3]]
    scores = [[0.9, 0.8, 0.0], [0.7, 0.6, 0.5]]
    assert results_from_scores(["q1", "q2"], doc_ids, indices, scores) == {
        "q1": {"d1": 0.8},
        "q2": {"q1": 0.6, "d2": 0.5},
    }
    kept = results_from_scores(["q1", "q2"], doc_ids, indices, scores, ignore_identical_ids=False)
    assert kept["q1"] == {"q1": 0.9, "d1": 0.8}
    assert kept["q2"] == pytest.approx({"q2": 0.7, "q1": 0.6, "d2": 0.5})


def test_results_from_scores_checks_shapes():
    with pytest.raises(UserError, match=r"shape \[2, k\]"):
        results_from_scores(["q1", "q2"], ["d"], [[0]], [[1.0]])


def test_format_table():
    table = format_table(
        [
            ("bm25", {"ndcg@10": 0.66512, "map": 0.6}),
            ("gtr-base", {"ndcg@10": 0.6, "recall@100": 0.9}),
        ]
    )
    assert table.splitlines() == [
        "run       ndcg@10     map  recall@100",
        "bm25       0.6651  0.6000           -",
        "gtr-base   0.6000       -      0.9000",
    ]


def test_median_length_analysis():
    corpus = Corpus(
        ids=["d1", "d2", "d3", "d4", "d5"],
        titles=["", "", "", "", "A title"],
        texts=["one", "two words", "a b c", "a b c d", "x " * 8],
    )
    run = {
        "q1": {"d5": 0.9, "d1": 0.8, "d2": 0.1},
        "q2": {"d3": 0.5, "d4": 0.4},
        "q3": {"d1": 1.0},
    }
    qrels = {
        "q1": {"d2": 1, "d3": 0},
        "q2": {"d4": 2, "d5": 1},
        "q3": {"d1": 0},
        "q4": {"d1": 1},
    }
    # top-2 pool: d5 (10 words), d1 (1), d3 (3), d4 (4); relevant: d2, d4, d5.
    assert median_length_analysis(run, qrels, corpus, k=2) == {
        "median_words_top2": 3.5,
        "median_words_relevant": 4.0,
        "num_queries": 2,
    }
    # top-10 pool: 10, 1, 2, 3, 4.
    assert median_length_analysis(run, qrels, corpus)["median_words_top10"] == 3.0
    with pytest.raises(UserError, match="^no query has both relevant documents and retrieved results$"):
        median_length_analysis({"q4": {}}, qrels, corpus)
