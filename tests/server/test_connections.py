"""Every connection bounded (`connections.bounded_protocol`): a head, a body, an idle keep-alive connection, an
answer its client does not read; and malformed HTTP answered in OpenAI's error shape. Raw sockets on
127.0.0.1, a server in this process with limits of about a second, bounded waits."""

import json
import socket
import time

import httpx
import pytest
from servers import MODEL, running

LIMIT = 1.0  # seconds: --header-timeout, --body-timeout, --keep-alive-timeout of these servers
WITHIN = LIMIT + 4.0  # what a test waits at most for the server to act (a loaded machine's margin)


@pytest.fixture(scope="module")
def server(tiny_encoder):
    limits = {"body_timeout": LIMIT, "max_inputs": 2048}
    with running(
        tiny_encoder, limits=limits, header_timeout=LIMIT, keep_alive_timeout=LIMIT, send_buffer=4096
    ) as served:
        yield served


@pytest.fixture(scope="module")
def port(server):
    return int(server[0].rsplit(":", 1)[1])


def connect(port, receive_buffer=None):
    sock = socket.socket()
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(WITHIN)
    sock.connect(("127.0.0.1", port))
    return sock


def read_to_the_end(sock):
    """Everything the server sends until it closes the connection, and the seconds that took (a
    `socket.timeout` past `WITHIN`: it did not close it)."""
    start, received = time.monotonic(), b""
    while chunk := sock.recv(65536):
        received += chunk
    return received, time.monotonic() - start


def error_of(answer, status):
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), head
    assert b"connection: close" in head.lower() and b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    return error


def test_a_body_that_stalls_after_10_of_100_bytes_is_closed_within_the_body_timeout(port):
    with connect(port) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b'{"input":"')
        answer, seconds = read_to_the_end(sock)
    assert error_of(answer, 408)["code"] == "body_timeout"
    assert LIMIT - 0.1 <= seconds < WITHIN


def test_50_connections_stalled_in_their_heads_are_all_closed(port):
    heads = [b"", b"POST /v1/embed", b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Le"]
    sockets = [connect(port) for _ in range(50)]
    try:
        for number, sock in enumerate(sockets):
            sock.sendall(heads[number % len(heads)])
        start = time.monotonic()
        answers = [read_to_the_end(sock)[0] for sock in sockets]
        assert time.monotonic() - start < WITHIN
    finally:
        for sock in sockets:
            sock.close()
    assert {error_of(answer, 408)["code"] for answer in answers} == {"header_timeout"}


def test_a_head_that_trickles_is_bounded_from_its_first_byte(port):
    with connect(port) as sock:
        start = time.monotonic()
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(int(WITHIN / 0.2)):  # a byte every 0.2 s: never idle, never whole
                sock.sendall(b"X")
                time.sleep(0.2)
        assert time.monotonic() - start < WITHIN


def test_a_head_over_the_limit_is_431(port):
    with connect(port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * (80 << 10))
        answer, _ = read_to_the_end(sock)
    assert error_of(answer, 431)["code"] == "request_head_too_large"


@pytest.mark.parametrize("length", [b"-5", b"abc", b"1e3", b"99999999999999999999999"])
def test_malformed_http_is_answered_400_in_openai_s_shape(port, length):
    with connect(port) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n{}")
        answer, _ = read_to_the_end(sock)
    error = error_of(answer, 400)
    assert error["code"] == "invalid_http" and error["message"].startswith("not a valid HTTP/1.1 request")


def test_a_keep_alive_connection_serves_requests_apart_and_is_closed_when_idle(server):
    url = server[0]
    with httpx.Client(timeout=WITHIN) as client:
        for _ in range(2):  # further apart than the head's limit: an idle connection has no head running
            assert client.get(f"{url}/health").status_code == 200
            time.sleep(LIMIT * 0.7)
    with connect(int(url.rsplit(":", 1)[1])) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer, seconds = read_to_the_end(sock)  # the answer, then the idle connection closed
    assert answer.startswith(b"HTTP/1.1 200 ") and seconds < WITHIN


def test_a_client_that_reads_nothing_of_a_large_answer_is_cut_off(server, port):
    url, batcher, _ = server
    body = json.dumps({"input": ["wing lift drag"] * 256, "model": MODEL, "encoding_format": "float"}).encode()
    batches = batcher.batches
    with connect(port, receive_buffer=4096) as sock:
        head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        sock.sendall(head + body)
        deadline = time.monotonic() + 60
        while batcher.batches == batches or batcher.queued or batcher.running:  # encoded: the answer is written
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(LIMIT + 2.0)  # reading nothing all along
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:  # aborted: what the server held for it dropped
            pass
    assert received.startswith(b"HTTP/1.1 200 ") and len(received) < 200_000  # of about 350 kB


def test_a_client_that_disconnects_inside_its_body_leaves_no_traceback(server, port, capfd, caplog):
    for _ in range(3):
        with connect(port) as sock:
            sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    time.sleep(0.5)  # the server sees the disconnections
    assert httpx.get(f"{server[0]}/health", timeout=WITHIN).status_code == 200
    assert "Traceback" not in capfd.readouterr().err + caplog.text
