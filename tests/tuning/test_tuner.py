"""`tune` and `gtr-keras tune`: each setting measured against exact search, the fastest meeting the target
recorded in the index and applied when it is loaded; the recall checked here with an exact search of our own."""

import json
import os

import numpy as np
import pytest
from search_inputs import CORPUS, QUERIES, clustered, doc_ids

from gtr_keras.cli.main import main
from gtr_keras.errors import UserError
from gtr_keras.index import SearchIndex
from gtr_keras.index.layout import TUNE_PLOT, TUNED_JSON
from gtr_keras.index.search_index import ArrayRows, write_search_index
from gtr_keras.tuning.tuner import DecodedRows, _bisect, settings_grid, tune

pytest.importorskip("matplotlib")


N = 21_000  # `gtr-keras index` builds ScaNN from 20k rows on


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    """A `gtr-keras index` directory of ScaNN over `N` synthetic vectors (no model)."""
    work = tmp_path_factory.mktemp("tune")
    np.save(work / "vectors.npy", clustered(N, seed=5))
    (work / "vectors.ids.txt").write_text("".join(f"doc-{i}\n" for i in range(N)))
    assert main(["index", "--embeddings", str(work / "vectors.npy"), "--out", str(work / "index")]) == 0
    return work / "index"


@pytest.fixture(scope="module")
def scann_dir(index_dir):
    return index_dir / "index"


def own_recall(index, queries, exact_rows, sampled):
    """recall@10 of `index` on `queries` (the rows `sampled` of the index, each left out of its answer)."""
    found = index.search(queries, 11)[0]
    hits = [len(set(row[row != me][:10]) & set(truth)) for row, me, truth in zip(found, sampled, exact_rows)]
    return np.mean(hits) / 10


def test_acceptance_tune_sample_meets_the_target_checked_by_an_exact_search(index_dir, scann_dir, capsys, tmp_path):
    plot = tmp_path / "curve.png"
    argv = ["tune", "--index", str(index_dir), "--sample", "200", "--target-recall", "0.9", "--plot", str(plot)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"wrote {plot}" in out and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((scann_dir / TUNED_JSON).read_text())
    assert record["recall"] >= 0.9 and record["k"] == 10 and len(record["measurements"]) > 20
    chosen = record["setting"]
    assert all(m["qps"] <= record["qps"] for m in record["measurements"] if m["recall"] >= 0.9)
    index = SearchIndex.load(scann_dir)
    assert {name: index.params[name] for name in chosen} == chosen
    # Our own exact search: the same sampled rows of the index's int8 vectors, decoded, scored by numpy.
    vectors = DecodedRows(os.path.join(scann_dir, "scann"))[:]
    sampled = np.sort(np.random.default_rng(0).choice(N, 200, replace=False))
    scores = vectors[sampled] @ vectors.T
    scores[np.arange(200), sampled] = -np.inf
    exact_rows = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    assert own_recall(index, vectors[sampled], exact_rows, sampled) == pytest.approx(record["recall"], abs=0.01)
    assert own_recall(index, vectors[sampled], exact_rows, sampled) >= 0.9 - 0.01


def test_tune_with_held_out_queries_writes_the_plot_under_the_index(index_dir, scann_dir, tmp_path):
    np.save(tmp_path / "queries.npy", QUERIES)
    assert main(["tune", "--index", str(index_dir), "--queries", str(tmp_path / "queries.npy"), "-k", "5"]) == 0
    assert (scann_dir / TUNE_PLOT).read_bytes()[:4] == b"\x89PNG"
    assert json.loads((scann_dir / TUNED_JSON).read_text())["queries"] == "200 held-out vectors"


def test_a_flag_overrides_the_tuned_setting(scann_dir):
    tune(scann_dir, sample=100, target_recall=0.5, log=lambda line: None)
    index = SearchIndex.load(scann_dir)
    index.set_search_params({"num_leaves_to_search": index.params["num_leaves"], "reorder_factor": 300})
    assert index.params["num_leaves_to_search"] == index.params["num_leaves"]
    with pytest.raises(UserError, match="at most num_leaves"):
        index.set_search_params({"num_leaves_to_search": index.params["num_leaves"] + 1})


def test_bisection_finds_the_smallest_values_meeting_the_target_between_the_grids_steps():
    tried = [{"num_leaves_to_search": s, "reorder_factor": r} for s in (5, 10) for r in (50, 100)]
    measured = []

    def measured_at(setting):
        measured.append(setting)
        meets = setting["reorder_factor"] >= 80 and setting["num_leaves_to_search"] >= 7
        return {"setting": setting, "recall": 0.96 if meets else 0.9}

    _bisect({"num_leaves_to_search": 10, "reorder_factor": 100}, tried, 0.95, measured_at)
    assert [(m["num_leaves_to_search"], m["reorder_factor"]) for m in measured] == [
        (10, 75),  # reorder first: fails, 87 meets, 81 meets (three halvings)
        (10, 87),
        (10, 81),
        (7, 81),  # then leaves at reorder 81: 7 meets, 6 fails, nothing left between 6 and 7
        (6, 81),
    ]


def test_tune_records_a_bisected_setting_when_it_is_the_fastest(scann_dir, monkeypatch):
    monkeypatch.setattr("gtr_keras.tuning.tuner.measure", lambda index, *args, **kwargs: _fake(index.params))
    (scann_dir / TUNED_JSON).unlink(missing_ok=True)
    assert 60 not in {s["reorder_factor"] for s in settings_grid(SearchIndex.load(scann_dir), 10)}
    record = tune(scann_dir, sample=50, target_recall=0.95, log=lambda line: None)
    assert record["setting"]["reorder_factor"] == 60  # the grid has 50 (fails) and 70: bisected 60, 55, 57
    assert SearchIndex.load(scann_dir).params["reorder_factor"] == record["setting"]["reorder_factor"]


def _fake(params):
    """(recall, QPS) of a setting in a model where recall needs reorder_factor >= 60, and QPS falls with both."""
    recall = 0.99 if params["reorder_factor"] >= 60 else 0.5
    return recall, 1e6 / (params["reorder_factor"] * params["num_leaves_to_search"])


def test_a_quantized_exact_index_is_tuned_on_its_rescore_pool(tmp_path):
    write_search_index(ArrayRows(doc_ids(len(CORPUS)), CORPUS), tmp_path / "i", "exact", {"vectors": "binary"})
    record = tune(tmp_path / "i", sample=100, target_recall=0.99, log=lambda line: None)
    assert list(record["setting"]) == ["rescore"] and record["recall"] >= 0.99
    assert SearchIndex.load(tmp_path / "i").params["rescore"] == record["setting"]["rescore"]
    assert [s["rescore"] for s in settings_grid(SearchIndex.load(tmp_path / "i"), 10)][:3] == [10, 20, 40]


def test_float32_exact_or_an_unreachable_target_is_one_line_and_records_nothing(tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "v.npy", CORPUS[:300])
    (tmp_path / "v.ids.txt").write_text("".join(f"doc-{i}\n" for i in range(300)))
    assert main(["index", "--embeddings", str(tmp_path / "v.npy"), "--out", str(tmp_path / "exact")]) == 0
    capsys.readouterr()
    assert main(["tune", "--index", str(tmp_path / "exact")]) == 2
    assert "has no search setting to tune" in capsys.readouterr().err
    write_search_index(ArrayRows(doc_ids(300), CORPUS[:300]), tmp_path / "bin", "exact", {"vectors": "binary"})
    monkeypatch.setattr("gtr_keras.tuning.tuner.settings_grid", lambda index, k: [{"rescore": 10}])
    with pytest.raises(UserError, match="no setting reached recall@10 1.0 .*nothing recorded"):
        tune(tmp_path / "bin", sample=100, target_recall=1.0, log=lambda line: None)
    assert not (tmp_path / "bin" / TUNED_JSON).exists() and (tmp_path / "bin" / TUNE_PLOT).exists()


def test_build_measures_other_leaves_and_blocks_and_keeps_the_index_it_chose(tmp_path):
    directory = tmp_path / "index"
    write_search_index(ArrayRows(doc_ids(len(CORPUS)), CORPUS), directory, "scann", {"num_leaves": 10})
    record = tune(directory, sample=100, target_recall=0.9, build=True, log=lambda line: None)
    builds = {tuple(m["build"].values()) for m in record["measurements"]}
    assert builds == {(10, 4), (5, 2), (5, 4), (10, 2), (20, 2), (20, 4)}
    index = SearchIndex.load(directory)
    chosen = {name: index.params[name] for name in ("num_leaves", "dimensions_per_block")}
    assert chosen == record["build"] and record["recall"] >= 0.9
    assert {name: index.params[name] for name in record["setting"]} == record["setting"]
    assert index.search_ids(CORPUS[[7]], 1)[0] == [["doc-7"]]


def test_build_refuses_an_exact_index(tmp_path):
    write_search_index(ArrayRows(doc_ids(300), CORPUS[:300]), tmp_path / "i", "exact", {"vectors": "int8"})
    with pytest.raises(UserError, match="rebuilds a ScaNN index of one segment; this one is exact"):
        tune(tmp_path / "i", sample=50, build=True, log=lambda line: None)
