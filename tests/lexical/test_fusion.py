import doctest
import json
import math
import shutil

import pytest

from gtr_keras.errors import DataError, UserError
from gtr_keras.lexical.fusion import DEFAULT_FUSION, Fusion, model_fusion
from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR

GTR = {"a": 0.9, "b": 0.7, "c": 0.5}
BM25 = {"b": 10.0, "d": 6.0, "c": 2.0}


def test_weighted_fusion_matches_a_hand_computed_example():
    # GTR normalised: a 1, b 0.5, c 0; BM25: b 1, d 0.5, c 0. With w = 0.25:
    # a 0.25, b 0.25 * 0.5 + 0.75 = 0.875, c 0, d 0.375.
    fused = Fusion("weighted", gtr_weight=0.25).fuse(GTR, BM25)
    assert list(fused) == ["b", "d", "a", "c"]
    assert fused == pytest.approx({"a": 0.25, "b": 0.875, "c": 0.0, "d": 0.375})


def test_rrf_matches_a_hand_computed_example():
    # GTR ranks a 1, b 2, c 3; BM25 ranks b 1, d 2, c 3; k = 60, equal shares.
    fused = Fusion("rrf", gtr_weight=0.5).fuse(GTR, BM25)
    expected = {
        "a": 0.5 / 61,
        "b": 0.5 / 62 + 0.5 / 61,
        "c": 0.5 / 63 + 0.5 / 63,
        "d": 0.5 / 62,
    }
    assert fused == pytest.approx(expected)
    assert list(fused) == ["b", "c", "a", "d"]


def test_ids_on_one_side_only_get_only_that_sides_share():
    fused = Fusion("weighted", gtr_weight=0.5).fuse({"x": 1.0, "y": 0.0}, {})
    assert fused == {"x": 0.5, "y": 0.0}
    assert Fusion("rrf").fuse({}, {"z": 3.0}) == pytest.approx({"z": 0.5 / 61})
    assert Fusion().fuse({}, {}) == {}


def test_equal_scores_on_a_side_all_count_as_its_best():
    assert Fusion("weighted", gtr_weight=0.5).fuse({"p": 0.3, "q": 0.3}, {"q": 1.0}) == {"q": 1.0, "p": 0.5}


def test_ties_are_ranked_as_trec_eval_ranks_them():
    # Equal fused scores: the larger id first, on each side's ranks and in the fused list.
    fused = Fusion("weighted", gtr_weight=0.5).fuse({"d1": 1.0, "d2": 0.0}, {"d2": 1.0, "d1": 0.0})
    assert list(fused) == ["d2", "d1"] and fused["d1"] == fused["d2"]
    assert list(Fusion("rrf").fuse({"d1": 0.4, "d3": 0.4}, {})) == ["d3", "d1"]


def test_fuse_runs_covers_every_query_and_cuts_at_depth():
    fusion = Fusion("weighted", gtr_weight=0.25)
    run = fusion.fuse_runs({"q1": GTR, "q2": {"e": 1.0}}, {"q1": BM25, "q3": {"f": 2.0}}, depth=2)
    assert list(run["q1"]) == ["b", "d"] and run["q2"] == {"e": 0.25} and run["q3"] == {"f": 0.75}
    assert len(fusion.fuse_runs({"q1": GTR}, {"q1": BM25}, depth=100)["q1"]) == 4


def test_weights_at_the_ends_rank_by_one_side_alone():
    # A side's last document scores 0, as one it did not retrieve: they tie (the larger id first).
    fused = Fusion("weighted", gtr_weight=1.0).fuse(GTR, BM25)
    assert list(fused) == ["a", "b", "d", "c"] and fused == pytest.approx({"a": 1, "b": 0.5, "c": 0, "d": 0})
    assert list(Fusion("weighted", gtr_weight=0.0).fuse(GTR, BM25))[:2] == ["b", "d"]
    assert list(Fusion("rrf", gtr_weight=1.0).fuse(GTR, BM25))[:3] == ["a", "b", "c"]


def test_config_round_trips_and_bad_settings_are_refused():
    fusion = Fusion("rrf", 0.3, rrf_k=10)
    assert Fusion.from_config(fusion.get_config()).get_config() == {"method": "rrf", "gtr_weight": 0.3, "rrf_k": 10}
    with pytest.raises(UserError, match="fusion method"):
        Fusion("max")
    with pytest.raises(UserError, match="gtr_weight"):
        Fusion(gtr_weight=1.5)
    with pytest.raises(UserError, match="rrf_k"):
        Fusion(rrf_k=0)


def test_model_fusion_reads_the_bundled_models_record_and_overrides():
    assert model_fusion("gtr_small_distilled_en").get_config()["gtr_weight"] == 0.2
    assert model_fusion(BUNDLED_MODEL_DIR, gtr_weight=0.4).get_config()["gtr_weight"] == 0.4
    # Another method than the recorded one does not keep the recorded method's weight.
    assert model_fusion(BUNDLED_MODEL_DIR, method="rrf").get_config()["gtr_weight"] == DEFAULT_FUSION["gtr_weight"]


def test_model_fusion_falls_back_for_models_that_record_none(tmp_path, tiny_st_dir):
    assert model_fusion("gtr-tiny").get_config()["gtr_weight"] == DEFAULT_FUSION["gtr_weight"]
    assert model_fusion("gtr_t5_base_en").get_config()["method"] == DEFAULT_FUSION["method"]
    assert model_fusion(tiny_st_dir).get_config()["gtr_weight"] == DEFAULT_FUSION["gtr_weight"]


def test_a_bad_record_is_refused_naming_the_file(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(BUNDLED_MODEL_DIR, model, ignore=shutil.ignore_patterns("*.h5"))
    metadata = json.loads((model / "metadata.json").read_text())
    for record in ({"method": "max", "gtr_weight": 0.2}, {"gtr_weight": 0.2}, [0.2]):
        (model / "metadata.json").write_text(json.dumps({**metadata, "fusion": record}))
        with pytest.raises(DataError, match=r"metadata.json: field 'fusion'"):
            model_fusion(str(model), method="rrf")


def test_the_class_docstring_example_runs():
    tests = doctest.DocTestFinder(recurse=False).find(Fusion, globs={"Fusion": Fusion})
    results = doctest.DocTestRunner().run(tests[0])
    assert results.attempted and not results.failed


@pytest.mark.parametrize("method", ["weighted", "rrf"])
def test_a_nan_score_is_a_document_that_side_did_not_retrieve(method):
    fused = Fusion(method).fuse_runs({"q": {"a": 0.9, "b": float("nan"), "c": 0.1}}, {"q": {"b": 3.0, "c": 1.0}})
    assert all(math.isfinite(score) for score in fused["q"].values())
    assert fused == Fusion(method).fuse_runs({"q": {"a": 0.9, "c": 0.1}}, {"q": {"b": 3.0, "c": 1.0}})
