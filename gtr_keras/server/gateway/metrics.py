"""`Metrics`: the Prometheus series of one `gtr-keras serve` application, in a registry of its own.

Through `prometheus_client` (the text format of `/metrics`, its parser in the
tests). Each application has its own `CollectorRegistry`, not the library's
global one, so that several applications in one process (the tests) count
apart. Requests are counted by the middleware, by route template (`endpoint`,
`other` for a path no route takes, so that no client can make a series per
path) and status; the batchers' stages and counts come through `stages`; the
queues, batches and the index's generation are read when scraped (a collector),
from the objects that own them.

The series (docs/serving.md, "Metrics", says what each means):
`gtr_keras_requests_total{endpoint,status}`, `gtr_keras_errors_total{endpoint,status,code}`,
`gtr_keras_request_duration_seconds{endpoint}`, `gtr_keras_stage_duration_seconds{batcher,stage}`,
`gtr_keras_batch_texts{batcher}`, `gtr_keras_forward_pass_padded_tokens`,
`gtr_keras_embedded_texts_total{kind}`, `gtr_keras_embedded_tokens_total{kind}`,
`gtr_keras_reranked_pairs_total`, `gtr_keras_reranked_tokens_total`,
`gtr_keras_queue_texts{batcher}`, `gtr_keras_batches_total{batcher}`, `gtr_keras_ready`,
`gtr_keras_index_generation`, `gtr_keras_index_reloads_total`, `gtr_keras_index_reload_failures_total`, and
the process's own (`process_resident_memory_bytes`, `process_cpu_seconds_total`, ...).
"""

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TEXTS = tuple(float(1 << n) for n in range(13))  # 1 to 4,096
TOKENS = tuple(float(1 << n) for n in range(6, 18))  # 64 to 131,072


class _Watched:
    """The collector of what other objects own: the batchers' queues and batches, the live index."""

    def __init__(self):
        self.batchers, self.live_index = [], None

    def collect(self):
        queued = GaugeMetricFamily("gtr_keras_queue_texts", "Texts waiting in a batcher's queue.", labels=["batcher"])
        batches = CounterMetricFamily("gtr_keras_batches", "Batches a batcher ran.", labels=["batcher"])
        for batcher in self.batchers:
            queued.add_metric([batcher.label], batcher.queued)
            batches.add_metric([batcher.label], batcher.batches)
        yield from (queued, batches)
        live = self.live_index
        current = live.current if live is not None else None
        ready = "1 once every endpoint answers: the model and the index's first generation are loaded."
        yield GaugeMetricFamily("gtr_keras_ready", ready, value=float(live is None or current is not None))
        if live is None:
            return
        if current is not None:
            generation = "The generation of the index that searches answer from."
            yield GaugeMetricFamily("gtr_keras_index_generation", generation, value=current.number)
        yield CounterMetricFamily("gtr_keras_index_reloads", "New generations swapped in.", value=live.reloads)
        failures = "Loads of a new generation that failed (the generation in use kept)."
        yield CounterMetricFamily("gtr_keras_index_reload_failures", failures, value=live.failures)


class Metrics:
    """The series of one application, in `registry` (a `CollectorRegistry` of its own).

    Example:
    >>> metrics = Metrics()
    >>> metrics.request("/v1/embeddings", 200, 0.012)
    >>> body, content_type = metrics.page()
    >>> b'gtr_keras_requests_total{endpoint="/v1/embeddings",status="200"} 1.0' in body
    True
    """

    def __init__(self):
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        self.requests = Counter(
            "gtr_keras_requests", "Requests answered, by route and status.", ["endpoint", "status"], registry=registry
        )
        self.errors = Counter(
            "gtr_keras_errors",
            "Error answers, by route, status and OpenAI's error code (503: busy, timeout, stopping, loading).",
            ["endpoint", "status", "code"],
            registry=registry,
        )
        self.duration = Histogram(
            "gtr_keras_request_duration_seconds",
            "Seconds from a request's head to its answer's end.",
            ["endpoint"],
            buckets=SECONDS,
            registry=registry,
        )
        self.stages = Histogram(
            "gtr_keras_stage_duration_seconds",
            "Seconds of each stage of the batchers' work: queue, tokenize, model, search.",
            ["batcher", "stage"],
            buckets=SECONDS,
            registry=registry,
        )
        self.batch_texts = Histogram(
            "gtr_keras_batch_texts", "Texts of each batch a batcher ran.", ["batcher"], buckets=TEXTS, registry=registry
        )
        self.pass_tokens = Histogram(
            "gtr_keras_forward_pass_padded_tokens",
            "Padded tokens (texts x the longest) of each forward pass of the model.",
            buckets=TOKENS,
            registry=registry,
        )
        self.texts = Counter("gtr_keras_embedded_texts", "Texts embedded, by kind.", ["kind"], registry=registry)
        self.tokens = Counter(
            "gtr_keras_embedded_tokens",
            "Tokens embedded (the tokenizer's, EOS included, not padding), by kind.",
            ["kind"],
            registry=registry,
        )
        self.pairs = Counter("gtr_keras_reranked_pairs", "(query, document) pairs reranked.", registry=registry)
        self.pair_tokens = Counter(
            "gtr_keras_reranked_tokens",
            "Tokens of the pairs reranked (packed and cut at the reranker's budget, not padding).",
            registry=registry,
        )
        self._watched = _Watched()
        registry.register(self._watched)

    def watch(self, batchers, live_index=None):
        """Reports the queues and batches of `batchers` and the generation of `live_index` when scraped."""
        self._watched.batchers, self._watched.live_index = list(batchers), live_index

    def request(self, endpoint, status, seconds, code=None):
        """Counts an answered request; `code`: the error code of an error answer."""
        self.requests.labels(endpoint, str(status)).inc()
        self.duration.labels(endpoint).observe(seconds)
        if status >= 400:
            self.errors.labels(endpoint, str(status), code or "").inc()

    def stage(self, batcher, name, seconds):
        """A stage's duration (`stages.stage`)."""
        self.stages.labels(batcher, name).observe(seconds)

    def record(self, batcher, event, values):
        """A count of `stages.record`: `batch` (texts), `forward_pass` (padded_tokens), `embedded` (kind,
        texts, tokens), `reranked` (pairs, tokens)."""
        if event == "batch":
            self.batch_texts.labels(batcher).observe(values["texts"])
        elif event == "forward_pass":
            self.pass_tokens.observe(values["padded_tokens"])
        elif event == "embedded":
            self.texts.labels(values["kind"]).inc(values["texts"])
            self.tokens.labels(values["kind"]).inc(values["tokens"])
        elif event == "reranked":
            self.pairs.inc(values["pairs"])
            self.pair_tokens.inc(values["tokens"])

    def page(self):
        """`(body, content type)` of `/metrics`: Prometheus' text format."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
