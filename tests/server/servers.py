"""Helpers of the server tests: an in-process `gtr-keras serve` (uvicorn in a thread, 127.0.0.1, a free
port) and a tiny corpus to index."""

import contextlib
import socket
import threading
import time

import numpy as np

from gtr_keras.beir.readers import Corpus
from gtr_keras.server.app import build_app
from gtr_keras.server.batcher import Batcher, encoding, query_encoder
from gtr_keras.server.live_index import LiveIndex
from gtr_keras.server.serve import listening_socket, uvicorn_server

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
MODEL = "tiny"


def corpus(n=40, seed=0, prefix="d"):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 12))) for _ in range(n)]
    return Corpus([f"{prefix}{i}" for i in range(n)], [f"title {prefix}{i}" for i in range(n)], texts)


@contextlib.contextmanager
def serving(
    encoder,
    index_dir=None,
    model_dir=None,
    limits=None,
    max_wait=0.0,
    max_queue=4096,
    poll_interval=None,
    header_timeout=10.0,
    keep_alive_timeout=5.0,
    send_buffer=None,
    grace_period=5.0,
):
    """Serves `encoder` (and `index_dir`) in this process; yields `(base URL, batcher, live index or None,
    uvicorn server)`. `send_buffer`: the bytes of each connection's socket send buffer (default: the
    system's). Setting the server's `should_exit` (`hurry`) is what the first (second) signal does."""
    batcher = Batcher(encoding(encoder, 32), 32, max_wait, max_queue, timeout=30.0)
    live = index_dir and LiveIndex(index_dir, encoder, query_encoder(batcher), poll_interval=poll_interval)
    app = build_app(batcher, MODEL, encoder.embedding_dim, live, model_dir, limits)
    sock = listening_socket("127.0.0.1", 0)
    if send_buffer:  # accepted connections take it from the listening socket
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    body_timeout = (limits or {}).get("body_timeout", 30.0)
    server = uvicorn_server(
        app,
        grace_period=grace_period,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        keep_alive_timeout=keep_alive_timeout,
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "the server did not start within 30 s"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", batcher, live, server
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        for each in app.state.batchers:
            each.close()
        if live:
            live.close()
        assert not thread.is_alive(), "the server did not stop within 30 s"


@contextlib.contextmanager
def running(encoder, *args, **kwargs):
    """`serving`, yielding `(base URL, batcher, live index or None)`."""
    with serving(encoder, *args, **kwargs) as (url, batcher, live, _):
        yield url, batcher, live
