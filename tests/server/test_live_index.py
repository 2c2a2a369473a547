import os
import shutil
import threading
import time

import httpx
import pytest
from servers import corpus, running

from gtr_keras.errors import UserError
from gtr_keras.retrieval.index import Index
from gtr_keras.retrieval.index_building import build_index
from gtr_keras.retrieval.index_updates import update_index
from gtr_keras.server import live_index
from gtr_keras.server.live_index import LiveIndex


@pytest.fixture
def index_dir(tmp_path, tiny_encoder, tiny_model_dir):
    build_index(tiny_encoder, corpus(), tmp_path / "index", model_dir=tiny_model_dir)
    return str(tmp_path / "index")


def _ids(generation, query, retriever="gtr", k=100):
    return [hit["id"] for hit in generation.index.search([query], k, retriever=retriever)[0]]


def test_an_update_is_swapped_in_whole_and_a_held_generation_outlives_its_files(index_dir, tiny_encoder):
    live = LiveIndex(index_dir, tiny_encoder, poll_interval=None)
    assert live.current.number == 0 and not live.check_now()
    new = corpus(3, seed=7, prefix="new")
    update_index(index_dir, corpus=new, encoder=tiny_encoder, delete=["d0"])
    assert live.check_now()
    first = live.current
    assert first.number == 1 and live.reloads == 1
    assert "new0" in _ids(first, new.texts[0], "bm25") and "d0" not in _ids(first, "wing lift drag")
    update_index(index_dir, corpus=corpus(2, seed=8, prefix="later"), encoder=tiny_encoder, compact=True)
    last = update_index(index_dir, delete=["d1"], compact=True).generation
    assert not os.path.exists(os.path.join(index_dir, "index", "segment-000001"))  # generation 1's segment
    assert live.check_now() and live.current.number == last > 1
    for retriever in ("gtr", "bm25", "hybrid"):  # the generation held still answers whole
        hits = first.index.search([new.texts[0]], 5, retriever=retriever)[0]
        assert hits and all(hit["text"] for hit in hits)
    assert "d1" in _ids(first, "wing lift drag") and "d1" not in _ids(live.current, "wing lift drag")


def test_a_failed_load_keeps_the_generation_and_is_tried_again(index_dir, tiny_encoder, caplog):
    live = LiveIndex(index_dir, tiny_encoder, poll_interval=None)
    update_index(index_dir, corpus=corpus(2, seed=3, prefix="new"), encoder=tiny_encoder)
    manifest = os.path.join(index_dir, "index", "segments.json")
    good = open(manifest, encoding="utf-8").read()
    with open(manifest, "w", encoding="utf-8") as f:
        f.write("{broken")
    assert not live.check_now() and live.current.number == 0
    assert "serving generation 0 for now" in caplog.text
    with open(manifest, "w", encoding="utf-8") as f:
        f.write(good)
    assert live.check_now() and live.current.number == 1


def test_a_load_during_which_an_update_commits_is_not_served_under_the_older_number(
    index_dir, tiny_encoder, monkeypatch
):
    live = LiveIndex(index_dir, tiny_encoder, poll_interval=None)
    update_index(index_dir, corpus=corpus(2, seed=3, prefix="new"), encoder=tiny_encoder)  # generation 1

    class CommittingMeanwhile(Index):
        def __init__(self, directory, model):
            monkeypatch.setattr(live_index, "Index", Index)  # once
            update_index(directory, delete=["d0"])  # generation 2 commits between the number read and the load
            super().__init__(directory, model)

    monkeypatch.setattr(live_index, "Index", CommittingMeanwhile)
    assert not live.check_now()  # loaded generation 2 where generation 1 was read: not swapped in
    assert live.current.number == 0 and live.reloads == 0
    assert live.check_now() and live.current.number == 2
    assert "d0" not in _ids(live.current, "wing lift drag") and "new0" in _ids(live.current, "wing lift drag")


def test_a_bm25_side_that_went_away_is_believed_at_the_second_look(index_dir, tiny_encoder):
    live = LiveIndex(index_dir, tiny_encoder, poll_interval=None)
    shutil.rmtree(os.path.join(index_dir, "bm25"))
    os.utime(os.path.join(index_dir, "retriever.json"))  # a commit point changed
    assert not live.check_now() and live.current.bm25_problem is None  # perhaps a replacement's moment
    assert live.check_now() and "no BM25 side" in live.current.bm25_problem


@pytest.mark.parametrize("poll_interval", [0.0, 1e300, float("inf")])
def test_a_poll_interval_past_a_day_or_not_positive_is_refused(index_dir, tiny_encoder, poll_interval):
    with pytest.raises(UserError, match="poll_interval must be seconds"):
        LiveIndex(index_dir, tiny_encoder, poll_interval=poll_interval)  # a wait of 1e300 s ends the watch


def test_each_generation_is_an_index_whose_searches_are_index_search_s(index_dir, tiny_encoder, tiny_model_dir):
    live = LiveIndex(index_dir, tiny_encoder, poll_interval=None)
    served = live.current.index
    assert isinstance(served, Index) and served.search_settings == live.current.search_settings == {}
    opened = Index.open(index_dir, tiny_model_dir)
    for retriever in ("gtr", "bm25", "hybrid"):
        assert _ids(live.current, "wing lift", retriever, 10) == [
            hit["id"] for hit in opened.search(["wing lift"], 10, retriever=retriever)[0]
        ]


def test_the_watch_reloads_by_itself_and_stops(index_dir, tiny_encoder):
    live = LiveIndex(index_dir, tiny_encoder, poll_interval=0.05)
    try:
        update_index(index_dir, corpus=corpus(1, seed=4, prefix="new"), encoder=tiny_encoder)
        deadline = time.monotonic() + 10
        while live.current.number != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert live.current.number == 1
    finally:
        live.close()
    assert not live._thread.is_alive()


def test_an_update_while_clients_search_fails_no_request(index_dir, tiny_encoder, tiny_model_dir):
    stop, answers, failures = threading.Event(), [], []
    with running(tiny_encoder, index_dir, tiny_model_dir, poll_interval=0.05) as (url, _, _):

        def search(retriever):
            with httpx.Client(timeout=30) as client:
                while not stop.is_set():
                    try:
                        response = client.post(
                            f"{url}/v1/search", json={"query": "wing lift", "k": 5, "retriever": retriever}
                        )
                    except httpx.HTTPError as error:
                        failures.append(repr(error))
                        continue
                    if response.status_code != 200:
                        failures.append(response.text)
                    else:
                        answers.append((retriever, response.json()["generation"]))

        clients = [threading.Thread(target=search, args=(r,)) for r in ("gtr", "bm25", "hybrid", "gtr")]
        for client in clients:
            client.start()
        try:
            new = corpus(3, seed=9, prefix="new")
            for change in ({"corpus": new, "encoder": tiny_encoder}, {"delete": ["d2", "d3"]}, {"compact": True}):
                generation = update_index(index_dir, **change).generation
                deadline = time.monotonic() + 10  # the documented delay: --poll-interval and one load
                while httpx.get(f"{url}/health").json()["index"]["generation"] != generation:
                    assert time.monotonic() < deadline, f"generation {generation} not served within 10 s"
                    time.sleep(0.02)
            answer = httpx.post(f"{url}/v1/search", json={"query": new.texts[0], "k": 40, "retriever": "bm25"}).json()
            assert "new0" in [hit["id"] for hit in answer["hits"]] and answer["generation"] == generation
        finally:
            stop.set()
            for client in clients:
                client.join(30)
    assert not failures, failures[:3]
    assert {retriever for retriever, _ in answers} == {"gtr", "bm25", "hybrid"}
    assert {seen for _, seen in answers} >= {0, generation}


def test_a_setting_tune_records_is_applied_by_a_running_server(tiny_encoder, tiny_model_dir, tmp_path):
    pytest.importorskip("matplotlib")
    from gtr_keras.tuning.tuner import tune

    build_index(tiny_encoder, corpus(), tmp_path / "index", model_dir=tiny_model_dir, params={"vectors": "int8"})
    with running(tiny_encoder, tmp_path / "index", tiny_model_dir, poll_interval=0.05) as (url, _, _):
        before = httpx.get(f"{url}/health").json()["index"]
        assert before["search_settings"] == {"rescore": before["search_settings"]["rescore"]}
        record = tune(tmp_path / "index", sample=20, target_recall=0.9, k=5, plot=tmp_path / "p.png")
        deadline = time.monotonic() + 10
        while (health := httpx.get(f"{url}/health").json()["index"])["reloads"] == before["reloads"]:
            assert time.monotonic() < deadline, "the recorded setting was not loaded within 10 s"
            time.sleep(0.02)
        assert health["search_settings"] == record["setting"] and health["generation"] == 0
        answer = httpx.post(f"{url}/v1/search", json={"query": "wing lift", "k": 5}).json()
        assert len(answer["hits"]) == 5


@pytest.mark.large
def test_each_answer_s_hits_are_of_the_generation_it_names_through_quick_updates(
    index_dir, tiny_encoder, tiny_model_dir
):
    first = corpus()
    documents = {0: dict(zip(first.ids, first.texts))}  # generation: {id: text}
    answers, stop = [], threading.Event()
    with running(tiny_encoder, index_dir, tiny_model_dir, poll_interval=0.05) as (url, _, _):

        def search(retriever):
            with httpx.Client(timeout=30) as client:
                for _ in range(400):  # at most; until the updates end
                    if stop.is_set():
                        return
                    body = {"query": "wing lift heat", "k": 100, "retriever": retriever}
                    answers.append((retriever, client.post(f"{url}/v1/search", json=body)))

        clients = [threading.Thread(target=search, args=(r,)) for r in ("gtr", "hybrid", "bm25", "gtr")]
        for client in clients:
            client.start()
        try:
            live = dict(documents[0])
            for number in range(12):
                if number % 3 == 2:
                    change = {"delete": sorted(live)[:2]}
                    for doc_id in change["delete"]:
                        del live[doc_id]
                else:
                    new = corpus(3, seed=20 + number, prefix=f"u{number}-")
                    change = {"corpus": new, "encoder": tiny_encoder}
                    live.update(zip(new.ids, new.texts))
                generation = update_index(index_dir, **change).generation
                documents[generation] = dict(live)
                time.sleep(0.03)
        finally:
            stop.set()
            for client in clients:
                client.join(60)
    assert answers and all(response.status_code == 200 for _, response in answers)
    served = set()
    for retriever, response in answers:
        answer = response.json()
        generation = documents[answer["generation"]]
        served.add(answer["generation"])
        hits = {hit["id"]: hit["text"] for hit in answer["hits"]}
        assert all(generation.get(doc_id) == text for doc_id, text in hits.items()), (retriever, answer["generation"])
        if retriever == "gtr":  # exact search, k past the documents: all of them
            assert set(hits) == set(generation), (answer["generation"], set(hits) ^ set(generation))
    assert len(served) > 1


def test_an_engine_s_collection_is_one_generation_searched_through_the_engine(index_dir, tiny_encoder, tmp_path):
    from gtr_keras.engines.engine_index import EngineIndex

    Index.open(index_dir).push(f"qdrant:{tmp_path / 'q'}", "c")
    live = LiveIndex(f"qdrant:{tmp_path / 'q'}", tiny_encoder, poll_interval=None, collection="c")
    try:
        assert isinstance(live.current.index, EngineIndex) and live.current.number == 0
        assert "searched through its engine" in live.current.bm25_problem and not live.check_now()
        local = Index.open(index_dir, tiny_encoder).search(["wing lift"], 10)
        found = live.current.index.search(["wing lift"], 10)
        assert [hit["id"] for hit in found[0]] == [hit["id"] for hit in local[0]]
    finally:
        live.current.index.close()
