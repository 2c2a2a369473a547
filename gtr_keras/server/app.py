"""The routes of `gtr-keras serve`, a Starlette application: `POST /v1/embeddings`, `POST /v1/search`,
`POST /v1/rerank`, `GET /health`, `GET /metrics`, `GET /v1/models` (and `/v1/models/{id}`).

Every request passes the `gateway` first (its id, key, span, metrics and
access-log line), whatever its route.

Every refusal is OpenAI's error shape (`ApiError`), an unknown route or method
too; an error of the server itself is a 500 of that shape, one line (its
traceback on stderr, the only one a request can print). Every request passes
through `_answers`, the one place where a check of every request goes. Requests
await the `Batcher`s' futures in the event loop: embeddings the encoder's,
reranks the reranker's, searches the search batcher's, which searches the
`Index` of the generation `LiveIndex.current` held when they began
(`Index.search`, the one search path: their queries encoded through the
encoder's batches, their pairs reranked through the reranker's). Each wait, for
the body and for the answer, is bounded (`Deadlines`): by `body_timeout`, by the
batcher's timeout, and at a stop by the grace period's end.
"""

import asyncio
import base64
import functools
import json
import logging
import time
import traceback

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gtr_keras.errors import CheckpointError, DataError, MismatchError, OverloadedError, UserError
from gtr_keras.lexical.fusion import Fusion, model_fusion
from gtr_keras.retrieval.reranking import FunctionScorer
from gtr_keras.retrieval.retriever import search_results
from gtr_keras.server.api_error import ApiError
from gtr_keras.server.batcher import Batcher, Stopping
from gtr_keras.server.deadlines import Deadlines
from gtr_keras.server.gateway import stages
from gtr_keras.server.gateway.metrics import Metrics
from gtr_keras.server.gateway.middleware import Gateway, Settings, authorized, error_code
from gtr_keras.server.rerank_scoring import PAIRS, ranked
from gtr_keras.server.validation import discard_body, embedding_request, read_json, rerank_request, search_request
from gtr_keras.utils.dimensions import truncate

logger = logging.getLogger(__name__)

DEFAULT_LIMITS = {"max_inputs": 2048, "max_body_bytes": 8 << 20, "max_queries": 64, "max_k": 1000, "body_timeout": 30.0}
FUSIONS_KEPT = 64  # fusions of a hybrid search's options kept read
# Refusals after which the connection is closed: its body was not read whole, or the server is stopping.
CLOSING = ("request_too_large", "body_timeout", "client_disconnected", "stopping")
# The library's errors that, raised once a request was checked, are the server's files' fault (a damaged index,
# a model's malformed record, a stale BM25 side, a reranker's non-finite score), not the request's.
SERVER_SIDE = (DataError, CheckpointError, MismatchError)


def served_models(name):
    """`{served name: kind}`: `name` (the kind from `input_type`, default document), `name-query` and
    `name-document`.

    Example:
    >>> served_models("gtr_t5_base_en")
    {'gtr_t5_base_en': None, 'gtr_t5_base_en-query': 'query', 'gtr_t5_base_en-document': 'document'}
    """
    return {name: None, f"{name}-query": "query", f"{name}-document": "document"}


class _Answer(JSONResponse):
    """Starlette's JSON answer, but one that any text renders: a lone surrogate (a document read with
    invalid UTF-8) is escaped as JSON allows (`\\udcff`) instead of failing the answer."""

    def render(self, content):
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error_response(error):
    headers = {"connection": "close"} if error.code in CLOSING else None
    return _Answer(error.body(), status_code=error.status, headers=headers)


def _stopping():
    return ApiError(503, "the server is stopping; retry (on another replica)", None, "stopping")


def _api_error(error):
    """The `ApiError` an exception of a handler is answered with: `ApiError` as it is, an error of the server's
    files (`SERVER_SIDE`) as a 500 (its line on the server's stderr), another `UserError` the library raised
    as 422 (e.g. a reranked search of an index that stores no texts), anything else as a one-line 500 (its
    traceback on the server's stderr)."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, Stopping):
        return _stopping()
    if isinstance(error, OverloadedError):
        return ApiError(503, str(error), None, "busy")
    first_line = (str(error).strip().splitlines() or [""])[0]
    if isinstance(error, SERVER_SIDE):
        logger.error("gtr-keras serve: error: %s: %s", type(error).__name__, first_line)
        return ApiError(500, f"the server's files: {first_line}", None, "server_data_error")
    if isinstance(error, UserError):
        return ApiError(422, first_line, None, "invalid_value")
    logger.error("%s", "".join(traceback.format_exception(error)).rstrip("\n"))
    return ApiError(500, f"{type(error).__name__}: {first_line}", None, "server_error")


def _answers(handler):
    """`handler` answering every error in OpenAI's shape (`_api_error`), its code noted for the metrics."""

    @functools.wraps(handler)
    async def answer(request):
        try:
            return await handler(request)
        except Exception as exception:
            error = _api_error(exception)
            error_code(request, error.code)
            return _error_response(error)

    return answer


def _embedding(vector, encoding_format):
    if encoding_format == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, "<f4").tobytes()).decode("ascii")
    return vector.tolist()


def _scored(reranker, most, pairs):
    """The scores of a batch of searches' (query, hit) pairs through the reranker's `Batcher`, at most `most`
    (a request's worth) a time: the batch may hold more pairs than the reranker's queue ever takes."""
    step = max(1, min(most, reranker.max_queue))
    parts = [reranker.wait(pairs[start : start + step], PAIRS)[0] for start in range(0, len(pairs), step)]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def _searching(model_source, fusion, scorer):
    """The `run` of the search `Batcher`: key `(Index, k, filter, retriever, fusion, gtr_weight, rerank_depth)`,
    the hits of the queries by `Index.search` (`filter` its clauses, or None: an engine's collection translates
    them to its own filter; `fusion` for a hybrid search without options; with options, the fusion of
    `model_source` with them, `fusion.model_fusion`, read once for each of the last `FUSIONS_KEPT` options asked,
    not in every batch; with a depth, reranked by `scorer`)."""
    fusion_of = functools.lru_cache(maxsize=FUSIONS_KEPT)(functools.partial(model_fusion, model_source))

    def run(key, queries, stop):
        index, k, clauses, retriever, method, gtr_weight, depth = key
        chosen = None if retriever != "hybrid" else fusion
        if retriever == "hybrid" and (method is not None or gtr_weight is not None):
            chosen = fusion_of(method, gtr_weight)
        rerank = scorer if depth is not None else None
        with stages.stage("search", queries=len(queries), k=k, retriever=retriever):
            hits = index.search(
                queries, k, filter=clauses, retriever=retriever, fusion=chosen, rerank=rerank, rerank_depth=depth
            )
            return (hits,)

    return run


def build_app(
    batcher,
    model_name,
    embedding_dim,
    live_index=None,
    model_source=None,
    limits=None,
    gateway=None,
    reranker=None,
    reranker_name=None,
):
    """The Starlette application of `gtr-keras serve`, behind its `gateway` (`middleware.Gateway`).

    Searches are batched too: a second `Batcher` (of `batcher`'s settings) runs the queries of concurrent
    searches of one generation, `k`, retriever, fusion and rerank depth as one `Index.search`, whose queries
    `live_index` encodes through `batcher` (`batcher.query_encoder`) and whose pairs `reranker` scores.

    The application's `state.stop(grace)` (called in its event loop, at the server's first signal) answers
    the requests in flight within `grace` seconds (503 `stopping` for those unfinished then) and abandons
    the batchers' work at that moment (`Batcher.abandon`); `state.stop(0)` at once. `state.batchers` are
    the batchers, which whoever runs the app closes (`serve`) with the live index once it stopped;
    `state.metrics` its `Metrics`, in a registry of its own (`/metrics`).

    Until `live_index` has its first generation (`LiveIndex(wait=False)`), `/health` answers 503 with
    status `loading`, and so does `/v1/search` (code `loading`): a load balancer's readiness probe of
    `/health` sends no request before the replica can answer every endpoint.

    Args:
        batcher: the `Batcher` that encodes every text (`batcher.encoding`).
        model_name: the served model's name (`served_models`).
        embedding_dim: D, the model's embedding size.
        live_index: the `LiveIndex` that `/v1/search` answers from, or None (404 there).
        model_source: the model directory (or source), for the fusion of a hybrid search's `fusion` and
            `gtr_weight` (`fusion.model_fusion`).
        limits: `DEFAULT_LIMITS` overridden: `max_inputs` (texts an embedding request), `max_body_bytes`,
            `max_queries` (a search request), `max_k`, `body_timeout` (seconds a body takes to arrive).
        gateway: the gateway's `middleware.Settings` (keys, access log, tracing, metrics port); default none.
        reranker: the `Batcher` of (query, document) pairs that a reranker scores (`rerank_scoring.scoring`), for
            `/v1/rerank` and searches with `rerank`; or None (404 there, 422 for `rerank`).
        reranker_name: the reranker's name in requests and `/v1/models` (its directory's name).

    Example:
    >>> batcher = Batcher(encoding(gtr_keras.load("gtr_small_distilled_en")))
    >>> app = build_app(batcher, "gtr_small_distilled_en", 768)
    >>> uvicorn.run(app, host="127.0.0.1", port=8000)  # doctest: +SKIP
    """
    limits = {**DEFAULT_LIMITS, **(limits or {})}
    models = served_models(model_name)
    rerankers = (reranker_name,) if reranker else ()
    started = int(time.time())
    settings = (batcher.batch_size, batcher.max_wait, batcher.max_queue, batcher.timeout, "gtr-keras-search")
    scorer = reranker and FunctionScorer(functools.partial(_scored, reranker, limits["max_inputs"]))
    fusion = (live_index and live_index.fusion) or Fusion()
    searches = live_index and Batcher(_searching(model_source, fusion, scorer), *settings)
    batchers = [batcher, *([searches] if searches else []), *([reranker] if reranker else [])]
    deadlines = Deadlines()
    metrics = Metrics()
    metrics.watch(batchers, live_index)
    for each in batchers:
        each.observer = metrics

    async def within(seconds, awaitable, late):
        """`await awaitable`, at most `seconds` and never past a stop's end; `late` (an `ApiError`) past
        `seconds`, 503 `stopping` past the stop's end."""
        try:
            async with deadlines.bounded(seconds):
                return await awaitable
        except TimeoutError:
            raise (_stopping() if deadlines.stopped() else late) from None

    async def body_of(request):
        seconds = limits["body_timeout"]
        late = ApiError(408, f"the body did not arrive within {seconds:g} s", None, "body_timeout")
        end, most, chunks = time.monotonic() + seconds, limits["max_body_bytes"], request.stream()
        try:
            return await within(seconds, read_json(request, most, chunks), late)
        except ApiError as error:
            if error.code == "request_too_large":  # answered once the rest came, within the body's time
                await within(max(0.0, end - time.monotonic()), discard_body(request, most, chunks), error)
            raise

    async def answer_of(future, what):
        if future is None:
            if deadlines.stop_at is not None:
                raise _stopping()
            raise ApiError(503, f"the {what} queue is full ({batcher.max_queue:,} texts); retry", None, "busy")
        late = ApiError(503, f"no {what} answer within {batcher.timeout:g} s; retry", None, "timeout")
        return await within(batcher.timeout, asyncio.wrap_future(future), late)

    async def embeddings(request):
        body = await body_of(request)
        asked = embedding_request(body, models, embedding_dim, limits["max_inputs"])
        vectors, counts = await answer_of(batcher.submit(asked.texts, asked.kind), "encoder's")
        tokens = sum(counts)
        data = [
            {"object": "embedding", "index": i, "embedding": _embedding(vector, asked.encoding_format)}
            for i, vector in enumerate(truncate(vectors, asked.dimensions))
        ]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return _Answer({"object": "list", "data": data, "model": asked.model, "usage": usage})

    async def search(request):
        body = await body_of(request)
        asked = search_request(body, limits["max_queries"], limits["max_k"], limits["max_inputs"])
        if live_index is None:
            raise ApiError(404, "no index is served: start `gtr-keras serve` with --index INDEX", None, "no_index")
        current = live_index.current  # once: the generation's `Index` and its number together
        if current is None:
            raise ApiError(503, "the index's first generation is loading; retry", None, "loading")
        if asked.retriever != "gtr" and current.bm25_problem:
            raise ApiError(422, f"retriever: {current.bm25_problem}", "retriever", "no_bm25_side")
        if asked.rerank_depth is not None and reranker is None:
            message = "rerank: no reranker is served: start `gtr-keras serve` with --reranker MODEL"
            raise ApiError(422, message, "rerank", "no_reranker")
        options = (asked.retriever, asked.fusion, asked.gtr_weight, asked.rerank_depth)
        key = (current.index, asked.k, asked.filter, *options)
        (hits,) = await answer_of(searches.submit(asked.queries, key), "search")
        results = search_results(asked.queries, hits)
        answer = {"object": "search", "model": model_name, "retriever": asked.retriever, "k": asked.k}
        if asked.rerank_depth is not None:
            answer.update(reranker=reranker_name, rerank_depth=asked.rerank_depth)
        answer["generation"] = current.number
        if asked.single:
            answer.update(query=asked.queries[0], hits=results[0]["hits"])
        answer["results"] = results
        return _Answer(answer)

    async def rerank(request):
        body = await body_of(request)
        if reranker is None:
            message = "no reranker is served: start `gtr-keras serve` with --reranker MODEL"
            raise ApiError(404, message, None, "no_reranker")
        asked = rerank_request(body, rerankers, limits["max_inputs"])
        pairs = [(asked.query, document) for document in asked.documents]
        scores, counts = await answer_of(reranker.submit(pairs, PAIRS), "reranker's")
        results = ranked(scores, asked.documents, asked.top_n, asked.return_documents)
        return _Answer({"model": asked.model, "results": results, "usage": {"total_tokens": sum(counts)}})

    def model_card(name):
        return {"id": name, "object": "model", "created": started, "owned_by": "gtr-keras"}

    async def list_models(request):
        return _Answer({"object": "list", "data": [model_card(name) for name in (*models, *rerankers)]})

    async def get_model(request):
        name = request.path_params["model"]
        if name not in models and name not in rerankers:
            raise ApiError(404, f"model: {name!r} is not served here", "model", "model_not_found")
        return _Answer(model_card(name))

    async def health(request):
        current = live_index and live_index.current
        status = "stopping" if deadlines.stop_at is not None else "loading" if live_index and not current else "ok"
        code = 200 if status == "ok" else 503
        if not authorized(request):  # a probe without the key: the status, not the model, index or settings
            return _Answer({"status": status}, status_code=code)
        answer = {
            "status": status,
            "model": model_name,
            "embedding_dim": embedding_dim,
            "batch_size": batcher.batch_size,
            "queued": batcher.queued,
            "batches": batcher.batches,
        }
        if reranker:
            answer["reranker"] = reranker_name
        if current:
            answer["index"] = {
                "path": live_index.index_dir,
                "generation": current.number,
                "loaded_at": current.loaded_at,
                "reloads": live_index.reloads,
                "bm25": current.bm25_problem is None,
                "search_settings": current.search_settings,
            }
        elif live_index is not None:
            answer["index"] = {"path": live_index.index_dir, "generation": None, "reloads": 0}
        return _Answer(answer, status_code=code)

    async def metrics_page(request):
        body, content_type = metrics.page()
        return Response(body, media_type=content_type)

    async def http_error(request, error):
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
        message = f"{request.method} {request.url.path}: {error.detail}"
        error_code(request, code)
        return _error_response(ApiError(error.status_code, message, None, code))

    def abandon():
        for each in batchers:
            each.abandon()

    def stop(grace):
        deadlines.stop(grace, abandon)

    routes = [
        Route("/v1/embeddings", _answers(embeddings), methods=["POST"]),
        Route("/v1/search", _answers(search), methods=["POST"]),
        Route("/v1/rerank", _answers(rerank), methods=["POST"]),
        Route("/v1/models", _answers(list_models), methods=["GET"]),
        Route("/v1/models/{model:path}", _answers(get_model), methods=["GET"]),
        Route("/health", _answers(health), methods=["GET"]),
        Route("/metrics", _answers(metrics_page), methods=["GET"]),
    ]
    middleware = [Middleware(Gateway, settings=gateway or Settings(), metrics=metrics, routes=routes)]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error}, middleware=middleware)
    app.state.stop = stop
    app.state.batchers = batchers
    app.state.metrics = metrics
    return app
