"""`gtr-keras serve`: embeddings and search over HTTP, the listening sockets and keys taken before the model loads."""

import argparse
import contextlib
import ipaddress
import os
import socket
import sys
import urllib.parse

from gtr_keras.cli.helpers import handler_inputs
from gtr_keras.cli.helpers.flag_checks import check_engine_index
from gtr_keras.cli.helpers.flag_types import (
    MODEL_HELP,
    PROG,
    at_least_one,
    index_or_target,
    input_file,
    port_number,
    seconds,
)
from gtr_keras.cli.helpers.shared_flags import (
    add_batch_size,
    add_encoder_arguments,
)
from gtr_keras.errors import UserError


def add_parser(subparsers, parents):
    """Adds `serve` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "serve",
        help="embeddings and search over HTTP (OpenAI's /v1/embeddings, /v1/search)",
        description="Serves the model's embeddings in OpenAI's /v1/embeddings schema and, with --index, searches "
        "of the index at /v1/search (with --reranker, reranks at /v1/rerank), on uvicorn; requests are encoded "
        "together in batches across clients, and an update of the index is served without a restart "
        "(docs/serving.md). SIGTERM or SIGINT stops it.",
        parents=parents,
    )
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument(
        "--index",
        type=index_or_target,
        help="index directory for /v1/search, or an engine's target (qdrant:PATH, milvus:PATH.db, ...) with "
        "--collection (default: none)",
    )
    p.add_argument(
        "--collection", help="with an engine's target as --index: the collection `push` wrote (default: none)"
    )
    p.add_argument(
        "--reranker",
        metavar="MODEL",
        help="a reranker for /v1/rerank (Cohere's and Jina's schema) and for /v1/search's rerank: a cross-encoder "
        "checkpoint or the model directory `gtr-keras convert` wrote from one; served as its directory's name "
        "(docs/reranking.md) (default: none)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=port_number, default=8000, help="port to listen on (0: a free one, printed)")
    p.add_argument(
        "--served-model-name",
        help="the model's name in requests and /v1/models, with NAME-query and NAME-document "
        "(default: the --model directory's name)",
    )
    group = p.add_argument_group("batching (across requests)")
    add_batch_size(group, "texts (of one or several requests)")
    group.add_argument(
        "--max-wait-ms",
        type=seconds(zero=True, per_second=1000, unit="milliseconds"),
        default=0.0,
        help="how long an idle encoder waits after a request for others to share its batch (0: none; under "
        "load, requests share batches anyway: they queue while it encodes)",
    )
    group.add_argument(
        "--max-queue", type=at_least_one, default=4096, help="texts waiting at most; a request beyond is a 503"
    )
    group.add_argument(
        "--max-batch-tokens",
        type=at_least_one,
        default=None,
        help="bound each batch by padded tokens instead of --batch-size texts, as text-embeddings-inference "
        "does: a forward pass holds at most N padded tokens (and --batch-size texts), texts of like lengths "
        "together; at least the model's document budget (default: batches of --batch-size texts)",
    )
    group = p.add_argument_group("limits")
    group.add_argument("--max-inputs", type=at_least_one, default=2048, help="texts per embedding request")
    group.add_argument("--max-body-bytes", type=at_least_one, default=8 << 20, help="request body size (413 beyond)")
    group.add_argument("--max-queries", type=at_least_one, default=64, help="queries per search request")
    group.add_argument("--max-k", type=at_least_one, default=1000, help="largest k of a search")
    group.add_argument(
        "--request-timeout",
        type=seconds(),
        default=60.0,
        help="seconds a request waits for its embeddings or hits once its body is read (then a 503)",
    )
    group = p.add_argument_group("connections (each is closed past its limit)")
    group.add_argument(
        "--header-timeout",
        type=seconds(),
        default=10.0,
        help="seconds a request's head (request line and headers) may take to arrive, from the connection's "
        "opening or a later request's first byte (then a 408)",
    )
    group.add_argument(
        "--body-timeout",
        type=seconds(),
        default=30.0,
        help="seconds a request's body may take to arrive (then a 408), and an answer may wait for its client "
        "to read any of it",
    )
    group.add_argument(
        "--keep-alive-timeout",
        type=seconds(),
        default=5.0,
        help="seconds an idle keep-alive connection stays open",
    )
    group = p.add_argument_group("live index and stopping")
    group.add_argument(
        "--poll-interval",
        type=seconds(),
        default=2.0,
        help="seconds between looks for a new generation of --index (an update or a rebuild) or a search setting "
        "`tune` recorded",
    )
    group.add_argument(
        "--grace-period",
        type=seconds(zero=True),
        default=30.0,
        help="seconds the requests in flight get to finish after SIGTERM or SIGINT (those unfinished then get a "
        "503); a second signal stops at once",
    )
    group = p.add_argument_group("keys, metrics, traces and logs (docs/serving.md)")
    group.add_argument(
        "--api-key",
        action="append",
        dest="api_keys",
        metavar="KEY",
        help="a key requests must carry (Authorization: Bearer KEY; 401 otherwise), on every path but /health; "
        "repeatable (a key here shows in the process list: prefer --api-keys-file; default: none, no key asked)",
    )
    group.add_argument(
        "--api-keys-file",
        type=input_file,
        metavar="FILE",
        help="a local file of keys, one a line (# comments), read again when it changes: a key rotates "
        "without a restart (default: none)",
    )
    group.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve a --host other than loopback without a key (refused otherwise)",
    )
    group.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve /metrics (Prometheus' text format) on this port only, on --host (default: on --port)",
    )
    group.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="export OpenTelemetry traces there by OTLP over HTTP, e.g. http://collector:4318 (needs the otel "
        "extra; /v1/traces is added to a URL without a path; default: none, no traces)",
    )
    group.add_argument("--access-log", action="store_true", help="log every request on stderr, one line")
    group.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="the access log's lines: text, or a JSON object a line (json turns the access log on)",
    )
    add_encoder_arguments(p)
    return p


def loopback(host):
    """True when every address `host` names is a loopback one (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0].split("%")[0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False  # listening there says what is wrong
    return bool(addresses) and all(ipaddress.ip_address(address).is_loopback for address in addresses)


def check(args, parser):
    """`--max-queue` holds a request of `--max-inputs` or `--max-queries` and a batch of `--batch-size` (a
    request it cannot hold would be told to retry forever; the flags of seconds are bounded by their type,
    `arguments.seconds`); a `--host` other than loopback needs a key or `--allow-unauthenticated`; keys are
    printable ASCII; the OTLP endpoint is an HTTP URL; a token budget holds a text of `--document-length`; the
    reranker's name (its directory's) is not one the model is served under."""
    check_engine_index(args, parser)
    for flag, value in (("--max-inputs", args.max_inputs), ("--max-queries", args.max_queries)):
        if value > args.max_queue:
            parser.error(f"argument {flag}: {value} is more than --max-queue holds")
    if args.batch_size > args.max_queue:
        parser.error(f"argument --batch-size: {args.batch_size} is more than --max-queue holds (a batch never fills)")
    model = args.served_model_name or os.path.basename(str(args.model).rstrip("/"))
    if args.reranker and os.path.basename(args.reranker.rstrip("/")) in (model, f"{model}-query", f"{model}-document"):
        parser.error(
            f"argument --reranker: its name is one the model is served under ({model}); give the model another "
            "with --served-model-name"
        )
    if any(not key or not all("!" <= character <= "~" for character in key) for key in args.api_keys or ()):
        parser.error("argument --api-key: a key must be printable ASCII without spaces (the key is not shown)")
    keyed = bool(args.api_keys or args.api_keys_file)
    if not keyed and not args.allow_unauthenticated and not loopback(args.host):
        parser.error(
            f"argument --host: {args.host} is not a loopback address: give --api-key or --api-keys-file, or "
            "--allow-unauthenticated to serve anyone who reaches it"
        )
    if args.metrics_port and args.metrics_port == args.port:
        parser.error(f"argument --metrics-port: {args.metrics_port} is --port; give another (or none)")
    if args.otlp_endpoint is not None:
        parts = urllib.parse.urlsplit(args.otlp_endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            parser.error(f"argument --otlp-endpoint: {args.otlp_endpoint!r} is not an http:// or https:// URL")
    length = args.document_length
    if args.max_batch_tokens is not None and length is not None and args.max_batch_tokens < length:
        parser.error(
            f"argument --max-batch-tokens: {args.max_batch_tokens} is less than --document-length {length}: "
            "a text of the document budget would fit no batch"
        )


def before_the_model(args):
    """`serve`'s listening sockets (`--port`'s, `args.socket`, and `--metrics-port`'s, `args.metrics_socket`)
    and its keys (`args.keys`), before the model is resolved or TensorFlow imported: a port in use or a
    malformed keys file is exit 2 at once. The command holds the sockets until it ends."""
    from gtr_keras.server.gateway.keys import ApiKeys
    from gtr_keras.server.serve import listening_socket

    keyed = args.api_keys or args.api_keys_file
    args.keys = ApiKeys(args.api_keys or (), args.api_keys_file) if keyed else None
    if not keyed and not loopback(args.host):  # --allow-unauthenticated: said once, at start
        print(
            f"{PROG} serve: warning: serving {args.host} without a key (--allow-unauthenticated): anyone who "
            "reaches the port can use it",
            file=sys.stderr,
            flush=True,
        )
    held = contextlib.ExitStack()
    args.socket = held.enter_context(listening_socket(args.host, args.port))
    args.metrics_socket = None
    if args.metrics_port is not None:
        try:
            args.metrics_socket = held.enter_context(listening_socket(args.host, args.metrics_port))
        except UserError as error:
            held.close()
            raise UserError(str(error).replace("--port", "--metrics-port")) from None
    return held


def run(args):
    from gtr_keras.lexical.fusion import model_fusion
    from gtr_keras.models.gtr.encoder import Encoder
    from gtr_keras.server.gateway.request_log import AccessLog
    from gtr_keras.server.serve import serve as serve_http

    fusion = model_fusion(args.model) if args.index else None  # a bad record before the model loads
    reranker = _serve_reranker_source(args)  # a model directory that holds no reranker, before any model loads
    limits = {name: getattr(args, name) for name in ("max_inputs", "max_body_bytes", "max_queries", "max_k")}
    limits["body_timeout"] = args.body_timeout
    encoder = _any_encoder(args)
    if args.index and not isinstance(encoder, Encoder):
        raise UserError(
            f"--index: {args.model} is an export, which an index cannot check as the model it was built "
            "with; serve the index with the model directory (exports serve /v1/embeddings)"
        )
    if args.max_batch_tokens is not None and args.max_batch_tokens < encoder.document_length:
        raise UserError(
            f"--max-batch-tokens: {args.max_batch_tokens} is less than the model's document budget "
            f"({encoder.document_length} tokens): a text of that length would fit no batch"
        )
    scorer = reranker and handler_inputs.reranker(args, reranker)
    if scorer and args.max_batch_tokens is not None and args.max_batch_tokens < scorer.sequence_length:
        raise UserError(
            f"--max-batch-tokens: {args.max_batch_tokens} is less than the reranker's pair budget "
            f"({scorer.sequence_length} tokens): a pair of that length would fit no batch"
        )
    logged = args.access_log or args.log_format == "json"
    serve_http(
        encoder,
        args.served_model_name or os.path.basename(str(args.model).rstrip("/")),
        args.socket,
        index_dir=args.index,
        model_source=args.model,
        fusion=fusion,
        batch_size=args.batch_size,
        max_wait=args.max_wait_ms / 1000,
        max_queue=args.max_queue,
        timeout=args.request_timeout,
        poll_interval=args.poll_interval,
        grace_period=args.grace_period,
        limits=limits,
        access_log=AccessLog(args.log_format, sys.stderr) if logged else None,
        header_timeout=args.header_timeout,
        keep_alive_timeout=args.keep_alive_timeout,
        keys=args.keys,
        tracing=_tracing(args.otlp_endpoint),
        metrics_sock=args.metrics_socket,
        max_batch_tokens=args.max_batch_tokens,
        reranker=scorer,
        reranker_name=scorer and os.path.basename(args.reranker.rstrip("/")),
        collection=args.collection,
    )
    print("gtr-keras serve: stopped", file=sys.stderr, flush=True)


def _any_encoder(args):
    """The `--model` encoder of a model directory (`_encoder`) or of any export `gtr_keras.load` takes."""
    from gtr_keras.exports.export_formats import format_of_directory
    from gtr_keras.loading import load

    if format_of_directory(args.model) is None:
        return handler_inputs.encoder(args)
    dtype = "bfloat16" if args.precision == "bfloat16" else None  # refused for an export, in one line
    return load(args.model, dtype=dtype, query_length=args.query_length, document_length=args.document_length)


def _serve_reranker_source(args):
    """`serve --reranker`'s resolved source (`_reranker_source`), or None."""
    try:
        return handler_inputs.reranker_source(argparse.Namespace(rerank=args.reranker))
    except UserError as error:
        raise UserError(str(error).replace("--rerank:", "--reranker:", 1)) from None


def _tracing(endpoint):
    """The `Tracing` exporting to `--otlp-endpoint`, or None."""
    if endpoint is None:
        return None
    from gtr_keras.server.gateway.tracing import Tracing, otlp_provider

    return Tracing(otlp_provider(endpoint))
