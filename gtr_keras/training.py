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
inputs would change the weights is refused), TensorBoard logs, a
progress bar, a clear stop on a NaN loss, and the final model written as a
gtr-keras model directory.
"""

import dataclasses
import hashlib
import inspect
import itertools
import json
import math
import os
import re

import keras
import tensorflow as tf
import yaml

from gtr_keras.backbone import GTRBackbone
from gtr_keras.checkpoints import fingerprint, load, save
from gtr_keras.data import TrainingData
from gtr_keras.files import atomic_file
from gtr_keras.errors import CheckpointError, MismatchError, TrainingError, UserError
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
    "grad_cache_chunk_size": 1, "sentencepiece_vocabulary_size": 1,
}
_OPTIONAL_SETTINGS = ("grad_cache_chunk_size", "sentencepiece_vocabulary_size")
RUN_RECORD = "train_config.json"
NOT_COMPARED = (
    "output_dir", "checkpoint_every", "keep_checkpoints", "strategy", "tpu", "grad_cache_chunk_size",
    "deterministic", "verbose",
    # paths: the files behind them are compared by content
    "init", "tokenizer", "data.source", "data.split", "data.negatives_file",
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

    Resuming: `train` records the settings and fingerprints of the inputs in
    `output_dir/train_config.json` and refuses to resume with any that change
    the trained weights: every setting except those in `NOT_COMPARED` (where
    files go, how often checkpoints are saved and kept, and how the same
    arithmetic is spread over devices, GradCache chunks or nondeterministic
    kernels, which changes the weights by rounding only), and by content
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
            try:
                self.data = TrainingData(**self.data)
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

    @classmethod
    def from_dict(cls, values, source="config"):
        """Builds a config from plain values, naming `source` and the key in errors.

        Raises:
            UserError: an unknown, missing or bad setting; the message starts
                with `source`.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        data_fields = {f.name for f in dataclasses.fields(TrainingData)}
        unknown = sorted(set(values) - fields)
        unknown += sorted(f"data.{key}" for key in set(values.get("data") or {}) - data_fields)
        if unknown:
            raise UserError(f"{source}: unknown setting(s) {', '.join(unknown)}")
        for name in ("init", "output_dir", "data"):
            if values.get(name) is None:
                raise UserError(f"{source}: missing setting `{name}`")
        if "source" not in values["data"]:
            raise UserError(f"{source}: missing setting `data.source`")
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


def load_config(path, overrides=None):
    """Reads a YAML (or JSON) training config, with `overrides` on top.

    Args:
        path: the config file, or `None` to build from `overrides` only.
        overrides: a dict of settings; `"data.<name>"` keys set data settings.

    Returns:
        A `TrainConfig`.

    Raises:
        UserError: an unreadable file or a bad setting, naming the file.

    Example:
    >>> config = load_config("train.yaml", {"steps": 20, "data.train_fraction": 0.1})  # doctest: +SKIP
    """
    values = {}
    if path is not None:
        with open(path, encoding="utf-8") as f:
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


def _tokenizer_file(config):
    """The run's SentencePiece model file, or None for the initial model directory's own; from a preset
    without a `tokenizer`, one is trained on the training texts (once: a resumed run reuses it)."""
    if config.tokenizer or os.path.isdir(config.init):
        return config.tokenizer
    path = os.path.join(config.output_dir, "spiece.model")
    if not os.path.exists(path):
        preset = preset_config(config.init, **config.model)
        size = config.sentencepiece_vocabulary_size or preset["vocabulary_size"] - 100
        train_sentencepiece(_training_texts(config.data), path + ".tmp", vocabulary_size=size)
        os.replace(path + ".tmp", path)
    return path


def _initial_encoder(config, policy):
    """The `GTRTextEmbedder` a run starts from (build it under the strategy's scope), and the
    fingerprint of what determines it: `checkpoints.fingerprint` of a model directory's model, or the
    SHA-256 of a preset's architecture (the random weights follow from it and `seed`)."""
    if os.path.isdir(config.init):
        model = load(config.init, dtype=policy).model
        return model, fingerprint(model)
    architecture = json.dumps(preset_config(config.init, **config.model), sort_keys=True)
    model = GTRTextEmbedder.from_architecture(config.init, dtype=policy, **config.model)
    return model, hashlib.sha256(architecture.encode("utf-8")).hexdigest()


def _set_preprocessor(config, model):
    """Gives the initial model the run's tokenizer (`_tokenizer_file`, else its own) and token budgets."""
    path = _tokenizer_file(config)
    tokenizer = GTRTokenizer(path) if path else model.preprocessor.tokenizer
    if tokenizer.vocabulary_size() > model.backbone.vocabulary_size:
        raise MismatchError(
            f"{path}: the tokenizer has {tokenizer.vocabulary_size()} pieces but the initial model {config.init} "
            f"only {model.backbone.vocabulary_size} embedding rows; use a tokenizer with fewer pieces"
        )
    model.preprocessor = GTRTextEmbedderPreprocessor(tokenizer, config.data.document_length, config.data.query_length)


def _sha256(path):
    """SHA-256 (hex) of a file's bytes, read 1 MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _file_inputs(config):
    """Fingerprints of the files a run reads, `{name: {"path", "sha256"}}`: `data.<role>` for each file
    of `TrainingData.files`, and `tokenizer` for a `tokenizer` file."""
    if config.tokenizer is not None and not os.path.isfile(config.tokenizer):
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
    what = {"init": "initial model", "tokenizer": "tokenizer", "data.negatives": "mined negatives"}.get(
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
    if not os.path.exists(path):
        if tf.train.latest_checkpoint(os.path.join(config.output_dir, "checkpoints")):
            raise MismatchError(f"{path}: missing, so the checkpoints beside it cannot be checked; {start_over}")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise MismatchError(f"{path}: unreadable ({error}); {start_over}") from None
    if not isinstance(record, dict) or not {"settings", "inputs"} <= set(record):
        raise MismatchError(f"{path}: written by an older gtr-keras, without fingerprints of the inputs; {start_over}")
    return record


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

    Args:
        config: a `TrainConfig`, or a dict of its settings.

    Returns:
        The trained `Encoder`.

    Raises:
        UserError: a bad setting.
        DataError: training data that is missing, malformed or empty.
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
    policy = dtype_policy(config.precision)
    if not os.path.isdir(config.init) and config.init not in PRESETS:
        raise CheckpointError(f"{config.init}: no such model directory and not a preset name ({', '.join(PRESETS)})")
    settings = config.to_dict()
    settings["data"]["format"] = config.data.resolved_format()
    record, resumed = {"settings": settings, "inputs": {}}, _resumed_record(config)
    if resumed:
        _check_resume(config, record, resumed, ("settings",))
    record["inputs"] = _file_inputs(config)
    if resumed:
        _check_resume(config, record, resumed, ("data", "tokenizer"))
    else:
        config.data.check()
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    strategy = make_strategy(config.strategy, config.tpu)
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
        os.makedirs(config.output_dir, exist_ok=True)
        with atomic_file(os.path.join(config.output_dir, RUN_RECORD)) as f:
            f.write(json.dumps(record, indent=2, default=os.fspath).encode("utf-8"))

    _set_preprocessor(config, encoder)
    with strategy.scope():
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
        with config.data.surface_errors():
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
