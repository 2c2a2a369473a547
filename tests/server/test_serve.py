"""The `gtr-keras serve` command in a process of its own, on 127.0.0.1 and a free port, with bounded waits."""

import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import openai
import pytest
from conftest import REPO
from servers import MODEL, Served, corpus, free_port, serving

from gtr_keras.errors import UserError
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.server.serve import listening_socket


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_encoder, tiny_model_dir):
    directory = tmp_path_factory.mktemp("serve-command") / "index"
    build_index(tiny_encoder, corpus(), directory, model_dir=tiny_model_dir)
    return directory


@pytest.mark.large
def test_the_command_serves_embeddings_and_search_and_stops_at_sigterm(tiny_model_dir, tiny_encoder, index_dir):
    served = Served("--model", tiny_model_dir, "--index", index_dir, "--served-model-name", "gtr")
    try:
        assert served.lines[0].strip() == f"gtr-keras serve: listening on {served.url} (model gtr, index {index_dir})"
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=30)
        texts = ["lift on a wing", "shock waves"]
        answer = client.embeddings.create(input=texts, model="gtr")
        embeddings = np.array([d.embedding for d in answer.data])
        np.testing.assert_allclose(embeddings, tiny_encoder.encode_documents(texts), atol=1e-6, rtol=0)
        found = httpx.post(f"{served.url}/v1/search", json={"query": "wing lift", "k": 5}, timeout=30).json()
        assert len(found["hits"]) == 5 and {"id", "score"} <= set(found["hits"][0])
        several = httpx.post(f"{served.url}/v1/search", json={"queries": ["wing", "heat"], "k": 2}, timeout=30)
        assert [len(r["hits"]) for r in several.json()["results"]] == [2, 2]
        bad = httpx.post(f"{served.url}/v1/embeddings", content=b"not json", timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
        with pytest.raises(openai.UnprocessableEntityError):
            client.embeddings.create(input="x", model="gtr", extra_body={"colour": "red"})
    finally:
        status, seconds, err = served.stop()
    assert status == 0, err
    assert err.strip().splitlines()[-1] == "gtr-keras serve: stopped" and "Traceback" not in err


@pytest.mark.large
@pytest.mark.large
def test_the_command_answers_v1_search_from_an_engine_s_collection(tiny_model_dir, tiny_encoder, index_dir, tmp_path):
    from gtr_keras.retrieval.index import Index

    Index.open(str(index_dir)).push(f"qdrant:{tmp_path / 'q'}", "c")
    served = Served("--model", tiny_model_dir, "--index", f"qdrant:{tmp_path / 'q'}", "--collection", "c")
    try:
        found = httpx.post(f"{served.url}/v1/search", json={"query": "wing lift", "k": 5}, timeout=30).json()
        local = Index.open(str(index_dir), tiny_encoder).search(["wing lift"], 5)[0]
        assert [hit["id"] for hit in found["hits"]] == [hit["id"] for hit in local]
        np.testing.assert_allclose([h["score"] for h in found["hits"]], [h["score"] for h in local], atol=1e-5)
        bm25 = httpx.post(f"{served.url}/v1/search", json={"query": "wing", "retriever": "bm25"}, timeout=30)
        assert bm25.status_code == 422 and "searched through its engine" in bm25.json()["error"]["message"]
    finally:
        served.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_batch_finishes_it_refuses_new_connections_and_exits_0(tiny_model_dir, tiny_encoder, sig):
    # The batch waits 3 s for company: the signal comes while the request is in the batcher.
    served = Served(
        "--model", tiny_model_dir, "--served-model-name", "model", "--max-wait-ms", "3000", "--grace-period", "20"
    )
    try:
        _signal_during_a_batch(served, tiny_encoder, sig)
    finally:  # a failed assertion leaves no server behind
        if served.process.poll() is None:
            served.process.kill()


def _signal_during_a_batch(served, tiny_encoder, sig):
    answers = []
    request = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{served.url}/v1/embeddings", json={"input": ["a wing"], "model": "model"}, timeout=60)
        )
    )
    request.start()
    deadline = time.monotonic() + 30
    while httpx.get(f"{served.url}/health", timeout=10).json()["queued"] == 0:
        assert time.monotonic() < deadline and not answers, f"the request never reached the batcher: {answers}"
        time.sleep(0.02)
    served.process.send_signal(sig)
    time.sleep(0.5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{served.url}/health", timeout=5)
    request.join(60)
    status, seconds, err = served.stop(sig)  # a second signal after the exit is harmless; communicate waits
    assert status == 0, err
    assert answers and answers[0].status_code == 200
    np.testing.assert_allclose(
        answers[0].json()["data"][0]["embedding"], tiny_encoder.encode_documents(["a wing"])[0], atol=1e-6, rtol=0
    )


LONG_TEXT = " ".join(["shock boundary layer interaction on a swept wing in a supersonic nozzle"] * 40)


def _long_request(served, answers):
    """Posts 2,048 long texts (minutes of encoding for the tiny model on 2 cores) in a thread; returns when
    the encoder has them."""
    body = {"input": [f"{number} {LONG_TEXT}" for number in range(2048)], "model": "model"}
    request = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{served.url}/v1/embeddings", json=body, timeout=120)),
        daemon=True,
    )
    request.start()
    deadline = time.monotonic() + 60
    while httpx.get(f"{served.url}/health", timeout=10).json()["batches"] == 0:
        assert time.monotonic() < deadline and not answers, f"the request never reached the encoder: {answers}"
        time.sleep(0.05)
    return request


@pytest.mark.large
def test_sigterm_during_a_long_request_exits_within_the_grace_period_answering_it_503(tiny_model_dir):
    served = Served("--model", tiny_model_dir, "--served-model-name", "model", "--grace-period", "3")
    try:
        answers = []
        request = _long_request(served, answers)
        time.sleep(2)
        status, seconds, err = served.stop(signal.SIGTERM, timeout=30)
        request.join(30)
    finally:
        if served.process.poll() is None:
            served.process.kill()
    assert status == 0 and seconds < 3 + 2, (status, seconds, err)
    assert err.strip().splitlines()[-1] == "gtr-keras serve: stopped" and "Traceback" not in err
    assert answers, "the request in flight got no answer"
    if answers[0].status_code != 200:  # it finished within the grace period on a fast machine
        assert answers[0].status_code == 503 and answers[0].json()["error"]["code"] == "stopping"
        assert answers[0].headers["connection"] == "close"


@pytest.mark.large
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_ends_the_grace_period_at_once(tiny_model_dir, sig):
    served = Served("--model", tiny_model_dir, "--served-model-name", "model", "--grace-period", "60")
    try:
        answers = []
        request = _long_request(served, answers)
        served.process.send_signal(sig)
        time.sleep(0.5)
        assert served.process.poll() is None  # the grace period runs
        status, seconds, err = served.stop(sig, timeout=30)
        request.join(30)
    finally:
        if served.process.poll() is None:
            served.process.kill()
    assert status == 0 and seconds < 3, (status, seconds, err)
    assert "Traceback" not in err
    assert answers, "the request in flight got no answer"
    assert answers[0].status_code == 503 and answers[0].json()["error"]["code"] == "stopping"


@pytest.mark.large
def test_malformed_requests_leave_no_traceback_on_the_command_s_stderr(tiny_model_dir, index_dir):
    served = Served("--model", tiny_model_dir, "--index", index_dir, "--served-model-name", "gtr")
    try:
        bodies = [
            ("embeddings", b"[" * 50_000 + b"]" * 50_000),
            ("embeddings", b'{"input": "a", "model": "gtr", "dimensions": ' + b"9" * 5_000 + b"}"),
            ("embeddings", b'{"input": ["a", "\\ud800"], "model": "gtr"}'),
            ("embeddings", b'{"input": "a", "model": "gtr", "dimensions": NaN}'),
            ("search", b'{"query": "\\udfff"}'),
            ("search", b'{"query": "a", "k": 1e999}'),
            ("search", b'{"\\ud800": 1}'),
        ]
        statuses = [
            httpx.post(f"{served.url}/v1/{endpoint}", content=body, timeout=30).status_code for endpoint, body in bodies
        ]
        with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 400 ")
    finally:
        status, _, err = served.stop()
    assert statuses == [400, 400, 422, 400, 422, 422, 422]
    assert status == 0 and "Traceback" not in err and err.strip().endswith("gtr-keras serve: stopped"), err


def _main_before_tensorflow(*argv):
    """Runs `gtr-keras ARGV` in a fresh process that asserts exit 2 without TensorFlow; returns its stderr."""
    script = (
        "import sys\nfrom gtr_keras.cli.main import main\n"
        f"try:\n    status = main({list(map(str, argv))!r})\nexcept SystemExit as exit_:\n    status = exit_.code\n"
        "assert status == 2 and 'tensorflow' not in sys.modules and 'keras' not in sys.modules, status\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_a_port_in_use_is_refused_before_tensorflow_is_imported(tiny_model_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        err = _main_before_tensorflow("serve", "--model", tiny_model_dir, "--port", taken.getsockname()[1])
    assert err.strip().endswith("cannot listen there (Address already in use)")


@pytest.mark.large
def test_a_port_in_use_is_exit_2_in_one_line_before_the_model_loads(tiny_model_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "gtr_keras", "serve", "--model", tiny_model_dir, "--port", str(port)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"gtr-keras serve: error: --host 127.0.0.1 --port {port}: cannot listen there (Address already in use)"
    )


def slow_request(url, batcher, encoder, monkeypatch, answers, passes):
    """Posts 40 x 32 texts, each forward pass of which takes 0.25 s more, in a thread; returns the thread once
    the encoder runs them. `passes` gets each pass's start (`time.monotonic()`)."""
    encode = encoder.encode

    def slow(texts, kind="document", batch_size=32, progress=None):
        passes.append(time.monotonic())
        time.sleep(0.25)
        return encode(texts, kind, batch_size, progress)

    monkeypatch.setattr(encoder, "encode", slow)
    body = {"input": [f"wing {number}" for number in range(32 * 40)], "model": MODEL}
    thread = threading.Thread(target=lambda: answers.append(httpx.post(f"{url}/v1/embeddings", json=body, timeout=60)))
    thread.start()
    deadline = time.monotonic() + 30
    while not batcher.running:
        assert time.monotonic() < deadline and not answers, answers
        time.sleep(0.01)
    return thread


@pytest.mark.parametrize("hurry", [False, True])
def test_a_stop_answers_the_requests_in_flight_503_at_the_grace_period_s_end(tiny_encoder, monkeypatch, hurry):
    answers, passes = [], []
    grace, end = (30.0, 0.3) if hurry else (1.0, 1.0)  # the end: a second signal's moment, or the grace's
    with serving(tiny_encoder, grace_period=grace) as (url, batcher, _, server):
        request = slow_request(url, batcher, tiny_encoder, monkeypatch, answers, passes)
        start = time.monotonic()
        server.should_exit = True  # the first signal
        if hurry:
            time.sleep(end)
            server.hurry = True  # the second
        request.join(30)
        answered = time.monotonic() - start
    assert answers[0].status_code == 503 and answers[0].json()["error"]["code"] == "stopping"
    assert answers[0].headers["connection"] == "close"
    assert end - 0.1 < answered < end + 1.0
    assert len(passes) < 40 and all(begun < start + answered for begun in passes)  # none begun after the answer


def test_a_client_that_reads_nothing_at_a_stop_is_cut_without_a_traceback(tiny_encoder, capfd):
    body = json.dumps({"input": ["wing lift drag"] * 256, "model": MODEL, "encoding_format": "float"}).encode()
    with serving(tiny_encoder, send_buffer=4096, grace_period=0.5) as (url, batcher, _, server):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", int(url.rsplit(":", 1)[1])))
            sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            deadline = time.monotonic() + 60
            while batcher.batches == 0 or batcher.running:  # encoded: its answer waits for the client
                assert time.monotonic() < deadline
                time.sleep(0.02)
            start = time.monotonic()
            server.should_exit = True
            while server.started and not server.server_state.connections == set():
                assert time.monotonic() - start < 0.5 + 1.5, "the connection was not cut"
                time.sleep(0.02)
    assert "Traceback" not in capfd.readouterr().err


def test_listening_socket_names_the_address_it_cannot_take():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(UserError, match=r"--port \d+: cannot listen there"):
            listening_socket("127.0.0.1", taken.getsockname()[1])
    sock = listening_socket("127.0.0.1", 0)
    assert sock.getsockname()[1] > 0
    sock.close()


def test_two_servers_starting_together_on_one_port_the_second_is_refused_at_once():
    first = listening_socket("127.0.0.1", 0)  # bound and listening before the model loads
    try:
        with pytest.raises(UserError, match="Address already in use"):
            listening_socket("127.0.0.1", first.getsockname()[1])  # a bind alone passes on Linux (SO_REUSEADDR)
        with socket.create_connection(first.getsockname()[:2], timeout=5):
            pass  # a connection waits in the backlog while the server loads
    finally:
        first.close()


def test_the_uvicorn_internals_the_server_relies_on_are_there():
    """`serve.py` and `connections.py` subclass uvicorn's server and protocols (pyproject pins the uvicorn
    releases they were tried with): each name they use must be there."""
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    server = uvicorn.Server(uvicorn.Config(app=None))
    assert callable(server.config.get_loop_factory) and isinstance(server._captured_signals, list)
    assert isinstance(server.server_state.connections, set) and isinstance(server.server_state.default_headers, list)
    assert all(hasattr(server, name) for name in ("should_exit", "force_exit", "started", "handle_exit", "serve"))
    for protocol in (HttpToolsProtocol, H11Protocol):
        for name in ("connection_made", "connection_lost", "data_received", "pause_writing", "resume_writing"):
            assert callable(getattr(protocol, name)), (protocol, name)
        assert callable(protocol.send_400_response)
        source = inspect.getsource(protocol)
        assert "self.cycle" in source and "response_complete" in source and "self.loop" in source


def test_the_serve_extra_s_hint_when_uvicorn_is_missing(tmp_path):
    script = (
        "import sys\nsys.modules['uvicorn'] = None\nfrom gtr_keras.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "PYTHONPATH": REPO}
    result = subprocess.run(
        [sys.executable, "-c", script, "serve", "--model", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        "gtr-keras serve: error: needs uvicorn and Starlette: pip install 'gtr-keras[serve]'"
    )


def test_an_index_with_an_export_is_exit_2_in_one_line(tiny_onnx_export, index_dir, capsys):
    from gtr_keras.cli.main import main

    assert main(["serve", "--model", tiny_onnx_export, "--index", str(index_dir), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gtr-keras serve: error: --index: ") and "is an export" in err and "\n" not in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--port", "70000"], "argument --port: must be from 0 (a free port) to 65535, got 70000"),
        (["--max-wait-ms", "-1"], "argument --max-wait-ms: must be at least 0, got -1"),
        (["--poll-interval", "0"], "argument --poll-interval: must be positive, got 0"),
        (["--max-inputs", "100", "--max-queue", "10"], "argument --max-inputs: 100 is more than --max-queue holds"),
        (["--header-timeout", "0"], "argument --header-timeout: must be positive, got 0"),
        (["--body-timeout", "inf"], "argument --body-timeout: must be a finite number of seconds"),
        (["--grace-period", "inf"], "argument --grace-period: must be a finite number of seconds"),
        (["--keep-alive-timeout", "-1"], "argument --keep-alive-timeout: must be positive, got -1"),
        (["--max-wait-ms", "inf"], "argument --max-wait-ms: must be a finite number of milliseconds"),
        (["--max-wait-ms", "1e300"], "argument --max-wait-ms: must be at most 8.64e+07 milliseconds (a day), got"),
        (["--poll-interval", "1e300"], "argument --poll-interval: must be at most 86400 seconds (a day), got 1e300"),
        (["--request-timeout", "1e300"], "argument --request-timeout: must be at most 86400 seconds (a day), got"),
        (["--header-timeout", "86401"], "argument --header-timeout: must be at most 86400 seconds (a day), got"),
        (
            ["--max-queries", "100", "--max-queue", "64", "--max-inputs", "8"],
            "argument --max-queries: 100 is more than",
        ),
        (
            ["--batch-size", "64", "--max-inputs", "8", "--max-queries", "8", "--max-queue", "32"],
            "argument --batch-size: 64",
        ),
    ],
)
def test_bad_serve_flags_are_exit_2_in_one_line(flags, message, capsys):
    from gtr_keras.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "gtr_small_distilled_en", *flags])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err.strip()


def test_a_host_beyond_loopback_without_a_key_is_exit_2_in_one_line_before_tensorflow(tiny_model_dir, capsys):
    from gtr_keras.cli.main import main

    for host in ("0.0.0.0", "::"):
        with pytest.raises(SystemExit) as exit_:
            main(["serve", "--model", tiny_model_dir, "--host", host])
        assert exit_.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"gtr-keras serve: error: argument --host: {host} is not a loopback address: give ")
    err = _main_before_tensorflow("serve", "--model", tiny_model_dir, "--host", "0.0.0.0")
    assert "--allow-unauthenticated" in err and len(err.strip().splitlines()) == 1


def test_a_key_or_allow_unauthenticated_passes_the_host_check(tiny_model_dir):
    from gtr_keras.cli.commands.serve import check as check_serve
    from gtr_keras.cli.parser import build_parser

    parser = build_parser()
    for extra in (["--api-key", "sk-1"], ["--allow-unauthenticated"], ["--host", "localhost"], ["--host", "127.0.0.9"]):
        host = [] if "--host" in extra else ["--host", "0.0.0.0"]
        check_serve(parser.parse_args(["serve", "--model", tiny_model_dir, *host, *extra]), parser)


def test_a_malformed_keys_file_is_exit_2_naming_its_line_before_tensorflow(tiny_model_dir, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("sk-good\nsk with spaces\n")
    err = _main_before_tensorflow("serve", "--model", tiny_model_dir, "--api-keys-file", keys, "--port", "0")
    assert err.strip() == (
        f"gtr-keras serve: error: --api-keys-file {keys}:2: a key must be printable ASCII without spaces "
        "(the key is not shown)"
    )


def test_the_otel_extra_s_hint_when_opentelemetry_is_missing(tmp_path):
    script = (
        "import sys\nsys.modules['opentelemetry'] = None\nfrom gtr_keras.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "serve", "--model", str(tmp_path), "--otlp-endpoint", "http://127.0.0.1:4318"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        "gtr-keras serve: error: argument --otlp-endpoint: needs OpenTelemetry's SDK and OTLP exporter: "
        "pip install 'gtr-keras[otel]'"
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--api-key", "sk 1"], "argument --api-key: a key must be printable ASCII without spaces (the key is not"),
        (["--otlp-endpoint", "collector:4318"], "argument --otlp-endpoint: 'collector:4318' is not an http:// or"),
        (["--max-batch-tokens", "100", "--document-length", "128"], "argument --max-batch-tokens: 100 is less than"),
        (["--max-batch-tokens", "0"], "argument --max-batch-tokens: must be at least 1"),
        (["--port", "8000", "--metrics-port", "8000"], "argument --metrics-port: 8000 is --port"),
        (["--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
    ],
)
def test_bad_serve_flags_of_the_gateway_are_exit_2_in_one_line(flags, message, capsys):
    from gtr_keras.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "gtr_small_distilled_en", *flags])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "sk 1" not in err


def test_a_token_budget_below_the_model_s_document_budget_is_exit_2(tiny_model_dir, capsys):
    from gtr_keras.cli.main import main

    assert main(["serve", "--model", tiny_model_dir, "--max-batch-tokens", "100", "--port", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "gtr-keras serve: error: --max-batch-tokens: 100 is less than the model's document budget (512 tokens): "
        "a text of that length would fit no batch"
    )


def test_health_says_loading_503_until_the_first_generation_is_loaded(
    tiny_encoder, tiny_model_dir, index_dir, monkeypatch
):
    from gtr_keras.server import live_index

    gate, open_index = threading.Event(), live_index.Index.open

    def held(directory, model):
        assert gate.wait(30)
        return open_index(directory, model)

    monkeypatch.setattr(live_index.Index, "open", held)
    with serving(tiny_encoder, index_dir, tiny_model_dir, poll_interval=0.05, wait=False) as (url, _, live, _):
        health = httpx.get(f"{url}/health", timeout=30)
        assert health.status_code == 503 and health.json()["status"] == "loading"
        assert health.json()["index"] == {"path": str(index_dir), "generation": None, "reloads": 0}
        search = httpx.post(f"{url}/v1/search", json={"query": "wing", "k": 3}, timeout=30)
        assert search.status_code == 503 and search.json()["error"]["code"] == "loading"
        body = {"input": ["a wing"], "model": MODEL}
        assert httpx.post(f"{url}/v1/embeddings", json=body, timeout=30).status_code == 200
        gate.set()
        deadline = time.monotonic() + 30
        while (health := httpx.get(f"{url}/health", timeout=30)).status_code != 200:
            assert time.monotonic() < deadline, "not ready within 30 s"
            time.sleep(0.02)
        assert health.json()["status"] == "ok" and health.json()["index"]["generation"] == 0
        assert httpx.post(f"{url}/v1/search", json={"query": "wing", "k": 3}, timeout=30).status_code == 200


@pytest.mark.large
def test_an_index_that_cannot_be_loaded_stops_the_command_exit_2_in_one_line(tiny_model_dir, index_dir, tmp_path):
    broken = tmp_path / "index"
    shutil.copytree(index_dir, broken)
    (broken / "index" / "segments.json").write_text("{broken")
    result = subprocess.run(
        [sys.executable, "-m", "gtr_keras", "serve", "--model", tiny_model_dir, "--index", broken, "--port", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 2 and "listening on" not in result.stdout
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("gtr-keras")]  # TensorFlow's aside
    assert line.startswith("gtr-keras serve: error: ") and "segments.json" in line


@pytest.mark.large
def test_the_command_with_keys_a_metrics_port_and_json_access_log(tiny_model_dir, index_dir, tmp_path):
    metrics_port = free_port()
    keys = tmp_path / "keys"
    keys.write_text("sk-first\n")
    served = Served(
        "--model", tiny_model_dir, "--index", index_dir, "--served-model-name", "gtr", "--host", "127.0.0.1",
        "--api-key", "sk-flag", "--api-keys-file", keys, "--metrics-port", metrics_port, "--log-format", "json",
    )  # fmt: skip
    try:
        assert served.lines[0].strip().endswith(f", metrics on http://127.0.0.1:{metrics_port}/metrics)")
        body = {"input": ["a wing"], "model": "gtr"}
        assert httpx.post(f"{served.url}/v1/embeddings", json=body, timeout=30).status_code == 401
        bearer = {"authorization": "Bearer sk-flag", "x-request-id": "cmd-1"}
        assert httpx.post(f"{served.url}/v1/embeddings", json=body, headers=bearer, timeout=30).status_code == 200
        replacement = tmp_path / "keys.next"
        replacement.write_text("sk-second\n")
        os.replace(replacement, keys)  # rotated: taken within a second, no restart
        rotated, deadline = {"authorization": "Bearer sk-second"}, time.monotonic() + 10
        while httpx.post(f"{served.url}/v1/search", json={"query": "wing"}, headers=rotated).status_code != 200:
            assert time.monotonic() < deadline, "the rotated key was not taken within 10 s"
            time.sleep(0.2)
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", headers=bearer, timeout=30)
        assert metrics.status_code == 200 and "gtr_keras_requests_total" in metrics.text
        assert httpx.get(f"{served.url}/metrics", headers=bearer, timeout=30).status_code == 404
    finally:
        status, _, err = served.stop()
    assert status == 0
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert {"request_id": "cmd-1", "status": 200, "path": "/v1/embeddings"}.items() <= next(
        entry for entry in lines if entry["request_id"] == "cmd-1"
    ).items()
    assert "sk-flag" not in err and "sk-second" not in err and "sk-first" not in err


def test_serving_beyond_loopback_without_a_key_is_said_in_one_line_at_start(tiny_model_dir):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = _main_before_tensorflow(
            "serve", "--model", tiny_model_dir, "--host", "0.0.0.0", "--allow-unauthenticated", "--port", port
        )
    warning, error = err.strip().splitlines()
    assert warning == (
        "gtr-keras serve: warning: serving 0.0.0.0 without a key (--allow-unauthenticated): anyone who reaches the "
        "port can use it"
    )
    assert error.endswith("cannot listen there (Address already in use)")
