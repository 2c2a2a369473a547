"""`DualEncoder`, the Keras model that trains a shared `GTRTextEmbedder` tower with GTR's
bidirectional in-batch softmax loss, and GTR's optimizer.

Under any `tf.distribute` strategy the in-batch candidates are those of the GLOBAL batch: each
replica gathers the embeddings of all replicas (`ReplicaContext.all_gather`, whose gradient sends
every replica's share back to where the embedding was computed), scores its own queries against all
passages and its own positives against all queries, and returns its share of the global-batch loss,
so the gradients that the optimizer sums over replicas are those of the global-batch loss on one
device.
"""

from collections.abc import Sequence
from typing import Any

import keras
import keras_hub
import tensorflow as tf

from gtr_keras.errors import UserError
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.training.distributed import is_multi_worker
from gtr_keras.training.losses import DEFAULT_TEMPERATURE, BidirectionalInBatchLoss
from gtr_keras.utils.dimensions import check_dimensions

_TOWERS = ("query", "positive", "negatives")


def make_optimizer(steps: int, learning_rate: float = 1e-3) -> keras.optimizers.Optimizer:
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


def require_tensorflow_backend(what: str) -> None:
    """Raises a `UserError` unless Keras runs on TensorFlow: `what` (a training path) is written with
    `tf.GradientTape` and `tf.distribute`.

    Args:
        what: what needs the backend, as the message names it (e.g. `"DualEncoder training"`).

    Example:
    >>> require_tensorflow_backend("DualEncoder training")  # KERAS_BACKEND=tensorflow
    """
    backend = keras.config.backend()
    if backend != "tensorflow":
        raise UserError(f"{what} needs Keras' TensorFlow backend (KERAS_BACKEND=tensorflow), not {backend!r}")


def gather(context: Any, x: tf.Tensor) -> tf.Tensor:
    """`x` of every replica of `context`, concatenated in replica order. Through `tf.identity`: an input
    tensor of a multi-worker step has no device, which the collective needs to name."""
    return context.all_gather(tf.identity(x), axis=0)


def as_batch(batch: Any) -> dict[str, Any]:
    """`batch` (or a dataset's `element_spec`) as the dict the model's steps take: a `(query, positive[,
    negatives])` tuple, each tower tf.string texts or `{"token_ids", "padding_mask"}`, names its towers; a
    dict holding `"positive"` is returned as it is; any other structure is refused with a `UserError`.

    Args:
        batch: a batch, or the `element_spec` of a `tf.data` dataset of batches.

    Example:
    >>> sorted(as_batch((tf.constant(["lift"]), tf.constant(["wing lift"]))))
    ['positive', 'query']
    """
    if isinstance(batch, dict) and "positive" in batch:
        return batch
    if isinstance(batch, (tuple, list)) and len(batch) in (2, 3) and all(_is_tower(tower) for tower in batch):
        return dict(zip(_TOWERS, batch))
    raise UserError(
        'DualEncoder batches are dicts of "query", "positive" (optionally "negatives" and ids) or (query, '
        f"document[, negatives]) tuples of tf.string texts or token dicts; got {_structure(batch)}"
    )


def _is_tower(x):
    return (isinstance(x, dict) and {"token_ids", "padding_mask"} <= x.keys()) or getattr(x, "dtype", None) == tf.string


def _structure(batch):
    """A one-line description of a batch's structure, for an error message."""
    if isinstance(batch, dict):
        return f"a dict of {sorted(batch)}"
    if isinstance(batch, (tuple, list)):
        return f"a {type(batch).__name__} of {len(batch)}: ({', '.join(_structure(x) for x in batch)})"
    return " ".join(repr(batch).split())


def _towers(batch):
    """The encoder inputs of a batch: `query`, `positive` and, if present, `negatives`."""
    return {name: batch[name] for name in _TOWERS if name in batch}


@keras.saving.register_keras_serializable(package="gtr_keras")
class StepModel(keras.Model):
    """What the Keras models that `train`'s loop fits share (`DualEncoder`, a reranker's
    `ListwiseReranker`): custom steps on Keras' TensorFlow backend, preprocessors that run in the input
    pipeline, and no symbolic build of a model `train` has built already; and their metrics, the mean loss and
    accuracy since the start of the epoch."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")

    @property
    def metrics(self):
        return [self.loss_tracker, self.accuracy_tracker]

    def _preprocessing_built(self):
        """Marks the preprocessors and their tokenizers built: they have no weights and run in the input
        pipeline, but an unbuilt layer makes Keras, under a distribution strategy, build the model by
        calling it on a whole batch (which `call` does not take) before `fit` or `evaluate`. Every
        preprocessor the encoder tracks counts: `train` gives a loaded model a new one, and Keras keeps
        tracking the one it replaced."""
        for layer in self._flatten_layers(include_self=False):  # `Model.layers` leaves a Task's preprocessor out
            if isinstance(layer, (keras_hub.models.Preprocessor, keras_hub.tokenizers.Tokenizer)) and not layer.built:
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

    def compile(self, *args, **kwargs):
        require_tensorflow_backend(f"{type(self).__name__} training")
        super().compile(*args, **kwargs)

    def fit(self, *args, **kwargs):
        self._preprocessing_built()
        return super().fit(*args, **kwargs)


class DualEncoder(StepModel):
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
    keras-hub tasks do. A batch may also be a `(query, positive)` or
    `(query, positive, negatives)` tuple of such towers (texts or token
    dicts); any other structure is refused with a `UserError` naming these.

    Training is written for Keras' TensorFlow backend: `compile` refuses
    another one with a `UserError`.

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
        matryoshka_dims: prefixes N of the embeddings trained besides D, each with the same loss
            (`BidirectionalInBatchLoss`); recorded on `encoder` (its config), so that the saved model says
            which `dimensions` it serves without a warning.

    Example:
    >>> embedder = keras_hub.models.TextEmbedder.from_preset(model_dir)
    >>> model = DualEncoder(embedder)
    >>> model.compile(optimizer=make_optimizer(steps=2))
    >>> pairs = tf.data.Dataset.from_tensor_slices((["lift", "drag"], ["wing lift", "drag force"])).batch(2)
    >>> history = model.fit(pairs, epochs=1, verbose=0)
    >>> sorted(history.history)
    ['accuracy', 'loss']
    """

    def __init__(
        self,
        encoder: GTRTextEmbedder,
        temperature: float = DEFAULT_TEMPERATURE,
        mask_false_negatives: bool = True,
        grad_cache_chunk_size: int | None = None,
        matryoshka_dims: Sequence[int] = (),
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if grad_cache_chunk_size is not None and grad_cache_chunk_size < 1:
            raise UserError(f"grad_cache_chunk_size must be a positive integer, got {grad_cache_chunk_size}")
        self.encoder = encoder
        self.temperature = temperature
        self.mask_false_negatives = mask_false_negatives
        self.grad_cache_chunk_size = grad_cache_chunk_size
        self.matryoshka_dims = tuple(
            check_dimensions(n, encoder.embedding_dim, "matryoshka_dims") for n in matryoshka_dims or ()
        )
        if self.matryoshka_dims:
            encoder.matryoshka_dims = self.matryoshka_dims  # recorded in its config: what it is trained for
        self.contrastive_loss = BidirectionalInBatchLoss(temperature, self.matryoshka_dims)
        self.built = True

    def _batches(self, x):
        """A `tf.data` dataset `x` as the steps take it: tuples named (`as_batch`), raw-string towers
        tokenised in the pipeline; any other `x` is returned as it is."""
        if not isinstance(x, tf.data.Dataset):
            return x
        as_batch(x.element_spec)  # refuses another structure before Keras reads it
        if not isinstance(x.element_spec, dict):
            x = x.map(lambda *towers: as_batch(towers))
        spec = x.element_spec["positive"]
        if not (isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string):
            return x
        if spec.shape.rank != 1:
            raise UserError(f"raw-string batches hold [B] texts per tower (batch the dataset), got {spec.shape}")
        if self.encoder.preprocessor is None:
            raise UserError("raw-string batches need an encoder with a preprocessor (GTRTextEmbedderPreprocessor)")
        tower_features = self.encoder.preprocessor.tower_features
        return x.map(lambda batch: {**batch, **tower_features(batch)}, num_parallel_calls=tf.data.AUTOTUNE)

    def fit(self, x: Any = None, *args: Any, **kwargs: Any) -> Any:
        if "validation_data" in kwargs:
            kwargs["validation_data"] = self._batches(kwargs["validation_data"])
        return super().fit(self._batches(x), *args, **kwargs)

    def evaluate(self, x: Any = None, *args: Any, **kwargs: Any) -> Any:
        self._preprocessing_built()
        return super().evaluate(self._batches(x), *args, **kwargs)

    def call(self, inputs, training=False):
        """Embeds `{"token_ids", "padding_mask"}` inputs with the shared tower."""
        return self.encoder(inputs, training=training)

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
        local = {
            "queries": embeddings["query"],
            "positives": embeddings["positive"],
            "negatives": embeddings.get("negatives"),
        }
        if self.mask_false_negatives:
            local.update(
                positive_ids=batch.get("positive_id"),
                negative_ids=batch.get("negative_ids"),
                query_ids=batch.get("query_id"),
            )
        gathered = {name: None if x is None else gather(context, x) for name, x in local.items()}
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
        logs = {"loss": self.loss_tracker.result(), "accuracy": self.accuracy_tracker.result()}
        if is_multi_worker(self.distribute_strategy):
            # Keras 3 reduces the logs of a multi-worker step with `strategy.reduce(MEAN, axis=0)`, which a scalar
            # fails; the replicas' values are equal (all-reduced above), so a [1] vector reduces to the same scalar.
            logs = {name: tf.reshape(value, [1]) for name, value in logs.items()}
        return logs

    def train_step(self, batch):
        batch = as_batch(batch)
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
        batch = as_batch(batch)
        embed = self._embed_in_chunks if self.grad_cache_chunk_size else self._embed
        return self._track(*self._replica_loss(batch, embed(batch, training=False)), batch)

    def _chunked(self, tensors):
        """Reshapes every `[B, ...]` tensor to `[B / S, S, ...]`."""
        size = self.grad_cache_chunk_size

        def split(x):
            divisible = tf.debugging.assert_equal(
                tf.shape(x)[0] % size,
                0,
                message=f"GradCache needs each replica's batch to be a multiple of grad_cache_chunk_size={size}",
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
            lambda chunk: self._embed(chunk, training),
            self._chunked(towers),
            fn_output_signature={name: spec(name) for name in towers},
            parallel_iterations=1,
        )
        return {name: tf.reshape(e, tf.concat([[-1], tf.shape(e)[2:]], axis=0)) for name, e in embedded.items()}

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
            "matryoshka_dims": list(self.matryoshka_dims),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)
