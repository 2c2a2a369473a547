"""OpenTelemetry spans of requests, read back from the SDK's in-memory exporter."""

import asyncio
import http.server
import socket
import threading
import time

import httpx
import pytest
from server.servers import MODEL, Served, indexed, serving

from gtr_keras.server.gateway.metrics import Metrics
from gtr_keras.server.gateway.middleware import Gateway, Settings
from gtr_keras.server.gateway.tracing import Tracing, otlp_provider, traces_url

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
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: the collector is down
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


def test_a_method_http_does_not_define_names_no_span_of_its_own():
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def nothing():
        return {"type": "http.request", "body": b""}

    async def sent(message):
        pass

    gateway = Gateway(app, Settings(tracing=Tracing(provider)), Metrics(), routes=[])
    for method in ("BREW-7f3a", "GET"):  # uvicorn's h11 parser takes any token as a method
        scope = {"type": "http", "method": method, "path": "/coffee", "headers": []}
        asyncio.run(gateway(scope, nothing, sent))
    other, known = exporter.get_finished_spans()
    assert (other.name, other.attributes["http.request.method"]) == ("HTTP other", "_OTHER")
    assert (known.name, known.attributes["http.request.method"]) == ("GET other", "GET")


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector on 127.0.0.1 that keeps the bodies of the traces posted to it."""

    bodies = []

    def do_POST(self):
        self.bodies.append(self.rfile.read(int(self.headers["content-length"])))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.large
def test_the_spans_of_the_last_requests_are_exported_before_the_command_exits(tiny_model_dir):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    served = Served("--model", tiny_model_dir, "--served-model-name", "gtr", "--otlp-endpoint", endpoint)
    try:
        body = {"input": ["a wing"], "model": "gtr"}
        headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
        assert httpx.post(f"{served.url}/v1/embeddings", json=body, headers=headers, timeout=30).status_code == 200
    finally:  # at once: the batch processor exports every 5 s, and the command ends by os._exit (no atexit)
        status, _, err = served.stop()
        collector.shutdown()
    assert status == 0, err
    names = []
    for posted in _Collector.bodies:
        request = ExportTraceServiceRequest.FromString(posted)
        for resource in request.resource_spans:
            for scoped in resource.scope_spans:
                names += [span.name for span in scoped.spans if span.trace_id.hex() == TRACE_ID]
    assert "POST /v1/embeddings" in names and {"queue", "tokenize", "model"} <= set(names), names
