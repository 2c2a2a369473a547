"""Teachers for distillation: frozen text embedders whose embeddings a student learns from.

A teacher is any model the project can load as a text embedder: a GTR model
directory (or sentence-transformers GTR checkpoint), or a keras-hub
`TextEmbedder` preset, such as a sentence-transformers BERT checkpoint that
keras-hub reads directly (`keras_hub.models.TextEmbedder.from_preset` on its
directory gives a `BertTextEmbedder` with the checkpoint's pooling and
normalisation), with no PyTorch.
"""

import hashlib
import json
import os
from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import tensorflow as tf

from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.encoder import Encoder
from gtr_keras.models.gtr.presets import PRESET_SOURCES
from gtr_keras.models.model_files.fingerprint import fingerprint, update_with_weights
from gtr_keras.models.model_files.model_directory import SAFETENSORS_FILE, check_safetensors
from gtr_keras.models.model_files.model_source import gtr_model_source
from gtr_keras.saving import load_model
from gtr_keras.utils import files
from gtr_keras.utils.records import strings_sha256


def _embed_texts(embedder, texts):
    """Embeddings of a batch of strings, padded to the batch's longest text rather than the budget."""
    features = embedder.preprocessor(texts)
    length = tf.maximum(tf.reduce_max(tf.reduce_sum(tf.cast(features["padding_mask"], tf.int32), axis=1)), 1)
    features = {name: value[:, :length] for name, value in features.items()}
    return tf.cast(embedder(features, training=False), tf.float32)


class Teacher:
    """A frozen text embedder that encodes the texts a student is distilled from.

    Texts are encoded in batches of similar length, padded to the longest
    text of the batch rather than to the model's budget (exact for models
    whose attention masks padding, as BERT's and T5's do). A keras-hub
    teacher is traced into a concrete TensorFlow function when made.

    Args:
        embedder: a keras-hub `TextEmbedder` with its preprocessor: a
            `GTRTextEmbedder` (queries and documents get their own token
            budgets), or e.g. keras-hub's `BertTextEmbedder` (one budget).
        source: where the teacher was loaded from, for messages and records.

    Example:
    >>> teacher = load_teacher("models/all-MiniLM-L6-v2")
    >>> teacher.encode(["a query", "a document"]).shape
    (2, 384)
    """

    def __init__(self, embedder: Any, source: str | os.PathLike[str]):
        self.source = os.fspath(source)
        self.is_gtr = hasattr(embedder, "batch_encoder")
        if self.is_gtr:
            self._encoder = embedder.batch_encoder()
            self.embedding_dim = embedder.embedding_dim
            budgets = embedder.preprocessor.get_config()
            digest = hashlib.sha256(fingerprint(embedder).encode("utf-8"))
            digest.update(json.dumps([budgets["sequence_length"], budgets["query_length"]]).encode("utf-8"))
        else:
            self.embedding_dim = int(embedder.output.shape[-1])
            self._embed = tf.function(lambda texts: _embed_texts(embedder, texts)).get_concrete_function(
                tf.TensorSpec([None], tf.string)
            )
            config = {key: value for key, value in embedder.get_config().items() if key != "name"}
            digest = hashlib.sha256(type(embedder).__name__.encode("utf-8"))
            digest.update(json.dumps(config, sort_keys=True, default=str).encode("utf-8"))
            digest.update(strings_sha256(embedder.preprocessor.tokenizer.get_vocabulary()).encode("utf-8"))
            update_with_weights(digest, embedder.weights)
        self._fingerprint = digest.hexdigest()

    def fingerprint(self) -> str:
        """SHA-256 (hex) of the model: architecture, vocabulary, token budgets and every weight."""
        return self._fingerprint

    def encode(
        self, texts: Iterable[str], kind: str = "document", batch_size: int = 64, progress: bool | None = None
    ) -> np.ndarray:
        """Embeddings of `texts`, float32 `[N, embedding_dim]`, in input order.

        Args:
            texts: a list of strings.
            kind: `"query"` or `"document"`: the token budget of a GTR
                teacher (other teachers have one budget).
            batch_size: texts per forward pass.
            progress: show a progress bar (GTR teachers; by default for long inputs).
        """
        if self.is_gtr:
            return self._encoder.encode(list(texts), kind, batch_size, progress)
        texts = list(texts)
        order = np.argsort([len(text) for text in texts], kind="stable")
        rows = np.empty((len(texts), self.embedding_dim), np.float32)
        for start in range(0, len(texts), batch_size):
            chosen = order[start : start + batch_size]
            rows[chosen] = self._embed(tf.constant([texts[i] for i in chosen])).numpy()
        return rows

    def encode_queries(self, texts: Iterable[str], batch_size: int = 64, progress: bool | None = None) -> np.ndarray:
        """`encode(texts, "query", ...)`: a teacher searches like an `Encoder` (`runs.gtr_run`)."""
        return self.encode(texts, "query", batch_size, progress)

    def encode_documents(self, texts: Iterable[str], batch_size: int = 64, progress: bool | None = None) -> np.ndarray:
        """`encode(texts, "document", ...)`."""
        return self.encode(texts, "document", batch_size, progress)


def check_teacher_source(source: str | os.PathLike[str]) -> str:
    """Raises `CheckpointError` for a local teacher path that is no directory, nor a GTR hub name
    (`gtr_t5_base_en`, ...) or keras-hub `TextEmbedder` preset name (`all_minilm_l6_v2_en`, ...), or a local
    directory whose `model.safetensors` is damaged or truncated (naming it); cheap.

    Returns:
        `source` as a string.
    """
    import keras_hub

    source = os.fspath(source)
    local = "://" not in source or source.startswith("file://")
    known = source in PRESET_SOURCES or source in keras_hub.models.TextEmbedder.presets
    if local and not known and not files.isdir(source.removeprefix("file://")):
        raise CheckpointError(f"{source}: no such teacher model directory (nor a preset name)")
    weights = os.path.join(source.removeprefix("file://"), SAFETENSORS_FILE)
    if local and not known and files.exists(weights):
        check_safetensors(weights)
    return source


def load_teacher(source: str | os.PathLike[str]) -> Teacher:
    """Loads a teacher: a GTR model (any source `gtr_keras.load` takes) or a keras-hub `TextEmbedder` preset.

    Args:
        source: a GTR model directory or sentence-transformers GTR checkpoint;
            a keras-hub `TextEmbedder` preset directory, including a
            sentence-transformers BERT checkpoint directory (keras-hub reads
            `config.json`, `model.safetensors`, the tokenizer files and the
            pooling settings); a keras-hub preset name
            (`all_minilm_l6_v2_en`) or hub id (`hf://...`), downloaded.

    Raises:
        CheckpointError: nothing loadable as a text embedder there.

    Example:
    >>> teacher = load_teacher("hf://sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
    """
    import keras_hub

    source = check_teacher_source(source)
    local = "://" not in source or source.startswith("file://")
    if gtr_model_source(source.removeprefix("file://") if local else source) is not None:
        return Teacher(cast(Encoder, load_model(source)).model, source)  # a GTR source: an `Encoder`
    try:
        embedder = keras_hub.models.TextEmbedder.from_preset(source)
    except (ValueError, OSError, KeyError, TypeError, AttributeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"{source}: not a text embedder that gtr-keras or keras-hub can load ({reason}); a GTR checkpoint "
            f"under another name: `gtr-keras convert` it first"
        ) from None
    if embedder.preprocessor is None:
        raise CheckpointError(f"{source}: the text embedder has no preprocessor, so it cannot read text")
    return Teacher(embedder, source)
