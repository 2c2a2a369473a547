"""Resuming `train`: only a run of the same settings and inputs is resumed, and `train_config.json` stays as
the run started."""

import json
import re
import shutil

import numpy as np
import pytest
from beir_files import write_beir
from training_inputs import SPIECE, write_triples

import gtr_keras
from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError, MismatchError
from gtr_keras.training import callbacks, loop
from gtr_keras.training.config import TrainConfig
from gtr_keras.training.loop import train


def tiny_run(tmp_path, **settings):
    """Settings of a 1-block gtr-tiny run on 16 triples, two steps of 4."""
    data = {"source": write_triples(tmp_path / "t.jsonl", count=16), "query_length": 8, "document_length": 16}
    return {
        "init": "gtr-tiny",
        "tokenizer": SPIECE,
        "model": {"num_layers": 1},
        "steps": 2,
        "batch_size": 4,
        "checkpoint_every": 2,
        "verbose": 0,
        "output_dir": str(tmp_path / "run"),
        "data": data,
        **settings,
    }


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    config = tiny_run(tmp_path_factory.mktemp("resume"))
    train(config)
    return config


def refused(config, message):
    """Asserts that resuming with `config` fails with `message`, leaving the run as it was."""
    run = config["output_dir"]
    record = open(f"{run}/train_config.json", "rb").read()
    expected = f"{run}/train_config.json: {message}; use another --output-dir or delete {run} to start over"
    with pytest.raises(MismatchError, match=f"^{re.escape(expected)}$"):
        train(config)
    assert open(f"{run}/train_config.json", "rb").read() == record


@pytest.mark.parametrize(
    "change, message",
    [
        ({"steps": 3}, "this run has steps=3, the run being resumed has steps=2"),
        ({"learning_rate": 0.01}, "this run has learning_rate=0.01, the run being resumed has learning_rate=0.001"),
        ({"seed": 1}, "this run has seed=1, the run being resumed has seed=0"),
        ({"precision": "bfloat16"}, "this run has precision=bfloat16, the run being resumed has precision=float32"),
        (
            {"model": {"num_layers": 2}},
            "this run has model={'num_layers': 2}, the run being resumed has model={'num_layers': 1}",
        ),
        (
            {"data.num_negatives": 2},
            "this run has data.num_negatives=2, the run being resumed has data.num_negatives=1",
        ),
        ({"data.query_length": 16}, "this run has data.query_length=16, the run being resumed has data.query_length=8"),
        ({"init": "gtr-small"}, "this run reads the initial model gtr-small, the run being resumed read gtr-tiny"),
    ],
)
def test_other_settings_are_refused(finished_run, change, message):
    config = {**finished_run, "data": dict(finished_run["data"])}
    for key, value in change.items():
        if key.startswith("data."):
            config["data"][key[len("data.") :]] = value
        else:
            config[key] = value
    refused(config, message)


def test_other_files_are_refused_by_content_and_moved_ones_resume(finished_run, tmp_path):
    source = finished_run["data"]["source"]
    other = tmp_path / "other.jsonl"
    other.write_text(open(source).read() + json.dumps({"query": "q", "positive": "p"}) + "\n")
    refused(
        {**finished_run, "data": {**finished_run["data"], "source": str(other)}},
        f"this run reads the training data {other}, the run being resumed read {source}",
    )
    tokenizer = tmp_path / "other.model"
    tokenizer.write_bytes(open(SPIECE, "rb").read() + b"\n")
    refused(
        {**finished_run, "tokenizer": str(tokenizer)},
        f"this run reads the tokenizer {tokenizer}, the run being resumed read {SPIECE}",
    )
    original = open(source).read()
    try:
        with open(source, "a") as f:
            f.write(json.dumps({"query": "q", "positive": "p"}) + "\n")
        refused(finished_run, f"the training data {source} changed since the run started")
    finally:
        open(source, "w").write(original)

    moved = tmp_path / "moved.jsonl"
    moved.write_text(original)
    record = open(f"{finished_run['output_dir']}/train_config.json", "rb").read()
    dev = write_beir(tmp_path / "dev", Corpus(["d1"], [""], ["a cat"]), {"q1": "cat"}, [("q1", "d1", 1)], "dev")
    not_compared = {
        "checkpoint_every": 1,
        "keep_checkpoints": 1,
        "verbose": 2,
        "deterministic": False,
        "steps_per_execution": 1,
        "log_every": 7,
        "validation_data": str(dev),
        "validation_split": "dev",
        "validate_every": 3,
        "validation_max_queries": 2,
        "keep_best": True,
    }
    train({**finished_run, **not_compared, "data": {**finished_run["data"], "source": str(moved)}})
    assert open(f"{finished_run['output_dir']}/train_config.json", "rb").read() == record


def test_a_run_without_fingerprints_is_not_resumed(finished_run, tmp_path):
    copy = shutil.copytree(finished_run["output_dir"], tmp_path / "run")
    config = {**finished_run, "output_dir": str(copy)}
    (copy / "train_config.json").write_text(json.dumps({"init": "gtr-tiny", "steps": 2}))
    with pytest.raises(
        MismatchError,
        match=r"train_config.json: not a run record \(no settings and inputs\); use another --output-dir or delete",
    ):
        train(config)
    (copy / "train_config.json").unlink()
    with pytest.raises(MismatchError, match="train_config.json: missing, so the checkpoints beside it cannot be"):
        train(config)
    # Without checkpoints, what another run left is named too: a new run would compete with its best model,
    # reuse its tokenizer or log beside it.
    shutil.rmtree(copy / "checkpoints")
    for leftover in ("logs", "model"):
        with pytest.raises(
            MismatchError,
            match=rf"run/{leftover}: left by another run \(.*train_config.json is "
            rf"missing\).*delete .* to start over",
        ):
            train(config)
        shutil.rmtree(copy / leftover)
    (copy / "best_model").mkdir()
    with pytest.raises(MismatchError, match=r"run/best_model: left by another run"):
        train(config)
    (copy / "best_model").rmdir()
    (copy / "spiece.model").write_bytes(b"old")
    with pytest.raises(MismatchError, match=r"run/spiece\.model: left by another run"):
        train(config)
    (copy / "spiece.model").unlink()
    train(config)


class Stop(Exception):
    pass


def stop(*args, **kwargs):
    raise Stop


def test_a_changed_initial_model_directory_is_refused(tiny_model_dir, tmp_path, monkeypatch):
    init = str(shutil.copytree(tiny_model_dir, tmp_path / "init"))
    config = tiny_run(tmp_path, init=init, model={}, tokenizer=None)
    monkeypatch.setattr(loop, "_set_preprocessor", stop)
    with pytest.raises(Stop):  # stopped once the run is recorded
        train(config)
    monkeypatch.undo()
    changed = gtr_keras.load(init)
    changed.model.backbone.final_norm.scale.assign(changed.model.backbone.final_norm.scale * 2)
    gtr_keras.save(changed, init)
    refused(config, f"the initial model {init} changed since the run started")


def test_resume_with_another_checkpoint_interval_equals_an_uninterrupted_run(finished_run, tmp_path, monkeypatch):
    """`checkpoint_every` is not compared: it decides where a run can resume, not the weights."""
    save = callbacks.Checkpoints.on_epoch_end

    def stop_after_saving(self, epoch, logs=None):
        save(self, epoch, logs)
        stop()

    config = {**finished_run, "output_dir": str(tmp_path / "run"), "checkpoint_every": 1}
    monkeypatch.setattr(callbacks.Checkpoints, "on_epoch_end", stop_after_saving)
    with pytest.raises(Stop):
        train(config)
    monkeypatch.undo()
    resumed = train({**config, "checkpoint_every": 2})
    straight = gtr_keras.load(f"{finished_run['output_dir']}/model")
    for a, b in zip(straight.model.weights, resumed.model.weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6, rtol=0, err_msg=a.path)


def test_a_resumed_run_competes_with_the_best_model_it_kept(tmp_path):
    config = TrainConfig.from_dict(tiny_run(tmp_path, validation_data="dev", keep_best=True))
    collection = (Corpus(["d1", "d2"], ["", ""], ["a cat", "a dog"]), {"q1": "cat"}, {"q1": {"d1": 1}})
    digest = callbacks.collection_sha256(collection)
    assert callbacks.best_so_far(config, digest) is None
    kept = tmp_path / "run" / "best_model"
    kept.mkdir(parents=True)
    record = {
        "step": 2,
        "ndcg@10": 0.25,
        "recall@100": 1.0,
        "validation_data": "dev",
        "validation_split": "dev",
        "validation_max_queries": None,
        "validation_sha256": digest,
    }
    (kept / "validation.json").write_text(json.dumps(record))
    assert callbacks.best_so_far(config, digest) == 0.25
    # Validated on other data: not comparable, so the next validation replaces it. Other content at the same
    # path (a judgement, a text, a query changed), or other settings.
    corpus, queries, qrels = collection
    for other in [
        (corpus, queries, {"q1": {"d2": 1}}),
        (Corpus(["d1", "d2"], ["", ""], ["a cat", "a cow"]), queries, qrels),
        (corpus, {"q1": "dog"}, qrels),
    ]:
        assert callbacks.best_so_far(config, callbacks.collection_sha256(other)) is None
    (kept / "validation.json").write_text(json.dumps({**record, "validation_split": "test"}))
    assert callbacks.best_so_far(config, digest) is None
    # A record cut short (a full disk) is one line naming it, not a traceback.
    (kept / "validation.json").write_text(json.dumps(record)[:20])
    with pytest.raises(DataError, match=r"best_model/validation\.json: unreadable .*; delete .*best_model to start"):
        callbacks.best_so_far(config, digest)
