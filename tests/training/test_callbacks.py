import glob
import json
import math
import os
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf
from beir_files import write_beir

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError
from gtr_keras.training.callbacks import (
    BEST_MODEL,
    BEST_MODEL_RECORD,
    Checkpoints,
    Scalars,
    best_so_far,
    collection_sha256,
    validation_collection,
)


class RecordingManager:
    """A `tf.train.CheckpointManager` that records the steps it was asked to save at."""

    def __init__(self):
        self.saved, self.directory = [], "checkpoints"

    def save(self, checkpoint_number):
        self.saved.append(checkpoint_number)


def _model(learning_rate=0.1):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss="mse")
    return model


def _checkpoints(steps=10, every=4, epoch_length=2):
    callback = Checkpoints(RecordingManager(), 0, steps, every, epoch_length)
    callback.set_model(_model())
    return callback


def _epoch(callback, to_step, loss=1.0):
    """One Keras epoch of `callback`'s model that ends at global step `to_step`."""
    callback.on_epoch_begin(0)
    callback.model.optimizer.iterations.assign(to_step)
    callback.on_epoch_end(0, {"loss": loss})
    return callback.model.stop_training


def test_checkpoints_are_saved_when_an_epoch_reaches_a_multiple_of_the_interval_and_at_the_end():
    callback = _checkpoints()
    assert [_epoch(callback, step) for step in (2, 4, 6, 8, 10)] == [False, False, False, False, True]
    assert callback.manager.saved == [4, 8, 10]
    assert callback.nan_step is None


def test_an_epoch_cut_short_by_the_data_stops_the_run_and_saves_it():
    callback = _checkpoints()
    _epoch(callback, 4)
    assert _epoch(callback, 5) is True
    assert callback.manager.saved == [4, 5]


def test_a_nan_loss_stops_without_saving():
    callback = _checkpoints()
    assert _epoch(callback, 4, loss=math.nan) is True
    assert callback.nan_step == 4 and callback.manager.saved == []


def test_non_finite_weights_are_not_saved():
    callback = _checkpoints()
    kernel = callback.model.layers[0].kernel
    kernel.assign(np.full(kernel.shape, np.inf, "float32"))
    assert _epoch(callback, 4) is True
    assert callback.nan_step == 4 and callback.manager.saved == []


def _points(logdir):
    """`{tag: [(step, value), ...]}` of the scalars written to `logdir`."""
    points = {}
    for path in sorted(glob.glob(f"{logdir}/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                points.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return points


def test_scalars_are_the_means_of_the_steps_since_the_last_point_across_epochs(tmp_path):
    """Two epochs of 3 steps, a point every 2: Keras hands callbacks the epoch's running means."""
    clock = SimpleNamespace(step=0)
    callback = Scalars(tf.summary.create_file_writer(str(tmp_path)), clock, steps=6, log_every=2, steps_per_execution=1)
    callback.set_model(_model(learning_rate=0.25))
    losses = iter([1.0, 3.0, 5.0, 7.0, 9.0, 11.0])
    for epoch in range(2):
        callback.on_epoch_begin(epoch)
        seen = []
        for batch in range(3):
            seen.append(next(losses))
            callback.on_train_batch_end(batch, {"loss": np.mean(seen), "accuracy": 1.0 / (batch + 1)})
            clock.step += 1
        callback.on_epoch_end(epoch, {"loss": np.mean(seen), "accuracy": 1.0 / 3})
    points = _points(tmp_path)
    assert points["train/loss"] == [(2, 2.0), (4, 6.0), (6, 10.0)]
    assert points["train/learning_rate"] == [(2, 0.25), (4, 0.25), (6, 0.25)]
    assert [step for step, _ in points["train/accuracy"]] == [2, 4, 6]


def test_a_non_finite_loss_stops_the_run_at_the_next_point(tmp_path):
    clock = SimpleNamespace(step=0)
    callback = Scalars(tf.summary.create_file_writer(str(tmp_path)), clock, steps=4, log_every=1, steps_per_execution=1)
    callback.set_model(_model())
    callback.on_epoch_begin(0)
    callback.on_train_batch_end(0, {"loss": math.inf})
    assert callback.model.stop_training


def _config(tmp_path, directory, **settings):
    return SimpleNamespace(
        **{
            "validation_data": str(directory),
            "validation_split": "test",
            "validation_max_queries": 10,
            "keep_best": True,
            "output_dir": str(tmp_path / "out"),
            **settings,
        }
    )


@pytest.fixture
def collection_dir(tmp_path):
    corpus = Corpus(["d1", "d2"], ["", ""], ["cats purr", "dogs bark"])
    rows = [("q1", "d1", 1), ("q2", "d2", 0), ("q3", "d2", 1)]
    return write_beir(tmp_path / "beir", corpus, {"q1": "cats", "q2": "dogs", "q3": "barking"}, rows)


def test_validation_collection_keeps_the_first_queries(tmp_path, collection_dir):
    assert validation_collection(_config(tmp_path, None, validation_data=None)) is None
    corpus, queries, qrels = validation_collection(_config(tmp_path, collection_dir, validation_max_queries=2))
    assert corpus.ids == ["d1", "d2"] and queries == {"q1": "cats", "q2": "dogs"}
    assert qrels == {"q1": {"d1": 1}, "q2": {"d2": 0}}


def test_validation_queries_without_a_relevant_document_are_refused(tmp_path, collection_dir):
    config = _config(tmp_path, collection_dir, validation_max_queries=1)
    (collection_dir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td2\t0\n")
    with pytest.raises(DataError, match="no judged query of split 'test' has a relevant document"):
        validation_collection(config)


def test_the_collection_sha256_follows_its_content(tmp_path, collection_dir):
    collection = validation_collection(_config(tmp_path, collection_dir))
    corpus, queries, qrels = collection
    assert collection_sha256(collection) == collection_sha256(validation_collection(_config(tmp_path, collection_dir)))
    assert collection_sha256((corpus, {**queries, "q1": "kittens"}, qrels)) != collection_sha256(collection)
    assert collection_sha256((corpus, queries, {**qrels, "q1": {"d1": 2}})) != collection_sha256(collection)


def _keep(config, **record):
    """Writes the record of a best model kept with NDCG@10 0.5 under `config`'s validation settings."""
    directory = os.path.join(config.output_dir, BEST_MODEL)
    os.makedirs(directory)
    settings = {key: getattr(config, key) for key in ("validation_data", "validation_split", "validation_max_queries")}
    with open(os.path.join(directory, BEST_MODEL_RECORD), "w") as f:
        json.dump({"ndcg@10": 0.5, **settings, **record}, f)


def test_the_best_model_so_far_counts_only_with_the_same_settings_and_collection(tmp_path, collection_dir):
    config = _config(tmp_path, collection_dir)
    assert best_so_far(config, "a" * 64) is None
    _keep(config, validation_sha256="a" * 64)
    assert best_so_far(config, "a" * 64) == 0.5
    assert best_so_far(config, "b" * 64) is None
    assert best_so_far(_config(tmp_path, collection_dir, validation_max_queries=5), "a" * 64) is None
    assert best_so_far(_config(tmp_path, collection_dir, keep_best=False), "a" * 64) is None
