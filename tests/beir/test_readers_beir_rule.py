"""Judgements of documents absent from the corpus are misses, as in BEIR."""

import math

import pytest
import pytrec_eval
from beir_files import write_beir

from gtr_keras.beir.dataset import load_dataset
from gtr_keras.beir.evaluation import evaluate_run
from gtr_keras.beir.qrels_checks import check_qrels
from gtr_keras.beir.readers import Corpus, load_corpus, load_qrels, load_queries

QRELS_ROWS = [("q1", "d1", 1), ("q1", "d9", 1), ("q2", "d2", 1), ("q7", "d3", 1)]
RUN = {
    "q1": {"d1": 0.9, "d2": 0.5, "d3": 0.1},
    "q2": {"d1": 0.9, "d2": 0.5, "d3": 0.1},
}


@pytest.fixture
def collection(tmp_path):
    corpus = Corpus(["d1", "d2", "d3"], ["", "", ""], ["cats purr", "dogs bark", "birds sing"])
    return write_beir(tmp_path / "beir", corpus, {"q1": "cats", "q2": "dogs"}, QRELS_ROWS)


def test_load_dataset_keeps_judgements_of_absent_documents(collection):
    corpus, queries, qrels, report = load_dataset(collection)
    assert qrels == {"q1": {"d1": 1, "d9": 1}, "q2": {"d2": 1}}
    assert list(queries) == ["q1", "q2"]
    assert not report.ok
    assert str(report) == (
        "qrels: 1 query id(s) not in the queries (e.g. 'q7'); "
        "1 document id(s) not in the corpus (e.g. 'd9'); dropped 1 of 4 judgements; "
        "kept 1 judgement(s) of absent documents as relevant, counted as misses (BEIR's rule)"
    )


def test_ndcg_counts_absent_documents_as_misses(collection):
    _, _, qrels, _ = load_dataset(collection)
    q1 = 1 / (1 + 1 / math.log2(3))
    q2 = 1 / math.log2(3)
    ndcg = evaluate_run(qrels, RUN)["ndcg@10"]
    assert ndcg == pytest.approx((q1 + q2) / 2)

    full_qrels = {"q1": {"d1": 1, "d9": 1}, "q2": {"d2": 1}}
    direct = pytrec_eval.RelevanceEvaluator(full_qrels, {"ndcg_cut.10"}).evaluate(RUN)
    assert ndcg == pytest.approx(sum(v["ndcg_cut_10"] for v in direct.values()) / len(direct))

    dropped, _ = check_qrels(load_qrels(collection), load_corpus(collection).ids, load_queries(collection))
    assert evaluate_run(dropped, RUN)["ndcg@10"] == pytest.approx((1 + q2) / 2)
    assert evaluate_run(dropped, RUN)["ndcg@10"] > ndcg
