"""The `gtr-keras serve` process: its listening socket, the batcher, the live index and uvicorn, and how it
stops.

The socket is bound before anything heavy is imported or loaded (a port in use
is one line and exit status 2 at once: the command binds it first), and so is
the metrics port's, if any: one uvicorn server serves both sockets (the
gateway keeps `/metrics` to the metrics port). The server listens once the
model is loaded, and the index's first generation loads meanwhile (`/health`
answers 503 `loading`); the `listening on` line comes once it is loaded, and an
index that cannot be loaded stops the server (exit status 2, its one line). The first
SIGTERM or SIGINT makes uvicorn stop accepting connections and close idle ones;
the requests in flight get `grace_period` seconds to finish, and those
unfinished then are answered 503 (`stopping`) while the batchers abandon their
work, the encoder's between two forward passes (`app.build_app`'s
`state.stop`). The batchers' and the index watch's threads are then given
`JOIN_BOUND` seconds (then left running, daemons), and `serve` returns: within
the grace period and about a second. The command then exits 0 at once
(`cli.main`: `os._exit`, before the interpreter's teardown of TensorFlow, which
takes seconds, and would abort while a thread still runs a forward pass). A
second signal answers the requests in flight 503 and stops at once.
"""

import asyncio
import logging
import signal
import socket
import time

import uvicorn

from gtr_keras.errors import UserError
from gtr_keras.server.app import build_app
from gtr_keras.server.batcher import Batcher, encoding, query_encoder, token_lengths
from gtr_keras.server.connections import bounded_protocol
from gtr_keras.server.gateway.middleware import Settings
from gtr_keras.server.live_index import LiveIndex
from gtr_keras.server.rerank_scoring import pair_lengths, scoring

logger = logging.getLogger(__name__)

JOIN_BOUND = 0.5  # seconds the threads get to end after the server stopped (daemons left running past it)
BACKSTOP = 1.0  # seconds past the grace period after which uvicorn cancels what still runs
BACKLOG = 2048  # connections waiting to be accepted (uvicorn's default)


def listening_socket(host, port):
    """A TCP socket listening on `host`:`port` (0: a free port); connections wait in its backlog until the
    server accepts them. It listens at once: on Linux a second socket with `SO_REUSEADDR` binds a port that
    another binds but does not listen on yet, and only `listen` refuses it, so two servers started together
    on one port would both pass a bind.

    Raises:
        UserError: the address is in use, or not this machine's, naming it.

    Example:
    >>> listening_socket("127.0.0.1", 0).getsockname()[1] > 0
    True
    """
    sock = None
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as error:
        if sock is not None:
            sock.close()
        raise UserError(f"--host {host} --port {port}: cannot listen there ({error.strerror or error})") from None
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server with the stop of `gtr-keras serve`: once `should_exit` (the first SIGTERM or SIGINT),
    `stop(grace_period)` (the app's `state.stop`: the requests in flight answered by then) and, half a
    `BACKSTOP` past it, every connection still open cut (a client reading nothing of its answer), before
    uvicorn would cancel what still runs (with a traceback on stderr). A second signal sets `hurry`: all of
    it now (uvicorn's own second SIGINT ends its wait leaving the requests in flight unanswered)."""

    hurry = False

    def __init__(self, config, stop, grace_period):
        super().__init__(config)
        self.stop, self.grace_period = stop, grace_period

    def handle_exit(self, sig, frame):
        self._captured_signals.append(sig)  # raised again once uvicorn stopped, as uvicorn does
        if self.should_exit:
            self.hurry = True
        self.should_exit = True

    async def serve(self, sockets=None):
        serving = asyncio.ensure_future(super().serve(sockets))
        loop, given = asyncio.get_running_loop(), None
        while not serving.done():
            grace = 0.0 if self.hurry else self.grace_period if self.should_exit else None
            if grace is not None and (given is None or grace < given):
                given = grace
                self.stop(grace)
                loop.call_later(grace + BACKSTOP / 2, self._cut)
                if self.hurry:
                    loop.call_later(BACKSTOP, setattr, self, "force_exit", True)
            await asyncio.wait([serving], timeout=0.05)
        await serving

    def _cut(self):
        for connection in list(self.server_state.connections):
            connection.transport.abort()


def uvicorn_server(app, grace_period=30.0, header_timeout=10.0, body_timeout=30.0, keep_alive_timeout=5.0):
    """The `uvicorn.Server` of `app` (`app.build_app`'s): HTTP/1.1 with keep-alive, every connection bounded
    (`connections.bounded_protocol`: `header_timeout`; `body_timeout` for an answer its client does not
    read; idle `keep_alive_timeout`), warnings only (the access log is the gateway's), and at a stop the
    requests in flight answered within `grace_period` (`_Server`)."""
    config = uvicorn.Config(
        app,
        http=bounded_protocol(header_timeout, body_timeout),
        timeout_keep_alive=keep_alive_timeout,
        timeout_graceful_shutdown=grace_period + BACKSTOP,
        access_log=False,
        log_level="warning",
        lifespan="off",  # the batchers and the index's watch end after uvicorn, in `serve`, bounded
    )
    return _Server(config, app.state.stop, grace_period)


def _shut_down(batchers, live_index, sockets, tracing):
    """What `serve` ends once uvicorn stopped, each step whatever the others did, within `JOIN_BOUND` and the
    traces' flush: the batchers' work abandoned and their threads and the index's watch given the bound, the
    sockets closed, and the spans not yet exported flushed (`Tracing.close`). The command then ends by
    `os._exit` (`cli.main`), which runs no `atexit` hook: what an exporter or a buffer holds must be flushed
    here (OpenTelemetry's `BatchSpanProcessor` flushes at exit only through `atexit`)."""
    end = time.monotonic() + JOIN_BOUND
    steps = [each.abandon for each in batchers]  # nothing is waiting for them any more
    steps += [lambda: live_index.close(max(0.0, end - time.monotonic()))] if live_index else []
    steps += [lambda each=each: each.join(max(0.0, end - time.monotonic())) for each in batchers]
    steps += [each.close for each in sockets if each is not None]
    steps += [tracing.close] if tracing else []
    problems = []
    for step in steps:
        try:
            step()
        except Exception as error:  # the next steps still run; the first problem is raised after them
            problems.append(error)
    if problems:
        raise problems[0]


def serve(
    encoder,
    model_name,
    sock,
    index_dir=None,
    model_source=None,
    fusion=None,
    batch_size=32,
    max_wait=0.0,
    max_queue=4096,
    timeout=60.0,
    poll_interval=2.0,
    grace_period=30.0,
    limits=None,
    access_log=None,
    header_timeout=10.0,
    keep_alive_timeout=5.0,
    keys=None,
    tracing=None,
    metrics_sock=None,
    max_batch_tokens=None,
    reranker=None,
    reranker_name=None,
    collection=None,
):
    """Serves `encoder` (and the index `index_dir`) on `sock` until SIGTERM or SIGINT; then returns (a thread
    still in a forward pass or a load `JOIN_BOUND` seconds after the stop is left running, a daemon).

    Args:
        encoder: what `gtr_keras.load` returns.
        model_name: the served model's name (`app.served_models`).
        sock: the bound socket (`listening_socket`).
        index_dir: the index directory `/v1/search` answers from, or None.
        model_source: the model's directory or source (the fusion a hybrid search's options start from).
        fusion: the `Fusion` of hybrid searches without fusion options.
        batch_size, max_wait, max_queue, timeout: the `Batcher`s' (the encoder's and the searches').
        poll_interval: seconds between looks at the index's commit points (`LiveIndex`).
        grace_period: seconds the requests in flight get to finish at a stop.
        limits: `app.build_app`'s (its `body_timeout` also bounds a client's reading of an answer).
        access_log: an `AccessLog` writing a line per request, or None.
        header_timeout: seconds a request's head may take (`connections.bounded_protocol`).
        keep_alive_timeout: seconds an idle keep-alive connection stays open.
        keys: the `ApiKeys` every request but `/health`'s must carry, or None.
        tracing: the `Tracing` of the requests' spans, or None.
        metrics_sock: a second bound socket, the only one that serves `/metrics`; or None.
        max_batch_tokens: the encoder's (and the reranker's) batches' budget of padded tokens instead of
            `batch_size` texts (pairs).
        reranker: a reranker's scorer (`gtr_keras.load(RERANKER_DIR)`) for `/v1/rerank` and searches with
            `rerank`, batched by its own `Batcher` (`rerank_scoring.scoring`); or None.
        reranker_name: its name in requests and `/v1/models`.
        collection: with an engine target as `index_dir` (`qdrant:PATH`, ...), the collection `/v1/search`
            answers from (`LiveIndex`).

    Raises:
        UserError: the index's first generation cannot be loaded (the server stops first).

    Example:
    >>> serve(gtr_keras.load("gtr_small_distilled_en"), "gtr_small_distilled_en", listening_socket("127.0.0.1", 8000))
    """
    lengths = token_lengths(encoder) if max_batch_tokens else None
    run_encoder = encoding(encoder, batch_size, max_batch_tokens)
    settings = (batch_size, max_wait, max_queue, timeout, "gtr-keras-encoder", max_batch_tokens, lengths)
    batcher = Batcher(run_encoder, *settings)
    reranks = None
    try:
        if reranker is not None:
            measure = pair_lengths(reranker) if max_batch_tokens else None
            run_reranker = scoring(reranker, batch_size, max_batch_tokens)
            reranks = Batcher(run_reranker, *settings[:4], "gtr-keras-reranker", max_batch_tokens, measure)
        queries = query_encoder(batcher, encoder)
        live_index = index_dir and LiveIndex(index_dir, encoder, queries, fusion, poll_interval, False, collection)
    except BaseException:
        for each in (batcher, reranks):
            if each is not None:
                each.close(0)
        raise
    metrics_port = metrics_sock.getsockname()[1] if metrics_sock else None
    gateway = Settings(keys, access_log, tracing, metrics_port)
    app = build_app(
        batcher, model_name, encoder.embedding_dim, live_index, model_source, limits, gateway, reranks, reranker_name
    )
    body_timeout = (limits or {}).get("body_timeout", 30.0)
    server = uvicorn_server(app, grace_period, header_timeout, body_timeout, keep_alive_timeout)
    host, port = sock.getsockname()[:2]

    async def run():
        serving = asyncio.ensure_future(server.serve(sockets=[sock, *([metrics_sock] if metrics_sock else [])]))
        while not (server.started and (not live_index or live_index.current or live_index.error)):
            if serving.done():
                break
            await asyncio.sleep(0.02)
        if live_index and live_index.error:
            server.should_exit = True
        elif server.started and not serving.done():
            index = f", index {index_dir}" if index_dir else ""
            index += f", reranker {reranker_name}" if reranks else ""
            index += f", metrics on http://{host}:{metrics_port}/metrics" if metrics_port else ""
            logger.info("gtr-keras serve: listening on http://%s:%s (model %s%s)", host, port, model_name, index)
        await serving

    # uvicorn handles the signals while it serves and raises them again once stopped, into the handlers it
    # found: these, which let the command return (exit 0) instead of dying of the signal.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
            runner.run(run())
    except SystemExit as exit_:  # uvicorn's own exit at a failed start-up
        raise UserError(f"the server could not start (uvicorn exit {exit_.code})") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _shut_down(app.state.batchers, live_index, [sock, metrics_sock], tracing)
    error = live_index and live_index.error
    if isinstance(error, (UserError, OSError)):
        raise UserError(str(error)) from None
    if error:
        raise error
