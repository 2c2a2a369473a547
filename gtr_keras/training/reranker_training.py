"""Fine-tuning a reranker: `train_reranker(config)`, behind `gtr-keras train --reranker MODEL`.

The examples are `train`'s (`TrainingData`: JSONL triples, a BEIR collection with `mine`'s negatives, MS MARCO
triples, TFRecords), each a query, its positive and `num_negatives` hard negatives: a group of `1 + k` pairs that
the reranker scores, trained with a listwise softmax over the group (`losses.ListwiseSoftmaxLoss`). The loop is
`train`'s own (`loop.run_training`): checkpoints, a resume that equals an uninterrupted run, the run record and its
checks, TensorBoard, bfloat16, strategies; the final reranker is the model directory `output_dir/model`.
"""

import dataclasses
import os

import tensorflow as tf

from gtr_keras.errors import UserError
from gtr_keras.models.model_files.fingerprint import fingerprint
from gtr_keras.models.reranker.reranker import Reranker
from gtr_keras.saving import save
from gtr_keras.training.config import TrainConfig
from gtr_keras.training.dual_encoder import StepModel
from gtr_keras.training.loop import TrainedModel, run_training
from gtr_keras.training.losses import ListwiseSoftmaxLoss

# Settings of GTR's training that a reranker's does not have: (setting, why).
_GTR_SETTINGS = (
    ("tokenizer", "a reranker keeps its own tokenizer"),
    ("grad_cache_chunk_size", "GradCache splits GTR's in-batch loss; a reranker's groups are independent"),
    ("matryoshka_dims", "a reranker gives scores, not embeddings to truncate"),
    ("validation_data", "validation measures a GTR model's retrieval"),
)


@dataclasses.dataclass
class RerankerTrainConfig(TrainConfig):
    """The settings of a reranker's fine-tuning: `TrainConfig`'s, `init` the reranker (a model directory or a
    cross-encoder checkpoint), and `temperature` the listwise softmax's (1.0: the logits as they are).

    A reranker keeps its tokenizer and its pair budget (`data.query_length` and `data.document_length` are not
    used); GTR's tokenizer, GradCache and validation settings are refused, and `data.num_negatives` must be at
    least 1 (a group of one pair has nothing to rank).

    Example:
    >>> config = RerankerTrainConfig(init="models/minilm", data={"source": "triples.jsonl", "num_negatives": 3},
    ...                              output_dir="runs/minilm")
    """

    temperature: float = 1.0

    flags = {"init": "--reranker", "output_dir": "--output-dir", "data.source": "--data"}

    def __post_init__(self):
        super().__post_init__()
        for name, why in _GTR_SETTINGS:
            if getattr(self, name) is not None:
                raise UserError(f"{name} does not apply to a reranker ({why})")
        if self.data.num_negatives < 1:
            raise UserError("data.num_negatives must be at least 1 for a reranker (its loss ranks each query's group)")
        if self.strategy == "tpu":
            raise UserError("strategy 'tpu' is not supported for rerankers (their pairs are padded per batch)")


class ListwiseReranker(StepModel):
    """A `Reranker` trained on groups of pairs: each query with its positive, then its `k` hard negatives.

    A batch is the model inputs of `B * (1 + k)` pairs, query by query, positive first (`pair_batches`); the
    loss is `ListwiseSoftmaxLoss` over each query's `1 + k` logits, and `accuracy` the share of queries whose
    positive scores above its negatives. Under a distribution strategy each replica returns its share of the
    global batch's loss.

    Args:
        reranker: the `Reranker` to train.
        group_size: pairs per query, `1 + k`.
        temperature: the softmax's temperature.

    Example:
    >>> model = ListwiseReranker(Reranker.from_preset("models/minilm"), group_size=4)
    >>> model.compile(optimizer=make_optimizer(steps=100))
    """

    def __init__(self, reranker, group_size, temperature=1.0, **kwargs):
        super().__init__(**kwargs)
        self.reranker = reranker
        self.group_size = group_size
        self.listwise_loss = ListwiseSoftmaxLoss(temperature)
        self._seed_states = [v for v in reranker.non_trainable_variables if v.name == "seed_generator_state"]
        self.built = True

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # The dropout layers' random states, in `train`'s checkpoints: a resumed run draws the masks that an
        # uninterrupted one would (Keras does not track them).
        children = super()._trackable_children(save_type, **kwargs)
        children.update({f"dropout_seed_{number}": state for number, state in enumerate(self._seed_states)})
        return children

    def call(self, inputs, training=False):
        return self.reranker(inputs, training=training)

    def _loss(self, batch, training):
        logits = tf.reshape(self.reranker(batch, training=training), [-1, self.group_size])
        context = tf.distribute.get_replica_context()
        queries = tf.shape(logits)[0]
        return (*self.listwise_loss.loss_and_hits(logits, queries * context.num_replicas_in_sync), queries)

    def _track(self, loss, hits, queries):
        total, hits, count = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, [loss, hits, tf.cast(queries, tf.float32)]
        )
        self.loss_tracker.update_state(total)
        self.accuracy_tracker.update_state(hits / count)
        return {"loss": self.loss_tracker.result(), "accuracy": self.accuracy_tracker.result()}

    def train_step(self, batch):
        variables = self.trainable_variables
        with tf.GradientTape() as tape:
            loss, hits, queries = self._loss(batch, training=True)
        # Adafactor squares `IndexedSlices` before summing duplicate rows: dense gradients (as `DualEncoder`).
        gradients = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
        self.optimizer.apply_gradients(zip(gradients, variables))
        return self._track(loss, hits, queries)

    def test_step(self, batch):
        return self._track(*self._loss(batch, training=False))


def pair_batches(preprocessor, text_batches):
    """Model inputs of `TrainingData.text_batches`' batches: per query, its positive then its negatives, as
    pairs packed by `preprocessor` (`RerankerPreprocessor`), each batch padded to its longest pair."""

    def features(batch):
        documents = tf.concat([batch["positive"][:, None], batch["negatives"]], axis=1)
        queries = tf.repeat(batch["query"], tf.shape(documents)[1])
        return preprocessor.features(queries, tf.reshape(documents, [-1]))

    return text_batches.map(features, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _initial_reranker(config, policy):
    reranker = Reranker.from_preset(config.init, dtype=policy)
    return reranker, fingerprint(reranker)


def _keep_tokenizer(config, model, strategy, cluster):
    """A reranker keeps its tokenizer and pair budget."""


RERANKER_MODEL = TrainedModel(_initial_reranker, _keep_tokenizer, save, lambda reranker: reranker.scorer())


def train_reranker(config):
    """Fine-tunes a reranker and writes the model directory `output_dir/model`.

    As `loop.train` does for GTR (the record of settings and inputs, the checks of a rerun, checkpoints every
    `checkpoint_every` steps and a resume that ends with the weights of an uninterrupted run, a NaN loss
    stopping the run), with `ListwiseReranker`'s listwise softmax loss.

    Args:
        config: a `RerankerTrainConfig`, or a dict of its settings.

    Returns:
        The trained reranker's `PairScorer`.

    Example:
    >>> scorer = train_reranker({"init": "models/minilm", "output_dir": "runs/minilm", "steps": 500,
    ...                          "data": {"source": "nfcorpus", "negatives_file": "negatives.jsonl",
    ...                                   "num_negatives": 3}})  # doctest: +SKIP
    """
    if isinstance(config, dict):
        config = RerankerTrainConfig.from_dict(config)
    if not os.path.isdir(os.fspath(config.init)) and not str(config.init).startswith("hf://"):
        from gtr_keras.models.model_files.model_source import resolve_model_source

        resolve_model_source(config.init)  # names a missing directory
    made = {}

    def make_model(reranker):
        made["preprocessor"] = reranker.preprocessor
        return ListwiseReranker(reranker, 1 + config.data.num_negatives, config.temperature)

    def make_dataset(run, tokenizer, batch_size, pad_to_length=False, **kwargs):
        def batches(rows=None):
            return pair_batches(made["preprocessor"], run.data.text_batches(batch_size, rows=rows, **kwargs))

        return batches

    return run_training(config, make_model, make_dataset, trained=RERANKER_MODEL)
