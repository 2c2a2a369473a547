"""The gateway over HTTP: keys (401 in OpenAI's shape, /health open), request ids, the access log."""

import io
import json
import socket

import httpx
import openai
import pytest
from server.servers import MODEL, indexed, serving

from gtr_keras.server.gateway.keys import ApiKeys
from gtr_keras.server.gateway.middleware import Settings
from gtr_keras.server.gateway.request_log import AccessLog

KEY = "sk-test-7f3a9c01"
EMBEDDING = {"input": ["lift on a wing"], "model": MODEL}
SEARCH = {"query": "wing lift", "k": 3}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_encoder, tiny_model_dir):
    return indexed(tmp_path_factory, tiny_encoder, tiny_model_dir)


@pytest.fixture(scope="module")
def keyed(tiny_encoder, tiny_model_dir, index_dir):
    log = io.StringIO()
    settings = Settings(keys=ApiKeys([KEY, "sk-other"]), access_log=AccessLog("json", log))
    with serving(tiny_encoder, index_dir, tiny_model_dir, gateway=settings) as (url, *_):
        yield url, log


def _bearer(key):
    return {"authorization": f"Bearer {key}"}


@pytest.mark.parametrize("path, body", [("/v1/embeddings", EMBEDDING), ("/v1/search", SEARCH)])
def test_without_the_key_401_in_openai_s_shape_with_it_200(keyed, path, body):
    url, _ = keyed
    for headers, code in (({}, "missing_api_key"), (_bearer("sk-wrong"), "invalid_api_key")):
        response = httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30)
        assert response.status_code == 401
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, code)
        assert response.headers["www-authenticate"] == "Bearer" and response.headers["connection"] == "close"
        assert "sk-wrong" not in response.text
    assert httpx.post(f"{url}{path}", json=body, headers=_bearer(KEY), timeout=30).status_code == 200
    assert httpx.post(f"{url}{path}", json=body, headers=_bearer("sk-other"), timeout=30).status_code == 200


def test_health_is_open_and_everything_else_asks_for_the_key(keyed):
    url, _ = keyed
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    assert httpx.get(f"{url}/health", headers=_bearer("sk-wrong"), timeout=30).status_code == 200
    for path in ("/metrics", "/v1/models", "/no/such/route"):
        assert httpx.get(f"{url}{path}", timeout=30).status_code == 401, path
    assert httpx.get(f"{url}/metrics", headers=_bearer(KEY), timeout=30).status_code == 200
    assert httpx.get(f"{url}/no/such/route", headers=_bearer(KEY), timeout=30).status_code == 404


def test_health_without_the_key_says_the_status_alone(keyed, index_dir):
    url, _ = keyed
    for headers in ({}, _bearer("sk-wrong")):
        assert httpx.get(f"{url}/health", headers=headers, timeout=30).json() == {"status": "ok"}
    health = httpx.get(f"{url}/health", headers=_bearer(KEY), timeout=30).json()
    assert health["model"] == MODEL and health["index"]["path"] == str(index_dir)


def test_the_openai_client_passes_with_its_api_key_and_raises_without(keyed):
    url, _ = keyed
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=30)
    assert len(client.embeddings.create(input=["a wing"], model=MODEL).data) == 1
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="sk-wrong", max_retries=0, timeout=30).models.list()


def test_a_refused_request_s_body_is_not_read_and_its_connection_closed(keyed):
    url, _ = keyed
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{")  # body withheld
        answer = b""
        while chunk := sock.recv(65536):  # until the server closes: the body is never waited for
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 ") and b"missing_api_key" in answer


def test_request_ids_are_taken_or_made_returned_and_logged(keyed):
    url, log = keyed
    given = httpx.get(f"{url}/health", headers={"x-request-id": "checkout-42"}, timeout=30)
    assert given.headers["x-request-id"] == "checkout-42"
    made = [
        httpx.get(f"{url}/health", headers=headers, timeout=30).headers["x-request-id"]
        for headers in (
            {},
            {"x-request-id": "has space"},
            {"x-request-id": "x" * 129},
            {"x-request-id": ""},
        )
    ]
    assert all(len(identity) == 32 and int(identity, 16) >= 0 for identity in made) and len(set(made)) == 4
    refused = httpx.post(f"{url}/v1/embeddings", json=EMBEDDING, headers={"x-request-id": "r-401"}, timeout=30)
    assert refused.status_code == 401 and refused.headers["x-request-id"] == "r-401"
    lines = {entry["request_id"]: entry for entry in map(json.loads, log.getvalue().splitlines())}
    assert lines["checkout-42"]["path"] == "/health" and lines["checkout-42"]["status"] == 200
    assert set(lines["checkout-42"]) == {"time", "request_id", "method", "path", "status", "duration_ms", "client"}
    assert lines["checkout-42"]["client"].startswith("127.0.0.1:")
    assert lines["r-401"]["status"] == 401 and lines["r-401"]["method"] == "POST"
    assert all(identity in lines for identity in made)


def test_the_key_is_never_written_to_the_log_or_stderr(tiny_encoder, capfd):
    log = io.StringIO()
    settings = Settings(keys=ApiKeys([KEY]), access_log=AccessLog("text", log))
    with serving(tiny_encoder, gateway=settings) as (url, *_):
        for key in (KEY, KEY + "-wrong"):
            for path in ("/v1/embeddings", f"/v1/embeddings?key={key}"):
                httpx.post(f"{url}{path}", json=EMBEDDING, headers={"authorization": f"Bearer {key}"}, timeout=30)
        httpx.post(f"{url}/v1/embeddings", content=b"{bad", headers=_bearer(KEY), timeout=30)
    written = log.getvalue() + "".join(capfd.readouterr())
    assert log.getvalue().count("\n") == 5 and '"POST /v1/embeddings" 200 ' in log.getvalue()
    assert '"POST /v1/embeddings" 401 ' in log.getvalue() and '"POST /v1/embeddings" 400 ' in log.getvalue()
    assert KEY not in written
