"""OpenTelemetry traces of `gtr-keras serve` (the `otel` extra): a span per request, children per stage.

A request's span (kind SERVER, named `METHOD ROUTE`) continues the trace of its
W3C `traceparent` header (OpenTelemetry's propagator: `OTEL_PROPAGATORS`, by
default W3C trace context and baggage); the stages of its work in the batchers
are its children (`stages`). `--otlp-endpoint` exports them by OTLP over HTTP
(protobuf), in batches from a thread of their own (`BatchSpanProcessor`): an
exporter that fails (a collector down) drops spans, with a warning of
OpenTelemetry's on stderr, and never fails a request. opentelemetry is imported
only where tracing is on.
"""

import contextlib
import threading
import urllib.parse

TRACES_PATH = "/v1/traces"
FLUSH_MILLISECONDS = 1000  # what the spans not yet exported get at a stop


def traces_url(endpoint):
    """The OTLP/HTTP traces URL of `endpoint`: a collector's address (`/v1/traces` added) or a full URL.

    Example:
    >>> traces_url("http://collector:4318")
    'http://collector:4318/v1/traces'
    """
    parts = urllib.parse.urlsplit(endpoint)
    return endpoint.rstrip("/") + TRACES_PATH if parts.path in ("", "/") else endpoint


def otlp_provider(endpoint, service_name="gtr-keras"):
    """A `TracerProvider` exporting to `endpoint` (`traces_url`) by OTLP/HTTP in batches.

    Example:
    >>> provider = otlp_provider("http://127.0.0.1:4318")
    >>> tracing = Tracing(provider)
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint))))
    return provider


class Tracing:
    """The request spans of one application, from `provider` (an OpenTelemetry `TracerProvider`).

    Example:
    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> with Tracing(TracerProvider()).request({"traceparent": "00-..."}, "POST /v1/embeddings", {}) as span:
    ...     pass
    """

    def __init__(self, provider):
        self.provider = provider
        self.tracer = provider.get_tracer("gtr_keras.server")

    @contextlib.contextmanager
    def request(self, headers, name, attributes):
        """A SERVER span `name`, child of the trace `headers` (a dict of lower-case names) carry, if any."""
        from opentelemetry import propagate, trace

        parent = propagate.extract(headers)
        span = self.tracer.start_span(name, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes)
        try:
            yield span
        finally:
            span.end()

    def close(self):
        """Exports what is still waiting, waiting at most `FLUSH_MILLISECONDS` (the SDK's flush, which
        retries a collector that does not answer for the exporter's timeout, goes on in a daemon thread:
        it holds no stop)."""
        flushing = threading.Thread(target=self.provider.force_flush, name="gtr-keras-trace-flush", daemon=True)
        flushing.start()
        flushing.join(FLUSH_MILLISECONDS / 1000)


def answered(span, status):
    """Records a request's answer on its span: the status, and an error for a 5xx."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))


def child_span(parent, name, start_ns=None, attributes=None):
    """A span `name` begun (now, or at `start_ns`, ns since the epoch), child of `parent`, a `(tracer, span)`;
    the caller ends it."""
    from opentelemetry import trace

    tracer, span = parent
    context = trace.set_span_in_context(span)
    return tracer.start_span(name, context=context, start_time=start_ns, attributes=attributes)


def failed(span, error):
    """Records on `span` that its stage raised `error` (its type and first line; no traceback, no text)."""
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"))
