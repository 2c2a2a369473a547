"""Training GTR dual encoders: the `DualEncoder` Keras model and the `gtr-keras train` loop.

`DualEncoder` trains a shared `GTRTextEmbedder` tower with GTR's bidirectional
in-batch softmax loss (`gtr_keras.losses`). Under any `tf.distribute`
strategy the in-batch candidates are those of the GLOBAL batch: each replica
gathers the embeddings of all replicas (`ReplicaContext.all_gather`, whose
gradient sends every replica's share back to where the embedding was
computed), scores its own queries against all passages and its own positives
against all queries, and returns its share of the global-batch loss, so the
gradients that the optimizer sums over replicas are those of the global-batch
loss on one device.

`train(config)` is the loop behind `gtr-keras train`: checkpoints every
`checkpoint_every` steps (model, optimizer and step; the data position is
recovered by skipping the batches already seen, so a run killed and resumed
ends with the same weights as an uninterrupted one; a rerun whose settings or
inputs would change the weights is refused), `steps_per_execution` steps per
call into the device, TensorBoard scalars every `log_every` steps against the
global step (loss, in-batch top-1 accuracy, learning rate), validation on a
small BEIR dev set (NDCG@10, Recall@100; optionally keeping the best model),
a progress bar, a clear stop on a NaN loss, and the final model written as a
gtr-keras model directory. Nothing is read back from the device between
executions but the metrics Keras itself hands to callbacks; the step count,
the checkpoint and NaN checks and validation happen between Keras epochs.
"""

import dataclasses
import hashlib
import inspect
import itertools
import json
import math
import os
import re
import sys
import time
import warnings
from typing import ClassVar

import keras
import tensorflow as tf
import yaml

from gtr_keras import files as fs
from gtr_keras.backbone import GTRBackbone
from gtr_keras.checkpoints import fingerprint, load, save
from gtr_keras.data import TrainingData
from gtr_keras.files import atomic_file, atomic_outputs
from gtr_keras.index import read_json_object
from gtr_keras.errors import CheckpointError, DataError, MismatchError, TrainingError, UserError
from gtr_keras.losses import DEFAULT_TEMPERATURE, BidirectionalInBatchLoss
from gtr_keras.preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.presets import PRESETS, preset_config
from gtr_keras.text_embedder import GTRTextEmbedder
from gtr_keras.tokenizer import GTRTokenizer, train_sentencepiece

PRECISIONS = {"float32": None, "bfloat16": "mixed_bfloat16"}
STRATEGIES = ("default", "mirrored", "tpu")
_TOWERS = ("query", "positive", "negatives")
_SENTENCEPIECE_TEXTS = 200_000
_INTEGER_SETTINGS = {
    "steps": 1, "batch_size": 1, "checkpoint_every": 1, "keep_checkpoints": 1, "seed": 0,
    "grad_cache_chunk_size": 1, "sentencepiece_vocabulary_size": 1, "steps_per_execution": 1, "log_every": 1,
    "validate_every": 1, "validation_max_queries": 1,
}
_OPTIONAL_SETTINGS = (
    "grad_cache_chunk_size", "sentencepiece_vocabulary_size", "steps_per_execution", "validate_every",
    "validation_max_queries",
)
_VALIDATION_SETTINGS = ("validate_every", "validation_max_queries", "keep_best")
TPU_STEPS_PER_EXECUTION = 100
VALIDATION_DEPTH = 100
BEST_MODEL = "best_model"
BEST_MODEL_RECORD = "validation.json"
RUN_RECORD = "train_config.json"
NOT_COMPARED = (
    "output_dir", "checkpoint_every", "keep_checkpoints", "strategy", "tpu", "grad_cache_chunk_size",
    "deterministic", "verbose",
    # how steps are dispatched and what is logged or evaluated on the side: the weights stay the same
    "steps_per_execution", "log_every", "validation_data", "validation_split", "validate_every",
    "validation_max_queries", "keep_best",
    # paths: the files behind them are compared by content
    "init", "tokenizer", "data.source", "data.split", "data.negatives_file", "teacher", "data.texts",
    # distillation: the teacher's batches change its embeddings by rounding only
    "teacher_batch_size",
)
_HASH_CHUNK = 1 << 20


def dtype_policy(precision):
    """The Keras dtype policy for a training precision.

    Args:
        precision: `"float32"` or `"bfloat16"` (Keras `"mixed_bfloat16"`:
            bfloat16 compute, float32 weights). `"float16"` is refused: T5's
            activations overflow float16's range.

    Returns:
        A dtype policy name, or `None` for float32.

    Raises:
        UserError: another precision.

    Example:
    >>> dtype_policy("bfloat16")
    'mixed_bfloat16'
    """
    if precision == "float16":
        raise UserError(
            "precision 'float16' is not supported: T5 activations overflow float16 (max 65504) and the loss "
            "becomes inf/NaN. Use 'bfloat16' (same range as float32) or 'float32'."
        )
    if precision not in PRECISIONS:
        raise UserError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


def make_optimizer(steps, learning_rate=1e-3):
    """GTR's optimizer: Adafactor with a learning rate decaying linearly to 0 over `steps`.

    Args:
        steps: training steps (the decay length).
        learning_rate: initial learning rate (1e-3 in GTR).

    Example:
    >>> optimizer = make_optimizer(steps=1000)
    >>> float(optimizer.learning_rate)
    0.001
    """
    schedule = keras.optimizers.schedules.PolynomialDecay(
        learning_rate, decay_steps=steps, end_learning_rate=0.0, power=1.0
    )
    return keras.optimizers.Adafactor(learning_rate=schedule)


def _towers(batch):
    """The encoder inputs of a batch: `query`, `positive` and, if present, `negatives`."""
    return {name: batch[name] for name in _TOWERS if name in batch}


@keras.saving.register_keras_serializable(package="gtr_keras")
class DualEncoder(keras.Model):
    """Trains a shared GTR tower on (query, positive, hard negatives) batches.

    Batches are dicts as `TrainingData.dataset` makes them: `"query"` and
    `"positive"`, each `{"token_ids", "padding_mask"}` `[B, L]`; optionally
    `"negatives"` `{"token_ids", "padding_mask"}` `[B, k, L]`; and optionally
    `"positive_id"` `[B]` and `"negative_ids"` `[B, k]` document ids and
    `"query_id"` `[B]` query ids (int64 hashes, or strings off XLA) for
    false-negative masking. `fit`, `evaluate` and `predict` also take
    `tf.data` datasets of raw-string batches (`"query"` `[B]`,
    `"positive"` `[B]`, `"negatives"` `[B, k]` tf.string, ids as they are):
    the encoder's preprocessor tokenises them in the input pipeline, as
    keras-hub tasks do.

    GradCache (Gao et al. 2021): with `grad_cache_chunk_size=S`, the step
    embeds the batch S examples at a time without keeping activations, takes
    the loss gradient with respect to the embeddings, then re-embeds each
    chunk under a tape and backpropagates the cached embedding gradients. The
    loss and gradients equal those of the whole batch at once (dropout masks
    are replayed by restoring the tower's random seed state before the second
    pass), while activation memory is that of S examples. Each replica's
    batch must be a multiple of S.

    Under a distribution strategy every replica must get the same number of
    examples: a global batch divisible by the number of replicas, and no
    partial last batch (`drop_remainder=True` for finite data).

    Metrics: `loss`, and `accuracy`, the in-batch top-1 accuracy (the share of
    the global batch's queries whose best-scoring candidate is their positive,
    `in_batch_hits`); both are computed and averaged on the device, so `fit`
    with `steps_per_execution` > 1 reads nothing back between executions.

    Args:
        encoder: the `GTRTextEmbedder` tower shared by queries and passages.
        temperature: softmax temperature `tau` (0.01 in GTR).
        mask_false_negatives: mask candidates sharing the positive's id, and
            the other positives of the same query (when the batch carries ids).
        grad_cache_chunk_size: examples per GradCache chunk; `None` for plain
            backpropagation.

    Example:
    >>> embedder = keras_hub.models.TextEmbedder.from_preset(model_dir)
    >>> model = DualEncoder(embedder)
    >>> model.compile(optimizer=make_optimizer(steps=2))
    >>> texts = {"query": [["lift"], ["drag"]], "positive": [["wing lift"], ["drag force"]]}
    >>> batches = tf.data.Dataset.from_tensor_slices(texts).map(lambda b: {k: v[0] for k, v in b.items()}).batch(2)
    >>> history = model.fit(batches, epochs=1, verbose=0)
    >>> sorted(history.history)
    ['accuracy', 'loss']
    """

    def __init__(self, encoder, temperature=DEFAULT_TEMPERATURE, mask_false_negatives=True,
                 grad_cache_chunk_size=None, **kwargs):
        super().__init__(**kwargs)
        if grad_cache_chunk_size is not None and grad_cache_chunk_size < 1:
            raise ValueError(f"grad_cache_chunk_size must be a positive integer, got {grad_cache_chunk_size}")
        self.encoder = encoder
        self.temperature = temperature
        self.mask_false_negatives = mask_false_negatives
        self.grad_cache_chunk_size = grad_cache_chunk_size
        self.contrastive_loss = BidirectionalInBatchLoss(temperature)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")
        self.built = True

    def _tokenized(self, x):
        """`x` with raw-string towers tokenised in the pipeline (a dataset of token batches is returned as is)."""
        if not isinstance(x, tf.data.Dataset) or x.element_spec.get("positive") != tf.TensorSpec([None], tf.string):
            return x
        if self.encoder.preprocessor is None:
            raise ValueError("raw-string batches need an encoder with a preprocessor (GTRTextEmbedderPreprocessor)")
        tower_features = self.encoder.preprocessor.tower_features
        return x.map(lambda batch: {**batch, **tower_features(batch)}, num_parallel_calls=tf.data.AUTOTUNE)

    def _preprocessing_built(self):
        """Marks the preprocessor and its tokenizer built: they have no weights and run in the input
        pipeline, but an unbuilt layer makes Keras, under a distribution strategy, build the model by
        calling it on a whole batch (which `call` does not take) before `fit` or `evaluate`."""
        preprocessor = getattr(self.encoder, "preprocessor", None)
        for layer in (preprocessor, getattr(preprocessor, "tokenizer", None)):
            if layer is not None and not layer.built:
                layer.built = True

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Keras' TensorFlow trainer, under a distribution strategy, takes a batch from a first iterator
        over the data to build the model before `fit` iterates the data again. A dataset that reshuffles
        on each iteration (`TrainingData`) would then train on another order than with the default
        strategy, after skipping the batches of a resumed run twice; so a model whose layers and
        optimizer are built already (as `train` builds them) skips that step."""
        built = all(layer.built for layer in self._flatten_layers())
        if built and (self.optimizer is None or self.optimizer.built):
            return
        super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def fit(self, x=None, *args, **kwargs):
        self._preprocessing_built()
        if "validation_data" in kwargs:
            kwargs["validation_data"] = self._tokenized(kwargs["validation_data"])
        return super().fit(self._tokenized(x), *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        self._preprocessing_built()
        return super().evaluate(self._tokenized(x), *args, **kwargs)

    def call(self, inputs, training=False):
        """Embeds `{"token_ids", "padding_mask"}` inputs with the shared tower."""
        return self.encoder(inputs, training=training)

    @property
    def metrics(self):
        return [self.loss_tracker, self.accuracy_tracker]

    def _embed(self, batch, training):
        """Embeddings of the towers present in `batch`: `[B, D]`, negatives `[B, k, D]`."""
        embeddings = {name: self.encoder(batch[name], training=training) for name in ("query", "positive")}
        if "negatives" in batch:
            negatives = batch["negatives"]
            k = negatives["token_ids"].shape[1]
            flat_inputs = {name: tf.reshape(v, [-1, tf.shape(v)[-1]]) for name, v in negatives.items()}
            flat = self.encoder(flat_inputs, training=training)
            embeddings["negatives"] = tf.reshape(flat, [-1, k, flat.shape[-1]])
        return embeddings

    def _replica_loss(self, batch, embeddings):
        """This replica's share of the loss of the global batch (replicas hold equal batches), and how
        many of its queries rank their positive first among the global batch's candidates (`in_batch_hits`)."""
        context = tf.distribute.get_replica_context()
        local = {"queries": embeddings["query"], "positives": embeddings["positive"],
                 "negatives": embeddings.get("negatives")}
        if self.mask_false_negatives:
            local.update(positive_ids=batch.get("positive_id"), negative_ids=batch.get("negative_ids"),
                         query_ids=batch.get("query_id"))
        gathered = {name: None if x is None else context.all_gather(x, axis=0) for name, x in local.items()}
        size = tf.shape(embeddings["query"])[0]
        start = context.replica_id_in_sync_group * size
        rows = (start, start + size)
        return self.contrastive_loss.loss_and_hits(**gathered, rows=rows)

    def _track(self, loss, hits, batch):
        """Updates the loss and in-batch accuracy of the global batch, summed over replicas on device."""
        count = tf.cast(tf.shape(batch["positive"]["token_ids"])[0], hits.dtype)
        total, hits, count = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, [loss, hits, count]
        )
        self.loss_tracker.update_state(total)
        self.accuracy_tracker.update_state(hits / count)
        return {"loss": self.loss_tracker.result(), "accuracy": self.accuracy_tracker.result()}

    def train_step(self, batch):
        variables = self.trainable_variables
        if self.grad_cache_chunk_size:
            (loss, hits), gradients = self._grad_cache_gradients(batch, variables)
        else:
            with tf.GradientTape() as tape:
                loss, hits = self._replica_loss(batch, self._embed(batch, training=True))
            gradients = tape.gradient(loss, variables)
        # Keras' Adafactor squares `IndexedSlices` values before summing duplicate indices
        # (embedding rows looked up more than once), so it gets dense gradients.
        gradients = [tf.convert_to_tensor(g) for g in gradients]
        self.optimizer.apply_gradients(zip(gradients, variables))
        return self._track(loss, hits, batch)

    def test_step(self, batch):
        embed = self._embed_in_chunks if self.grad_cache_chunk_size else self._embed
        return self._track(*self._replica_loss(batch, embed(batch, training=False)), batch)

    def _chunked(self, tensors):
        """Reshapes every `[B, ...]` tensor to `[B / S, S, ...]`."""
        size = self.grad_cache_chunk_size

        def split(x):
            divisible = tf.debugging.assert_equal(
                tf.shape(x)[0] % size, 0,
                message=f"GradCache needs each replica's batch to be a multiple of "
                f"grad_cache_chunk_size={size}",
            )
            with tf.control_dependencies([divisible]):
                chunks = tf.reshape(x, tf.concat([[-1, size], tf.shape(x)[1:]], axis=0))
            chunks.set_shape([None, size, *x.shape[1:]])
            return chunks

        return tf.nest.map_structure(split, tensors)

    def _embed_in_chunks(self, batch, training):
        """`_embed` of the whole batch, computed S examples at a time."""
        towers = _towers(batch)

        def spec(name):
            k = [batch[name]["token_ids"].shape[1]] if name == "negatives" else []
            return tf.TensorSpec([self.grad_cache_chunk_size, *k, self.encoder.embedding_dim], tf.float32)

        embedded = tf.map_fn(
            lambda chunk: self._embed(chunk, training), self._chunked(towers),
            fn_output_signature={name: spec(name) for name in towers}, parallel_iterations=1,
        )
        return {
            name: tf.reshape(e, tf.concat([[-1], tf.shape(e)[2:]], axis=0)) for name, e in embedded.items()
        }

    def _grad_cache_gradients(self, batch, variables):
        """GradCache's `(loss, hits)` and gradients, equal to those of `_embed` on the whole batch."""
        seeds = [v for v in self.encoder.non_trainable_variables if v.name == "seed_generator_state"]
        initial_seeds = [tf.identity(v.value) for v in seeds]
        embeddings = self._embed_in_chunks(batch, training=True)
        with tf.GradientTape() as tape:
            tape.watch(embeddings)
            loss, hits = self._replica_loss(batch, embeddings)
        embedding_gradients = tape.gradient(loss, embeddings)
        for seed, value in zip(seeds, initial_seeds):
            seed.assign(value)

        def accumulate(totals, chunk_and_upstream):
            chunk, upstream = chunk_and_upstream
            with tf.GradientTape() as chunk_tape:
                embedded = self._embed(chunk, training=True)
                surrogate = tf.add_n([tf.reduce_sum(embedded[name] * upstream[name]) for name in embedded])
            gradients = chunk_tape.gradient(surrogate, variables)
            return [total + tf.convert_to_tensor(g) for total, g in zip(totals, gradients)]

        gradients = tf.foldl(
            accumulate,
            (self._chunked(_towers(batch)), self._chunked(embedding_gradients)),
            initializer=[tf.zeros(v.shape, v.dtype) for v in variables],
            parallel_iterations=1,
        )
        return (loss, hits), gradients

    def get_config(self):
        return {
            **super().get_config(),
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "temperature": self.temperature,
            "mask_false_negatives": self.mask_false_negatives,
            "grad_cache_chunk_size": self.grad_cache_chunk_size,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


@dataclasses.dataclass
class TrainConfig:
    """Settings of a `gtr-keras train` run (the YAML/JSON config file, `data` nested).

    Args:
        init: a gtr-keras model directory to fine-tune, or a preset name
            (`gtr-tiny`, `gtr-base`, ...) to train from random weights.
        data: a `TrainingData`, or a dict of its arguments.
        model: `GTRBackbone` arguments (or `embedding_dim`) replacing the preset's when `init` is
            a preset (e.g. `{"num_layers": 2, "embedding_dim": 128}`).
        output_dir: where checkpoints (`checkpoints/`), TensorBoard logs
            (`logs/`), the config (`train_config.json`) and the final model
            directory (`model/`) go. Rerunning with the same `output_dir`
            resumes from the latest checkpoint.
        tokenizer: a SentencePiece model file. By default the model
            directory's; with a preset, one is trained on the training texts
            (and kept as `output_dir/spiece.model`).
        sentencepiece_vocabulary_size: pieces of a trained SentencePiece
            model (default: the preset's vocabulary size minus T5's 100
            sentinel ids).
        sentencepiece_case_folding: train the SentencePiece model with NFKC
            and Unicode case folding (`nmt_nfkc_cf`), so that the model sees
            "LIFT", "Lift" and "lift" as the same pieces; the normalisation is
            part of the SentencePiece model, so every tokenizer of it (in the
            graph, in exports, Hugging Face's) folds case alike.
        steps: optimizer steps.
        batch_size: global batch size (queries per step, over all replicas).
        learning_rate: initial Adafactor learning rate, decayed linearly to 0.
        checkpoint_every: steps between checkpoints (also the length of a
            Keras epoch, or its greatest common divisor with `validate_every`).
        keep_checkpoints: checkpoints kept on disk.
        precision: `"float32"` or `"bfloat16"` (`"float16"` is refused).
        grad_cache_chunk_size: examples per GradCache chunk on each replica
            (`None`: no GradCache).
        strategy: `"default"` (one device), `"mirrored"` (all local GPUs) or
            `"tpu"` (batches padded to the token budgets, for static shapes).
            JSONL, MS MARCO and BEIR sources are read by Python on the host
            (`tf.data.Dataset.from_generator`), which a TPU Node's remote
            host cannot run: there, write TFRecords with `write_tfrecord`.
        tpu: TPU address for `TPUClusterResolver` (`"local"` on a TPU VM).
        seed: seed of initialisation, shuffling and negative sampling.
        temperature: softmax temperature (0.01).
        mask_false_negatives: mask in-batch candidates that share the
            positive's document id.
        deterministic: enable TensorFlow op determinism (needed for
            bit-for-bit resumes).
        verbose: Keras `fit` verbosity (1: progress bar, 2: a line per
            checkpoint interval, 0: silent; validation lines unless 0).
        steps_per_execution: training steps the device runs per call from
            Python (Keras `compile(steps_per_execution=...)`, a loop on the
            device): the host reads metrics, writes TensorBoard points and
            checks for the end of the run only between calls. It must divide
            `checkpoint_every` (and `validate_every`). Default (`None`): 1
            with the `default` and `mirrored` strategies; with `tpu`, the
            largest divisor of `checkpoint_every` (and `validate_every`) up to
            100, so 100 for the usual multiples of 100. The weights are those
            of any other setting.
        log_every: steps between TensorBoard points in `output_dir/logs`,
            plotted against the global step: `train/loss` and
            `train/accuracy` (the in-batch top-1 accuracy), each the mean over
            the steps since the previous point (or the start of the checkpoint
            interval), and `train/learning_rate`. A point is written when an
            execution reaches a multiple of `log_every` (exactly there when
            `steps_per_execution` divides it), from the values Keras already
            fetches between executions, on a background thread.
        validation_data: a BEIR directory to validate on during training
            (read with `gtr_keras.retrieval.load_dataset`): NDCG@10 and
            Recall@100 (`gtr_keras.evaluation.evaluate_run`) of exact search
            over its whole corpus with the weights being trained, written to
            TensorBoard (`val/ndcg@10`, `val/recall@100`) and printed. Each
            validation encodes the corpus and queries outside the training
            step (with `tpu`, with a copy of the weights on the host CPU), so
            use a small collection (thousands of documents, hundreds of
            queries) or cap the queries with `validation_max_queries`.
            Default: no validation.
        validation_split: the qrels split of `validation_data` (`"dev"`).
        validate_every: steps between validations (default: at each
            checkpoint); the last step is always validated. Validation runs
            between Keras epochs, whose length becomes the greatest common
            divisor of `checkpoint_every` and `validate_every`.
        validation_max_queries: validate on the first N judged queries of the
            split (default: all).
        keep_best: keep the model of the best validation NDCG@10 so far as a
            model directory `output_dir/best_model` (like `output_dir/model`,
            with `validation.json`: its step and metrics), replaced when a
            later validation does better. Needs `validation_data`.

    Resuming: `train` records the settings and fingerprints of the inputs in
    `output_dir/train_config.json` and refuses to resume with any that change
    the trained weights: every setting except those in `NOT_COMPARED` (where
    files go, how often checkpoints are saved and kept, how the same
    arithmetic is spread over devices, device loops (`steps_per_execution`),
    GradCache chunks or nondeterministic kernels, which changes the weights
    by rounding only, and what is logged and validated), and by content
    rather than path the initial model, the tokenizer file and the training
    data files.

    Raises:
        UserError: a setting of the wrong type or out of range.

    Example:
    >>> config = TrainConfig(init="gtr-base", data={"source": "triples.tsv"}, output_dir="runs/gtr")
    >>> config.data.num_negatives
    1
    """

    init: str
    data: TrainingData
    output_dir: str
    model: dict = dataclasses.field(default_factory=dict)
    tokenizer: str = None
    sentencepiece_vocabulary_size: int = None
    sentencepiece_case_folding: bool = False
    steps: int = 1000
    batch_size: int = 128
    learning_rate: float = 1e-3
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    precision: str = "float32"
    grad_cache_chunk_size: int = None
    strategy: str = "default"
    tpu: str = None
    seed: int = 0
    temperature: float = DEFAULT_TEMPERATURE
    mask_false_negatives: bool = True
    deterministic: bool = True
    verbose: int = 1
    steps_per_execution: int = None
    log_every: int = 100
    validation_data: str = None
    validation_split: str = "dev"
    validate_every: int = None
    validation_max_queries: int = None
    keep_best: bool = False

    data_class: ClassVar[type] = TrainingData
    flags: ClassVar[dict] = {"init": "--init", "output_dir": "--output-dir", "data.source": "--data"}

    def __post_init__(self):
        if isinstance(self.data, dict):
            try:
                self.data = self.data_class(**self.data)
            except UserError as error:
                raise UserError(f"data.{error}") from None
        dtype_policy(self.precision)
        if self.strategy not in STRATEGIES:
            raise UserError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        for name, minimum in _INTEGER_SETTINGS.items():
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_SETTINGS:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise UserError(f"{name} must be an integer of at least {minimum}, got {value!r}")
        for name in ("learning_rate", "temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"{name} must be a number, got {value!r}")
        if self.learning_rate < 0:
            raise UserError(f"learning_rate must not be negative, got {self.learning_rate}")
        if not self.temperature > 0:
            raise UserError(f"temperature must be positive, got {self.temperature}")
        if self.model:
            if self.init not in PRESETS:
                raise UserError(f"model settings {sorted(self.model)} need a preset `init`, got {self.init!r}")
            known = {*inspect.signature(GTRBackbone).parameters, "embedding_dim"}
            unknown = sorted(set(self.model) - known)
            if unknown:
                raise UserError(f"unknown model setting(s) {', '.join(unknown)}")
        self._check_loop_settings()
        self._check_tokenizer_settings()

    def _check_tokenizer_settings(self):
        if self.tokenizer is None and self.init in PRESETS:
            return
        uses = f"the tokenizer {self.tokenizer}" if self.tokenizer else f"the tokenizer of {self.init}"
        for name in ("sentencepiece_case_folding", "sentencepiece_vocabulary_size"):
            if getattr(self, name) not in (None, False):
                raise UserError(f"{name} applies only to the SentencePiece model trained for a preset `init` "
                                f"without a `tokenizer`; this run uses {uses}")

    def _check_loop_settings(self):
        for name in ("keep_best", "sentencepiece_case_folding"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.validation_split, str) or not self.validation_split:
            raise UserError(f"validation_split must be a qrels split name, got {self.validation_split!r}")
        if self.validation_data is None:
            named = [name for name in _VALIDATION_SETTINGS if getattr(self, name) not in (None, False)]
            if named:
                raise UserError(f"{named[0]} needs validation_data (a BEIR directory)")
        elif not isinstance(self.validation_data, (str, os.PathLike)):
            raise UserError(f"validation_data must be a BEIR directory, got {self.validation_data!r}")
        if self.steps_per_execution is not None and self.epoch_length() % self.steps_per_execution:
            also = f" and validate_every {self.validate_every}" if self.validate_every else ""
            raise UserError(
                f"steps_per_execution {self.steps_per_execution} must divide checkpoint_every {self.checkpoint_every}"
                + also
            )

    def epoch_length(self):
        """Steps of a Keras epoch of `train`: `checkpoint_every`, or its gcd with `validate_every`.

        Example:
        >>> TrainConfig("gtr-tiny", {"source": "t.jsonl"}, "out", checkpoint_every=1000).epoch_length()
        1000
        """
        if self.validate_every is None:
            return self.checkpoint_every
        return math.gcd(self.checkpoint_every, self.validate_every)

    def resolved_steps_per_execution(self):
        """`steps_per_execution`, or its default: 1, or with `tpu` the largest divisor of
        `epoch_length()` up to 100.

        Example:
        >>> TrainConfig("gtr-tiny", {"source": "t.jsonl"}, "out", strategy="tpu", checkpoint_every=250
        ...             ).resolved_steps_per_execution()
        50
        """
        if self.steps_per_execution is not None:
            return self.steps_per_execution
        if self.strategy != "tpu":
            return 1
        length = self.epoch_length()
        return max(k for k in range(1, min(length, TPU_STEPS_PER_EXECUTION) + 1) if length % k == 0)

    @classmethod
    def from_dict(cls, values, source="config"):
        """Builds a config from plain values, naming `source` and the key in errors.

        Raises:
            UserError: an unknown, missing or bad setting; the message starts
                with `source`.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        data_fields = {f.name for f in dataclasses.fields(cls.data_class)}
        unknown = sorted(set(values) - fields)
        unknown += sorted(f"data.{key}" for key in set(values.get("data") or {}) - data_fields)
        if unknown:
            raise UserError(f"{source}: unknown setting(s) {', '.join(unknown)}")
        for name, flag in cls.flags.items():
            group, _, key = name.rpartition(".")
            holder = (values.get(group) or {}) if group else values
            if holder.get(key) is None:
                raise UserError(f"{source}: missing setting `{name}` ({flag})")
        try:
            return cls(**values)
        except (TypeError, ValueError) as error:
            raise UserError(f"{source}: {error}") from None

    def to_dict(self):
        return dataclasses.asdict(self)


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but `1e-3` is a float (YAML 1.2 and JSON) rather than a string (YAML 1.1)."""


_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+.0123456789")
)


def load_config(path, overrides=None, config_class=None):
    """Reads a YAML (or JSON) training config, with `overrides` on top.

    Args:
        path: the config file, or `None` to build from `overrides` only.
        overrides: a dict of settings; `"data.<name>"` keys set data settings.
        config_class: `TrainConfig` (default) or a subclass (`DistillConfig`).

    Returns:
        A `config_class`.

    Raises:
        UserError: an unreadable file or a bad setting, naming the file.

    Example:
    >>> config = load_config("train.yaml", {"steps": 20, "data.train_fraction": 0.1})  # doctest: +SKIP
    """
    values = {}
    if path is not None:
        with fs.open(path, "r") as f:
            try:
                values = yaml.load(f, Loader=_ConfigLoader) or {}
            except yaml.YAMLError as error:
                raise UserError(f"{path}: not valid YAML/JSON ({error})") from None
        if not isinstance(values, dict):
            raise UserError(f"{path}: expected a mapping of settings, got {type(values).__name__}")
    values = {**values, "data": dict(values.get("data") or {})}
    for key, value in (overrides or {}).items():
        if key.startswith("data."):
            values["data"][key[len("data."):]] = value
        else:
            values[key] = value
    return (config_class or TrainConfig).from_dict(values, source=path or "training settings")


def make_strategy(name, tpu=None):
    """The `tf.distribute` strategy for `TrainConfig.strategy`.

    Example:
    >>> make_strategy("default").num_replicas_in_sync
    1
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {name!r}")


def _training_texts(data):
    """Distinct texts of the training data: a BEIR collection repeats each document once per query
    that judged it (NFCorpus: 31 times on average), which would multiply SentencePiece's work."""
    texts = itertools.chain.from_iterable((e.query, e.positive, *e.negatives) for e in data.examples())
    seen = set()
    distinct = (t for t in texts if not (t in seen or seen.add(t)))
    return itertools.islice(distinct, _SENTENCEPIECE_TEXTS)


def _is_directory(path):
    """True for a directory on any file system (a `DataError` for a file system TensorFlow does not know)."""
    return fs.exists(path) and fs.isdir(path)


def _tokenizer_file(config):
    """The run's SentencePiece model file, or None for the initial model directory's own; from a preset
    without a `tokenizer`, one is trained on the training texts (once: a resumed run reuses it)."""
    if config.tokenizer or _is_directory(config.init):
        return config.tokenizer
    path = os.path.join(config.output_dir, "spiece.model")
    if not fs.exists(path):
        preset = preset_config(config.init, **config.model)
        size = config.sentencepiece_vocabulary_size or preset["vocabulary_size"] - 100
        with atomic_outputs(path) as (staged,):
            train_sentencepiece(_training_texts(config.data), str(staged), vocabulary_size=size,
                                case_folding=config.sentencepiece_case_folding)
    return path


def _initial_encoder(config, policy):
    """The `GTRTextEmbedder` a run starts from (build it under the strategy's scope), and the
    fingerprint of what determines it: `checkpoints.fingerprint` of a model directory's model, or the
    SHA-256 of a preset's architecture (the random weights follow from it and `seed`)."""
    if _is_directory(config.init):
        model = load(config.init, dtype=policy).model
        return model, fingerprint(model)
    architecture = json.dumps(preset_config(config.init, **config.model), sort_keys=True)
    model = GTRTextEmbedder.from_architecture(config.init, dtype=policy, **config.model)
    return model, hashlib.sha256(architecture.encode("utf-8")).hexdigest()


def _set_preprocessor(config, model):
    """Gives the initial model the run's tokenizer (`_tokenizer_file`, else its own) and token budgets."""
    path = _tokenizer_file(config)
    tokenizer = GTRTokenizer(fs.read_bytes(path)) if path else model.preprocessor.tokenizer
    if tokenizer.vocabulary_size() > model.backbone.vocabulary_size:
        raise MismatchError(
            f"{path}: the tokenizer has {tokenizer.vocabulary_size()} pieces but the initial model {config.init} "
            f"only {model.backbone.vocabulary_size} embedding rows; use a tokenizer with fewer pieces"
        )
    model.preprocessor = GTRTextEmbedderPreprocessor(tokenizer, config.data.document_length, config.data.query_length)


def _sha256(path):
    """SHA-256 (hex) of a file's bytes, read 1 MiB at a time."""
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _file_inputs(config):
    """Fingerprints of the files a run reads, `{name: {"path", "sha256"}}`: `data.<role>` for each file
    of `TrainingData.files`, and `tokenizer` for a `tokenizer` file."""
    if config.tokenizer is not None and not fs.isfile(config.tokenizer):
        raise CheckpointError(f"{config.tokenizer}: no such SentencePiece model file (the `tokenizer` setting)")
    files = {f"data.{role}": path for role, path in config.data.files().items()}
    if config.tokenizer is not None:
        files["tokenizer"] = os.fspath(config.tokenizer)
    return {name: {"path": path, "sha256": _sha256(path)} for name, path in files.items()}


def _flat_settings(record):
    settings = dict(record["settings"])
    data = settings.pop("data")
    return {**settings, **{f"data.{key}": value for key, value in data.items()}}


def _input_change(name, now, then):
    """What changed in an input (compared by content), in words; `None` if nothing did."""
    if now and then and now["sha256"] == then["sha256"]:
        return None
    what = {"init": "initial model", "tokenizer": "tokenizer", "data.negatives": "mined negatives",
            "teacher": "teacher model"}.get(
        name, "training data"
    )
    if now and then and now["path"] == then["path"]:
        return f"the {what} {now['path']} changed since the run started"
    return (
        f"this run reads the {what} {now['path'] if now else 'none'}, "
        f"the run being resumed read {then['path'] if then else 'none'}"
    )


def _check_resume(config, record, resumed, parts):
    """Raises `MismatchError` at the first difference between this run's `record` and the resumed run's,
    among `parts`: "settings", and the inputs named after "data", "tokenizer" or "init"."""
    changes = []
    if "settings" in parts:
        now, then = _flat_settings(record), _flat_settings(resumed)
        changes += [
            f"this run has {key}={now.get(key)}, the run being resumed has {key}={then.get(key)}"
            for key in {**now, **then}
            if key not in NOT_COMPARED
            and json.dumps(now.get(key), sort_keys=True) != json.dumps(then.get(key), sort_keys=True)
        ]
    for name in {**record["inputs"], **resumed["inputs"]}:
        if name.split(".")[0] in parts:
            changes.append(_input_change(name, record["inputs"].get(name), resumed["inputs"].get(name)))
    changes = [change for change in changes if change]
    if changes:
        raise MismatchError(
            f"{os.path.join(config.output_dir, RUN_RECORD)}: {changes[0]}; "
            f"use another --output-dir or delete {config.output_dir} to start over"
        )


def _resumed_record(config):
    """The record of the run in `output_dir` to resume, or `None` for a new run."""
    path = os.path.join(config.output_dir, RUN_RECORD)
    start_over = f"use another --output-dir or delete {config.output_dir} to start over"
    if not fs.exists(path):
        if tf.train.latest_checkpoint(os.path.join(config.output_dir, "checkpoints")):
            raise MismatchError(f"{path}: missing, so the checkpoints beside it cannot be checked; {start_over}")
        return None
    try:
        record = json.loads(fs.read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise MismatchError(f"{path}: unreadable ({error}); {start_over}") from None
    if not isinstance(record, dict) or not {"settings", "inputs"} <= set(record):
        raise MismatchError(f"{path}: written by an older gtr-keras, without fingerprints of the inputs; {start_over}")
    return record


def _learning_rate_at(optimizer, step):
    """The optimizer's learning rate at `step`, computed on the host from its schedule (no device read)."""
    rate = getattr(optimizer, "_learning_rate", None)
    with tf.device("/cpu:0"):
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            return float(rate(step))
        return float(optimizer.learning_rate)


class _Checkpoints(keras.callbacks.Callback):
    """Runs at the end of each Keras epoch only (`TrainConfig.epoch_length` steps), never between
    batches: reads the step (the one device read of the interval), stops at `steps` or when the data
    ran out, notes a NaN loss (the epoch's mean, averaged on the device) or non-finite weights, and
    saves a checkpoint when the epoch reached a multiple of `checkpoint_every` or the end of the run."""

    def __init__(self, manager, start, steps, every, epoch_length):
        super().__init__()
        self.manager = manager
        self.steps = steps
        self.every = every
        self.epoch_length = epoch_length
        self.step = self.saved_step = self.epoch_start = start
        self.nan_step = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = self.step

    def on_epoch_end(self, epoch, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())
        if self.step >= self.steps or self.step < self.epoch_start + self.epoch_length:
            self.model.stop_training = True  # the end (the dataset holds the steps left), or the data ran out
        loss = (logs or {}).get("loss")
        if self.nan_step is None and loss is not None and not math.isfinite(loss):
            self.nan_step = self.step
        if self.nan_step is not None:
            self.model.stop_training = True
            return
        due = self.step // self.every > self.epoch_start // self.every or self.model.stop_training
        if not due or self.step == self.saved_step:
            return
        variables = self.model.trainable_variables
        if bool(tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in variables]))):
            self.manager.save(checkpoint_number=self.step)
            self.saved_step = self.step
        else:
            self.nan_step = self.step
            self.model.stop_training = True


class _Scalars(keras.callbacks.Callback):
    """TensorBoard points every `log_every` steps against the global step: `train/loss` and
    `train/accuracy`, the means over the steps since the previous point, and `train/learning_rate`.

    It reads nothing from the device: Keras hands every callback the metrics of each execution
    (`steps_per_execution` steps) as Python numbers, the running means `m_n` of the epoch's first `n`
    steps, so a window's sum is `m_n * n - m_p * p`; the step is counted on the host. A loss that is
    not finite stops the run at the end of the execution.
    """

    def __init__(self, writer, clock, steps, log_every, steps_per_execution):
        super().__init__()
        self.writer = writer
        self.clock = clock
        self.steps = steps
        self.log_every = log_every
        self.steps_per_execution = steps_per_execution
        self.carried = (0, 0.0, 0.0)  # steps, loss sum, accuracy sum since the last point, from past epochs

    def on_epoch_begin(self, epoch, logs=None):
        self.start = self.clock.step
        self.last = (0, 0.0, 0.0)  # the epoch's steps, loss mean and accuracy mean at its last point

    def _since_last(self, done, loss, accuracy):
        """(steps, loss sum, accuracy sum) since the last point, given the epoch's means after `done` steps."""
        seen, seen_loss, seen_accuracy = self.last
        count, loss_sum, accuracy_sum = self.carried
        return (count + done - seen, loss_sum + loss * done - seen_loss * seen,
                accuracy_sum + accuracy * done - seen_accuracy * seen)

    def on_train_batch_end(self, batch, logs=None):
        done = min(batch + 1, self.steps - self.start)  # steps of the epoch so far (the last execution may be short)
        previous = (done - 1) // self.steps_per_execution * self.steps_per_execution
        step = self.start + done
        if step // self.log_every == (self.start + previous) // self.log_every or not logs or "loss" not in logs:
            return
        loss, accuracy = logs["loss"], logs.get("accuracy", math.nan)
        if not math.isfinite(loss):
            self.model.stop_training = True
        count, loss_sum, accuracy_sum = self._since_last(done, loss, accuracy)
        with self.writer.as_default(step=step), tf.device("/cpu:0"):
            tf.summary.scalar("train/loss", loss_sum / count)
            tf.summary.scalar("train/accuracy", accuracy_sum / count)
            tf.summary.scalar("train/learning_rate", _learning_rate_at(self.model.optimizer, step))
        self.last, self.carried = (done, loss, accuracy), (0, 0.0, 0.0)

    def on_epoch_end(self, epoch, logs=None):
        done = self.clock.step - self.start
        if logs and "loss" in logs and done > self.last[0]:
            self.carried = self._since_last(done, logs["loss"], logs.get("accuracy", math.nan))
        self.writer.flush()


class _Validation(keras.callbacks.Callback):
    """Validates at the end of the Keras epochs that reach a multiple of `every` steps, and at the end
    of the run: NDCG@10 and Recall@100 of exact search over the validation corpus with the weights
    being trained, written to TensorBoard (`val/ndcg@10`, `val/recall@100`) and printed; with
    `keep_best`, the best model so far is kept in `output_dir/best_model`."""

    def __init__(self, config, clock, writer, collection, best):
        super().__init__()
        self.config = config
        self.clock = clock
        self.writer = writer
        self.corpus, self.queries, self.qrels = collection
        self.every = config.validate_every or config.checkpoint_every
        self.best = best
        self.validated_step = None
        self._host_model = None

    def _embedder(self):
        """The embedder to encode with: the one being trained, or under a TPU strategy a host copy of it."""
        embedder = self.model.encoder
        if self.config.strategy != "tpu":
            return embedder
        with tf.device("/cpu:0"):
            if self._host_model is None:
                backbone = GTRBackbone.from_config(embedder.backbone.get_config())
                self._host_model = GTRTextEmbedder(backbone, embedder.preprocessor, embedder.embedding_dim)
            self._host_model.set_weights(embedder.get_weights())
        return self._host_model

    def validate(self):
        """`{"ndcg@10", "recall@100"}` of the model as it is now."""
        from gtr_keras.evaluation import evaluate_run
        from gtr_keras.retrieval import gtr_run

        embedder = self._embedder()
        run = gtr_run(embedder.batch_encoder(), self.corpus, self.queries, depth=VALIDATION_DEPTH, progress=False)
        metrics = evaluate_run(self.qrels, run)
        return embedder, {"ndcg@10": metrics["ndcg@10"], "recall@100": metrics["recall@100"]}

    def on_epoch_end(self, epoch, logs=None):
        step = self.clock.step
        due = step // self.every > self.clock.epoch_start // self.every or step >= self.config.steps
        if self.clock.nan_step is not None or not due or step == self.validated_step:
            return
        began = time.perf_counter()
        embedder, metrics = self.validate()
        self.validated_step = step
        with self.writer.as_default(step=step), tf.device("/cpu:0"):
            for name, value in metrics.items():
                tf.summary.scalar(f"val/{name}", value)
        self.writer.flush()
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in metrics.items()})
        line = (f"validation at step {step}: ndcg@10 {metrics['ndcg@10']:.4f}, recall@100 "
                f"{metrics['recall@100']:.4f} ({len(self.queries)} queries, {len(self.corpus)} documents, "
                f"{time.perf_counter() - began:.1f} s)")
        if self.config.keep_best and (self.best is None or metrics["ndcg@10"] > self.best):
            self.best = metrics["ndcg@10"]
            record = {"step": step, **metrics, **_validation_settings(self.config)}
            with fs.atomic_directory(os.path.join(self.config.output_dir, BEST_MODEL)) as staging:
                embedder.save_to_preset(str(staging))
                (staging / BEST_MODEL_RECORD).write_text(json.dumps(record, indent=2, default=os.fspath) + "\n")
            line += f"; best so far, saved to {os.path.join(self.config.output_dir, BEST_MODEL)}"
        if self.config.verbose:
            print(line, flush=True)


def _validation_settings(config):
    return {"validation_data": config.validation_data, "validation_split": config.validation_split,
            "validation_max_queries": config.validation_max_queries}


def _validation_collection(config):
    """`(corpus, queries, qrels)` of `validation_data` (at most `validation_max_queries` queries), or None."""
    if config.validation_data is None:
        return None
    from gtr_keras.retrieval import load_dataset

    corpus, queries, qrels, report = load_dataset(config.validation_data, config.validation_split)
    if not report.ok:
        print(f"warning: validation data: {report}", file=sys.stderr)
    queries = dict(itertools.islice(queries.items(), config.validation_max_queries))
    qrels = {qid: qrels[qid] for qid in queries}
    if not any(grade >= 1 for judgements in qrels.values() for grade in judgements.values()):
        raise DataError(f"{config.validation_data}: no judged query of split {config.validation_split!r} has a "
                        f"relevant document (the validation_data setting)")
    return corpus, queries, qrels


def _best_so_far(config):
    """The NDCG@10 of `output_dir/best_model` when kept with the same validation settings, else None."""
    path = os.path.join(config.output_dir, BEST_MODEL, BEST_MODEL_RECORD)
    if not config.keep_best or not fs.exists(path):
        return None
    record = read_json_object(path, f"delete {os.path.dirname(path)} to start the best model over")
    same = json.dumps(_validation_settings(config), default=os.fspath) == json.dumps(
        {key: record.get(key) for key in _validation_settings(config)}, default=os.fspath)
    return record.get("ndcg@10") if same else None


class _Progress(keras.callbacks.ProgbarLogger):
    """Keras' progress bar, listed first so that its line ends before validation prints."""


def train(config):
    """Trains a GTR dual encoder and writes the model directory `output_dir/model`.

    A new run first reads the training data through once (`TrainingData.check`),
    then records its settings and fingerprints of its inputs in
    `output_dir/train_config.json`: the SHA-256 of every training data file
    (`TrainingData.files`; read in full, the one sure way to see a change) and
    of the tokenizer file, and the initial model's (`checkpoints.fingerprint`
    of a model directory, the architecture of a preset). Rerunning with the
    same `output_dir` resumes from the latest checkpoint once these match
    (`TrainConfig` says which settings count): the weights, optimizer state
    and step are restored and the batches already seen are skipped, so the
    result equals an uninterrupted run's.

    Keras epochs are `TrainConfig.epoch_length()` steps; the step, a NaN
    loss (the epoch's mean) and the weights are checked, checkpoints saved
    and `validation_data` evaluated only between epochs, and TensorBoard
    points (`output_dir/logs`) are written from the metrics Keras fetches
    after each execution of `steps_per_execution` steps. With `keep_best`,
    `output_dir/best_model` holds the model of the best validation NDCG@10
    (a resumed run keeps competing with it).

    Args:
        config: a `TrainConfig`, or a dict of its settings.

    Returns:
        The trained `Encoder`.

    Raises:
        UserError: a bad setting.
        DataError: training or validation data that is missing, malformed
            or empty.
        CheckpointError: `init` is neither a model directory nor a preset,
            or the `tokenizer` file is missing.
        MismatchError: `output_dir` holds a run of other settings or inputs.
        TrainingError: the loss became NaN, or the data ran out.

    Example:
    >>> encoder = train({"init": "gtr-base", "output_dir": "runs/gtr",
    ...                  "data": {"source": "triples.tsv"}, "steps": 20000})  # doctest: +SKIP
    """
    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)

    def dual_encoder(encoder):
        return DualEncoder(encoder, config.temperature, config.mask_false_negatives, config.grad_cache_chunk_size)

    return run_training(config, dual_encoder, config.data.dataset)


def run_training(config, make_model, make_dataset, inputs=None):
    """The loop of `train`, for any Keras model that trains a `GTRTextEmbedder` (`distill` uses it too).

    Args:
        config: a `TrainConfig` (or a subclass's instance).
        make_model: `make_model(encoder)` -> the model to `fit`, with the
            initial `GTRTextEmbedder` as its `encoder`; called under the
            strategy's scope.
        make_dataset: `make_dataset(tokenizer, batch_size, seed=, skip_batches=,
            drop_remainder=, pad_to_length=)` -> the training batches.
        inputs: optional `inputs()` -> `{name: {"path", "sha256"}}` of further
            inputs to record and compare on resume (called once the data is
            checked, before the model is built).

    Returns:
        The trained `Encoder`.
    """
    policy = dtype_policy(config.precision)
    if config.init not in PRESETS and not _is_directory(config.init):
        raise CheckpointError(f"{config.init}: no such model directory and not a preset name ({', '.join(PRESETS)})")
    settings = config.to_dict()
    settings["data"]["format"] = config.data.resolved_format()
    record, resumed = {"settings": settings, "inputs": {}}, _resumed_record(config)
    if resumed:
        _check_resume(config, record, resumed, ("settings",))
    validation = _validation_collection(config)  # small: read before the training data is hashed and checked
    record["inputs"] = _file_inputs(config)
    if resumed:
        _check_resume(config, record, resumed, ("data", "tokenizer"))
    else:
        config.data.check()
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    strategy = make_strategy(config.strategy, config.tpu)
    if inputs:  # after the strategy: connecting to a TPU resets TensorFlow's state
        further = inputs()
        record["inputs"].update(further)
        if resumed:
            _check_resume(config, record, resumed, tuple(further))
    replicas = strategy.num_replicas_in_sync
    chunk = config.grad_cache_chunk_size or 1
    if config.batch_size % (replicas * chunk):
        raise UserError(
            f"batch_size {config.batch_size} must split evenly over {replicas} replica(s)"
            + (f" into GradCache chunks of {chunk}" if config.grad_cache_chunk_size else "")
        )
    with strategy.scope():
        encoder, init_fingerprint = _initial_encoder(config, policy)
    record["inputs"]["init"] = {"path": os.fspath(config.init), "sha256": init_fingerprint}
    if resumed:
        _check_resume(config, record, resumed, ("init",))
    else:
        fs.makedirs(config.output_dir)
        with atomic_file(os.path.join(config.output_dir, RUN_RECORD)) as f:
            f.write(json.dumps(record, indent=2, default=os.fspath).encode("utf-8"))

    _set_preprocessor(config, encoder)
    with strategy.scope():
        model = make_model(encoder)
        optimizer = make_optimizer(config.steps, config.learning_rate)
        model.compile(optimizer=optimizer, steps_per_execution=config.resolved_steps_per_execution())
        optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        manager = tf.train.CheckpointManager(
            checkpoint, os.path.join(config.output_dir, "checkpoints"), max_to_keep=config.keep_checkpoints
        )
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    start = int(optimizer.iterations.numpy())
    if start < config.steps:
        # The batches already seen are skipped and the dataset ends with the last step: the final epoch
        # (and the first, when checkpoint_every changed on resume) may be shorter, and the run stops there.
        dataset = make_dataset(
            encoder.preprocessor.tokenizer, config.batch_size, seed=config.seed, skip_batches=start,
            drop_remainder=True, pad_to_length=config.strategy == "tpu",
        ).take(config.steps - start)
        length = config.epoch_length()
        checkpoints = _Checkpoints(manager, start, config.steps, config.checkpoint_every, length)
        writer = tf.summary.create_file_writer(os.path.join(config.output_dir, "logs"))
        callbacks = [
            checkpoints,
            _Scalars(writer, checkpoints, config.steps, config.log_every, config.resolved_steps_per_execution()),
        ]
        if validation:
            callbacks.append(_Validation(config, checkpoints, writer, validation, _best_so_far(config)))
        if config.verbose:
            callbacks.insert(0, _Progress())
        first_epoch = start // length
        try:
            with config.data.surface_errors(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Your input ran out of data")  # the run's last epoch
                model.fit(
                    dataset,
                    initial_epoch=first_epoch,
                    epochs=first_epoch + math.ceil((config.steps - start) / length),
                    steps_per_epoch=length,
                    callbacks=callbacks,
                    shuffle=False,
                    verbose=config.verbose,
                )
        finally:
            writer.close()
        if checkpoints.nan_step is not None:
            last = manager.latest_checkpoint or "none was saved"
            raise TrainingError(
                f"training stopped: the loss or the weights became NaN by step {checkpoints.nan_step} "
                f"(last good checkpoint: {last}); lower learning_rate, train in float32, or check the data."
            )
        if checkpoints.step < config.steps:
            raise TrainingError(
                f"the training data ran out after {checkpoints.step} of {config.steps} steps: "
                f"{config.data.source} gave no complete batch of {config.batch_size} examples"
                + (" with at least one hard negative" if config.data.num_negatives else "")
            )
    save(encoder, os.path.join(config.output_dir, "model"))
    return encoder.batch_encoder()
