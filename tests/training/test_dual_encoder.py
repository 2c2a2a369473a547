import inspect
import json
import logging
import os
import signal
import subprocess
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from training_inputs import SPIECE, WORDS, final_weights, run_python, write_triples

import gtr_keras
from gtr_keras.errors import TrainingError, UserError
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.training.config import TrainConfig, dtype_policy, load_config
from gtr_keras.training.dual_encoder import DualEncoder, make_optimizer
from gtr_keras.training.loop import train
from gtr_keras.training.losses import BidirectionalInBatchLoss, in_batch_hits


def token_batch(seed, batch_size=4, k=2, length=6):
    """A random tokenised batch; positives 0 and 2 share a document id and queries 1 and 2 are the same
    query, so both kinds of masking are exercised."""
    rng = np.random.default_rng(seed)

    def tokens(*shape):
        ids = rng.integers(3, 1000, size=shape + (length,)).astype("int32")
        mask = (np.arange(length) < rng.integers(2, length + 1, size=shape)[..., None]).astype("int32")
        return {"token_ids": ids * mask, "padding_mask": mask}

    return {
        "query": tokens(batch_size),
        "positive": tokens(batch_size),
        "negatives": tokens(batch_size, k),
        "positive_id": np.array([7, 8, 7, 9], "int64")[:batch_size],
        "negative_ids": np.arange(batch_size * k, dtype="int64").reshape(batch_size, k) + 100,
        "query_id": np.array([5, 6, 6, 8], "int64")[:batch_size],
    }


DISTRIBUTED_SCRIPT = (
    "import numpy as np\n"
    + inspect.getsource(token_batch)
    + """
import json
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras
from gtr_keras.training.losses import BidirectionalInBatchLoss, in_batch_hits
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.training.dual_encoder import DualEncoder, make_optimizer

batch = token_batch(0)
tensors = tf.nest.map_structure(tf.constant, batch)
mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def build(chunk=None):
    keras.utils.set_random_seed(0)
    return DualEncoder(GTRTextEmbedder.from_architecture("gtr-tiny", num_layers=1), grad_cache_chunk_size=chunk)


def weights(model):
    return [w.numpy() for w in model.encoder.weights]


def single_step(optimizer):
    model = build()
    model.compile(optimizer=optimizer)
    return float(model.train_step(tensors)["loss"]), weights(model)


def mirrored_step(optimizer, chunk=None):
    with mirrored.scope():
        model = build(chunk)
        model.compile(optimizer=optimizer())
    dataset = tf.data.Dataset.from_tensor_slices(batch).batch(4)
    history = model.fit(dataset, steps_per_epoch=1, shuffle=False, verbose=0)
    return history.history["loss"][0], weights(model)


def max_difference(a, b):
    return float(max(np.abs(x - y).max() for x, y in zip(a, b)))


model = build()
embedded = model._embed(tensors, training=False)
loss = BidirectionalInBatchLoss()
ids = (tensors["positive_id"], tensors["negative_ids"])
halves = [
    float(loss(*(x[s] for x in (embedded["query"], embedded["positive"], embedded["negatives"], *ids)),
               query_ids=tensors["query_id"][s]))
    for s in (slice(0, 2), slice(2, 4))
]
results = {
    "global_loss": float(loss(embedded["query"], embedded["positive"], embedded["negatives"], *ids,
                              query_ids=tensors["query_id"])),
    "per_replica_loss": sum(halves) / 2,
}
for name, optimizer, chunk in [
    ("sgd", lambda: keras.optimizers.SGD(0.1), None),
    ("adafactor", lambda: make_optimizer(10), None),
    ("sgd_grad_cache", lambda: keras.optimizers.SGD(0.1), 1),
]:
    single_loss, single_weights = single_step(optimizer())
    distributed_loss, distributed_weights = mirrored_step(optimizer, chunk)
    results[name] = {
        "single_loss": single_loss,
        "distributed_loss": distributed_loss,
        "weight_difference": max_difference(single_weights, distributed_weights),
        "weight_change": max_difference(single_weights, weights(build())),
    }
print("RESULTS", json.dumps(results))
"""
)


@pytest.mark.large
@pytest.mark.slow
def test_mirrored_step_uses_global_batch_negatives_and_matches_one_device():
    process = run_python(DISTRIBUTED_SCRIPT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    results = json.loads(stdout.split("RESULTS ", 1)[1])
    # Per-replica negatives would give the mean of the half-batch losses instead.
    assert abs(results["per_replica_loss"] - results["global_loss"]) > 1e-3
    for name in ("sgd", "adafactor", "sgd_grad_cache"):
        step = results[name]
        assert step["distributed_loss"] == pytest.approx(results["global_loss"], abs=1e-5), name
        assert step["single_loss"] == pytest.approx(results["global_loss"], abs=1e-5), name
        assert step["weight_difference"] <= 1e-5, name
        assert step["weight_change"] > 1e-3, name


def one_step(batch, chunk=None, dropout=0.0, graph=False):
    """Loss and weights after one SGD step, eagerly or through a traced `fit`."""
    keras.utils.set_random_seed(0)
    encoder = GTRTextEmbedder.from_architecture("gtr-tiny", num_layers=1, dropout=dropout)
    model = DualEncoder(encoder, grad_cache_chunk_size=chunk)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    if graph:
        dataset = tf.data.Dataset.from_tensor_slices(batch).batch(4)
        loss = model.fit(dataset, steps_per_epoch=1, shuffle=False, verbose=0).history["loss"][0]
    else:
        loss = float(model.train_step(tf.nest.map_structure(tf.constant, batch))["loss"])
    return loss, [w.numpy() for w in model.encoder.weights]


def assert_same_step(a, b, atol=1e-5):
    assert a[0] == pytest.approx(b[0], abs=atol)
    assert max(np.abs(x - y).max() for x, y in zip(a[1], b[1])) <= atol


def fit_tiny_model(model_dir, batches, **settings):
    """Loss and weights after one epoch of SGD `fit` on `batches`, from the model in `model_dir` and seed 0."""
    from gtr_keras.saving import load_model

    keras.utils.set_random_seed(0)
    embedder = load_model(model_dir).model
    model = DualEncoder(embedder, **settings)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    loss = model.fit(batches, epochs=1, shuffle=False, verbose=0).history["loss"][0]
    return loss, [w.numpy() for w in embedder.weights]


def test_grad_cache_step_equals_full_batch_step():
    batch = token_batch(1)
    full = one_step(batch)
    assert_same_step(one_step(batch, chunk=2), full)
    assert_same_step(one_step(batch, chunk=1), full)


def test_evaluation_loss_and_chunk_errors():
    batch = tf.nest.map_structure(tf.constant, token_batch(4))
    keras.utils.set_random_seed(0)
    model = DualEncoder(GTRTextEmbedder.from_architecture("gtr-tiny", num_layers=1), grad_cache_chunk_size=2)
    embedded = model._embed(batch, training=False)
    want = BidirectionalInBatchLoss()(
        *(embedded[name] for name in ("query", "positive", "negatives")),
        batch["positive_id"],
        batch["negative_ids"],
        query_ids=batch["query_id"],
    )
    assert float(model.test_step(batch)["loss"]) == pytest.approx(float(want), abs=1e-5)
    model.grad_cache_chunk_size = 3
    with pytest.raises(tf.errors.InvalidArgumentError, match="multiple of grad_cache_chunk_size=3"):
        model.test_step(batch)


def test_config_round_trip():
    model = DualEncoder(
        GTRTextEmbedder.from_architecture("gtr-tiny", num_layers=1), 0.05, False, grad_cache_chunk_size=2
    )
    clone = DualEncoder.from_config(model.get_config())
    assert (clone.temperature, clone.mask_false_negatives, clone.grad_cache_chunk_size) == (0.05, False, 2)
    assert clone.encoder.get_config() == model.encoder.get_config()


def test_grad_cache_replays_dropout_masks():
    # With one chunk the first pass draws the same dropout masks as a plain step;
    # the second pass must reuse them for the gradients to match (in a traced step too).
    batch = token_batch(2)
    assert_same_step(one_step(batch, chunk=4, dropout=0.3, graph=True), one_step(batch, dropout=0.3))


def test_float16_is_refused_with_a_reason(tmp_path):
    with pytest.raises(ValueError, match="float16.*overflow.*bfloat16"):
        dtype_policy("float16")
    with pytest.raises(ValueError, match="float16"):
        TrainConfig(init="gtr-tiny", data={"source": "x"}, output_dir=str(tmp_path), precision="float16")
    assert dtype_policy("bfloat16") == "mixed_bfloat16" and dtype_policy("float32") is None


def test_bfloat16_step_runs():
    keras.utils.set_random_seed(0)
    model = DualEncoder(GTRTextEmbedder.from_architecture("gtr-tiny", num_layers=1, dtype=dtype_policy("bfloat16")))
    model.compile(optimizer=make_optimizer(10))
    loss = float(model.train_step(tf.nest.map_structure(tf.constant, token_batch(3)))["loss"])
    assert np.isfinite(loss)
    assert model.encoder.weights[0].dtype == "float32"


def test_optimizer_is_adafactor_with_linear_decay():
    optimizer = make_optimizer(steps=100, learning_rate=1e-3)
    assert isinstance(optimizer, keras.optimizers.Adafactor)
    rates = []
    for step in (0, 50, 100):
        optimizer.iterations.assign(step)
        rates.append(float(optimizer.learning_rate))
    assert rates == pytest.approx([1e-3, 5e-4, 0.0])


def test_sentencepiece_sees_each_training_text_once(tmp_path):
    from gtr_keras.training.data import TrainingData
    from gtr_keras.training.loop import _training_texts

    records = [{"query": f"q{i % 3}", "positive": "a passage judged by every query"} for i in range(30)]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    texts = list(_training_texts(TrainingData(str(path), num_negatives=0)))
    assert sorted(texts) == ["a passage judged by every query", "q0", "q1", "q2"]


def test_config_file_overrides_and_errors(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("init: gtr-tiny\noutput_dir: out\nsteps: 50\ndata: {source: t.jsonl, num_negatives: 3}\n")
    config = load_config(path, {"steps": 7, "data.train_fraction": 0.1})
    assert (config.steps, config.data.num_negatives, config.data.train_fraction) == (7, 3, 0.1)
    path.write_text("init: gtr-tiny\noutput_dir: out\nstepz: 5\ndata:\n  source: t.jsonl\n  negatives: 2\n")
    with pytest.raises(ValueError, match=f"{path}: unknown setting.*stepz, data.negatives"):
        load_config(path)
    path.write_text("init: gtr-tiny\noutput_dir: out\ndata: {}\n")
    with pytest.raises(ValueError, match="missing setting `data.source`"):
        load_config(path)
    with pytest.raises(UserError, match="strategy must be one of"):
        load_config(None, {"init": "gtr-tiny", "output_dir": "o", "data.source": "t", "strategy": "gpu"})
    with pytest.raises(ValueError, match="unknown model setting.*layers"):
        load_config(None, {"init": "gtr-tiny", "output_dir": "o", "data.source": "t", "model": {"layers": 2}})
    with pytest.raises(ValueError, match="need a preset `init`"):
        load_config(None, {"init": "runs/model", "output_dir": "o", "data.source": "t", "model": {"num_layers": 2}})


def test_model_settings_change_the_preset_shape(tmp_path):
    config = TrainConfig(
        init="gtr-tiny",
        model={"num_layers": 1, "embedding_dim": 16},
        tokenizer=SPIECE,
        output_dir=str(tmp_path / "run"),
        steps=2,
        batch_size=4,
        checkpoint_every=2,
        verbose=0,
        data={"source": write_triples(tmp_path / "t.jsonl"), "query_length": 8, "document_length": 16},
    )
    trained = train(config)
    assert (trained.model.backbone.num_layers, trained.model.embedding_dim) == (1, 16)
    assert trained.encode_queries(["what about a cat"]).shape == (1, 16)


def test_nan_loss_stops_with_a_clear_message(tmp_path):
    config = TrainConfig(
        init="gtr-tiny",
        tokenizer=SPIECE,
        output_dir=str(tmp_path / "run"),
        steps=4,
        batch_size=4,
        learning_rate=float("nan"),
        checkpoint_every=2,
        deterministic=False,
        verbose=0,
        data={"source": write_triples(tmp_path / "t.jsonl"), "query_length": 8, "document_length": 16},
    )
    # Step 1's loss is finite, but its update makes the weights NaN: nothing may be saved.
    with pytest.raises(TrainingError, match=r"became NaN by step 2 \(last good checkpoint: none was saved\)"):
        train(config)
    assert not (tmp_path / "run" / "model").exists()
    assert not (tmp_path / "run" / "checkpoints" / "checkpoint").exists()


RESUME_SCRIPT = """
import json, sys, time
from gtr_keras.training import callbacks, loop

config = json.loads(sys.argv[1])
if len(sys.argv) > 2:
    # Hold the run a few steps past its first checkpoint, for the test to kill it there.
    pause_at = int(sys.argv[2])
    on_train_batch_end = callbacks.Checkpoints.on_train_batch_end

    def pausing(self, batch, logs=None):
        on_train_batch_end(self, batch, logs)
        if int(self.model.optimizer.iterations.numpy()) == pause_at:
            time.sleep(600)

    callbacks.Checkpoints.on_train_batch_end = pausing
loop.train(config)
"""


@pytest.mark.large
@pytest.mark.slow
def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path):
    data = {
        "source": write_triples(tmp_path / "t.jsonl"),
        "num_negatives": 2,
        "query_length": 16,
        "document_length": 32,
    }
    base = dict(init="gtr-tiny", steps=20, batch_size=4, checkpoint_every=5, seed=3, verbose=0, data=data)

    def run(output_dir, *args):
        return run_python(RESUME_SCRIPT, json.dumps({**base, "output_dir": str(output_dir)}), *args)

    assert run(tmp_path / "straight").wait(timeout=300) == 0

    resumed = tmp_path / "resumed"
    process = run(resumed, "7")
    deadline = time.time() + 300
    while not (resumed / "checkpoints" / "checkpoint").exists():
        assert process.poll() is None and time.time() < deadline, "training ended before its first checkpoint"
        time.sleep(0.05)
    time.sleep(1.0)
    assert process.poll() is None
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (resumed / "model").exists()
    assert "ckpt-5" in (resumed / "checkpoints" / "checkpoint").read_text()
    assert run(resumed).wait(timeout=300) == 0

    straight, again = final_weights(tmp_path / "straight"), final_weights(resumed)
    assert straight.keys() == again.keys() and len(straight) > 5
    for name in straight:
        np.testing.assert_allclose(again[name], straight[name], atol=1e-5, rtol=0, err_msg=name)
    # A tokenizer was trained on the data for the preset and reused on resume.
    vocabulary = resumed / "model" / "assets" / "tokenizer" / "vocabulary.spm"
    assert (resumed / "spiece.model").read_bytes() == vocabulary.read_bytes()


@pytest.mark.large
@pytest.mark.slow
def test_fit_takes_raw_strings_through_the_preprocessor_like_token_batches(tiny_model_dir):
    from gtr_keras.saving import load_model

    texts = {
        "query": ["wing lift", "drag on a body", "shock waves", "heat transfer"],
        "positive": ["lift of a wing " * 5, "drag force", "a normal shock", "boundary layer heat"],
        "negatives": [["flutter"], ["buckling of shells"], ["wing"], ["jets"]],
        "positive_id": ["d1", "d2", "d3", "d4"],
        "negative_ids": [["d5"], ["d6"], ["d7"], ["d8"]],
    }
    tower_features = load_model(tiny_model_dir).model.preprocessor.tower_features
    dataset = tf.data.Dataset.from_tensor_slices(texts)
    raw = fit_tiny_model(tiny_model_dir, dataset.batch(4, drop_remainder=True))  # [4] strings
    tokens = fit_tiny_model(tiny_model_dir, dataset.batch(4).map(lambda batch: {**batch, **tower_features(batch)}))
    assert np.isfinite(raw[0])
    assert_same_step(raw, tokens, atol=1e-6)
    assert not np.allclose(raw[1][0], load_model(tiny_model_dir).model.weights[0].numpy())


@pytest.mark.slow
def test_fit_takes_query_document_tuples_like_dicts(tiny_model_dir):
    from gtr_keras.saving import load_model

    queries = ["wing lift", "drag on a body", "shock waves", "heat transfer"]
    documents = ["lift of a wing", "drag force", "a normal shock", "boundary layer heat"]
    as_dicts = tf.data.Dataset.from_tensor_slices({"query": queries, "positive": documents}).batch(4)
    as_tuples = tf.data.Dataset.from_tensor_slices((queries, documents)).batch(4)
    from_tuples = fit_tiny_model(tiny_model_dir, as_tuples, mask_false_negatives=False)
    assert np.isfinite(from_tuples[0])
    assert_same_step(from_tuples, fit_tiny_model(tiny_model_dir, as_dicts, mask_false_negatives=False), atol=1e-6)

    model = DualEncoder(load_model(tiny_model_dir).model)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    expected = r'^DualEncoder batches are dicts of "query", .* or \(query, document\[, negatives\]\) tuples.*'
    for structure, got in [
        ((queries, documents, documents, documents), "; got a tuple of 4: "),
        ({"query": queries, "document": documents}, r"; got a dict of \['document', 'query'\]$"),
        (queries, "; got TensorSpec"),
    ]:
        with pytest.raises(UserError, match=expected + got):
            model.fit(tf.data.Dataset.from_tensor_slices(structure).batch(4), verbose=0)
    with pytest.raises(UserError, match=r"hold \[B\] texts per tower \(batch the dataset\), got \(\)$"):
        model.fit(tf.data.Dataset.from_tensor_slices((queries, documents)), verbose=0)


def test_steps_take_tower_tuples_and_refuse_other_structures():
    batch = tf.nest.map_structure(tf.constant, token_batch(6))
    keras.utils.set_random_seed(0)
    model = DualEncoder(GTRTextEmbedder.from_architecture("gtr-tiny", num_layers=1), mask_false_negatives=False)

    def loss(batch):
        model.reset_metrics()
        return float(model.test_step(batch)["loss"])

    for towers in (("query", "positive"), ("query", "positive", "negatives")):
        as_dict = {name: batch[name] for name in towers}
        assert loss(tuple(as_dict.values())) == pytest.approx(loss(as_dict))
    with pytest.raises(UserError, match="got a tuple of 2: .*a dict of .*token_ids.*, <tf.Tensor"):
        model.test_step((batch["query"], batch["positive_id"]))  # Keras' (x, y), not two towers
    with pytest.raises(UserError, match="raw-string batches need an encoder with a preprocessor"):
        model.fit(tf.data.Dataset.from_tensor_slices((["a"], ["b"])).batch(1), verbose=0)
    with pytest.raises(UserError, match="^grad_cache_chunk_size must be a positive integer, got 0$"):
        DualEncoder(model.encoder, grad_cache_chunk_size=0)


def test_training_refuses_a_backend_other_than_tensorflow(monkeypatch, tmp_path):
    model = DualEncoder(GTRTextEmbedder.from_architecture("gtr-tiny", num_layers=1))
    monkeypatch.setattr(keras.config, "backend", lambda: "jax")
    message = r"needs Keras' TensorFlow backend \(KERAS_BACKEND=tensorflow\), not 'jax'$"
    with pytest.raises(UserError, match="^DualEncoder training " + message):
        model.compile(optimizer=make_optimizer(10))
    with pytest.raises(UserError, match="^gtr-keras training " + message):
        train({"init": "gtr-tiny", "output_dir": str(tmp_path / "run"), "data": {"source": str(tmp_path / "none")}})
    assert not (tmp_path / "run").exists()


def test_in_batch_hits_count_top1_positives_with_the_loss_masking():
    e = np.eye(4, dtype="float32")
    queries = np.stack([e[0], e[1], e[0], e[3]])
    # Query 0's best candidate is positive 2, the same document (id 7) as its own positive.
    positives = np.stack([0.8 * e[0] + 0.6 * e[1], e[1], e[0], 0.9 * e[3]])
    ids = np.array([7, 8, 7, 9])
    assert float(in_batch_hits(queries, positives)) == 3
    assert float(in_batch_hits(queries, positives, positive_ids=ids)) == 4
    # A hard negative of query 3 scores above its positive; another query's is a candidate too.
    negatives = np.stack([-e[0], -e[1], -e[2], e[3]])[:, None, :]
    negative_ids = np.arange(4)[:, None] + 100
    assert float(in_batch_hits(queries, positives, negatives, ids, negative_ids)) == 3
    assert float(in_batch_hits(queries, positives, negatives, ids, negative_ids, rows=(2, 4))) == 1
    # Rows 1 and 2 are the same query (ids 5, 6, 6, 8) with two judged passages: the other one is masked.
    queries = np.stack([e[0], e[1], e[1], e[3]])
    positives = np.stack([e[0], 0.8 * e[1] + 0.6 * e[2], e[1], e[3]])
    assert float(in_batch_hits(queries, positives)) == 3
    assert float(in_batch_hits(queries, positives, query_ids=np.array([5, 6, 6, 8]))) == 4


def test_accuracy_is_a_metric_of_the_step():
    batch = tf.nest.map_structure(tf.constant, token_batch(5))
    keras.utils.set_random_seed(0)
    model = DualEncoder(GTRTextEmbedder.from_architecture("gtr-tiny", num_layers=1))
    embedded = model._embed(batch, training=False)
    hits = in_batch_hits(
        embedded["query"],
        embedded["positive"],
        embedded["negatives"],
        batch["positive_id"],
        batch["negative_ids"],
        query_ids=batch["query_id"],
    )
    logs = model.test_step(batch)
    assert sorted(logs) == ["accuracy", "loss"] and [m.name for m in model.metrics] == ["loss", "accuracy"]
    assert float(logs["accuracy"]) == pytest.approx(float(hits) / 4)


def test_loop_settings_defaults_and_errors():
    def config(**settings):
        return TrainConfig(init="gtr-tiny", data={"source": "t.jsonl"}, output_dir="o", **settings)

    assert config().resolved_steps_per_execution() == 1
    assert config(strategy="mirrored").resolved_steps_per_execution() == 1
    assert config(strategy="tpu").resolved_steps_per_execution() == 100
    assert config(strategy="tpu", checkpoint_every=250).resolved_steps_per_execution() == 50
    assert config(strategy="tpu", checkpoint_every=64).resolved_steps_per_execution() == 64
    with_validation = config(strategy="tpu", validation_data="dev", validate_every=300)
    assert (with_validation.epoch_length(), with_validation.resolved_steps_per_execution()) == (100, 100)
    with pytest.raises(UserError, match="^steps_per_execution 3 must divide checkpoint_every 1000$"):
        config(steps_per_execution=3)
    with pytest.raises(UserError, match="must divide checkpoint_every 1000 and validate_every 300$"):
        config(steps_per_execution=200, validation_data="dev", validate_every=300)
    for name, value in [("keep_best", True), ("validate_every", 10), ("validation_max_queries", 5)]:
        with pytest.raises(UserError, match=f"^{name} needs validation_data"):
            config(**{name: value})
    with pytest.raises(UserError, match="log_every must be an integer of at least 1, got 0"):
        config(log_every=0)


def tensorboard_scalars(log_dir):
    """`{tag: [(step, value), ...]}` of the scalars written to `log_dir`."""
    scalars = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return scalars


def test_loop_logs_against_the_global_step_validates_and_keeps_the_best(tmp_path, caplog):
    from beir_files import write_beir

    from gtr_keras.beir.readers import Corpus

    texts = [f"the {a} and {b} {i}" for i, (a, b) in enumerate(zip(WORDS, WORDS[3:] + WORDS[:3]))]
    corpus = Corpus([f"d{i}" for i in range(len(texts))], [""] * len(texts), texts)
    queries = {f"q{i}": f"what about {WORDS[i]}" for i in range(8)}
    dev = write_beir(tmp_path / "dev", corpus, queries, [(f"q{i}", f"d{i}", 1) for i in range(8)], split="dev")
    data = {"source": write_triples(tmp_path / "t.jsonl"), "query_length": 8, "document_length": 16}
    base = dict(init="gtr-tiny", tokenizer=SPIECE, model={"num_layers": 1}, steps=5, batch_size=4, data=data)
    # Epochs of 2 steps (the gcd of checkpoint_every and validate_every), 2 steps per execution, a last
    # epoch of 1: checkpoints at 2, 4 and 5, validation at 4 and 5, TensorBoard points at 2 and 4; under
    # MirroredStrategy (one replica here), whose variables validation reads outside the step.
    caplog.set_level(logging.INFO, logger="gtr_keras")
    looped = train(
        {
            **base,
            "output_dir": str(tmp_path / "looped"),
            "checkpoint_every": 2,
            "steps_per_execution": 2,
            "log_every": 2,
            "validation_data": str(dev),
            "validate_every": 4,
            "strategy": "mirrored",
            "validation_max_queries": 6,
            "keep_best": True,
            "verbose": 2,
        }
    )
    printed = caplog.text
    plain = train({**base, "output_dir": str(tmp_path / "plain"), "checkpoint_every": 5, "verbose": 0})
    for a, b in zip(looped.model.weights, plain.model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, rtol=0, err_msg=a.path)

    run = tmp_path / "looped"
    scalars = tensorboard_scalars(str(run / "logs"))
    assert {tag: [step for step, _ in points] for tag, points in scalars.items()} == {
        "train/loss": [2, 4],
        "train/accuracy": [2, 4],
        "train/learning_rate": [2, 4],
        "val/ndcg@10": [4, 5],
        "val/recall@100": [4, 5],
    }
    assert [rate for _, rate in scalars["train/learning_rate"]] == pytest.approx([6e-4, 2e-4])
    assert all(np.isfinite(loss) for _, loss in scalars["train/loss"])
    assert all(0 <= accuracy <= 1 for _, accuracy in scalars["train/accuracy"])
    assert all(value == 1.0 for _, value in scalars["val/recall@100"])  # 16 documents, all retrieved
    assert sorted(p for p in os.listdir(run / "checkpoints") if p.endswith(".index")) == [
        "ckpt-2.index",
        "ckpt-4.index",
        "ckpt-5.index",
    ]
    for step, value in scalars["val/ndcg@10"]:
        assert f"validation at step {step}: ndcg@10 {value:.4f}, recall@100 1.0000 (6 queries, 16 documents" in printed
    best = json.loads((run / "best_model" / "validation.json").read_text())
    best_step, best_ndcg = max(scalars["val/ndcg@10"], key=lambda point: (point[1], -point[0]))
    assert (best["step"], best["validation_max_queries"]) == (best_step, 6)
    assert best["ndcg@10"] == pytest.approx(best_ndcg)
    assert gtr_keras.load(str(run / "best_model")).encode_queries(["what about a cat"]).shape == (1, 64)


@pytest.mark.large
@pytest.mark.slow
def test_fine_tuning_a_model_directory_under_mirrored_equals_the_default_strategy(tiny_model_dir, tmp_path):
    data = {"source": write_triples(tmp_path / "t.jsonl"), "query_length": 8, "document_length": 16}
    base = dict(init=tiny_model_dir, steps=2, batch_size=4, data=data, checkpoint_every=2, verbose=0)
    mirrored_run = train({**base, "output_dir": str(tmp_path / "mirrored"), "strategy": "mirrored"})
    default_run = train({**base, "output_dir": str(tmp_path / "default")})
    for a, b in zip(mirrored_run.model.weights, default_run.model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, rtol=0, err_msg=a.path)
