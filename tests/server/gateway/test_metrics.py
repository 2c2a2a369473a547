"""`/metrics`, scraped and parsed with prometheus_client's parser, and by a real Prometheus server (`large`)."""

import os
import shutil
import subprocess
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server.servers import MODEL, corpus, serving

from gtr_keras.retrieval.index_building import build_index
from gtr_keras.retrieval.index_updates import update_index
from gtr_keras.server.gateway.keys import ApiKeys
from gtr_keras.server.gateway.metrics import Metrics
from gtr_keras.server.gateway.middleware import Settings
from gtr_keras.server.serve import listening_socket


def samples(text):
    """`{(sample name, sorted label items): value}` of a `/metrics` page."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(page, name, **labels):
    return page.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(url, **kwargs):
    response = httpx.get(f"{url}/metrics", timeout=30, **kwargs)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain; version=")
    return samples(response.text)


@pytest.fixture
def index_dir(tmp_path, tiny_encoder, tiny_model_dir):
    build_index(tiny_encoder, corpus(), tmp_path / "index", model_dir=tiny_model_dir)
    return str(tmp_path / "index")


def test_the_requests_counter_rises_by_exactly_the_requests_sent(tiny_encoder, tiny_model_dir, index_dir):
    with serving(tiny_encoder, index_dir, tiny_model_dir) as (url, *_):
        before = scrape(url)
        good, bad, texts = 12, 5, 3

        def client(number):
            with httpx.Client(timeout=30) as http:
                for i in range(good // 4):
                    body = {"input": [f"wing {number} {i}"] * texts, "model": MODEL}
                    assert http.post(f"{url}/v1/embeddings", json=body).status_code == 200

        threads = [threading.Thread(target=client, args=(number,)) for number in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for _ in range(bad):
            assert httpx.post(f"{url}/v1/embeddings", json={"input": [], "model": MODEL}).status_code == 422
        assert httpx.post(f"{url}/v1/search", json={"query": "wing", "k": 3}).status_code == 200
        assert httpx.get(f"{url}/nowhere/{time.time()}").status_code == 404
        after = scrape(url)
    rose = {key: after[key] - before.get(key, 0.0) for key in after}
    assert value(rose, "gtr_keras_requests_total", endpoint="/v1/embeddings", status="200") == good
    assert value(rose, "gtr_keras_requests_total", endpoint="/v1/embeddings", status="422") == bad
    assert value(rose, "gtr_keras_errors_total", endpoint="/v1/embeddings", status="422", code="empty_input") == bad
    assert value(rose, "gtr_keras_requests_total", endpoint="/v1/search", status="200") == 1
    assert value(rose, "gtr_keras_requests_total", endpoint="other", status="404") == 1  # no series per path
    assert value(rose, "gtr_keras_request_duration_seconds_count", endpoint="/v1/embeddings") == good + bad
    assert value(rose, "gtr_keras_embedded_texts_total", kind="document") == good * texts
    assert value(rose, "gtr_keras_embedded_texts_total", kind="query") == 1
    sent = [f"wing {number} {i}" for number in range(4) for i in range(good // 4)] * texts
    tokens = sum(len(ids) for ids in tiny_encoder.tokenize(sent, "document"))
    assert value(rose, "gtr_keras_embedded_tokens_total", kind="document") == tokens
    for batcher, stage in (("encoder", "queue"), ("encoder", "tokenize"), ("encoder", "model"), ("search", "search")):
        assert value(rose, "gtr_keras_stage_duration_seconds_count", batcher=batcher, stage=stage) >= 1, stage
    assert value(rose, "gtr_keras_batch_texts_sum", batcher="encoder") == good * texts + 1
    assert value(rose, "gtr_keras_forward_pass_padded_tokens_count") >= 1
    assert value(after, "gtr_keras_queue_texts", batcher="encoder") == 0
    assert value(after, "gtr_keras_ready") == 1 and value(after, "gtr_keras_index_generation") == 0
    assert value(after, "process_resident_memory_bytes") > 0


def test_reloads_their_failures_and_the_generation_are_counted(tiny_encoder, tiny_model_dir, index_dir):
    with serving(tiny_encoder, index_dir, tiny_model_dir, poll_interval=None) as (url, _, live, _):
        update_index(index_dir, corpus=corpus(2, seed=3, prefix="new"), encoder=tiny_encoder)
        assert live.check_now()
        update_index(index_dir, delete=["d0"])
        manifest = os.path.join(index_dir, "index", "segments.json")
        good = open(manifest, encoding="utf-8").read()
        with open(manifest, "w", encoding="utf-8") as f:
            f.write("{broken")
        assert not live.check_now()
        with open(manifest, "w", encoding="utf-8") as f:
            f.write(good)
        page = scrape(url)
    assert value(page, "gtr_keras_index_generation") == 1
    assert value(page, "gtr_keras_index_reloads_total") == 1
    assert value(page, "gtr_keras_index_reload_failures_total") == 1


def test_the_metrics_port_alone_serves_metrics_and_the_key_guards_both(tiny_encoder):
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    settings = Settings(keys=ApiKeys(["sk-scraper"]), metrics_port=port)
    with serving(tiny_encoder, gateway=settings, more_sockets=[sock]) as (url, *_):
        metrics_url, key = f"http://127.0.0.1:{port}", {"authorization": "Bearer sk-scraper"}
        assert httpx.get(f"{metrics_url}/metrics", timeout=30).status_code == 401
        page = scrape(metrics_url, headers=key)
        assert value(page, "gtr_keras_requests_total", endpoint="/metrics", status="401") == 1
        assert httpx.get(f"{url}/metrics", headers=key, timeout=30).status_code == 404
        assert httpx.get(f"{metrics_url}/health", timeout=30).status_code == 404
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200


def test_each_application_counts_in_a_registry_of_its_own():
    first, second = Metrics(), Metrics()
    first.request("/v1/embeddings", 200, 0.01)
    labels = {"endpoint": "/v1/embeddings", "status": "200"}
    assert value(samples(first.page()[0].decode()), "gtr_keras_requests_total", **labels) == 1
    assert value(samples(second.page()[0].decode()), "gtr_keras_requests_total", **labels) == 0


def _free_port():
    with listening_socket("127.0.0.1", 0) as sock:
        return sock.getsockname()[1]


@pytest.mark.large
def test_a_prometheus_server_scrapes_the_metrics_and_answers_a_query(tiny_encoder, tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus binary (Debian's `prometheus` package; .ci/run installs it)")
    with serving(tiny_encoder) as (url, *_):
        for number in range(5):
            assert httpx.post(f"{url}/v1/embeddings", json={"input": [f"wing {number}"], "model": MODEL}).is_success
        target = url.removeprefix("http://")
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            f"scrape_configs:\n  - job_name: gtr-keras\n    static_configs:\n      - targets: ['{target}']\n"
        )
        port = _free_port()
        command = [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}"]
        command += [f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
        prometheus = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            query = 'gtr_keras_requests_total{job="gtr-keras",endpoint="/v1/embeddings",status="200"}'
            found, deadline = [], time.monotonic() + 60
            while not found and time.monotonic() < deadline and prometheus.poll() is None:
                time.sleep(0.5)
                try:
                    answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": query}, timeout=5)
                except httpx.HTTPError:
                    continue
                found = answer.json()["data"]["result"] if answer.status_code == 200 else []
        finally:
            prometheus.kill()
            _, err = prometheus.communicate(timeout=30)
    assert found, f"Prometheus read no series within 60 s: {err[-2000:]}"
    assert float(found[0]["value"][1]) == 5
