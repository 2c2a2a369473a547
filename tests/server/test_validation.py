import asyncio

import pytest

from gtr_keras.server import validation
from gtr_keras.server.api_error import ApiError
from gtr_keras.server.validation import discard_body, embedding_request, read_json, search_request

MODELS = {"m": None, "m-query": "query", "m-document": "document"}


def _refused(function, *args):
    with pytest.raises(ApiError) as raised:
        function(*args)
    return raised.value


def test_an_embedding_request_s_kind_comes_from_the_model_name_or_input_type():
    asked = embedding_request({"input": "a", "model": "m"}, MODELS, 8, 4)
    assert asked == (["a"], "document", "m", "float", None)
    assert embedding_request({"input": ["a"], "model": "m", "input_type": "query"}, MODELS, 8, 4).kind == "query"
    assert embedding_request({"input": ["a"], "model": "m-query"}, MODELS, 8, 4).kind == "query"
    asked = embedding_request({"input": ["a", "b"], "model": "m-document", "encoding_format": "base64"}, MODELS, 8, 4)
    assert (asked.texts, asked.kind, asked.encoding_format) == (["a", "b"], "document", "base64")
    assert embedding_request({"input": "a", "model": "m", "dimensions": 8, "user": "me"}, MODELS, 8, 4).texts == ["a"]
    assert embedding_request({"input": "a", "model": "m", "dimensions": 3}, MODELS, 8, 4).dimensions == 3
    assert embedding_request({"input": "a", "model": "m"}, MODELS, 8, 4).dimensions is None


@pytest.mark.parametrize("dimensions", [0, 9, "x", 1.5, True, -1])
def test_dimensions_are_an_integer_from_1_to_d(dimensions):
    error = _refused(embedding_request, {"input": "a", "model": "m", "dimensions": dimensions}, MODELS, 8, 4)
    assert (error.status, error.param, error.code) == (422, "dimensions", "invalid_value")
    assert error.message.startswith("dimensions: must be an integer from 1 to 8, got ")


def test_the_limit_of_inputs_is_inclusive():
    assert len(embedding_request({"input": ["a"] * 4, "model": "m"}, MODELS, 8, 4).texts) == 4
    error = _refused(embedding_request, {"input": ["a"] * 5, "model": "m"}, MODELS, 8, 4)
    assert (error.status, error.param, error.code) == (422, "input", "too_many_inputs")
    assert error.message == "input: 5 items; at most 4 a request"


def test_an_error_body_is_openai_s_shape():
    body = ApiError(422, "k: must be an integer", "k", "invalid_value").body()
    assert body == {
        "error": {
            "message": "k: must be an integer",
            "type": "invalid_request_error",
            "param": "k",
            "code": "invalid_value",
        }
    }
    assert ApiError(503, "busy; retry", None, "busy").body()["error"]["type"] == "server_error"


def test_a_search_request_takes_query_or_queries_and_the_fusion_options():
    asked = search_request({"query": "a", "k": 5}, 4, 100)
    assert (asked.queries, asked.single, asked.k, asked.retriever) == (["a"], True, 5, "gtr")
    asked = search_request({"queries": ["a", "b"], "retriever": "hybrid", "fusion": "rrf", "gtr_weight": 1}, 4, 100)
    assert (asked.single, asked.k, asked.fusion, asked.gtr_weight) == (False, 10, "rrf", 1.0)


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -0.1, "0.5", True])
def test_a_gtr_weight_must_be_a_number_from_0_to_1(weight):
    error = _refused(search_request, {"query": "a", "retriever": "hybrid", "gtr_weight": weight}, 4, 100)
    assert error.param == "gtr_weight"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"input": "\ud800", "model": "m"}, "input[0]"),
        ({"input": ["a", "b\udfffc"], "model": "m"}, "input[1]"),
        ({"input": "a", "model": "m", "user": "\udc80"}, "user"),
    ],
)
def test_a_text_utf8_cannot_encode_is_refused_naming_where(body, param):
    error = _refused(embedding_request, body, MODELS, 8, 4)
    assert (error.status, error.param, error.code) == (422, param, "invalid_text")
    assert error.message.startswith(f"{param}: a lone surrogate (U+D")
    assert error.body()["error"]["message"].encode("utf-8")  # the answer itself is UTF-8


@pytest.mark.parametrize("body, param", [({"query": "x\ud800"}, "query"), ({"queries": ["a", "\udc00"]}, "queries[1]")])
def test_a_query_utf8_cannot_encode_is_refused(body, param):
    error = _refused(search_request, body, 4, 100)
    assert (error.param, error.code) == (param, "invalid_text")


def test_a_value_is_quoted_short_and_a_field_name_encodable():
    error = _refused(embedding_request, {"input": "a", "model": "m" * 100_000}, MODELS, 8, 4)
    assert error.status == 404 and len(error.message) < 200
    error = _refused(search_request, {"query": "a", "k": 10**4000}, 4, 100)
    assert error.param == "k" and len(error.message) < 200 and error.message.endswith("got 1" + "0" * 56 + "...")
    error = _refused(embedding_request, {"input": "a", "model": "m", "\ud800" + "x" * 500: 1}, MODELS, 8, 4)
    assert error.code == "unknown_field" and error.param.startswith("\\ud800") and len(error.param) < 70
    assert error.body()["error"]["param"].encode("utf-8")


class StreamedRequest:
    """A request whose body comes in `chunks` chunks of `size` bytes, counted as they are read."""

    def __init__(self, headers, chunks, size):
        self.headers, self.read = headers, 0
        self.chunks, self.size = chunks, size

    async def stream(self):
        for _ in range(self.chunks):
            self.read += self.size
            yield b"x" * self.size


@pytest.mark.parametrize(
    "length, most_read",
    [(None, (10 + 20 + 2) << 10), (str(25 << 10), 25 << 10), (str(200 << 10), 0)],
    ids=["streamed", "declared-within-the-discarded-bytes", "declared-past-them"],
)
def test_a_body_over_the_limit_is_read_at_most_the_discarded_bytes_past_it_in_all(monkeypatch, length, most_read):
    """The limit 10 KiB, 20 KiB past it discarded, 1 KiB chunks: read_json and discard_body each stop at the
    chunk that crosses their limit, one count for both."""
    monkeypatch.setattr(validation, "DISCARDED_BYTES", 20 << 10)
    headers = {} if length is None else {"content-length": length}
    request = StreamedRequest(headers, chunks=200 if length is None else int(length) >> 10, size=1 << 10)

    async def refuse_then_discard():
        chunks = request.stream()
        with pytest.raises(ApiError) as refused:
            await read_json(request, 10 << 10, chunks)
        assert refused.value.status == 413
        await discard_body(request, 10 << 10, chunks)

    asyncio.run(refuse_then_discard())
    assert request.read <= most_read and (length is None or request.read == most_read)
