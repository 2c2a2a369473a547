"""`tune` and `gtr-keras tune`: each setting measured against exact float32 search on half the queries, the
fastest that meets the target on the other half recorded in the index and applied when it is loaded; the
recall checked here against numpy float32 brute force on queries tune never saw."""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from conftest import REPO, write_jsonl
from killed_at import killed_at
from search_inputs import CORPUS, clustered, doc_ids, float32_recall

from gtr_keras.cli.main import main
from gtr_keras.errors import UserError
from gtr_keras.storage.layout import EMBEDDINGS_NPY, TUNE_PLOT, TUNED_JSON
from gtr_keras.storage.search_index import ArrayRows, SearchIndex, rescore_pool_size, write_search_index
from gtr_keras.tuning import tuner
from gtr_keras.tuning.tuner import _bisect, needed_recall, settings_grid, tune
from gtr_keras.utils.file_operations import counting, stopping_at

pytest.importorskip("matplotlib")

N = 6000
# Unit vectors around 200 centres, noise 0.35 (issue 52's case): neighbours' scores lie closer together than
# int8 rounding, so recall against float32 stops near 0.93 without float32 rescoring.
CENTRES, NOISE = 200, 0.35


def _vectors(n, seed):
    return clustered(n, seed=seed, num_clusters=CENTRES, noise=NOISE)


def _write_embeddings(directory, vectors, files=1):
    """`files` embedding files of `vectors` (ids `doc-i`) in `directory`, as `gtr-keras encode` writes them."""
    directory.mkdir(parents=True, exist_ok=True)
    for number, rows in enumerate(np.array_split(np.arange(len(vectors)), files)):
        np.save(directory / f"part-{number}.npy", vectors[rows])
        (directory / f"part-{number}.ids.txt").write_text("".join(f"doc-{i}\n" for i in rows))
    return str(directory / "part-*.npy")


def _index_directory(directory, vectors, params):
    """An index directory (as `gtr-keras index` writes, without a model) of a ScaNN index of `params` over
    `vectors` (ids `doc-i`), whatever their number."""
    write_search_index(ArrayRows(doc_ids(len(vectors)), vectors), directory / "index", "scann", params)
    record = {"embedding_dim": vectors.shape[1], "kind": "scann", "num_documents": len(vectors), "model_dir": None}
    (directory / "retriever.json").write_text(json.dumps(record))
    return directory


def _held_out_recall(index, corpus, sample):
    """recall@10 of `index` on the held-out half of `tune`'s `sample` rows of `corpus` (the same rows, seed 0),
    each left out of its own answer, against numpy float32 brute force: the held-out recall `tune` recorded (near
    ties may order apart by another path)."""
    picked = np.random.default_rng(0).choice(len(corpus), sample, replace=False)
    held_out = np.sort(picked[sample // 2 :])
    scores = corpus[held_out] @ corpus.T
    scores[np.arange(len(held_out)), held_out] = -np.inf
    truth = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    found = index.search(corpus[held_out], 11)[0]
    return np.mean([len(set(row[row != me][:10]) & set(t)) / 10 for row, me, t in zip(found, held_out, truth)])


def _float32_recall(index_dir, vectors, queries):
    """recall@10 of `SearchIndex.load(index_dir)` (its tuned setting) against numpy float32 brute force over
    `vectors` (ids `doc-i`), on `queries` that tune never saw."""
    return float32_recall(SearchIndex.load(index_dir), doc_ids(len(vectors)), vectors, queries)[0]


@pytest.fixture(scope="module")
def corpus():
    return _vectors(N, seed=5)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, corpus):
    """An index directory of ScaNN over `N` synthetic vectors (no model), in 40 leaves: a build the same every
    time, where the default 60 leaves of 100 rows let ScaNN's k-means re-seed small partitions at random and a
    tuned setting chosen on one build miss its target held out on another (docs/limits.md)."""
    return _index_directory(tmp_path_factory.mktemp("tune") / "index", corpus, {"num_leaves": 40})


@pytest.fixture(scope="module")
def scann_dir(index_dir):
    return index_dir / "index"


def test_tune_sample_meets_the_target_on_queries_it_never_saw_against_float32(
    index_dir, scann_dir, corpus, capsys, tmp_path
):
    """Issue 52's acceptance at 6,000 rows (`test_acceptance_40k` for its 40,000 built by `gtr-keras index`)."""
    plot = tmp_path / "curve.png"
    argv = ["tune", "--index", str(index_dir), "--sample", "200", "--target-recall", "0.97", "--plot", str(plot)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "on 100 held-out queries" in out and "on the 100 it was tuned on) against exact float32 search" in out
    assert "document rows" in out and f"wrote {plot}" in out and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((scann_dir / TUNED_JSON).read_text())
    assert record["truth"] == "float32" and record["tuning_queries"] == record["held_out_queries"] == 100
    assert record["recall"] >= 0.97 and record["tuning_recall"] >= needed_recall(0.97, np.ones(100), 10) - 1e-4
    assert "rescore_factor" in record["setting"]
    assert len({m["setting"]["rescore_factor"] for m in record["measurements"]}) > 1
    index = SearchIndex.load(scann_dir)
    assert {name: index.params[name] for name in record["setting"]} == record["setting"]
    assert _held_out_recall(index, corpus, 200) == pytest.approx(record["recall"], abs=0.002)
    # And on 300 real held-out queries of the same distribution.
    assert _float32_recall(scann_dir, corpus, _vectors(300, seed=6)) >= 0.96


def test_tune_with_held_out_query_vectors_tunes_on_half_and_reports_the_other(index_dir, scann_dir, tmp_path):
    np.save(tmp_path / "queries.npy", _vectors(200, seed=7))
    assert main(["tune", "--index", str(index_dir), "--queries", str(tmp_path / "queries.npy"), "-k", "5"]) == 0
    assert (scann_dir / TUNE_PLOT).read_bytes()[:4] == b"\x89PNG"
    record = json.loads((scann_dir / TUNED_JSON).read_text())
    assert record["queries"] == "200 held-out query vectors" and record["k"] == 5
    assert record["tuning_queries"] == record["held_out_queries"] == 100 and record["recall"] >= 0.95


def test_a_target_the_sample_cannot_show_is_exit_2_naming_the_sample_that_can_before_any_search(
    tmp_path, capsys, monkeypatch
):
    """100 tuning queries cannot show 0.999 (all found, they would need 1.0006): the sample is the cause, not the
    index; said before any query is searched."""
    index_dir = _index_directory(tmp_path / "i", _vectors(3000, seed=3), {"num_leaves": 10})
    monkeypatch.setattr(tuner, "split_queries", lambda *args: pytest.fail("searched before the refusal"))
    assert main(["tune", "--index", str(index_dir), "--sample", "200", "--target-recall", "0.999"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "100 tuning queries cannot show recall@10 0.999: all found, they would need 1.0006" in err[0]
    )
    assert err[0].endswith("use --sample >= 2163") and tuner.queries_to_show(0.999, 10) == 2163
    assert needed_recall(0.999, np.ones(1082), 10) <= (1 + 0.999) / 2 < needed_recall(0.999, np.ones(1081), 10)
    np.save(tmp_path / "q.npy", _vectors(300, seed=4))
    assert (
        main(["tune", "--index", str(index_dir), "--queries", str(tmp_path / "q.npy"), "--target-recall", "0.999"]) == 2
    )
    assert "150 tuning queries cannot show recall@10 0.999" in capsys.readouterr().err
    assert not (index_dir / "index" / TUNED_JSON).exists()


def test_a_target_no_setting_meets_on_the_tuning_queries_is_exit_2_naming_the_nearest(tmp_path, capsys, monkeypatch):
    index_dir = _index_directory(tmp_path / "i", _vectors(3000, seed=3), {"num_leaves": 10})
    weak = {"num_leaves_to_search": 1, "reorder_factor": 1, "rescore_factor": 1}
    monkeypatch.setattr(tuner, "settings_grid", lambda index, k: [weak])
    assert main(["tune", "--index", str(index_dir), "--sample", "600", "--target-recall", "0.99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no setting reached recall@10 0.99 on the 300 tuning queries with the margin" in err[0]
    assert "(the nearest: 0." in err[0] and "num_leaves_to_search=1, reorder_factor=1, rescore_factor=1" in err[0]
    assert "nothing recorded" in err[0] and err[0].endswith("or rebuild with more leaves")
    assert not (index_dir / "index" / TUNED_JSON).exists()


def test_needed_recall_grows_the_margin_as_the_queries_get_fewer():
    assert needed_recall(0.97, np.ones(100), 10) == pytest.approx(0.97 + 1.645 * np.sqrt(0.97 * 0.03 / 10 / 100))
    assert needed_recall(0.97, np.ones(1000), 10) < needed_recall(0.97, np.ones(100), 10)
    assert needed_recall(0.999, np.ones(100), 10) > 1 > needed_recall(0.999, np.ones(5000), 10)
    spread = np.array([1.0, 0.5] * 50)  # observed variance above the floor counts
    assert needed_recall(0.9, spread, 10) > needed_recall(0.9, np.ones(100), 10)


def test_tune_logs_its_table_to_the_gtr_keras_logger_and_prints_nothing(tmp_path, caplog, capsys):
    write_search_index(ArrayRows(doc_ids(len(CORPUS)), CORPUS), tmp_path / "i", "scann", {"num_leaves": 10})
    caplog.set_level(logging.INFO, logger="gtr_keras")
    record = tune(tmp_path / "i", sample=100, target_recall=0.5)
    lines = [r.getMessage() for r in caplog.records if r.name == "gtr_keras.tuning.tuner" and r.levelno == logging.INFO]
    assert lines[0].startswith("50 tuning queries, 50 held out; ")
    assert lines[1].split() == ["setting", "recall@10", "QPS"] and len(lines) == 2 + len(record["measurements"])
    assert capsys.readouterr() == ("", "")


def test_a_flag_overrides_the_tuned_setting(tmp_path):
    write_search_index(ArrayRows(doc_ids(len(CORPUS)), CORPUS), tmp_path / "i", "scann", {"num_leaves": 10})
    tune(tmp_path / "i", sample=100, target_recall=0.5)
    index = SearchIndex.load(tmp_path / "i")
    index.set_search_params({"num_leaves_to_search": index.params["num_leaves"], "reorder_factor": 300})
    index.set_search_params({"rescore_factor": 7})
    assert index.params["num_leaves_to_search"] == index.params["num_leaves"] and index.params["rescore_factor"] == 7
    with pytest.raises(UserError, match="at most num_leaves"):
        index.set_search_params({"num_leaves_to_search": index.params["num_leaves"] + 1})


def test_bisection_finds_the_smallest_values_meeting_the_target_between_the_grids_steps():
    tried = [{"num_leaves_to_search": s, "reorder_factor": r} for s in (5, 10) for r in (50, 100)]
    measured = []

    def measured_at(setting):
        measured.append(setting)
        meets = setting["reorder_factor"] >= 80 and setting["num_leaves_to_search"] >= 7
        return {"setting": setting, "recall": 0.96 if meets else 0.9, "needed": 0.95}

    _bisect({"num_leaves_to_search": 10, "reorder_factor": 100}, tried, tuner._meets, measured_at, 10)
    assert [(m["num_leaves_to_search"], m["reorder_factor"]) for m in measured] == [
        (10, 75),  # reorder first: fails, 87 meets, 81 meets (three halvings)
        (10, 87),
        (10, 81),
        (7, 81),  # then leaves at reorder 81: 7 meets, 6 fails, nothing left between 6 and 7
        (6, 81),
    ]


def test_the_grid_holds_the_float32_rescoring_pools_up_to_the_reordering_pool(scann_dir):
    grid = settings_grid(SearchIndex.load(scann_dir), 10)
    assert {s["rescore_factor"] for s in grid} >= set(tuner.RESCORE_FACTORS)
    assert all(s["rescore_factor"] <= s["reorder_factor"] for s in grid)
    assert {s["reorder_factor"] for s in grid} >= set(tuner.REORDER_FACTORS)
    deep = settings_grid(SearchIndex.load(scann_dir), 1000)  # at depth 1000 a rescoring pool grows by 100s
    assert all(rescore_pool_size(1000, s["rescore_factor"]) <= s["reorder_factor"] * 1000 for s in deep)
    assert {"reorder_factor": 5, "rescore_factor": 10} in [
        {n: s[n] for n in ("reorder_factor", "rescore_factor")} for s in deep
    ]


def test_tune_records_a_bisected_setting_when_it_is_the_fastest(scann_dir, monkeypatch):
    monkeypatch.setattr(tuner, "measure", lambda index, queries, *args, **kwargs: _fake(index.params, len(queries)))
    (scann_dir / TUNED_JSON).unlink(missing_ok=True)
    assert 60 not in {s["reorder_factor"] for s in settings_grid(SearchIndex.load(scann_dir), 10)}
    record = tune(scann_dir, sample=50, target_recall=0.95)
    assert record["setting"]["reorder_factor"] == 60  # the grid has 50 (fails) and 70: bisected 60, 55, 57
    assert record["setting"]["rescore_factor"] == 0
    assert SearchIndex.load(scann_dir).params["reorder_factor"] == record["setting"]["reorder_factor"]


def test_settings_searching_at_least_as_much_as_one_too_slow_to_be_chosen_are_not_measured(scann_dir, monkeypatch):
    """Pruning the grid changes what `tune` measures, not what it records: the same setting as measuring every
    one, from far fewer."""
    measured = []

    def fake(index, queries, *args, **kwargs):
        measured.append(dict(index.params))
        return _fake(index.params, len(queries))

    monkeypatch.setattr(tuner, "measure", fake)
    records = {}
    for slower in (float("inf"), tuner.SLOWER):
        monkeypatch.setattr(tuner, "SLOWER", slower)
        (scann_dir / TUNED_JSON).unlink(missing_ok=True)
        measured.clear()
        records[slower] = tune(scann_dir, sample=50, target_recall=0.95), len(measured)
    (every, every_count), (pruned, pruned_count) = records.values()
    assert pruned["setting"] == every["setting"] and pruned["qps"] == every["qps"]
    assert pruned_count < every_count / 2
    most = max(s["num_leaves_to_search"] for s in settings_grid(SearchIndex.load(scann_dir), 10))
    assert all(s["num_leaves_to_search"] < most for s in measured)  # every leaf: too slow for reorder 5's cost


def test_a_target_int8_order_meets_is_met_without_float32_rescoring_where_that_is_fastest(
    index_dir, corpus, tmp_path, monkeypatch
):
    """Issue 62: `--target-recall 0.9`, which ScaNN's int8 order meets on these vectors from one leaf of the
    fixture's 40 on (0.96 there, well clear of the target on either half), is met fastest with no float32
    rescoring (`rescore_factor` 0) where rescoring costs time: recall measured for real against float32 search,
    QPS a cost model (deterministic); the recorded recall recomputed with numpy."""
    index_dir = shutil.copytree(index_dir, tmp_path / "index")
    real = tuner.measure

    def timed(index, queries, k, repeats=2):
        recalls, _ = real(index, queries, k, repeats=0)
        return recalls, 1e6 / _cost(index.params) if repeats else None

    monkeypatch.setattr(tuner, "measure", timed)
    assert main(["tune", "--index", str(index_dir), "--sample", "400", "--target-recall", "0.9"]) == 0
    record = json.loads((index_dir / "index" / TUNED_JSON).read_text())
    meeting = [m for m in record["measurements"] if m["recall"] >= m["needed"]]
    assert record["setting"] == max(meeting, key=lambda m: m["qps"])["setting"]
    assert record["setting"]["rescore_factor"] == 0
    assert {m["setting"]["rescore_factor"] for m in meeting} >= {0, 2}  # rescoring met it too, more slowly
    index = SearchIndex.load(index_dir)
    assert index.params["rescore_factor"] == 0 and index.rescore_pool(10) == 10
    assert _held_out_recall(index, corpus, 400) == pytest.approx(record["recall"], abs=0.002)
    assert record["recall"] >= 0.9


def _fake(params, n):
    """(per-query recalls, QPS) of a setting in a model where recall needs reorder_factor >= 60, and QPS falls
    with every parameter."""
    recall = 1.0 if params["reorder_factor"] >= 60 else 0.5
    cost = params["reorder_factor"] * params["num_leaves_to_search"] * (1 + params["rescore_factor"])
    return np.full(n, recall), 1e6 / cost


@pytest.mark.parametrize("held_out_recall, shown", [(0.5, "0.5000"), (0.96996, "0.969960")])
def test_the_setting_chosen_on_the_tuning_half_is_checked_once_held_out_and_refused_if_it_misses(
    scann_dir, monkeypatch, held_out_recall, shown
):
    """The held-out half checks the one setting chosen on the tuning half (trying the next fastest there would
    bias its recall), unrounded: 0.96996 misses 0.97, and the line says so in enough digits."""
    held = []

    def fake(index, queries, k, repeats=2):
        if repeats == 0:
            held.append(dict(index.params))
            return np.full(len(queries), held_out_recall), None
        return np.ones(len(queries)), 1e6 / _cost(index.params)

    monkeypatch.setattr(tuner, "measure", fake)
    (scann_dir / TUNED_JSON).unlink(missing_ok=True)
    with pytest.raises(UserError) as refused:
        tune(scann_dir, sample=100, target_recall=0.97)
    assert len(held) == 1 and (held[0]["reorder_factor"], held[0]["num_leaves_to_search"]) == (5, 1)
    message = str(refused.value)
    assert "the fastest setting meeting recall@10 0.97 on the 50 tuning queries (num_leaves_to_search=1, " in message
    assert ": 1.0000, needed 0.9" in message and f"reached {shown} on the 50 held out, below the target" in message
    assert "another setting is not tried held out" in message and not (scann_dir / TUNED_JSON).exists()


def _cost(params):
    return params["reorder_factor"] * params["num_leaves_to_search"] * (1 + params.get("rescore_factor", 0))


def test_a_quantized_exact_index_is_tuned_on_its_rescore_pool(tmp_path):
    write_search_index(ArrayRows(doc_ids(len(CORPUS)), CORPUS), tmp_path / "i", "exact", {"vectors": "binary"})
    record = tune(tmp_path / "i", sample=400, target_recall=0.97)
    assert list(record["setting"]) == ["rescore"] and record["recall"] >= 0.97
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
    with pytest.raises(UserError, match="no setting reached recall@10 1.0 on the 50 tuning queries .*nothing recorded"):
        tune(tmp_path / "bin", sample=100, target_recall=1.0)
    assert not (tmp_path / "bin" / TUNED_JSON).exists() and (tmp_path / "bin" / TUNE_PLOT).exists()
    with pytest.raises(UserError, match="at least 2 queries"):
        tune(tmp_path / "bin", sample=1)


def test_an_int8_only_scann_index_is_tuned_against_its_int8_copy_and_says_so(tmp_path, capsys):
    """An index of ScaNN's int8 copy only (`reorder: "int8"`): readable, searchable and tuned; its truth is that
    copy, and one line says what that means."""
    vectors = _vectors(3000, seed=8)
    index_dir = _index_directory(tmp_path / "int8", vectors, {"num_leaves": 10, "reorder": "int8"})
    assert not (index_dir / "index" / EMBEDDINGS_NPY).exists()
    assert main(["tune", "--index", str(index_dir), "--sample", "200", "--target-recall", "0.9"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"note: {index_dir / 'index'} {tuner.INT8_TRUTH}"
    assert "against exact search of its int8 copy (see the note)" in out[-2]
    record = json.loads((index_dir / "index" / TUNED_JSON).read_text())
    assert record["truth"] == "int8" and "rescore_factor" not in record["setting"] and record["recall"] >= 0.9
    assert SearchIndex.load(index_dir).search_ids(vectors[[7]], 1)[0] == [["doc-7"]]


@pytest.fixture
def small_grid(monkeypatch):
    """A grid of 2 x 2 x 2 settings a build, for the tests of `tune --build`'s builds and scratch."""
    monkeypatch.setattr(tuner, "LEAF_FRACTIONS", (0.2, 0.5))
    monkeypatch.setattr(tuner, "REORDER_FACTORS", (10, 50))
    monkeypatch.setattr(tuner, "RESCORE_FACTORS", (1, 4))


def test_build_measures_other_leaves_and_blocks_and_keeps_the_index_it_chose(tmp_path, small_grid):
    """The index kept, the original or a build, has the build's search params in its `index.json` (reorder 30,
    rescore 3), not those the last measurement left (the grid's reorder 50, rescore 4)."""
    directory = tmp_path / "index"
    params = {"num_leaves": 10, "reorder_factor": 30, "rescore_factor": 3}
    write_search_index(ArrayRows(doc_ids(len(CORPUS)), CORPUS), directory, "scann", params)
    record = tune(directory, sample=100, target_recall=0.9, build=True)
    written = json.loads((directory / "index.json").read_text())["params"]
    assert (written["reorder_factor"], written["rescore_factor"], written["reorder"]) == (30, 3, "float32")
    builds = {tuple(m["build"].values()) for m in record["measurements"]}
    assert builds == {(10, 4), (5, 2), (5, 4), (10, 2), (20, 2), (20, 4)}
    index = SearchIndex.load(directory)
    chosen = {name: index.params[name] for name in ("num_leaves", "dimensions_per_block")}
    assert chosen == record["build"] and record["recall"] >= 0.9
    assert {name: index.params[name] for name in record["setting"]} == record["setting"]
    assert index.params["reorder"] == "float32"  # a build keeps the index's float32 vectors and rescoring
    np.testing.assert_array_equal(np.load(directory / EMBEDDINGS_NPY), CORPUS)
    assert index.search_ids(CORPUS[[7]], 1) == ([["doc-7"]], pytest.approx(np.array([[1.0]]), abs=1e-6))
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tune-")]


def test_build_refuses_an_exact_index_before_any_search(tmp_path, monkeypatch):
    write_search_index(ArrayRows(doc_ids(300), CORPUS[:300]), tmp_path / "i", "exact", {"vectors": "int8"})
    monkeypatch.setattr(tuner, "split_queries", lambda *args: pytest.fail("searched before the refusal"))
    with pytest.raises(UserError, match="rebuilds a ScaNN index of one segment; this one is exact"):
        tune(tmp_path / "i", sample=50, build=True)


@pytest.mark.parametrize(
    "vectors, problem",
    [
        (np.ones((4, 3), np.float32), "queries of 3 dims, the index has 64"),
        (np.ones(64, np.float32), "queries must have shape [N, D], got shape (64,)"),
        (np.ones((4, 64), np.int64), "queries must be floating point, got dtype int64"),
        (np.full((4, 64), np.nan, np.float32), "queries hold NaN or infinity in 4 rows"),
    ],
    ids=["dims", "1-D", "int", "NaN"],
)
def test_bad_query_vectors_are_named_with_the_flag_and_file(index_dir, tmp_path, capsys, vectors, problem):
    np.save(tmp_path / "q.npy", vectors)
    assert main(["tune", "--index", str(index_dir), "--queries", str(tmp_path / "q.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"gtr-keras tune: error: --queries {tmp_path / 'q.npy'}: {problem}") and "\n" not in err


def test_a_queries_file_too_small_for_the_target_is_refused_before_the_model_loads(
    index_dir, tmp_path, capsys, monkeypatch, tiny_model_dir
):
    from gtr_keras.cli.helpers import handler_inputs

    write_jsonl(tmp_path / "queries.jsonl", [{"_id": f"q{i}", "text": f"wing lift {i}"} for i in range(40)])
    monkeypatch.setattr(handler_inputs, "encoder", lambda args: pytest.fail("the model loaded before the refusal"))
    argv = ["tune", "--index", str(index_dir), "--queries", str(tmp_path / "queries.jsonl"), "--model", tiny_model_dir]
    assert main([*argv, "--target-recall", "0.99"]) == 2
    assert "20 tuning queries cannot show recall@10 0.99: " in capsys.readouterr().err


def test_query_vectors_in_a_file_named_in_capitals_are_vectors_not_text(index_dir, scann_dir, tmp_path):
    np.save(tmp_path / "q.npy", _vectors(200, seed=7))
    os.rename(tmp_path / "q.npy", tmp_path / "Q.NPY")
    assert (
        main(["tune", "--index", str(index_dir), "--queries", str(tmp_path / "Q.NPY"), "--target-recall", "0.9"]) == 0
    )
    assert json.loads((scann_dir / TUNED_JSON).read_text())["queries"] == "200 held-out query vectors"


def _scratch(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith(".tune-"))


def test_a_build_stopped_at_any_point_leaves_scratch_that_the_next_tune_removes(tmp_path, small_grid):
    """Each crash point of `tune --build` (`utils/file_operations`: a stop leaves what a kill would): the next
    tune, with or without `--build`, removes the scratch and leaves a searchable index."""
    template = _index_directory(tmp_path / "template", CORPUS[:2000], {"num_leaves": 8})
    small = {"sample": 50, "target_recall": 0.5}
    shutil.copytree(template, tmp_path / "counted")
    with counting() as log:
        tune(tmp_path / "counted" / "index", build=True, **small)
    points = log.count
    assert points > 10 and not _scratch(tmp_path / "counted")
    for stop in (2, points // 2):  # in its builds, whose operations are the same whichever build it keeps
        index_dir = tmp_path / f"stopped-{stop}"
        shutil.copytree(template, index_dir)
        with stopping_at(stop) as stopped:
            tune(index_dir / "index", build=True, **small)
        assert stopped.crashed and _scratch(index_dir)
        tune(index_dir / "index", **small)
        assert not _scratch(index_dir)
        assert SearchIndex.load(index_dir).search_ids(CORPUS[[7]], 1)[0] == [["doc-7"]]


def test_tune_removes_its_own_scratch_only_not_a_sibling_index_whose_name_it_begins(tmp_path):
    """A standalone index `foo` beside `foo-bar`: `.tune-foo-bar-*` is the live scratch of `foo-bar`'s tune."""
    for name in ("foo", "foo-bar"):
        write_search_index(ArrayRows(doc_ids(300), CORPUS[:300]), tmp_path / name, "exact", {"vectors": "binary"})
    mine, theirs = tmp_path / ".tune-foo-ab_c1234", tmp_path / ".tune-foo-bar-x9y8z7w6"
    for scratch in (mine, theirs, tmp_path / ".tune-foo-bar"):
        scratch.mkdir()
    assert tuner.scratch_paths(tmp_path / "foo") == [str(mine)]
    assert tuner.scratch_paths(tmp_path / "foo-bar") == [str(theirs)]
    tune(tmp_path / "foo", sample=100, target_recall=0.5)
    assert not mine.exists() and theirs.exists() and (tmp_path / ".tune-foo-bar").exists()
    made = [tempfile.mkdtemp(prefix=".tune-foo-", dir=tmp_path) for _ in range(20)]  # this Python's mkdtemp
    assert sorted(tuner.scratch_paths(tmp_path / "foo")) == sorted(made)


@pytest.mark.large
def test_a_killed_tune_build_leaves_scratch_that_the_next_run_of_the_command_removes(index_dir):
    argv = ["-m", "gtr_keras", "tune", "--index", str(index_dir), "--sample", "50", "--build"]
    killed = killed_at(3, *argv)
    assert killed.returncode == -signal.SIGKILL
    assert _scratch(index_dir)
    rerun = [sys.executable, *argv[:-1], "--target-recall", "0.5"]
    env = {**os.environ, "PYTHONPATH": REPO}
    assert subprocess.run(rerun, env=env, capture_output=True, timeout=600).returncode == 0
    assert not _scratch(index_dir)


def test_tune_refuses_model_flags_that_do_not_fit_its_queries(index_dir, tmp_path, capsys):
    write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "wing lift"}])
    np.save(tmp_path / "q.npy", _vectors(4, seed=1))
    for flags, message in (
        (["--queries", str(tmp_path / "queries.jsonl")], "argument --model: required with a --queries file of text"),
        (["--queries", str(tmp_path / "q.npy"), "--model", "x"], "argument --model: encodes a --queries file of text"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["tune", "--index", str(index_dir), *flags])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.large
def test_tune_encodes_a_queries_file_with_the_index_model(tmp_path, tiny_model_dir, capsys):
    words = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 5)) + f" {i}" for i in range(300)]
    write_jsonl(tmp_path / "corpus.jsonl", [{"_id": f"d{i}", "title": "", "text": t} for i, t in enumerate(texts)])
    queries = [{"_id": f"q{i}", "text": " ".join(texts[i * 3].split()[:3])} for i in range(40)]
    write_jsonl(tmp_path / "queries.jsonl", queries)
    index = str(tmp_path / "index")
    argv = ["index", "--model", tiny_model_dir, "--corpus", str(tmp_path / "corpus.jsonl"), "--out", index]
    assert main([*argv, "--vectors", "int8", "--no-bm25"]) == 0
    argv = ["tune", "--index", index, "--queries", str(tmp_path / "queries.jsonl"), "--model", tiny_model_dir]
    assert main([*argv, "--target-recall", "0.9"]) == 0
    assert "40 held-out query vectors" in capsys.readouterr().out
    record = json.loads((tmp_path / "index" / "index" / TUNED_JSON).read_text())
    assert record["tuning_queries"] == record["held_out_queries"] == 20 and record["recall"] >= 0.9


@pytest.mark.large
def test_acceptance_40k(tmp_path, capsys):
    """Issue 52: 40,000 x 64 unit vectors (200 centres, noise 0.35) in 4 embedding files, `gtr-keras index
    --embeddings`, `tune --sample 200 --target-recall 0.97`: `SearchIndex.load(I).search_ids` gives recall@10
    >= 0.96 against numpy float32 brute force on 300 held-out queries (0.929 before float32 rescoring);
    `tune --target-recall 0.999` exits 2 at `--sample 200` (100 tuning queries cannot show it); with 2,000
    sampled rows it meets it on its held-out half of document rows, which overstate a real query's recall there
    (the 300 queries: 0.9977-0.9983 in three runs of four), and tuned on 2,000 held-out query vectors it meets it
    on their held-out half and on the 300 queries it never saw."""
    vectors = _vectors(40_000, seed=11)
    index = tmp_path / "index"
    assert main(["index", "--embeddings", _write_embeddings(tmp_path / "emb", vectors, 4), "--out", str(index)]) == 0
    queries = _vectors(300, seed=12)
    assert main(["tune", "--index", str(index), "--sample", "200", "--target-recall", "0.97"]) == 0
    assert _float32_recall(index, vectors, queries) >= 0.96
    capsys.readouterr()
    assert main(["tune", "--index", str(index), "--sample", "200", "--target-recall", "0.999"]) == 2
    assert "100 tuning queries cannot show recall@10 0.999" in capsys.readouterr().err
    assert main(["tune", "--index", str(index), "--sample", "2000", "--target-recall", "0.999"]) == 0
    record = json.loads((index / "index" / TUNED_JSON).read_text())
    assert record["held_out_queries"] == 1000 and record["recall"] >= 0.999
    assert _float32_recall(index, vectors, queries) >= 0.99
    np.save(tmp_path / "queries.npy", _vectors(2000, seed=13))
    assert (
        main(["tune", "--index", str(index), "--queries", str(tmp_path / "queries.npy"), "--target-recall", "0.999"])
        == 0
    )
    record = json.loads((index / "index" / TUNED_JSON).read_text())
    assert record["held_out_queries"] == 1000 and record["recall"] >= 0.999
    assert _float32_recall(index, vectors, queries) >= 0.999
