"""`/v1/rerank` and `/v1/search`'s `rerank`: the reranker's batches of pairs (`server/rerank_scoring.py`), in a
server in this process on 127.0.0.1 and a free port, with the tiny BERT cross-encoder of `reranker_inputs`."""

import json
import os
import threading

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from reranker_inputs import PAIRS
from servers import MODEL, RERANKER, Served, indexed, running

from gtr_keras.retrieval.index import Index
from gtr_keras.server.gateway.keys import ApiKeys
from gtr_keras.server.gateway.middleware import Settings
from gtr_keras.server.rerank_scoring import PAIRS as KEY
from gtr_keras.server.rerank_scoring import ranked, scoring

QUERY = "boundary layer of a wing"
DOCUMENTS = [document for _, document in PAIRS]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_encoder, tiny_model_dir):
    return indexed(tmp_path_factory, tiny_encoder, tiny_model_dir, "reranked")


@pytest.fixture(scope="module")
def url(tiny_encoder, tiny_model_dir, index_dir, bert_scorer):
    limits = {"max_inputs": 30, "max_queries": 4, "max_k": 30}
    with running(tiny_encoder, index_dir, tiny_model_dir, limits, reranker=bert_scorer) as (url, _, _):
        yield url


def _rerank(url, **body):
    return httpx.post(f"{url}/v1/rerank", json={"model": RERANKER, "query": QUERY, **body}, timeout=60)


def test_rerank_answers_the_results_sorted_by_predict_s_scores(url, bert_scorer):
    expected = bert_scorer.predict([(QUERY, document) for document in DOCUMENTS])
    answer = _rerank(url, documents=DOCUMENTS, top_n=5)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["model"] == RERANKER and set(body) == {"model", "results", "usage"}
    results = body["results"]
    assert [set(result) for result in results] == [{"index", "relevance_score"}] * 5
    assert [result["index"] for result in results] == list(np.argsort(-expected, kind="stable")[:5])
    np.testing.assert_allclose([r["relevance_score"] for r in results], np.sort(expected)[::-1][:5], atol=1e-5, rtol=0)
    tokens = sum(len(item) for item in bert_scorer.prepare([(QUERY, document) for document in DOCUMENTS]))
    assert body["usage"] == {"total_tokens": tokens}
    everything = _rerank(url, documents=[{"text": text} for text in DOCUMENTS[:3]], return_documents=True).json()
    assert [r["document"]["text"] for r in everything["results"]] == [
        DOCUMENTS[r["index"]] for r in everything["results"]
    ]
    assert len(everything["results"]) == 3  # top_n: all of them by default, and at most all
    assert len(_rerank(url, documents=DOCUMENTS[:2], top_n=10**400).json()["results"]) == 2


def test_concurrent_reranks_share_batches_and_each_gets_predict_s_scores(tiny_encoder, bert_scorer):
    queries = [pair[0] for pair in PAIRS[:6]]
    answers = [None] * len(queries)
    with running(tiny_encoder, max_wait=0.5, reranker=bert_scorer) as (url, _, _):

        def ask(number):
            body = {"model": RERANKER, "query": queries[number] or "x", "documents": DOCUMENTS[:4]}
            answers[number] = httpx.post(f"{url}/v1/rerank", json=body, timeout=60).json()

        threads = [threading.Thread(target=ask, args=(number,)) for number in range(len(queries))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        batches = httpx.get(f"{url}/health").json()
    assert batches["reranker"] == RERANKER
    for query, answer in zip(queries, answers):
        expected = bert_scorer.predict([(query or "x", document) for document in DOCUMENTS[:4]])
        got = sorted(answer["results"], key=lambda result: result["index"])
        np.testing.assert_allclose([r["relevance_score"] for r in got], expected, atol=1e-5, rtol=0)


def test_a_token_budget_gives_the_same_scores(tiny_encoder, bert_scorer):
    expected = bert_scorer.predict([(QUERY, document) for document in DOCUMENTS])
    with running(tiny_encoder, max_batch_tokens=512, reranker=bert_scorer) as (url, _, _):
        results = _rerank(url, documents=DOCUMENTS).json()["results"]
    got = sorted(results, key=lambda result: result["index"])
    np.testing.assert_allclose([r["relevance_score"] for r in got], expected, atol=1e-5, rtol=0)


TOO_MANY = [f"document {number}" for number in range(31)]
BAD_RERANK_BODIES = [
    ({"query": QUERY, "documents": []}, 422, "documents", "empty_input"),
    ({"query": QUERY, "documents": TOO_MANY}, 422, "documents", "too_many_inputs"),
    ({"query": QUERY, "documents": ["a", "\ud800"]}, 422, "documents[1]", "invalid_text"),
    ({"query": "\udfff", "documents": ["a"]}, 422, "query", "invalid_text"),
    ({"query": " ", "documents": ["a"]}, 422, "query", "empty_input"),
    ({"query": ["a"], "documents": ["a"]}, 422, "query", "invalid_type"),
    ({"documents": ["a"]}, 422, "query", "missing_field"),
    ({"query": QUERY}, 422, "documents", "missing_field"),
    ({"query": QUERY, "documents": "a", "model": "gpt-4"}, 404, "model", "model_not_found"),
    ({"query": QUERY, "documents": ["a"], "model": MODEL}, 404, "model", "model_not_found"),
    ({"query": QUERY, "documents": ["a"], "model": None}, 422, "model", "invalid_type"),
    ({"query": QUERY, "documents": [3]}, 422, "documents[0]", "invalid_type"),
    ({"query": QUERY, "documents": [{"text": "a", "title": "b"}]}, 422, "documents[0]", "invalid_type"),
    ({"query": QUERY, "documents": ["a"], "top_n": 0}, 422, "top_n", "invalid_value"),
    ({"query": QUERY, "documents": ["a"], "top_n": "3"}, 422, "top_n", "invalid_value"),
    ({"query": QUERY, "documents": ["a"], "return_documents": "yes"}, 422, "return_documents", "invalid_value"),
    ({"query": QUERY, "documents": ["a"], "rank_fields": ["text"]}, 422, "rank_fields", "unknown_field"),
]


@pytest.mark.parametrize("body, status, param, code", BAD_RERANK_BODIES)
def test_bad_rerank_requests_get_openai_s_error_shape_alone(url, capfd, caplog, body, status, param, code):
    body = {"model": RERANKER, **body}
    response = httpx.post(f"{url}/v1/rerank", content=json.dumps(body).encode(), timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code) and error["message"].startswith(param)
    assert "Traceback" not in capfd.readouterr().err + caplog.text
    assert _rerank(url, documents=["a wing"]).status_code == 200


def test_without_a_reranker_rerank_is_404_and_a_search_s_rerank_422(tiny_encoder, tiny_model_dir, index_dir):
    with running(tiny_encoder, index_dir, tiny_model_dir) as (url, _, _):
        response = _rerank(url, documents=["a"])
        assert response.status_code == 404 and response.json()["error"]["code"] == "no_reranker"
        search = httpx.post(f"{url}/v1/search", json={"query": "wing", "rerank": True}, timeout=60)
        assert search.status_code == 422 and search.json()["error"]["param"] == "rerank"
        assert [model["id"] for model in httpx.get(f"{url}/v1/models").json()["data"]] == [
            MODEL,
            f"{MODEL}-query",
            f"{MODEL}-document",
        ]


@pytest.mark.parametrize("retriever", ["gtr", "bm25", "hybrid"])
def test_a_search_with_rerank_answers_as_index_search_with_the_reranker(
    url, index_dir, tiny_model_dir, bert_scorer, retriever
):
    body = {"queries": ["shock boundary layer", "jet nozzle"], "k": 3, "retriever": retriever, "rerank": True}
    answer = httpx.post(f"{url}/v1/search", json={**body, "rerank_depth": 12}, timeout=60).json()
    assert (answer["reranker"], answer["rerank_depth"], answer["k"]) == (RERANKER, 12, 3)
    index = Index.open(index_dir, tiny_model_dir)
    expected = index.search(body["queries"], 3, retriever=retriever, rerank=bert_scorer, rerank_depth=12)
    for result, row in zip(answer["results"], expected):
        assert [hit["id"] for hit in result["hits"]] == [hit["id"] for hit in row]
        np.testing.assert_allclose([h["score"] for h in result["hits"]], [h["score"] for h in row], atol=1e-5, rtol=0)
    first = index.search(body["queries"], 12, retriever=retriever)
    assert all(
        {h["id"] for h in result["hits"]} <= {h["id"] for h in row} for result, row in zip(answer["results"], first)
    )
    default = httpx.post(f"{url}/v1/search", json=body, timeout=60).json()  # depth: k
    assert default["rerank_depth"] == 3


def test_searches_batched_together_rerank_more_pairs_than_the_reranker_s_queue_holds(
    tiny_encoder, tiny_model_dir, index_dir, bert_scorer
):
    limits = {"max_inputs": 30, "max_k": 30}
    queries = ["shock boundary layer", "jet nozzle", "wing flutter"]
    answers = [None] * len(queries)
    with running(tiny_encoder, index_dir, tiny_model_dir, limits, 0.5, 40, reranker=bert_scorer) as (url, _, _):

        def ask(number):  # 25 pairs each, 75 together in one batch of searches, past a queue of 40
            body = {"query": queries[number], "k": 2, "rerank": True, "rerank_depth": 25}
            answers[number] = httpx.post(f"{url}/v1/search", json=body, timeout=60)

        threads = [threading.Thread(target=ask, args=(number,)) for number in range(len(queries))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert [answer.status_code for answer in answers] == [200] * 3, answers[0].text
    expected = Index.open(index_dir, tiny_model_dir).search(queries, 2, rerank=bert_scorer, rerank_depth=25)
    assert [[hit["id"] for hit in answer.json()["hits"]] for answer in answers] == [
        [hit["id"] for hit in row] for row in expected
    ]


@pytest.mark.parametrize(
    "body, param, code",
    [
        ({"query": "wing", "rerank_depth": 5}, "rerank_depth", "invalid_value"),
        ({"query": "wing", "rerank": "yes"}, "rerank", "invalid_value"),
        ({"query": "wing", "rerank": True, "rerank_depth": 0}, "rerank_depth", "invalid_value"),
        ({"query": "wing", "rerank": True, "rerank_depth": 31}, "rerank_depth", "invalid_value"),
        ({"query": "wing", "k": 5, "rerank": True, "rerank_depth": 4}, "rerank_depth", "invalid_value"),
        ({"queries": ["a", "b"], "rerank": True, "rerank_depth": 16}, "rerank_depth", "too_many_inputs"),
    ],
)
def test_bad_rerank_options_of_a_search_are_422_naming_the_field(url, body, param, code):
    response = httpx.post(f"{url}/v1/search", json=body, timeout=60)
    assert response.status_code == 422, response.text
    assert (response.json()["error"]["param"], response.json()["error"]["code"]) == (param, code)


def test_the_reranker_is_listed_and_its_route_has_keys_and_metrics(tiny_encoder, bert_scorer):
    gateway = Settings(keys=ApiKeys(["sk-rerank"]))
    bearer = {"authorization": "Bearer sk-rerank"}
    with running(tiny_encoder, gateway=gateway, reranker=bert_scorer) as (url, _, _):
        body = {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS[:3]}
        refused = httpx.post(f"{url}/v1/rerank", json=body, timeout=60)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "missing_api_key"
        for _ in range(3):
            assert httpx.post(f"{url}/v1/rerank", json=body, headers=bearer, timeout=60).status_code == 200
        models = httpx.get(f"{url}/v1/models", headers=bearer).json()["data"]
        assert [model["id"] for model in models][-1] == RERANKER
        assert httpx.get(f"{url}/v1/models/{RERANKER}", headers=bearer).json()["id"] == RERANKER
        page = httpx.get(f"{url}/metrics", headers=bearer).text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }
    assert samples[("gtr_keras_requests_total", (("endpoint", "/v1/rerank"), ("status", "200")))] == 3
    assert samples[("gtr_keras_requests_total", (("endpoint", "/v1/rerank"), ("status", "401")))] == 1
    assert samples[("gtr_keras_reranked_pairs_total", ())] == 9
    assert samples[("gtr_keras_batches_total", (("batcher", "reranker"),))] == 3


def test_scoring_gives_predict_s_scores_and_token_counts(bert_scorer):
    scores, counts = scoring(bert_scorer, 4)(KEY, PAIRS, threading.Event())
    np.testing.assert_allclose(scores, bert_scorer.predict(PAIRS, batch_size=4), atol=1e-6, rtol=0)
    assert counts == [len(item) for item in bert_scorer.prepare(PAIRS)] and max(counts) <= bert_scorer.sequence_length


def test_ranked_sorts_by_score_keeping_the_request_s_order_on_ties():
    scores = np.array([0.5, 0.9, 0.5, 0.1], np.float32)
    assert [result["index"] for result in ranked(scores, list("abcd"), None, False)] == [1, 0, 2, 3]
    assert ranked(scores, list("abcd"), 1, True) == [
        {"index": 1, "relevance_score": pytest.approx(0.9), "document": {"text": "b"}}
    ]


def test_the_command_refuses_a_reranker_that_is_not_one_or_whose_name_is_taken(tiny_model_dir, capsys):
    from gtr_keras.cli.main import main

    assert (
        main(
            [
                "serve",
                "--model",
                tiny_model_dir,
                "--reranker",
                tiny_model_dir,
                "--port",
                "0",
                "--served-model-name",
                "m",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("gtr-keras serve: error: --reranker: ") and "is not a reranker" in err and "\n" not in err
    name = os.path.basename(tiny_model_dir.rstrip("/"))
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", tiny_model_dir, "--reranker", f"elsewhere/{name}-query"])
    assert exit_.value.code == 2
    assert f"argument --reranker: its name is one the model is served under ({name})" in capsys.readouterr().err


@pytest.mark.large
def test_the_command_serves_rerank_under_the_reranker_directory_s_name_with_keys_and_limits(
    tiny_model_dir, reranker_dirs, bert_scorer
):
    served = Served(
        "--model", tiny_model_dir, "--reranker", reranker_dirs["bert"], "--api-key", "sk-rerank", "--max-inputs", "5",
        "--served-model-name", "gtr",
    )  # fmt: skip
    bearer = {"authorization": "Bearer sk-rerank"}
    body = {"model": "bert", "query": QUERY, "documents": DOCUMENTS[:5], "top_n": 3}
    try:
        assert served.lines[0].strip().endswith("(model gtr, reranker bert)")
        assert httpx.post(f"{served.url}/v1/rerank", json=body, timeout=60).status_code == 401
        answer = httpx.post(f"{served.url}/v1/rerank", json=body, headers=bearer, timeout=60)
        too_many = httpx.post(f"{served.url}/v1/rerank", json={**body, "documents": DOCUMENTS[:6]}, headers=bearer)
        models = httpx.get(f"{served.url}/v1/models", headers=bearer, timeout=30).json()["data"]
    finally:
        status, _, err = served.stop()
    assert status == 0 and "Traceback" not in err and "sk-rerank" not in err
    expected = bert_scorer.predict([(QUERY, document) for document in DOCUMENTS[:5]])
    results = answer.json()["results"]
    assert [result["index"] for result in results] == list(np.argsort(-expected, kind="stable")[:3])
    np.testing.assert_allclose([r["relevance_score"] for r in results], np.sort(expected)[::-1][:3], atol=1e-5, rtol=0)
    assert too_many.status_code == 422 and too_many.json()["error"]["code"] == "too_many_inputs"
    assert [model["id"] for model in models] == ["gtr", "gtr-query", "gtr-document", "bert"]
