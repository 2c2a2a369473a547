"""The stages of a request's work in the batchers (queueing, tokenizing, the model call, the search), each a
child span of the request's span and an observation of the application's metrics.

A request runs in a context (`requesting`) that holds its span as a parent,
`(tracer, span)`; `Batcher.submit` keeps the parents of the context it is
called in with the request, and the worker runs each batch in a context
(`running`) that holds the parents of all its requests and the batcher's
observer. There `stage(name)` times a stage: a child span of each parent
(inside it, those children are the parents, so that a search's query encoding,
submitted from within its `search` stage, nests under it) and
`observer.stage(batcher, name, seconds)`; `record(event, **values)` gives the
observer a count (a forward pass's padded tokens, the texts embedded). Without
tracing there are no parents and no spans; without an observer nothing is
observed.

Example:
>>> with running(metrics, "encoder", parents):
...     with stage("tokenize"):
...         items = encoder.prepare(texts, "document")
"""

import collections
import contextlib
import contextvars
import time

from gtr_keras.server.gateway.tracing import child_span, failed

Context = collections.namedtuple("Context", "parents observer batcher")
_NONE = Context((), None, None)
_CONTEXT = contextvars.ContextVar("gtr_keras_stages", default=None)


def parents():
    """The `(tracer, span)` parents of the context this runs in (none without tracing)."""
    return (_CONTEXT.get() or _NONE).parents


@contextlib.contextmanager
def _within(context):
    token = _CONTEXT.set(context)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def requesting(parent):
    """The context of a request whose span is `parent`, a `(tracer, span)`, or None (no tracing)."""
    return _within(Context((parent,) if parent else (), None, None))


def running(observer, batcher, parents):
    """The context of a batch of `batcher` (its name in the metrics' labels), whose requests' spans are
    `parents`, observed by `observer` (an object with `stage` and `record`, or None)."""
    return _within(Context(tuple(parents), observer, batcher))


@contextlib.contextmanager
def stage(name, **attributes):
    """Times the block as stage `name`: a child span of each parent (with `attributes`), the parents of what
    the block runs, and the observer's `stage(batcher, name, seconds)`."""
    context = _CONTEXT.get() or _NONE
    spans = [child_span(parent, name, attributes=attributes) for parent in context.parents]
    start = time.perf_counter()
    try:
        children = tuple((parent[0], span) for parent, span in zip(context.parents, spans))
        with _within(context._replace(parents=children)):
            yield
    except BaseException as error:
        for span in spans:
            failed(span, error)
        raise
    finally:
        for span in spans:
            span.end()
        if context.observer is not None:
            context.observer.stage(context.batcher, name, time.perf_counter() - start)


def record(event, **values):
    """Gives the context's observer a count: `observer.record(batcher, event, values)`."""
    context = _CONTEXT.get() or _NONE
    if context.observer is not None:
        context.observer.record(context.batcher, event, values)


def waited(observer, batcher, requests, now_ns):
    """The queueing stage of requests a batch took at `now_ns` (ns since the epoch): for each of `requests`,
    `(parents, arrived_ns)`, a `queue` span from its arrival to now, and the observer's `stage`."""
    for request_parents, arrived_ns in requests:
        for parent in request_parents:
            child_span(parent, "queue", start_ns=arrived_ns).end(end_time=now_ns)
        if observer is not None:
            observer.stage(batcher, "queue", max(0, now_ns - arrived_ns) / 1e9)
