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
ends with the same weights as an uninterrupted one), TensorBoard logs, a
progress bar, a clear stop on a NaN loss, and the final model written as a
gtr-keras model directory.
"""

import dataclasses
import inspect
import itertools
import json
import math
import os

import keras
import tensorflow as tf
import yaml

from gtr_keras.backbone import GTRBackbone
from gtr_keras.checkpoints import load, save
from gtr_keras.data import TrainingData
from gtr_keras.errors import TrainingError
from gtr_keras.losses import DEFAULT_TEMPERATURE, BidirectionalInBatchLoss
from gtr_keras.preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.presets import PRESETS, preset_config
from gtr_keras.text_embedder import GTRTextEmbedder
from gtr_keras.tokenizer import GTRTokenizer, train_sentencepiece

PRECISIONS = {"float32": None, "bfloat16": "mixed_bfloat16"}
STRATEGIES = ("default", "mirrored", "tpu")
_TOWERS = ("query", "positive", "negatives")
_SENTENCEPIECE_TEXTS = 200_000


def dtype_policy(precision):
    """The Keras dtype policy for a training precision.

    Args:
        precision: `"float32"` or `"bfloat16"` (Keras `"mixed_bfloat16"`:
            bfloat16 compute, float32 weights). `"float16"` is refused: T5's
            activations overflow float16's range.

    Returns:
        A dtype policy name, or `None` for float32.

    Example:
    >>> dtype_policy("bfloat16")
    'mixed_bfloat16'
    """
    if precision == "float16":
        raise ValueError(
            "precision 'float16' is not supported: T5 activations overflow float16 (max 65504) and the loss "
            "becomes inf/NaN. Use 'bfloat16' (same range as float32) or 'float32'."
        )
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
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
    ['loss']
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
        self.built = True

    def _tokenized(self, x):
        """`x` with raw-string towers tokenised in the pipeline (a dataset of token batches is returned as is)."""
        if not isinstance(x, tf.data.Dataset) or x.element_spec["query"] != tf.TensorSpec([None], tf.string):
            return x
        if self.encoder.preprocessor is None:
            raise ValueError("raw-string batches need an encoder with a preprocessor (GTRTextEmbedderPreprocessor)")
        tower_features = self.encoder.preprocessor.tower_features
        return x.map(lambda batch: {**batch, **tower_features(batch)}, num_parallel_calls=tf.data.AUTOTUNE)

    def fit(self, x=None, *args, **kwargs):
        if "validation_data" in kwargs:
            kwargs["validation_data"] = self._tokenized(kwargs["validation_data"])
        return super().fit(self._tokenized(x), *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        return super().evaluate(self._tokenized(x), *args, **kwargs)

    def call(self, inputs, training=False):
        """Embeds `{"token_ids", "padding_mask"}` inputs with the shared tower."""
        return self.encoder(inputs, training=training)

    @property
    def metrics(self):
        return [self.loss_tracker]

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
        """This replica's share of the loss of the global batch (replicas hold equal batches)."""
        context = tf.distribute.get_replica_context()
        local = {"queries": embeddings["query"], "positives": embeddings["positive"],
                 "negatives": embeddings.get("negatives")}
        if self.mask_false_negatives:
            local.update(positive_ids=batch.get("positive_id"), negative_ids=batch.get("negative_ids"),
                         query_ids=batch.get("query_id"))
        gathered = {name: None if x is None else context.all_gather(x, axis=0) for name, x in local.items()}
        size = tf.shape(embeddings["query"])[0]
        start = context.replica_id_in_sync_group * size
        return self.contrastive_loss(**gathered, rows=(start, start + size))

    def _track(self, loss):
        total = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, loss)
        self.loss_tracker.update_state(total)
        return {"loss": self.loss_tracker.result()}

    def train_step(self, batch):
        variables = self.trainable_variables
        if self.grad_cache_chunk_size:
            loss, gradients = self._grad_cache_gradients(batch, variables)
        else:
            with tf.GradientTape() as tape:
                loss = self._replica_loss(batch, self._embed(batch, training=True))
            gradients = tape.gradient(loss, variables)
        # Keras' Adafactor squares `IndexedSlices` values before summing duplicate indices
        # (embedding rows looked up more than once), so it gets dense gradients.
        gradients = [tf.convert_to_tensor(g) for g in gradients]
        self.optimizer.apply_gradients(zip(gradients, variables))
        return self._track(loss)

    def test_step(self, batch):
        embed = self._embed_in_chunks if self.grad_cache_chunk_size else self._embed
        return self._track(self._replica_loss(batch, embed(batch, training=False)))

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
        """GradCache's loss and gradients, equal to those of `_embed` on the whole batch."""
        seeds = [v for v in self.encoder.non_trainable_variables if v.name == "seed_generator_state"]
        initial_seeds = [tf.identity(v.value) for v in seeds]
        embeddings = self._embed_in_chunks(batch, training=True)
        with tf.GradientTape() as tape:
            tape.watch(embeddings)
            loss = self._replica_loss(batch, embeddings)
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
        return loss, gradients

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
        steps: optimizer steps.
        batch_size: global batch size (queries per step, over all replicas).
        learning_rate: initial Adafactor learning rate, decayed linearly to 0.
        checkpoint_every: steps between checkpoints (also the length of a
            Keras epoch in the logs).
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
            checkpoint interval, 0: silent).

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

    def __post_init__(self):
        if isinstance(self.data, dict):
            self.data = TrainingData(**self.data)
        dtype_policy(self.precision)
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        for name in ("steps", "batch_size", "checkpoint_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")
        if self.model:
            if self.init not in PRESETS:
                raise ValueError(f"model settings {sorted(self.model)} need a preset `init`, got {self.init!r}")
            known = {*inspect.signature(GTRBackbone).parameters, "embedding_dim"}
            unknown = sorted(set(self.model) - known)
            if unknown:
                raise ValueError(f"unknown model setting(s) {', '.join(unknown)}")

    @classmethod
    def from_dict(cls, values, source="config"):
        """Builds a config from plain values, naming `source` and the key in errors."""
        fields = {f.name for f in dataclasses.fields(cls)}
        data_fields = {f.name for f in dataclasses.fields(TrainingData)}
        unknown = sorted(set(values) - fields)
        unknown += sorted(f"data.{key}" for key in set(values.get("data") or {}) - data_fields)
        if unknown:
            raise ValueError(f"{source}: unknown setting(s) {', '.join(unknown)}")
        for name in ("init", "output_dir", "data"):
            if values.get(name) is None:
                raise ValueError(f"{source}: missing setting `{name}`")
        if "source" not in values["data"]:
            raise ValueError(f"{source}: missing setting `data.source`")
        try:
            return cls(**values)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source}: {error}") from None

    def to_dict(self):
        return dataclasses.asdict(self)


def load_config(path, overrides=None):
    """Reads a YAML (or JSON) training config, with `overrides` on top.

    Args:
        path: the config file, or `None` to build from `overrides` only.
        overrides: a dict of settings; `"data.<name>"` keys set data settings.

    Returns:
        A `TrainConfig`.

    Example:
    >>> config = load_config("train.yaml", {"steps": 20, "data.train_fraction": 0.1})  # doctest: +SKIP
    """
    values = {}
    if path is not None:
        with open(path, encoding="utf-8") as f:
            try:
                values = yaml.safe_load(f) or {}
            except yaml.YAMLError as error:
                raise ValueError(f"{path}: not valid YAML/JSON ({error})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a mapping of settings, got {type(values).__name__}")
    values = {**values, "data": dict(values.get("data") or {})}
    for key, value in (overrides or {}).items():
        if key.startswith("data."):
            values["data"][key[len("data."):]] = value
        else:
            values[key] = value
    return TrainConfig.from_dict(values, source=path or "training settings")


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


def _tokenizer(config):
    """The tokenizer of a run; a preset without one gets a SentencePiece model trained on the data."""
    if config.tokenizer:
        return GTRTokenizer(config.tokenizer)
    if os.path.isdir(config.init):
        return None
    path = os.path.join(config.output_dir, "spiece.model")
    if not os.path.exists(path):
        preset = preset_config(config.init, **config.model)
        size = config.sentencepiece_vocabulary_size or preset["vocabulary_size"] - 100
        train_sentencepiece(_training_texts(config.data), path + ".tmp", vocabulary_size=size)
        os.replace(path + ".tmp", path)
    return GTRTokenizer(path)


def _initial_encoder(config, tokenizer, policy):
    """The `GTRTextEmbedder` to train, with the run's tokenizer and token budgets (built under the strategy's scope)."""
    if os.path.isdir(config.init):
        model = load(config.init, dtype=policy).model
        tokenizer = tokenizer or model.preprocessor.tokenizer
    elif config.init in PRESETS:
        model = GTRTextEmbedder.from_architecture(config.init, dtype=policy, **config.model)
    else:
        raise ValueError(
            f"init {config.init!r} is neither a model directory nor a preset ({sorted(PRESETS)})"
        )
    if tokenizer.vocabulary_size() > model.backbone.vocabulary_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocabulary_size()} pieces but the model only "
            f"{model.backbone.vocabulary_size} embedding rows"
        )
    model.preprocessor = GTRTextEmbedderPreprocessor(
        tokenizer, config.data.document_length, config.data.query_length
    )
    return model


class _Checkpoints(keras.callbacks.Callback):
    """Saves a checkpoint after each epoch (`checkpoint_every` steps) unless the weights are not
    finite, stops at `steps`, and notes the step where the loss or weights became NaN."""

    def __init__(self, manager, start, steps):
        super().__init__()
        self.manager = manager
        self.steps = steps
        self.step = self.saved_step = start
        self.nan_step = None

    def on_train_batch_end(self, batch, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())
        if self.nan_step is None and not math.isfinite(logs["loss"]):
            self.nan_step = self.step
        if self.step >= self.steps:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if self.nan_step is not None or self.step == self.saved_step:
            return
        if all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in self.model.trainable_variables):
            self.manager.save(checkpoint_number=self.step)
            self.saved_step = self.step
        else:
            self.nan_step = self.step
            self.model.stop_training = True


def train(config):
    """Trains a GTR dual encoder and writes the model directory `output_dir/model`.

    Rerunning with the same `output_dir` resumes from the latest checkpoint:
    the weights, optimizer state and step are restored and the batches
    already seen are skipped, so the result equals an uninterrupted run's.

    Args:
        config: a `TrainConfig`, or a dict of its settings.

    Returns:
        The trained `Encoder`.

    Raises:
        TrainingError: the loss became NaN, or the data ran out.

    Example:
    >>> encoder = train({"init": "gtr-base", "output_dir": "runs/gtr",
    ...                  "data": {"source": "triples.tsv"}, "steps": 20000})  # doctest: +SKIP
    """
    if isinstance(config, dict):
        config = TrainConfig.from_dict(config)
    policy = dtype_policy(config.precision)
    os.makedirs(config.output_dir, exist_ok=True)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    strategy = make_strategy(config.strategy, config.tpu)
    replicas = strategy.num_replicas_in_sync
    chunk = config.grad_cache_chunk_size or 1
    if config.batch_size % (replicas * chunk):
        raise ValueError(
            f"batch_size {config.batch_size} must split evenly over {replicas} replica(s)"
            + (f" into GradCache chunks of {chunk}" if config.grad_cache_chunk_size else "")
        )
    with open(os.path.join(config.output_dir, "train_config.json"), "w") as f:
        json.dump(config.to_dict(), f, indent=2)

    tokenizer = _tokenizer(config)
    with strategy.scope():
        encoder = _initial_encoder(config, tokenizer, policy)
        model = DualEncoder(
            encoder, config.temperature, config.mask_false_negatives, config.grad_cache_chunk_size
        )
        optimizer = make_optimizer(config.steps, config.learning_rate)
        model.compile(optimizer=optimizer)
        optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        manager = tf.train.CheckpointManager(
            checkpoint, os.path.join(config.output_dir, "checkpoints"), max_to_keep=config.keep_checkpoints
        )
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    start = int(optimizer.iterations.numpy())
    if start < config.steps:
        dataset = config.data.dataset(
            encoder.preprocessor.tokenizer, config.batch_size, seed=config.seed, skip_batches=start,
            drop_remainder=True, pad_to_length=config.strategy == "tpu",
        )
        checkpoints = _Checkpoints(manager, start, config.steps)
        every = config.checkpoint_every
        model.fit(
            dataset,
            initial_epoch=start // every,
            epochs=math.ceil(config.steps / every),
            steps_per_epoch=every,
            callbacks=[
                keras.callbacks.TerminateOnNaN(),
                checkpoints,
                keras.callbacks.TensorBoard(os.path.join(config.output_dir, "logs")),
            ],
            shuffle=False,
            verbose=config.verbose,
        )
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


_FLAGS = (
    ("--init", "init", str, "model directory to fine-tune, or preset name to train from scratch"),
    ("--output-dir", "output_dir", str, "checkpoints, logs and the final model go here (rerun to resume)"),
    ("--data", "data.source", str, "JSONL/TSV/TFRecord triples file or BEIR directory"),
    ("--data-format", "data.format", str, "jsonl, beir, msmarco or tfrecord (default: from the path)"),
    ("--split", "data.split", str, "qrels split of a BEIR source"),
    ("--negatives-file", "data.negatives_file", str, "mined-negatives JSONL for a BEIR source"),
    ("--num-negatives", "data.num_negatives", int, "hard negatives per query"),
    ("--query-length", "data.query_length", int, "query token budget"),
    ("--document-length", "data.document_length", int, "passage token budget"),
    ("--train-fraction", "data.train_fraction", float, "fraction of queries to train on"),
    ("--max-positives-per-query", "data.max_positives_per_query", int, "examples kept per query id"),
    ("--tokenizer", "tokenizer", str, "SentencePiece model file"),
    ("--steps", "steps", int, "optimizer steps"),
    ("--batch-size", "batch_size", int, "global batch size"),
    ("--learning-rate", "learning_rate", float, "initial learning rate (linear decay to 0)"),
    ("--checkpoint-every", "checkpoint_every", int, "steps between checkpoints"),
    ("--precision", "precision", str, "float32 or bfloat16"),
    ("--grad-cache-chunk-size", "grad_cache_chunk_size", int, "GradCache chunk size per replica"),
    ("--strategy", "strategy", str, "default, mirrored or tpu"),
    ("--tpu", "tpu", str, "TPU address (with --strategy tpu)"),
    ("--seed", "seed", int, "random seed"),
    ("--temperature", "temperature", float, "softmax temperature"),
)


def add_train_arguments(parser):
    """Adds `gtr-keras train` arguments to an `argparse` parser.

    `--config FILE` reads a YAML/JSON `TrainConfig`; every other flag
    overrides one setting of it.

    Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_train_arguments(parser)
    >>> run_train(parser.parse_args(["--config", "train.yaml", "--steps", "20"]))  # doctest: +SKIP
    """
    parser.add_argument("--config", help="YAML or JSON training config (flags override it)")
    for flag, key, kind, help_text in _FLAGS:
        parser.add_argument(flag, dest=key, type=kind, help=help_text)
    parser.add_argument(
        "--no-mask-false-negatives", dest="mask_false_negatives", action="store_const", const=False,
        help="do not mask in-batch candidates that share the positive's document id",
    )


def config_from_args(args):
    """The `TrainConfig` of parsed `add_train_arguments` arguments: `--config` with the flags on top."""
    keys = [key for _, key, _, _ in _FLAGS] + ["mask_false_negatives"]
    overrides = {key: getattr(args, key) for key in keys if getattr(args, key, None) is not None}
    return load_config(args.config, overrides)


def run_train(args):
    """Runs `gtr-keras train` from parsed `add_train_arguments` arguments; returns the exit status."""
    config = config_from_args(args)
    train(config)
    print(f"trained model written to {os.path.join(config.output_dir, 'model')}")
    return 0
