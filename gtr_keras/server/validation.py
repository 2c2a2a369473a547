"""The request bodies of `gtr-keras serve`, read and checked before any work: `ApiError`s naming the field.

400: the body is not UTF-8, not JSON (NaN and Infinity are not JSON; nor is a
number of more digits than Python converts, nor nesting deeper than its parser
goes), or not a JSON object. 413: it is larger than the limit (kept no further;
`discard_body` reads the rest and drops it, so that a client that writes its
whole body before it reads the answer reads the 413).
422: a field is unknown, missing, of the wrong type or out of range, named as
`param` (`input[3]`); a text that UTF-8 cannot encode (a lone surrogate, which
JSON's `\\ud800` escape can write) is one, refused here, before it shares a batch.
Messages quote at most `SHOWN` characters of a value.
"""

import collections
import json
import sys

from starlette.requests import ClientDisconnect

from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import Filter
from gtr_keras.lexical.fusion import METHODS
from gtr_keras.retrieval.hybrid_retriever import RETRIEVERS
from gtr_keras.server.api_error import ApiError
from gtr_keras.utils.dimensions import dimensions_rule
from gtr_keras.utils.text_files import text_problem

EMBEDDING_FIELDS = ("input", "model", "encoding_format", "dimensions", "user", "input_type")
SEARCH_FIELDS = ("query", "queries", "k", "filter", "retriever", "fusion", "gtr_weight", "rerank", "rerank_depth")
RERANK_FIELDS = ("model", "query", "documents", "top_n", "return_documents")
ENCODING_FORMATS = ("float", "base64")
INPUT_TYPES = ("query", "document")
SHOWN = 60
# The most of a body over the limit that `discard_body` reads on and drops, past the limit: more, the answer goes
# at once and the client, still writing, may see the connection reset instead of it.
DISCARDED_BYTES = 64 << 20

EmbeddingRequest = collections.namedtuple("EmbeddingRequest", "texts kind model encoding_format dimensions")
EmbeddingRequest.__doc__ = """A checked `/v1/embeddings` body: its texts, their kind, the model name, the format and
the `dimensions` each embedding is cut to (None: all D)."""
SearchRequest = collections.namedtuple(
    "SearchRequest", "queries single k filter retriever fusion gtr_weight rerank_depth"
)
SearchRequest.__doc__ = """A checked `/v1/search` body (`single`: asked with `query`, not `queries`; `filter`: the
tuple of its clauses, ANDed, None for none; `rerank_depth`: the first-stage hits reranked per query, None without
`rerank`)."""
RerankRequest = collections.namedtuple("RerankRequest", "query documents top_n return_documents model")
RerankRequest.__doc__ = "A checked `/v1/rerank` body: its query, documents' texts, `top_n` (None: all) and model."


def _declares_over(length, limit):
    """Whether a Content-Length header's value (a string) declares a body of more than `limit` bytes."""
    return length.isascii() and length.isdigit() and (len(length) > 18 or int(length) > limit)


async def read_json(request, max_bytes, chunks):
    """The JSON object of a Starlette `request`'s body, read up to `max_bytes` from `chunks`, its
    `request.stream()` (left where it stopped: `discard_body` reads on).

    Raises:
        ApiError: 413 for a body over `max_bytes` (by its Content-Length, or once that many bytes came);
            400 for one that is not UTF-8, not JSON, or not an object.
    """
    length = request.headers.get("content-length", "")
    if _declares_over(length, max_bytes):
        shown = f"{int(length):,}" if len(length) <= 18 else _cut(length)
        raise ApiError(413, f"the body is {shown} bytes; at most {max_bytes:,}", None, "request_too_large")
    kept, size = [], 0
    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > max_bytes:
                raise ApiError(413, f"the body is over {max_bytes:,} bytes", None, "request_too_large")
            kept.append(chunk)
    except ClientDisconnect:
        message = "the client closed the connection before its body ended"
        raise ApiError(400, message, None, "client_disconnected") from None
    raw = b"".join(kept)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        message = f"the body is not UTF-8 (byte {error.start}: {error.reason})"
        raise ApiError(400, message, None, "invalid_utf8") from None
    try:
        body = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as error:
        message = f"the body is not JSON ({error.msg} at line {error.lineno} column {error.colno})"
        raise ApiError(400, message, None, "invalid_json") from None
    except RecursionError:
        raise ApiError(400, "the body is not JSON this server reads: nested too deeply", None, "invalid_json") from None
    except ValueError:  # the one other error of `json.loads`: an integer too long to convert
        message = f"the body is not JSON this server reads: a number of over {sys.get_int_max_str_digits():,} digits"
        raise ApiError(400, message, None, "invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the body must be a JSON object, got {_json_type(body)}", None, "invalid_json")
    return body


async def discard_body(request, max_bytes, chunks):
    """Reads on what `read_json` left of `chunks` (`request.stream()`), a body refused as over `max_bytes`, and
    drops it, so that its client, which may write its whole body before it reads the answer (`http.client`,
    `urllib`), finds the answer once it did, and the connection closes with nothing unread (closing on unread
    bytes resets it, and the answer may be lost). At most `DISCARDED_BYTES` past `max_bytes` are read in all,
    `read_json`'s bytes counted (each of the two stops at the chunk that crosses its limit): none for a
    Content-Length of more, nor for a client waiting for `Expect: 100-continue` (it has sent no body).
    Bounded in time by the caller.

    Example:
    >>> chunks = request.stream()
    >>> await read_json(request, 8 << 20, chunks)  # doctest: +SKIP
    >>> await discard_body(request, 8 << 20, chunks)  # after its 413  # doctest: +SKIP
    """
    most = max_bytes + DISCARDED_BYTES
    length = request.headers.get("content-length", "")
    if request.headers.get("expect", "").lower() == "100-continue":
        return
    refused_by_length = _declares_over(length, max_bytes)
    if _declares_over(length, most):
        return
    size = 0 if refused_by_length else max_bytes  # read_json read none, or over max_bytes, before its 413
    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > most:
                return
    except ClientDisconnect:
        return


def _not_json(constant):
    raise ApiError(400, f"the body is not JSON ({constant} is not a JSON number)", None, "invalid_json")


def _cut(text):
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def _shown(value):
    """`value` as a message quotes it: JSON for a string or a number (at most `SHOWN` characters), the type's
    name for an array or an object."""
    return _json_type(value) if isinstance(value, (list, dict)) else _cut(json.dumps(value))


def _json_type(value):
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), "null")


def _refuse(param, message, code="invalid_value"):
    raise ApiError(422, f"{param}: {message}", param, code)


def _check_fields(body, fields):
    unknown = next((name for name in body if name not in fields), None)
    if unknown is not None:
        _refuse(_cut(unknown), f"unknown field (the fields are {', '.join(fields)})", "unknown_field")


def _model(body, served):
    """The served model `body` asks for (one of `served`): 422 missing or not a string, 404 not served."""
    if "model" not in body:
        _refuse("model", "missing (a required field)", "missing_field")
    model = body["model"]
    if not isinstance(model, str):
        _refuse("model", f"must be a string, got {_json_type(model)}", "invalid_type")
    if model not in served:
        message = f"model: {_shown(model)} is not served here (served: {', '.join(served)})"
        raise ApiError(404, message, "model", "model_not_found")
    return model


def _flag(body, field, default):
    value = body.get(field)
    if value is None:
        return default
    if not isinstance(value, bool):
        _refuse(field, f"must be true or false, got {_shown(value)}")
    return value


def _count(body, field, default, most=None):
    """`body[field]`: an integer from 1 (to `most`), or `default` when absent or null."""
    value = body.get(field)
    if value is None:
        return default
    if type(value) is not int or value < 1 or (most is not None and value > most):
        _refuse(field, f"must be an integer from 1{'' if most is None else f' to {most}'}, got {_shown(value)}")
    return value


def _choice(body, field, choices, default):
    value = body.get(field, default)
    if value is None:
        return default
    if not isinstance(value, str) or value not in choices:
        _refuse(field, f"must be one of {', '.join(choices)}, got {_shown(value)}")
    return value


def _check_text(param, text):
    """Refuses a text that UTF-8 cannot encode (a lone surrogate: `text_files.text_problem`, the rule of every
    text gtr-keras takes), naming where its first one is."""
    problem = text_problem(text)
    if problem is not None:
        _refuse(param, f"{problem}; send valid Unicode text", "invalid_text")


def _texts(body, field, max_items, blank=True):
    """The strings of `body[field]`: a string, or a non-empty list of at most `max_items` strings (`blank`:
    empty or white space ones too)."""
    value = body[field]
    if isinstance(value, str):
        value = [value]
    elif not isinstance(value, list):
        _refuse(field, f"must be a string or an array of strings, got {_json_type(value)}", "invalid_type")
    if not value:
        _refuse(field, "an empty array; send at least one string", "empty_input")
    if len(value) > max_items:
        _refuse(field, f"{len(value):,} items; at most {max_items:,} a request", "too_many_inputs")
    for i, text in enumerate(value):
        if isinstance(text, (int, list)) and not isinstance(text, bool):
            _refuse(f"{field}[{i}]", "token ids are not taken; send the text as a string", "invalid_type")
        if not isinstance(text, str):
            _refuse(f"{field}[{i}]", f"must be a string, got {_json_type(text)}", "invalid_type")
        _check_text(f"{field}[{i}]" if field != "query" else field, text)
        if not blank and not text.strip():
            _refuse(f"{field}[{i}]" if field == "queries" else field, "a blank query; send text", "empty_input")
    return value


def embedding_request(body, models, embedding_dim, max_inputs):
    """Checks a `/v1/embeddings` body (OpenAI's, with `input_type`).

    Args:
        body: the JSON object (`read_json`).
        models: `{served model name: "query", "document" or None}` (None: `input_type` says, default document).
        embedding_dim: D: `dimensions` is an integer from 1 to D (`utils.dimensions`' rule).
        max_inputs: the most texts a request may hold.

    Returns:
        An `EmbeddingRequest`.

    Raises:
        ApiError: 422 naming the field; 404 for a model not served.

    Example:
    >>> embedding_request({"input": "lift", "model": "gtr"}, {"gtr": None}, 768, 2048).kind
    'document'
    """
    _check_fields(body, EMBEDDING_FIELDS)
    if "input" not in body:
        _refuse("input", "missing (a required field)", "missing_field")
    model = _model(body, models)
    texts = _texts(body, "input", max_inputs)
    encoding_format = _choice(body, "encoding_format", ENCODING_FORMATS, "float")
    input_type = _choice(body, "input_type", INPUT_TYPES, None)
    if models[model] and input_type and input_type != models[model]:
        _refuse("input_type", f"{input_type!r}, but model {model!r} embeds {models[model]}s")
    dimensions = body.get("dimensions")
    if dimensions is not None and dimensions_rule(dimensions, embedding_dim):
        _refuse("dimensions", f"must be an integer from 1 to {embedding_dim}, got {_shown(dimensions)}")
    if body.get("user") is not None:
        if not isinstance(body["user"], str):
            _refuse("user", f"must be a string, got {_json_type(body['user'])}", "invalid_type")
        _check_text("user", body["user"])
    kind = models[model] or input_type or "document"
    return EmbeddingRequest(texts, kind, model, encoding_format, dimensions)


def _filter(body):
    """The clauses of `body["filter"]` (a clause, or an array of them, as `gtr-keras search --filter` takes them),
    each parsed (docs/filters.md); None for none."""
    value = body.get("filter")
    if value is None:
        return None
    clauses = [value] if isinstance(value, str) else value
    if not isinstance(clauses, list) or not all(isinstance(clause, str) for clause in clauses):
        _refuse("filter", f"must be a string or an array of strings, got {_shown(value)}", "invalid_type")
    try:
        Filter(clauses)
    except UserError as error:
        _refuse("filter", str(error))
    return tuple(clauses) or None


def search_request(body, max_queries, max_k, max_pairs=None):
    """Checks a `/v1/search` body: `query` (a string) or `queries` (strings), `k`, `filter` (a clause or an array
    of clauses, ANDed, as `gtr-keras search --filter` takes them; a field the index lacks is the search's 422),
    `retriever`, `fusion`,
    `gtr_weight` (the last two with `retriever` hybrid, as `gtr-keras search` takes them), `rerank` (true:
    each query's first `rerank_depth` hits, default `k`, reranked; at most `max_k` of them, and at most
    `max_pairs` (query, hit) pairs a request).

    Returns:
        A `SearchRequest`.

    Raises:
        ApiError: 422 naming the field.

    Example:
    >>> search_request({"query": "lift", "k": 5}, 64, 1000).queries
    ['lift']
    """
    _check_fields(body, SEARCH_FIELDS)
    if ("query" in body) == ("queries" in body):
        _refuse("query", "give one of query (a string) or queries (an array of strings)", "missing_field")
    single = "query" in body
    if single and not isinstance(body["query"], str):
        _refuse("query", f"must be a string, got {_json_type(body['query'])}", "invalid_type")
    queries = _texts(body, "query" if single else "queries", max_queries, blank=False)
    k = body.get("k", 10)
    if type(k) is not int or not 1 <= k <= max_k:
        _refuse("k", f"must be an integer from 1 to {max_k}, got {_shown(k)}")
    retriever = _choice(body, "retriever", RETRIEVERS, "gtr")
    fusion = _choice(body, "fusion", METHODS, None)
    gtr_weight = body.get("gtr_weight")
    if gtr_weight is not None:
        # compared as it is: an int of any size compares exactly (float() or isfinite of 10**400 would raise)
        if type(gtr_weight) not in (int, float) or not 0 <= gtr_weight <= 1:
            _refuse("gtr_weight", f"must be a number from 0 to 1, got {_shown(gtr_weight)}")
        gtr_weight = float(gtr_weight)
    for field, value in (("fusion", fusion), ("gtr_weight", gtr_weight)):
        if value is not None and retriever != "hybrid":
            _refuse(field, f"fuses retriever hybrid, not {retriever}")
    rerank = _flag(body, "rerank", False)
    depth = _count(body, "rerank_depth", k, max_k)
    if "rerank_depth" in body and body["rerank_depth"] is not None and not rerank:
        _refuse("rerank_depth", "goes with rerank: true")
    if rerank and depth < k:
        _refuse("rerank_depth", f"must be at least k ({k}): the best k of the reranked hits return, got {depth}")
    if rerank and max_pairs is not None and len(queries) * depth > max_pairs:
        message = f"{len(queries)} queries x {depth} hits are {len(queries) * depth:,} pairs; at most {max_pairs:,}"
        _refuse("rerank_depth", f"{message} a request", "too_many_inputs")
    return SearchRequest(queries, single, k, _filter(body), retriever, fusion, gtr_weight, depth if rerank else None)


def rerank_request(body, models, max_documents):
    """Checks a `/v1/rerank` body, the shape Cohere's, Jina's and text-embeddings-inference's clients send:
    `model`, `query` (a string), `documents` (strings, or objects `{"text": ...}` as Cohere's took them),
    `top_n` (default: all) and `return_documents` (default false).

    Args:
        body: the JSON object (`read_json`).
        models: the served reranker's name, in a sequence.
        max_documents: the most documents a request may hold.

    Returns:
        A `RerankRequest`.

    Raises:
        ApiError: 422 naming the field; 404 for a model not served.

    Example:
    >>> rerank_request({"model": "minilm", "query": "lift", "documents": ["a wing"]}, ["minilm"], 2048).top_n
    """
    _check_fields(body, RERANK_FIELDS)
    for field in ("query", "documents"):
        if field not in body:
            _refuse(field, "missing (a required field)", "missing_field")
    model = _model(body, models)
    if not isinstance(body["query"], str):
        _refuse("query", f"must be a string, got {_json_type(body['query'])}", "invalid_type")
    (query,) = _texts(body, "query", 1, blank=False)
    documents = body["documents"]
    if isinstance(documents, list):
        documents = [item["text"] if isinstance(item, dict) and list(item) == ["text"] else item for item in documents]
    documents = _texts({"documents": documents}, "documents", max_documents)
    top_n = _count(body, "top_n", None)
    return RerankRequest(query, documents, top_n, _flag(body, "return_documents", False), model)
