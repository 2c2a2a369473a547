"""Helpers of the server tests: an in-process `gtr-keras serve` (uvicorn in a thread, 127.0.0.1, a free
port), the command in a process of its own (`Served`), and a tiny corpus to index."""

import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
from conftest import REPO

from gtr_keras.beir.readers import Corpus
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.server.app import build_app
from gtr_keras.server.batcher import Batcher, encoding, query_encoder, token_lengths
from gtr_keras.server.live_index import LiveIndex
from gtr_keras.server.rerank_scoring import pair_lengths, scoring
from gtr_keras.server.serve import listening_socket, uvicorn_server

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
MODEL = "tiny"
RERANKER = "tiny-reranker"


def corpus(n=40, seed=0, prefix="d"):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 12))) for _ in range(n)]
    return Corpus([f"{prefix}{i}" for i in range(n)], [f"title {prefix}{i}" for i in range(n)], texts)


def indexed(tmp_path_factory, encoder, model_dir, name="index"):
    """A tiny index of `corpus()`, built by `encoder` in a new temporary directory."""
    directory = tmp_path_factory.mktemp(name) / "index"
    build_index(encoder, corpus(), directory, model_dir=model_dir)
    return directory


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
    gateway=None,
    max_batch_tokens=None,
    more_sockets=(),
    wait=True,
    reranker=None,
    collection=None,
):
    """Serves `encoder` (and `index_dir`) in this process; yields `(base URL, batcher, live index or None,
    uvicorn server)`. `send_buffer`: the bytes of each connection's socket send buffer (default: the
    system's). Setting the server's `should_exit` (`hurry`) is what the first (second) signal does.
    `gateway`: the gateway's `Settings`; `more_sockets`: bound sockets served too (a metrics port's);
    `wait`: False loads the index's first generation in the background; `reranker`: a reranker's scorer served
    as `RERANKER` (its pairs in batches of 32, or of `max_batch_tokens`); `collection`: with an engine's target
    as `index_dir`, the collection served."""
    lengths = token_lengths(encoder) if max_batch_tokens else None
    run = encoding(encoder, 32, max_batch_tokens)
    batcher = Batcher(run, 32, max_wait, max_queue, 30.0, "gtr-keras-encoder", max_batch_tokens, lengths)
    queries = query_encoder(batcher, encoder)
    live = index_dir and LiveIndex(index_dir, encoder, queries, None, poll_interval, wait, collection)
    reranks = reranker and Batcher(
        scoring(reranker, 32, max_batch_tokens),
        *(32, max_wait, max_queue, 30.0, "gtr-keras-reranker", max_batch_tokens),
        pair_lengths(reranker) if max_batch_tokens else None,
    )
    app = build_app(batcher, MODEL, encoder.embedding_dim, live, model_dir, limits, gateway, reranks, RERANKER)
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
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock, *more_sockets]}, daemon=True)
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
        for each in more_sockets:
            each.close()
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


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Served:
    """`gtr-keras serve ARGS --port P` started, its stdout read in a thread until it says it listens."""

    def __init__(self, *args):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "gtr_keras", "serve", *map(str, args), "--port", str(self.port)]
        self.process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines, listening = [], threading.Event()

        def read():
            for line in self.process.stdout:
                self.lines.append(line)
                if "listening on" in line:
                    listening.set()

        threading.Thread(target=read, daemon=True).start()
        if not listening.wait(120):
            self.process.kill()
            raise AssertionError(f"not listening within 120 s: {self.process.communicate(timeout=30)[1][-2000:]}")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Sends `sig`; returns `(exit status, seconds it took to exit, stderr)`."""
        start = time.monotonic()
        self.process.send_signal(sig)
        try:
            _, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        return self.process.returncode, time.monotonic() - start, err
