"""Replicas: several servers over one index directory, each switching to a new generation after an update,
with no failed request and no answer mixing generations (local directories, and `ram://` in one process)."""

import threading
import time

import httpx
import pytest
from servers import Served, corpus, running

from gtr_keras.retrieval.index_building import build_index
from gtr_keras.retrieval.index_updates import update_index

CLIENTS = 8
MOST_REQUESTS = 400  # per client, at most: each stops once the update is served and it saw it


def _search_through(urls, documents, stop, answers, failures, number):
    """A client sending searches to each of `urls` in turn until `stop` (at most `MOST_REQUESTS`), checking each
    answer's hits against the documents of the generation it names."""
    retriever = ("gtr", "bm25", "hybrid")[number % 3]
    with httpx.Client(timeout=30) as client:
        for count in range(MOST_REQUESTS):
            if stop.is_set():
                return
            url = urls[(number + count) % len(urls)]
            try:
                response = client.post(
                    f"{url}/v1/search", json={"query": "wing lift heat", "k": 100, "retriever": retriever}
                )
            except httpx.HTTPError as error:
                failures.append(f"{url}: {error!r}")
                continue
            if response.status_code != 200:
                failures.append(f"{url}: {response.status_code} {response.text[:200]}")
                continue
            answer = response.json()
            generation = documents.get(answer["generation"])
            hits = {hit["id"]: hit["text"] for hit in answer["hits"]}
            if generation is None or any(generation.get(doc_id) != text for doc_id, text in hits.items()):
                failures.append(f"{url}: generation {answer['generation']}: hits of another generation")
            if retriever == "gtr" and generation is not None and set(hits) != set(generation):
                failures.append(f"{url}: generation {answer['generation']}: not all of its documents")
            answers.append((number, url, answer["generation"]))


def _replicas_through_an_update(urls, index_dir, encoder, poll_interval, generation_of):
    """Searches through `urls` with `CLIENTS` clients while an update lands; returns `(answers, failures,
    seconds from the update's return until every replica served it)`. `generation_of(url)` reads a replica's
    generation."""
    first = corpus()
    documents = {0: dict(zip(first.ids, first.texts))}
    answers, failures, stop = [], [], threading.Event()
    clients = [
        threading.Thread(target=_search_through, args=(urls, documents, stop, answers, failures, number))
        for number in range(CLIENTS)
    ]
    for client in clients:
        client.start()
    try:
        deadline = time.monotonic() + 60
        while len(answers) < 4 * CLIENTS and time.monotonic() < deadline and not failures:
            time.sleep(0.02)
        new = corpus(4, seed=11, prefix="new")
        later = dict(documents[0])
        later.update(zip(new.ids, new.texts))
        del later["d0"]
        documents[1] = later
        update_index(index_dir, corpus=new, encoder=encoder, delete=["d0"])
        landed = time.monotonic()
        waiting = set(urls)
        while waiting and time.monotonic() < landed + 10 * poll_interval:
            waiting = {url for url in waiting if generation_of(url) != 1}
            time.sleep(0.02)
        switched = time.monotonic() - landed
        assert not waiting, f"{sorted(waiting)} not on generation 1 within {10 * poll_interval:g} s"
        seen = len(answers)
        while len(answers) < seen + 4 * CLIENTS and time.monotonic() < deadline + 60 and not failures:
            time.sleep(0.02)  # the clients go on with the new generation a while
    finally:
        stop.set()
        for client in clients:
            client.join(60)
    return answers, failures, switched


def _check(answers, failures, urls):
    assert failures == [], failures[:5]
    assert {url for _, url, _ in answers} == set(urls)
    for url in urls:
        served = [generation for _, seen_url, generation in answers if seen_url == url]
        assert set(served) == {0, 1}, (url, sorted(set(served)))
    for number in range(CLIENTS):  # each client's answers of one replica never go back a generation
        for url in urls:
            served = [generation for client, seen_url, generation in answers if client == number and seen_url == url]
            assert served == sorted(served), (number, url)


@pytest.mark.large
def test_two_servers_over_one_index_switch_within_two_poll_intervals_failing_no_request(
    tiny_encoder, tiny_model_dir, tmp_path
):
    index_dir = tmp_path / "index"
    build_index(tiny_encoder, corpus(), index_dir, model_dir=tiny_model_dir)
    poll_interval = 2.0
    replicas = [
        Served(
            "--model",
            tiny_model_dir,
            "--index",
            index_dir,
            "--served-model-name",
            "gtr",
            "--poll-interval",
            poll_interval,
        )
        for _ in range(2)
    ]
    try:
        urls = [served.url for served in replicas]

        def generation_of(url):
            return httpx.get(f"{url}/health", timeout=30).json()["index"]["generation"]

        answers, failures, switched = _replicas_through_an_update(
            urls, index_dir, tiny_encoder, poll_interval, generation_of
        )
    finally:
        stopped = [served.stop() for served in replicas]
    _check(answers, failures, urls)
    print(f"both replicas on the new generation {switched:.2f} s after the update returned")
    assert switched <= 2 * poll_interval, f"both on the new generation after {switched:.2f} s"
    assert all(status == 0 for status, _, _ in stopped), stopped


def test_replicas_over_one_ram_index_in_one_process_switch_failing_no_request(tiny_encoder, tiny_model_dir):
    index_dir = "ram://replicas/index"
    build_index(tiny_encoder, corpus(), index_dir, model_dir=tiny_model_dir)
    poll_interval = 0.5
    with (
        running(tiny_encoder, index_dir, tiny_model_dir, poll_interval=poll_interval) as (first, _, first_live),
        running(tiny_encoder, index_dir, tiny_model_dir, poll_interval=poll_interval) as (second, _, second_live),
    ):
        lives = {first: first_live, second: second_live}
        answers, failures, switched = _replicas_through_an_update(
            [first, second], index_dir, tiny_encoder, poll_interval, lambda url: lives[url].current.number
        )
    _check(answers, failures, [first, second])
    assert switched <= 2 * poll_interval + 2.0  # two looks and a load, in a process that also runs the clients
