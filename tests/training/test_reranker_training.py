"""Fine-tuning a reranker (`train --reranker`): a listwise softmax over each query's group that lowers the loss,
and a run killed after a checkpoint that resumes to the weights of an uninterrupted one."""

import json

import numpy as np
import pytest
import tensorflow as tf
from reranker_inputs import CHECKPOINTS
from training_inputs import write_triples

import gtr_keras
from gtr_keras.cli.main import main
from gtr_keras.errors import MismatchError, UserError
from gtr_keras.training import callbacks
from gtr_keras.training.losses import ListwiseSoftmaxLoss
from gtr_keras.training.reranker_training import RerankerTrainConfig, train_reranker


class Stop(Exception):
    pass


def test_the_listwise_loss_is_the_softmax_cross_entropy_of_each_querys_positive():
    logits = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    expected = np.mean(np.log(np.exp(logits / 0.5).sum(1)) - logits[:, 0] / 0.5)
    loss, hits = ListwiseSoftmaxLoss(0.5).loss_and_hits(tf.constant(logits))
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(hits) == float((logits.argmax(1) == 0).sum())
    assert float(ListwiseSoftmaxLoss(0.5)(tf.constant(logits), batch_size=10)) == pytest.approx(expected / 2, rel=1e-5)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"data": {"num_negatives": 0}}, "data.num_negatives must be at least 1 for a reranker"),
        ({"tokenizer": "spiece.model"}, "tokenizer does not apply to a reranker"),
        ({"validation_data": "dev"}, "validation_data does not apply to a reranker"),
        ({"grad_cache_chunk_size": 2}, "grad_cache_chunk_size does not apply to a reranker"),
    ],
)
def test_gtr_settings_are_refused(tmp_path, settings, message):
    data = {"source": "t.jsonl", **settings.pop("data", {})}
    with pytest.raises(UserError, match=message):
        RerankerTrainConfig.from_dict({"init": "r", "output_dir": str(tmp_path), "data": data, **settings})


def run_settings(tmp_path, **settings):
    tmp_path.mkdir(parents=True, exist_ok=True)
    return {
        "init": CHECKPOINTS["bert"],
        "data": {"source": write_triples(tmp_path / "t.jsonl", count=16), "num_negatives": 2},
        "steps": 4,
        "batch_size": 4,
        "checkpoint_every": 2,
        "learning_rate": 0.01,
        "verbose": 0,
        "output_dir": str(tmp_path / "run"),
        **settings,
    }


def group_loss(scorer, triples):
    """The listwise loss over every query's group, from the scorer's sigmoid scores (their logits)."""
    losses = []
    for record in triples:
        scores = scorer.predict([(record["query"], d) for d in [record["positive"], *record["negatives"]]])
        logits = np.log(scores) - np.log1p(-scores)
        losses.append(np.log(np.exp(logits).sum()) - logits[0])
    return float(np.mean(losses))


@pytest.mark.large
def test_train_reranker_lowers_the_listwise_loss(tmp_path, capsys):
    settings = run_settings(tmp_path, steps=16)
    triples = [json.loads(line) for line in open(settings["data"]["source"])]
    before = group_loss(gtr_keras.load(CHECKPOINTS["bert"]), triples)
    argv = ["train", "--reranker", settings["init"], "--data", settings["data"]["source"], "--num-negatives", "2"]
    argv += ["--steps", "16", "--batch-size", "4", "--checkpoint-every", "8", "--learning-rate", "0.01"]
    assert main([*argv, "--output-dir", settings["output_dir"]]) == 0
    assert "reranker trained model written to" in capsys.readouterr().out
    after = group_loss(gtr_keras.load(f"{settings['output_dir']}/model"), triples)
    assert after < before - 0.05, (before, after)


@pytest.mark.large
def test_a_killed_reranker_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path, monkeypatch):
    straight = train_reranker(run_settings(tmp_path / "straight"))
    save = callbacks.Checkpoints.on_epoch_end

    def stop_after_saving(self, epoch, logs=None):
        save(self, epoch, logs)
        raise Stop

    interrupted = run_settings(tmp_path / "interrupted")
    monkeypatch.setattr(callbacks.Checkpoints, "on_epoch_end", stop_after_saving)
    with pytest.raises(Stop):  # killed after the checkpoint at step 2
        train_reranker(interrupted)
    monkeypatch.undo()
    resumed = train_reranker(interrupted)
    for a, b in zip(straight.model.weights, resumed.model.weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6, rtol=0, err_msg=a.path)
    with pytest.raises(MismatchError, match="this run has steps=5, the run being resumed has steps=4"):
        train_reranker({**interrupted, "steps": 5})
