"""OpenTelemetry spans of requests, read back from the SDK's in-memory exporter."""

import time

import httpx
import pytest
from server.servers import MODEL, indexed, serving

from gtr_keras.server.gateway.middleware import Settings
from gtr_keras.server.gateway.tracing import Tracing, otlp_provider, traces_url
from gtr_keras.server.serve import listening_socket

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_encoder, tiny_model_dir):
    return indexed(tmp_path_factory, tiny_encoder, tiny_model_dir)


@pytest.fixture(scope="module")
def traced(tiny_encoder, tiny_model_dir, index_dir):
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with serving(tiny_encoder, index_dir, tiny_model_dir, gateway=Settings(tracing=Tracing(provider))) as (url, *_):
        yield url, exporter


def _spans_of(exporter, trace_id, count):
    """The spans of trace `trace_id` once `count` have ended (spans end after their answer is sent)."""
    deadline = time.monotonic() + 10
    while True:
        spans = [span for span in exporter.get_finished_spans() if span.context.trace_id == int(trace_id, 16)]
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.01)


def _children(spans, parent):
    return sorted(span.name for span in spans if span.parent and span.parent.span_id == parent.context.span_id)


def test_an_embedding_request_continues_the_trace_of_its_traceparent(traced):
    url, exporter = traced
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "x-request-id": "traced-1"}
    response = httpx.post(f"{url}/v1/embeddings", json={"input": ["a wing", "lift"], "model": MODEL}, headers=headers)
    assert response.status_code == 200
    spans = _spans_of(exporter, TRACE_ID, 4)
    (request,) = [span for span in spans if span.name == "POST /v1/embeddings"]
    assert request.parent.span_id == int(PARENT_ID, 16) and request.parent.is_remote
    assert request.kind.name == "SERVER"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["gtr_keras.request_id"] == "traced-1"
    assert _children(spans, request) == ["model", "queue", "tokenize"]
    model = next(span for span in spans if span.name == "model")
    assert model.attributes["texts"] == 2 and model.start_time >= request.start_time
    assert model.end_time <= request.end_time


def test_a_search_s_query_encoding_nests_under_its_search_span(traced):
    url, exporter = traced
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    headers = {"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"}
    assert httpx.post(f"{url}/v1/search", json={"query": "wing lift", "k": 3}, headers=headers).status_code == 200
    spans = _spans_of(exporter, trace_id, 6)
    (request,) = [span for span in spans if span.name == "POST /v1/search"]
    assert _children(spans, request) == ["queue", "search"]
    search = next(span for span in spans if span.name == "search")
    assert search.attributes["k"] == 3 and search.attributes["retriever"] == "gtr"
    assert _children(spans, search) == ["model", "queue", "tokenize"]


def test_a_request_without_traceparent_starts_a_trace_and_a_refusal_is_traced_too(traced):
    url, exporter = traced
    exporter.clear()
    assert httpx.post(f"{url}/v1/embeddings", content=b"{").status_code == 400
    deadline = time.monotonic() + 10
    while not exporter.get_finished_spans() and time.monotonic() < deadline:
        time.sleep(0.01)
    (span,) = exporter.get_finished_spans()
    assert span.parent is None and span.attributes["http.response.status_code"] == 400


def test_an_exporter_that_fails_never_fails_a_request(tiny_encoder):
    closed = listening_socket("127.0.0.1", 0)  # bound, never listening: the collector is down
    tracing = Tracing(otlp_provider(f"http://127.0.0.1:{closed.getsockname()[1]}"))
    with serving(tiny_encoder, gateway=Settings(tracing=tracing)) as (url, *_):
        for number in range(5):
            body = {"input": [f"wing {number}"], "model": MODEL}
            assert httpx.post(f"{url}/v1/embeddings", json=body, timeout=30).status_code == 200
    closed.close()
    start = time.monotonic()
    tracing.close()
    assert time.monotonic() - start < 5


def test_the_otlp_url_gets_its_traces_path_unless_given_one():
    assert traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert traces_url("https://otel.example/custom/path") == "https://otel.example/custom/path"
