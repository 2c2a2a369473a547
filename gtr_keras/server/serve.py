"""The `gtr-keras serve` process: its listening socket, the batcher, the live index and uvicorn, and how it
stops.

The socket is bound before the model loads (a port in use is one line and exit
status 2 at once). The first SIGTERM or SIGINT makes uvicorn stop accepting
connections, close idle ones, and wait for the requests in flight, up to
`grace_period` seconds (then they are cancelled); the batcher and the index's
watch end after them, and `serve` returns (the command exits 0). A second
SIGINT ends the wait.
"""

import asyncio
import signal
import socket
import sys

import uvicorn

from gtr_keras.errors import UserError
from gtr_keras.server.app import build_app
from gtr_keras.server.batcher import Batcher, encoding, query_encoder
from gtr_keras.server.live_index import LiveIndex


def listening_socket(host, port):
    """A TCP socket bound to `host`:`port` (0: a free port), not yet listening.

    Raises:
        UserError: the address is in use, or not this machine's, naming it.

    Example:
    >>> listening_socket("127.0.0.1", 0).getsockname()[1] > 0
    True
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as error:
        raise UserError(f"--host {host} --port {port}: cannot listen there ({error.strerror or error})") from None
    sock.set_inheritable(True)
    return sock


def uvicorn_server(app, grace_period=30.0, access_log=False):
    """The `uvicorn.Server` of `app`: HTTP/1.1 with keep-alive, no access log unless asked, warnings only,
    and `grace_period` seconds for the requests in flight at a stop."""
    config = uvicorn.Config(
        app,
        timeout_graceful_shutdown=grace_period,
        access_log=access_log,
        log_level="warning",
        lifespan="on",
    )
    return uvicorn.Server(config)


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
    access_log=False,
):
    """Serves `encoder` (and the index `index_dir`) on `sock` until SIGTERM or SIGINT; then returns.

    Args:
        encoder: what `gtr_keras.load` returns.
        model_name: the served model's name (`app.served_models`).
        sock: the bound socket (`listening_socket`).
        index_dir: the index directory `/v1/search` answers from, or None.
        model_source: the model's directory or source (the fusion a hybrid search's options start from).
        fusion: the `Fusion` of hybrid searches without fusion options.
        batch_size, max_wait, max_queue, timeout: the `Batcher`s' (the encoder's and the searches').
        poll_interval: seconds between looks at the index's commit points (`LiveIndex`).
        grace_period: seconds the requests in flight at a stop get to finish.
        limits: `app.build_app`'s.
        access_log: log each request (uvicorn's access log) on stderr.

    Example:
    >>> serve(gtr_keras.load("gtr-small-distilled"), "gtr-small-distilled", listening_socket("127.0.0.1", 8000))
    """
    batcher = Batcher(encoding(encoder, batch_size), batch_size, max_wait, max_queue, timeout, "gtr-keras-encoder")
    try:
        live_index = index_dir and LiveIndex(index_dir, encoder, query_encoder(batcher), fusion, poll_interval)
    except BaseException:
        batcher.close()
        raise
    app = build_app(batcher, model_name, encoder.embedding_dim, live_index, model_source, limits)
    server = uvicorn_server(app, grace_period, access_log)
    host, port = sock.getsockname()[:2]

    async def run():
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.02)
        if server.started:
            index = f", index {index_dir}" if index_dir else ""
            print(f"gtr-keras serve: listening on http://{host}:{port} (model {model_name}{index})", flush=True)
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
        if live_index:
            live_index.close()
        batcher.close()
        sock.close()
    print("gtr-keras serve: stopped", file=sys.stderr, flush=True)
