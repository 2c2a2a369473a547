import base64
import http.client
import json
import logging
import socket
import threading

import httpx
import numpy as np
import openai
import pytest
from search_inputs import assert_same_results
from servers import MODEL, corpus, running

from gtr_keras.beir.readers import Corpus
from gtr_keras.cli.main import main
from gtr_keras.lexical.fusion import model_fusion
from gtr_keras.retrieval.hybrid_retriever import HybridRetriever
from gtr_keras.retrieval.index import Index
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.retrieval.retriever import Retriever, search_results

TEXTS = ["lift on a swept wing", "shock boundary layer interaction in a supersonic nozzle", "heat transfer"]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_encoder, tiny_model_dir):
    directory = tmp_path_factory.mktemp("served") / "index"
    build_index(tiny_encoder, corpus(), directory, model_dir=tiny_model_dir)
    return directory


@pytest.fixture(scope="module")
def server(tiny_encoder, tiny_model_dir, index_dir):
    limits = {"max_inputs": 8, "max_body_bytes": 4096, "max_queries": 4, "max_k": 20}
    with running(tiny_encoder, index_dir, tiny_model_dir, limits) as served:
        yield served


@pytest.fixture(scope="module")
def url(server):
    return server[0]


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)


def test_openai_client_embeddings_equal_the_encode_command(client, tiny_model_dir, tiny_encoder, tmp_path):
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert (
        main(
            [
                "encode",
                "--model",
                tiny_model_dir,
                "--input",
                str(tmp_path / "texts.txt"),
                "--output",
                str(tmp_path / "e.npy"),
            ]
        )
        == 0
    )
    encoded = np.load(tmp_path / "e.npy")
    answer = client.embeddings.create(input=TEXTS, model=MODEL)  # the client asks for base64 and decodes it
    as_floats = client.embeddings.create(input=TEXTS, model=MODEL, encoding_format="float")
    for response in (answer, as_floats):
        assert [d.index for d in response.data] == [0, 1, 2]
        np.testing.assert_allclose(np.array([d.embedding for d in response.data]), encoded, atol=1e-6, rtol=0)
        tokens = sum(len(ids) for ids in tiny_encoder.tokenize(TEXTS, "document"))
        assert (response.usage.prompt_tokens, response.usage.total_tokens) == (tokens, tokens)
        assert response.model == MODEL
    blank = client.embeddings.create(input=["", TEXTS[0]], model=MODEL, encoding_format="float")
    np.testing.assert_allclose(blank.data[0].embedding, tiny_encoder.encode_documents([""])[0], atol=1e-6, rtol=0)
    one = client.embeddings.create(input=TEXTS[0], model=MODEL)
    np.testing.assert_allclose(one.data[0].embedding, encoded[0], atol=1e-6, rtol=0)


def test_queries_are_asked_by_input_type_or_the_query_model_name(url, tiny_encoder):
    long_text = " ".join(["boundary layer transition on a flat plate"] * 40)  # past the query budget
    query = tiny_encoder.encode_queries([long_text])[0]
    document = tiny_encoder.encode_documents([long_text])[0]
    assert not np.allclose(query, document, atol=1e-3)
    for body, expected in (
        ({"model": MODEL, "input_type": "query"}, query),
        ({"model": f"{MODEL}-query"}, query),
        ({"model": MODEL}, document),
        ({"model": f"{MODEL}-document", "input_type": "document"}, document),
    ):
        answer = httpx.post(f"{url}/v1/embeddings", json={"input": [long_text], **body}).json()
        np.testing.assert_allclose(answer["data"][0]["embedding"], expected, atol=1e-6, rtol=0)
        assert answer["usage"]["prompt_tokens"] == len(tiny_encoder.tokenize([long_text], answer_kind(body))[0])


def answer_kind(body):
    return "query" if body.get("input_type") == "query" or body["model"].endswith("-query") else "document"


def test_base64_is_little_endian_float32(url, tiny_encoder):
    answer = httpx.post(f"{url}/v1/embeddings", json={"input": TEXTS[:1], "model": MODEL, "encoding_format": "base64"})
    vector = np.frombuffer(base64.b64decode(answer.json()["data"][0]["embedding"]), "<f4")
    np.testing.assert_allclose(vector, tiny_encoder.encode_documents(TEXTS[:1])[0], atol=1e-6, rtol=0)


def test_dimensions_equal_to_the_model_s_are_taken(url, tiny_encoder):
    body = {"input": "x y", "model": MODEL, "dimensions": tiny_encoder.embedding_dim, "user": "u"}
    assert httpx.post(f"{url}/v1/embeddings", json=body).status_code == 200


@pytest.mark.parametrize("dimensions", [1, 8, 33])
def test_dimensions_give_the_first_n_coordinates_renormalised(url, client, tiny_encoder, dimensions):
    full = tiny_encoder.encode_documents(TEXTS)
    expected = full[:, :dimensions] / np.linalg.norm(full[:, :dimensions], axis=1, keepdims=True)
    answer = httpx.post(f"{url}/v1/embeddings", json={"input": TEXTS, "model": MODEL, "dimensions": dimensions})
    vectors = np.array([d["embedding"] for d in answer.json()["data"]])
    assert vectors.shape == (len(TEXTS), dimensions)
    np.testing.assert_allclose(vectors, expected, atol=1e-6, rtol=0)
    decoded = client.embeddings.create(input=TEXTS, model=MODEL, dimensions=dimensions)  # base64
    np.testing.assert_allclose(np.array([d.embedding for d in decoded.data]), expected, atol=1e-6, rtol=0)


BAD_EMBEDDING_BODIES = [
    (b"{", 400, None, "invalid_json"),
    (b"\xff\xfe{}", 400, None, "invalid_utf8"),
    (b'"input"', 400, None, "invalid_json"),
    (b'{"model": "tiny"}', 422, "input", "missing_field"),
    (b'{"input": "x"}', 422, "model", "missing_field"),
    (b'{"input": [], "model": "tiny"}', 422, "input", "empty_input"),
    (b'{"input": 3, "model": "tiny"}', 422, "input", "invalid_type"),
    (b'{"input": ["a", 3], "model": "tiny"}', 422, "input[1]", "invalid_type"),
    (b'{"input": [[1, 2, 3]], "model": "tiny"}', 422, "input[0]", "invalid_type"),
    (b'{"input": ["a", null], "model": "tiny"}', 422, "input[1]", "invalid_type"),
    (json.dumps({"input": ["a"] * 9, "model": "tiny"}).encode(), 422, "input", "too_many_inputs"),
    (b'{"input": "a", "model": 7}', 422, "model", "invalid_type"),
    (b'{"input": "a", "model": "gpt-4"}', 404, "model", "model_not_found"),
    (b'{"input": "a", "model": "tiny", "temperature": 0}', 422, "temperature", "unknown_field"),
    (b'{"input": "a", "model": "tiny", "encoding_format": "int8"}', 422, "encoding_format", "invalid_value"),
    (b'{"input": "a", "model": "tiny", "dimensions": 0}', 422, "dimensions", "invalid_value"),
    (b'{"input": "a", "model": "tiny", "dimensions": 65}', 422, "dimensions", "invalid_value"),
    (b'{"input": "a", "model": "tiny", "dimensions": "x"}', 422, "dimensions", "invalid_value"),
    (b'{"input": "a", "model": "tiny", "dimensions": 1.5}', 422, "dimensions", "invalid_value"),
    (b'{"input": "a", "model": "tiny", "dimensions": true}', 422, "dimensions", "invalid_value"),
    (b'{"input": "a", "model": "tiny", "dimensions": "64"}', 422, "dimensions", "invalid_value"),
    (b'{"input": "a", "model": "tiny", "input_type": "passage"}', 422, "input_type", "invalid_value"),
    (b'{"input": "a", "model": "tiny-query", "input_type": "document"}', 422, "input_type", "invalid_value"),
    (b'{"input": "a", "model": "tiny", "user": 1}', 422, "user", "invalid_type"),
    (json.dumps({"input": "a" * 5000, "model": "tiny"}).encode(), 413, None, "request_too_large"),
]


@pytest.mark.parametrize("body, status, param, code", BAD_EMBEDDING_BODIES)
def test_bad_embedding_requests_get_openai_s_error_shape(url, body, status, param, code):
    response = httpx.post(f"{url}/v1/embeddings", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")
    assert "\n" not in error["message"] and "Traceback" not in error["message"]
    if param:
        assert error["message"].startswith(param)


def test_a_body_over_the_limit_without_its_length_is_413(url):
    def chunks():
        for _ in range(10):
            yield b" " * 1000

    response = httpx.post(f"{url}/v1/embeddings", content=chunks())  # chunked: no Content-Length
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_the_openai_client_raises_its_status_errors(client):
    with pytest.raises(openai.UnprocessableEntityError, match="input: an empty array"):
        client.embeddings.create(input=[], model=MODEL)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.embeddings.create(input="x", model="text-embedding-3-small")


def test_unknown_routes_and_methods_get_the_error_shape(url):
    missing = httpx.get(f"{url}/v1/completions")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = httpx.get(f"{url}/v1/embeddings")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


def test_search_answers_as_search_json_does(url, index_dir, tiny_encoder, tiny_model_dir, capsys):
    answer = httpx.post(f"{url}/v1/search", json={"query": "shock boundary layer", "k": 5}).json()
    assert (
        main(
            [
                "search",
                "shock boundary layer",
                "--index",
                str(index_dir),
                "--model",
                tiny_model_dir,
                "-k",
                "5",
                "--json",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert_same_results(answer["results"], printed)  # the server's batch and the command's: scores to rounding
    assert_same_results(answer["hits"], printed[0]["hits"])
    assert answer["query"] == "shock boundary layer"
    assert [set(hit) for hit in answer["hits"]] == [{"id", "score", "title", "text"}] * 5
    assert (answer["retriever"], answer["k"], answer["generation"]) == ("gtr", 5, 0)
    several = httpx.post(f"{url}/v1/search", json={"queries": ["wing lift", "heat transfer"], "k": 3}).json()
    expected = Retriever.load(index_dir, tiny_encoder).search(["wing lift", "heat transfer"], 3)
    assert [r["query"] for r in several["results"]] == ["wing lift", "heat transfer"]
    assert [[h["id"] for h in r["hits"]] for r in several["results"]] == [[h["id"] for h in row] for row in expected]
    assert "hits" not in several


def test_bm25_and_hybrid_searches_with_fusion_options(url, index_dir, tiny_encoder, tiny_model_dir):
    hybrid = HybridRetriever.load(index_dir, tiny_encoder, model_fusion(tiny_model_dir, "rrf", 0.3))
    for body, retriever in (
        ({"retriever": "bm25"}, "bm25"),
        ({"retriever": "hybrid", "fusion": "rrf", "gtr_weight": 0.3}, "hybrid"),
    ):
        answer = httpx.post(f"{url}/v1/search", json={"query": "jet nozzle flutter", "k": 4, **body}).json()
        expected = hybrid.search(["jet nozzle flutter"], 4, retriever)[0]
        assert [h["id"] for h in answer["hits"]] == [h["id"] for h in expected]
        np.testing.assert_allclose([h["score"] for h in answer["hits"]], [h["score"] for h in expected], rtol=1e-5)


@pytest.mark.parametrize(
    "body, param",
    [
        ({}, "query"),
        ({"query": "a", "queries": ["b"]}, "query"),
        ({"query": ["a"]}, "query"),
        ({"query": " "}, "query"),
        ({"queries": ["a", ""]}, "queries[1]"),
        ({"queries": []}, "queries"),
        ({"queries": ["a"] * 5}, "queries"),
        ({"query": "a", "k": 0}, "k"),
        ({"query": "a", "k": 21}, "k"),
        ({"query": "a", "k": True}, "k"),
        ({"query": "a", "k": 2.5}, "k"),
        ({"query": "a", "retriever": "splade"}, "retriever"),
        ({"query": "a", "fusion": "rrf"}, "fusion"),
        ({"query": "a", "retriever": "hybrid", "gtr_weight": 1.5}, "gtr_weight"),
        ({"query": "a", "retriever": "hybrid", "fusion": "max"}, "fusion"),
        ({"query": "a", "top_k": 3}, "top_k"),
        ({"query": "a", "filter": "lang ~ en"}, "filter"),
        ({"query": "a", "filter": ["year >= 2000", 7]}, "filter"),
        ({"query": "a", "filter": {"lang": "en"}}, "filter"),
    ],
)
def test_bad_search_requests_are_422_naming_the_field(url, body, param):
    response = httpx.post(f"{url}/v1/search", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["param"] == param


FILTERS = [None, "lang = en", "lang != en", "year >= 2000", ["tags in (a, b)", "year < 2003"]]


def test_a_filtered_search_of_an_engine_s_collection_is_the_local_exact_index_s(tiny_encoder, tiny_model_dir, tmp_path):
    documents = corpus()
    metadata = [
        {"lang": ["en", "de", "fr"][i % 3], "year": 1995 + i % 10, "tags": [["a"], ["b", "c"], []][i % 3]}
        for i in range(len(documents.ids))
    ]
    for fields in metadata[::4]:
        del fields["lang"]  # no field: `lang != en` does not match it
    documents = Corpus(documents.ids, documents.titles, documents.texts, metadata)
    index = tmp_path / "index"
    build_index(tiny_encoder, documents, index, model_dir=tiny_model_dir, kind="exact")
    Index.open(index).push(f"qdrant:{tmp_path / 'q'}", "c")
    local = Index.open(index, tiny_encoder)
    with running(tiny_encoder, f"qdrant:{tmp_path / 'q'}", tiny_model_dir, collection="c") as (url, _, _):
        for filter in FILTERS:
            for k in (3, 10):
                body = {"queries": TEXTS, "k": k, **({} if filter is None else {"filter": filter})}
                answer = httpx.post(f"{url}/v1/search", json=body).json()
                expected = local.search(TEXTS, k, filter=filter)
                for result, hits in zip(answer["results"], expected):
                    assert [h["id"] for h in result["hits"]] == [h["id"] for h in hits]
                    assert len(hits) <= k and (filter is not None or len(hits) == k)
                    np.testing.assert_allclose(
                        [h["score"] for h in result["hits"]], [h["score"] for h in hits], atol=1e-5
                    )
        response = httpx.post(f"{url}/v1/search", json={"query": "wing", "filter": "colour = red"})
        assert response.status_code == 422 and "colour" in response.json()["error"]["message"]
    local.close()


def test_health_and_models(url, client, tiny_encoder, index_dir):
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["embedding_dim"] == tiny_encoder.embedding_dim
    assert health["index"]["path"] == str(index_dir) and health["index"]["generation"] == 0 and health["index"]["bm25"]
    assert [m.id for m in client.models.list()] == [MODEL, f"{MODEL}-query", f"{MODEL}-document"]
    assert client.models.retrieve(f"{MODEL}-query").owned_by == "gtr-keras"
    assert httpx.get(f"{url}/v1/models/nope").status_code == 404


def test_concurrent_requests_are_encoded_together(tiny_encoder):
    texts = [f"{word} wing panel" for word in ("one", "two", "three", "four", "five", "six", "seven", "eight")]
    with running(tiny_encoder, max_wait=0.5) as (url, batcher, _):
        answers = [None] * len(texts)

        def ask(i):
            answers[i] = httpx.post(f"{url}/v1/embeddings", json={"input": texts[i], "model": MODEL}, timeout=30).json()

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert batcher.batches < len(texts)  # the wait let requests share a batch
        expected = tiny_encoder.encode_documents(texts)
        np.testing.assert_allclose([a["data"][0]["embedding"] for a in answers], expected, atol=1e-6, rtol=0)


def test_a_full_queue_answers_503_at_once(tiny_encoder):
    with running(tiny_encoder, max_wait=5.0, max_queue=2) as (url, batcher, _):
        waiting = threading.Thread(
            target=httpx.post,
            args=(f"{url}/v1/embeddings",),
            kwargs={"json": {"input": ["a", "b"], "model": MODEL}, "timeout": 30},
        )
        waiting.start()
        while not batcher.queued:
            pass
        response = httpx.post(f"{url}/v1/embeddings", json={"input": "c", "model": MODEL}, timeout=2)
        assert response.status_code == 503 and response.json()["error"]["code"] == "busy"
        waiting.join(30)


def test_search_without_an_index_is_404(tiny_encoder):
    with running(tiny_encoder) as (url, _, _):
        response = httpx.post(f"{url}/v1/search", json={"query": "wing"})
        assert response.status_code == 404 and response.json()["error"]["code"] == "no_index"


def test_bm25_search_of_an_index_without_a_bm25_side_is_422(tiny_encoder, tiny_model_dir, tmp_path):
    build_index(tiny_encoder, corpus(8), tmp_path / "index", model_dir=tiny_model_dir, bm25=False)
    with running(tiny_encoder, tmp_path / "index", tiny_model_dir) as (url, _, _):
        response = httpx.post(f"{url}/v1/search", json={"query": "wing", "k": 3, "retriever": "hybrid"})
        assert response.status_code == 422 and "no BM25 side" in response.json()["error"]["message"]
        answer = httpx.post(f"{url}/v1/search", json={"query": "wing", "k": 20})
        assert answer.status_code == 200 and len(answer.json()["hits"]) == 8  # k past the documents: all of them


def test_search_results_is_the_shape_of_search_json():
    hits = [[{"id": "d1", "score": 0.5, "title": "t", "text": "x"}]]
    assert search_results(["q"], hits) == [{"query": "q", "hits": hits[0]}]


def test_an_onnx_export_serves_the_embeddings_of_its_runtime(tiny_onnx_export, tiny_encoder):
    from gtr_keras.loading import load

    onnx = load(tiny_onnx_export)
    with running(onnx) as (url, _, _):
        answer = httpx.post(f"{url}/v1/embeddings", json={"input": TEXTS, "model": MODEL}).json()
    embeddings = np.array([d["embedding"] for d in answer["data"]])
    np.testing.assert_allclose(embeddings, onnx.encode_documents(TEXTS), atol=1e-6, rtol=0)
    np.testing.assert_allclose(embeddings, tiny_encoder.encode_documents(TEXTS), atol=1e-4, rtol=0)
    assert answer["usage"]["prompt_tokens"] == sum(len(ids) for ids in onnx.tokenize(TEXTS, "document"))


@pytest.fixture(scope="module")
def roomy_url(tiny_encoder, tiny_model_dir, index_dir):
    """A server of the default limits (a body of 8 MiB), for the bodies the small server refuses by size."""
    with running(tiny_encoder, index_dir, tiny_model_dir) as (url, _, _):
        yield url


DEEP = b"[" * 50_000 + b"]" * 50_000
DIGITS = b"9" * 5_000
MALFORMED = [
    ("embeddings", DEEP, 400, None, "invalid_json"),
    ("embeddings", b'{"input": ' + DEEP + b', "model": "tiny"}', 400, None, "invalid_json"),
    ("embeddings", b'{"input": "a", "model": "tiny", "dimensions": ' + DIGITS + b"}", 400, None, "invalid_json"),
    ("search", b'{"query": "a", "k": ' + DIGITS + b"}", 400, None, "invalid_json"),
    ("embeddings", b'{"input": "a", "model": "tiny", "dimensions": ' + b"9" * 4000 + b"}", 422, "dimensions", None),
    ("search", b'{"query": "a", "k": -' + b"9" * 4000 + b"}", 422, "k", "invalid_value"),
    ("embeddings", b'{"input": "a", "model": "tiny", "dimensions": NaN}', 400, None, "invalid_json"),
    ("search", b'{"query": "a", "retriever": "hybrid", "gtr_weight": Infinity}', 400, None, "invalid_json"),
    ("search", b'{"query": "a", "retriever": "hybrid", "gtr_weight": -Infinity}', 400, None, "invalid_json"),
    ("search", b'{"query": "a", "retriever": "hybrid", "gtr_weight": 1e999}', 422, "gtr_weight", "invalid_value"),
    ("search", b'{"query": "a", "k": 1e999}', 422, "k", "invalid_value"),
    ("search", b'{"query": "a", "retriever": "hybrid", "gtr_weight": 1' + b"0" * 400 + b"}", 422, "gtr_weight", None),
    ("search", b'{"query": "a", "retriever": "hybrid", "gtr_weight": -' + b"9" * 400 + b"}", 422, "gtr_weight", None),
    ("search", b'{"query": "a", "rerank": true, "rerank_depth": ' + b"9" * 400 + b"}", 422, "rerank_depth", None),
    ("embeddings", b'{"input": "\\ud800", "model": "tiny"}', 422, "input[0]", "invalid_text"),
    ("embeddings", b'{"input": ["ok", "a\\udfffb"], "model": "tiny"}', 422, "input[1]", "invalid_text"),
    ("embeddings", b'{"input": "a", "model": "tiny", "user": "\\udc80"}', 422, "user", "invalid_text"),
    ("embeddings", b'{"input": "a", "model": "\\ud800"}', 404, "model", "model_not_found"),
    ("embeddings", b'{"input": "a", "model": "tiny", "\\ud800": 1}', 422, "\\ud800", "unknown_field"),
    ("search", b'{"query": "\\ud800 wing"}', 422, "query", "invalid_text"),
    ("search", b'{"queries": ["wing", "\\udc80"]}', 422, "queries[1]", "invalid_text"),
    ("embeddings", b'{"input": {}, "model": "tiny"}', 422, "input", "invalid_type"),
    ("embeddings", b'{"input": "a", "model": "tiny", "encoding_format": []}', 422, "encoding_format", None),
    ("embeddings", b'{"input": "a", "model": "tiny", "input_type": {}}', 422, "input_type", None),
    ("embeddings", b'{"input": "a", "model": ["tiny"]}', 422, "model", "invalid_type"),
    ("search", b'{"query": "a", "k": "10"}', 422, "k", "invalid_value"),
    ("search", b'{"query": "a", "k": null}', 422, "k", "invalid_value"),
    ("search", b'{"query": "a", "retriever": 5}', 422, "retriever", "invalid_value"),
    ("search", b'{"query": "a", "retriever": "hybrid", "fusion": ["rrf"]}', 422, "fusion", "invalid_value"),
    ("search", b'{"query": "a", "retriever": "hybrid", "gtr_weight": "0.5"}', 422, "gtr_weight", "invalid_value"),
    ("search", b'{"query": {"text": "a"}}', 422, "query", "invalid_type"),
    ("search", b"", 400, None, "invalid_json"),
    ("search", b"null", 400, None, "invalid_json"),
    ("search", b"[]", 400, None, "invalid_json"),
    ("search", b'{"query": "a"', 400, None, "invalid_json"),
]


@pytest.mark.parametrize("endpoint, body, status, param, code", MALFORMED)
def test_every_malformed_body_is_a_4xx_in_openai_s_shape_without_a_traceback(
    roomy_url, capfd, caplog, endpoint, body, status, param, code
):
    response = httpx.post(f"{roomy_url}/v1/{endpoint}", content=body, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and (code is None or error["code"] == code)
    assert "\n" not in error["message"] and len(error["message"]) < 300
    assert "Traceback" not in capfd.readouterr().err + caplog.text


def test_a_bad_text_fails_its_own_request_alone_among_concurrent_good_ones(tiny_encoder, tiny_model_dir, index_dir):
    bad_bodies = [
        ("embeddings", {"input": ["wing", "\ud800"], "model": MODEL}),
        ("search", {"query": "lift \udfff", "k": 3}),
        ("search", {"queries": ["heat", "\udc80"], "k": 3, "retriever": "hybrid"}),
    ]
    good_bodies = [
        ("embeddings", {"input": ["lift on a wing", "heat transfer"], "model": MODEL}),
        ("search", {"query": "shock boundary layer", "k": 3}),
        ("search", {"query": "jet nozzle", "k": 3, "retriever": "hybrid"}),
    ]
    good, bad = [], []
    with running(tiny_encoder, index_dir, tiny_model_dir, max_wait=0.02) as (url, batcher, _):

        def ask(bodies, answers):
            with httpx.Client(timeout=30) as client:
                for number in range(12):
                    endpoint, body = bodies[number % len(bodies)]
                    # json.dumps writes a lone surrogate as its escape: valid JSON, as a client sends it
                    answers.append(client.post(f"{url}/v1/{endpoint}", content=json.dumps(body).encode()))

        threads = [threading.Thread(target=ask, args=(good_bodies, good)) for _ in range(6)]
        threads += [threading.Thread(target=ask, args=(bad_bodies, bad)) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        shared = batcher.batches
    assert len(good) == 72 and [r.status_code for r in good if r.status_code != 200] == []
    assert len(bad) == 36 and {(r.status_code, r.json()["error"]["code"]) for r in bad} == {(422, "invalid_text")}
    assert shared < 72  # the good requests shared batches


def test_a_text_the_model_fails_on_fails_only_its_own_request_of_a_shared_batch(
    tiny_encoder, tiny_model_dir, index_dir, monkeypatch
):
    encode = tiny_encoder.encode

    def poisoned(texts, kind="document", batch_size=32, progress=None, dimensions=None):
        if any("poison" in text for text in texts):
            raise RuntimeError("the model cannot take this text")
        return encode(texts, kind, batch_size, progress, dimensions)

    monkeypatch.setattr(tiny_encoder, "encode", poisoned)
    bodies = [("embeddings", {"input": [f"wing {i}", "lift"], "model": MODEL}) for i in range(4)]
    bodies += [("search", {"query": f"heat {i}", "k": 3}) for i in range(3)]
    bodies += [("embeddings", {"input": ["a poison text"], "model": MODEL}), ("search", {"query": "poison", "k": 3})]
    answers = [None] * len(bodies)
    with running(tiny_encoder, index_dir, tiny_model_dir, max_wait=0.5) as (url, batcher, _):

        def ask(number):
            endpoint, body = bodies[number]
            answers[number] = httpx.post(f"{url}/v1/{endpoint}", json=body, timeout=30)

        threads = [threading.Thread(target=ask, args=(number,)) for number in range(len(bodies))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        shared = batcher.batches
    assert [a.status_code for a in answers] == [200] * 7 + [500, 500]
    assert {a.json()["error"]["type"] for a in answers[7:]} == {"server_error"}
    assert "the model cannot take this text" in answers[7].json()["error"]["message"]
    expected = tiny_encoder.encode_documents(["wing 0", "lift"])
    np.testing.assert_allclose([d["embedding"] for d in answers[0].json()["data"]], expected, atol=1e-6, rtol=0)
    assert [len(a.json()["hits"]) for a in answers[4:7]] == [3, 3, 3]
    assert shared < 9  # they shared batches, the poisoned ones among them


def test_a_hybrid_search_s_fusion_options_are_read_once_not_in_every_batch(
    tiny_encoder, tiny_model_dir, index_dir, monkeypatch
):
    from gtr_keras.server import app

    reads = []

    def counted(*args):
        reads.append(args[1:])
        return model_fusion(*args)

    monkeypatch.setattr(app, "model_fusion", counted)
    with running(tiny_encoder, index_dir, tiny_model_dir) as (url, _, _):
        for weight in (0.3, 0.3, 0.3, 0.7):
            body = {"query": "jet nozzle", "k": 3, "retriever": "hybrid", "fusion": "rrf", "gtr_weight": weight}
            assert httpx.post(f"{url}/v1/search", json=body, timeout=30).status_code == 200
    assert reads == [("rrf", 0.3), ("rrf", 0.7)]


def test_an_answer_holding_a_lone_surrogate_renders_as_json_escapes_it():
    from gtr_keras.server.app import _Answer

    answer = _Answer({"hits": [{"id": "d1", "text": "caf\udce9 au lait"}], "query": "café"})
    assert json.loads(answer.body) == {"hits": [{"id": "d1", "text": "caf\udce9 au lait"}], "query": "café"}
    assert _Answer({"query": "café"}).body == '{"query":"café"}'.encode()


def test_a_damaged_index_found_by_a_search_is_the_server_s_500_not_the_client_s_422(
    tiny_encoder, tiny_model_dir, index_dir, monkeypatch, capfd, caplog
):
    from gtr_keras.errors import DataError
    from gtr_keras.retrieval.index import Index

    search = Index.search

    def damaged(self, queries, *args, **kwargs):
        if "damaged" in queries:
            raise DataError(f"{index_dir}/bm25/data.csc.index.npy: a changed byte\nmore")
        return search(self, queries, *args, **kwargs)

    monkeypatch.setattr(Index, "search", damaged)
    with running(tiny_encoder, index_dir, tiny_model_dir) as (url, _, _):
        response = httpx.post(f"{url}/v1/search", json={"query": "damaged", "retriever": "bm25"}, timeout=30)
        assert httpx.post(f"{url}/v1/search", json={"query": "wing"}, timeout=30).status_code == 200
    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "server_data_error") and "data.csc.index.npy" in error[
        "message"
    ]
    (logged,) = [record for record in caplog.records if record.name == "gtr_keras.server.app"]
    assert logged.levelno == logging.ERROR and logged.message.startswith("gtr-keras serve: error: DataError: ")
    assert "more" not in logged.message and "Traceback" not in capfd.readouterr().err + caplog.text


OVER_8_MIB = 9_200_000  # bytes: over the default --max-body-bytes (8 MiB)


@pytest.fixture(scope="module")
def default_limits_url(tiny_encoder):
    with running(tiny_encoder) as (url, _, _):
        yield url


def _assert_too_large(response):
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, "request_too_large")


def _chunks(body):
    for start in range(0, len(body), 1 << 16):
        yield body[start : start + (1 << 16)]


def _by_http_client(url, body, chunked):
    """Python's `http.client` (what `urllib` sends with): the whole body written, then the answer read."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        headers = {"content-type": "application/json"}
        connection.request(
            "POST", "/v1/embeddings", _chunks(body) if chunked else body, headers, encode_chunked=chunked
        )
        answer = connection.getresponse()
        return httpx.Response(answer.status, content=answer.read())
    finally:
        connection.close()


def _by_httpx(url, body, chunked):
    return httpx.post(f"{url}/v1/embeddings", content=_chunks(body) if chunked else body, timeout=60)


@pytest.mark.parametrize("client", [_by_http_client, _by_httpx], ids=["http.client", "httpx"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_default_limit_is_answered_413_and_the_client_reads_it(default_limits_url, client, chunked):
    body = json.dumps({"input": "a" * OVER_8_MIB, "model": MODEL}).encode()
    for _ in range(3):
        _assert_too_large(client(default_limits_url, body, chunked))
    assert httpx.post(f"{default_limits_url}/v1/embeddings", json={"input": "x", "model": MODEL}).status_code == 200


def test_the_openai_client_reads_the_413_of_a_body_over_the_default_limit(default_limits_url):
    client = openai.OpenAI(base_url=f"{default_limits_url}/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(openai.APIStatusError) as error:
        client.embeddings.create(input=["a" * OVER_8_MIB], model=MODEL)
    assert error.value.status_code == 413 and error.value.body["code"] == "request_too_large"


def test_a_client_that_waits_for_100_continue_is_answered_413_before_it_sends_its_body(default_limits_url):
    host, port = default_limits_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n" % OVER_8_MIB
        )
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection after its answer
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in head, head
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_search_of_a_passages_index_answers_documents_with_the_window_that_scored(
    tiny_encoder, tiny_model_dir, tmp_path
):
    from gtr_keras.beir.readers import Corpus
    from gtr_keras.retrieval.index import Index

    long = Corpus(["a", "b", "c"], ["", "t", ""], [" ".join(["wing lift drag shock"] * 20)] * 2 + ["jet nozzle"])
    index = Index.build(tmp_path / "index", long, tiny_model_dir, passages="16:8")
    with running(tiny_encoder, tmp_path / "index", tiny_model_dir) as (url, _, _):
        answer = httpx.post(f"{url}/v1/search", json={"query": "shock drag", "k": 3}).json()
    assert sorted(hit["id"] for hit in answer["hits"]) == ["a", "b", "c"]
    assert_same_results(answer["hits"], index.search(["shock drag"], k=3)[0])
    assert all(set(hit["passage"]) == {"start", "end"} for hit in answer["hits"])
