"""`GTRTextEmbedder`: the GTR tower as a keras-hub `TextEmbedder`."""

import functools
import logging
import os
from collections.abc import Sequence
from typing import Any, Literal, Self

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from keras import ops
from keras_hub.src.utils import preset_utils

from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.models.gtr.encoder import Encoder
from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.gtr_tokenizer import VOCABULARY_FILE, pad_token_ids
from gtr_keras.models.gtr.masked_mean_pooling import MaskedMeanPooling
from gtr_keras.models.gtr.presets import preset_config
from gtr_keras.models.model_files.model_directory import (
    check_finite,
    check_model_directory,
    check_weights_file,
    file_weights_by_path,
)
from gtr_keras.models.model_files.model_formats import ARCHITECTURE, KERAS_HUB, RERANKER_FORMATS
from gtr_keras.models.model_files.model_source import DOWNLOAD_PREFIXES, load_source, resolve_model_source
from gtr_keras.models.model_files.preset_writer import write_preset
from gtr_keras.models.subclassed_model import SubclassedModelType
from gtr_keras.models.text_encoder import to_bytes
from gtr_keras.utils import files
from gtr_keras.utils.dimensions import check_dimensions, truncate, truncate_tensor

logger = logging.getLogger(__name__)

# The texts a SavedModel takes, the encoder's signature of each kind of text (also the LiteRT export's), and
# the name of its SentencePiece asset.
STRINGS = tf.TensorSpec([None], tf.string, name="texts")
ENCODER_SIGNATURES = {"query": "encode_queries", "document": "encode_documents"}
SPIECE_ASSET = "spiece.model"
# What a SavedModel directory holds (`export` and `exports.savedmodel` replace one only when it is one).
SAVED_MODEL_DIRECTORY = files.DirectoryKind(
    "a SavedModel",
    ("saved_model.pb",),
    ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "variables", "assets", "assets.extra"),
)


@keras.saving.register_keras_serializable(package="gtr_keras")
class GTRTextEmbedder(keras_hub.models.TextEmbedder, metaclass=SubclassedModelType):
    """GTR's shared query/document tower: T5 encoder, mean pooling, bias-free projection, L2 norm.

    The head lives here, not in `GTRBackbone`: the backbone is the plain T5
    encoder (usable under other heads, and what `Backbone.from_preset`
    gives), and the head is the part sentence-transformers keeps in modules
    of its own (`Pooling`, `Dense`, `Normalize`). The projection's weights
    are task weights (`task.weights.h5` in a preset directory). The dot
    product of two outputs is their cosine.

    `encode_queries`, `encode_documents` and `encode_text` take Python
    strings and return numpy rows in input order; they tokenise in the
    graph, sort texts by length and batch them so that short texts are not
    padded to long ones (`gtr_keras.models.gtr.encoder.Encoder`), so they are much
    faster on a mixed corpus than `predict`, which also works on raw
    strings through the preprocessor (document budget).

    Args:
        backbone: a `GTRBackbone`.
        preprocessor: a `GTRTextEmbedderPreprocessor`, or `None` for a model
            that takes `{"token_ids", "padding_mask"}` only.
        embedding_dim: output dimension D of the projection (768 in GTR).
        matryoshka_dims: the prefixes of its embeddings it was trained to rank with (`gtr-keras train
            --matryoshka-dims`), recorded in its config; `()` for GTR's. `encode_*(dimensions=N)` warns for
            another N.

    Inputs: `{"token_ids", "padding_mask"}` int `[batch, length]` (raw
    strings through `predict`/`fit`/`encode_*` when there is a preprocessor).
    Output: float32 `[batch, embedding_dim]`, unit-norm rows.

    Example:
    >>> embedder = keras_hub.models.TextEmbedder.from_preset(model_dir)
    >>> queries = embedder.encode_queries(["what keeps a wing up?"])
    >>> documents = embedder.encode_documents(["lift on a wing", "boundary layer"])
    >>> embedder.similarity(queries, documents).shape
    (1, 2)
    """

    backbone_cls = GTRBackbone
    preprocessor_cls = GTRTextEmbedderPreprocessor

    # Keras tracks it; None only for a model that embeds token ids (texts need one): what its methods take as set.
    preprocessor: Any

    def __init__(
        self,
        backbone: GTRBackbone,
        preprocessor: GTRTextEmbedderPreprocessor | None = None,
        embedding_dim: int = 768,
        matryoshka_dims: Sequence[int] = (),
        **kwargs: Any,
    ):
        # A subclassed model rather than a functional one, so that `keras.models.clone_model`
        # (which rebuilds functional models as plain `Functional`s) keeps the class.
        super().__init__(dtype=backbone.dtype_policy, **kwargs)

        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        policy = backbone.dtype_policy
        self.pooling = MaskedMeanPooling(name="mean_pooling", dtype=policy)
        self.projection = keras.layers.Dense(embedding_dim, use_bias=False, name="projection", dtype=policy)
        self.normalization = keras.layers.UnitNormalization(name="l2_normalize", dtype="float32")
        self.pooling.build((None, None, backbone.hidden_dim))
        self.projection.build((None, backbone.hidden_dim))
        self.normalization.build((None, embedding_dim))
        self.built = True

        # === Config ===
        self.embedding_dim = embedding_dim
        self.matryoshka_dims = tuple(
            check_dimensions(n, embedding_dim, "matryoshka_dims", CheckpointError) for n in matryoshka_dims or ()
        )
        self._batch_encoders: dict[bool, Encoder] = {}

    def call(self, inputs, training=False):
        sequence = self.backbone(inputs, training=training)
        return self.normalization(self.projection(self.pooling(sequence, inputs["padding_mask"])))

    def embed_spans(self, inputs: dict[str, Any], spans: Any) -> Any:
        """Late chunking: a unit vector for each token span of each text, from one forward pass of the text.

        The head of `call` (mean pooling, projection, L2 norm) applied to the tokens of each span
        instead of all of the text's, so each span's vector sees the whole text through attention. A span
        `[0, n)` over a text of n tokens (EOS included) gives the text's embedding (`call`).

        Args:
            inputs: `{"token_ids", "padding_mask"}` int `[batch, length]`.
            spans: int `[batch, spans, 2]`, `[start, end)` token positions of each text's spans; `(0, 0)`
                pads a text with fewer spans (its vector is zeros).

        Returns:
            float32 `[batch, spans, D]`.

        Example:
        >>> features = {"token_ids": np.array([[5, 6, 7, 1]]), "padding_mask": np.array([[1, 1, 1, 1]])}
        >>> embedder.embed_spans(features, np.array([[[0, 2], [2, 4]]])).shape
        TensorShape([1, 2, 768])
        """
        sequence = self.backbone(inputs)
        spans = ops.convert_to_tensor(spans, "int32")
        positions = ops.arange(ops.shape(sequence)[1], dtype="int32")
        inside = ops.logical_and(positions >= spans[..., :1], positions < spans[..., 1:])
        mask = ops.logical_and(inside, ops.expand_dims(ops.cast(inputs["padding_mask"], "bool"), 1))
        return self.normalization(self.projection(self.pooling(sequence, mask)))

    @classmethod
    def from_architecture(
        cls, preset: str, preprocessor: GTRTextEmbedderPreprocessor | None = None, dtype: Any = None, **overrides: Any
    ) -> Self:
        """A randomly initialised embedder of a preset's shape (`gtr-tiny` ... `gtr-xxl`).

        Args:
            preset: a name in `gtr_keras.models.gtr.presets.PRESETS`.
            preprocessor: the `GTRTextEmbedderPreprocessor`, if any.
            dtype: dtype policy.
            **overrides: architecture arguments replacing the preset's
                (`embedding_dim` or any `GTRBackbone` argument).
        """
        config = preset_config(preset, **overrides)
        embedding_dim = config.pop("embedding_dim", 768)
        return cls(cls.backbone_cls(**config, dtype=dtype), preprocessor, embedding_dim)

    @classmethod
    def from_parts(
        cls,
        backbone_config: dict[str, Any],
        vocabulary: bytes,
        document_length: int,
        query_length: int,
        embedding_dim: int,
        lowercase: bool = False,
        dtype: Any = None,
    ) -> Self:
        """A randomly initialised embedder from its parts, as the converters of other formats read them.

        Args:
            backbone_config: `GTRBackbone` arguments.
            vocabulary: the SentencePiece model (serialized proto bytes).
            document_length: the document token budget, EOS included.
            query_length: the query token budget, EOS included.
            embedding_dim: the projection's output size.
            lowercase: lower-case texts before tokenizing.
            dtype: dtype policy.

        Example:
        >>> embedder = GTRTextEmbedder.from_parts(preset_config("gtr-tiny"), proto, 512, 64, 768)  # doctest: +SKIP
        """
        tokenizer = cls.preprocessor_cls.tokenizer_cls(vocabulary, lowercase=lowercase)
        preprocessor = cls.preprocessor_cls(tokenizer, document_length, query_length)
        return cls(cls.backbone_cls(**backbone_config, dtype=dtype), preprocessor, embedding_dim)

    @classmethod
    def from_preset(cls, preset: str | os.PathLike[str], load_weights: bool = True, **kwargs: Any) -> Self:
        """Loads a preset directory, or converts a sentence-transformers GTR checkpoint on the way.

        The source is resolved once (`model_source.resolve_model_source`), then
        read in its format: keras-hub presets and architectures here, the other
        formats by the loader registered for them (`model_source.load_source`,
        `gtr_keras.convert.preset_loader`): a keras-hub preset (a directory written by `save_to_preset`, local or
        on a file system TensorFlow knows, such as `gs://` or `ram://`, copied
        locally first; `kaggle://`); a sentence-transformers GTR checkpoint (a
        directory, or a Hugging Face id `hf://sentence-transformers/gtr-t5-base`,
        downloaded when online); a trained model's name of `presets.PRESET_SOURCES`
        (`"gtr_t5_base_en"`, `"gtr_small_distilled_en"`); or an
        architecture's name of `presets.PRESETS` (`"gtr-tiny"`, `"gtr-small"`,
        `"gtr-base"`, ...), which gives a randomly initialised model
        without a preprocessor, as `from_architecture` does. A model directory
        whose settings contradict its weights or each other raises
        `CheckpointError` naming the file and setting
        (`model_directory.check_model_directory`).

        Args:
            preset: a name, id, directory or resolved `ModelSource`.
            load_weights: read the weights (else randomly initialised).
            **kwargs: keras-hub's `from_preset` arguments (`dtype`, ...).

        Example:
        >>> embedder = GTRTextEmbedder.from_preset("hf://sentence-transformers/gtr-t5-base")  # doctest: +SKIP
        """
        source = resolve_model_source(preset)
        if source.format == ARCHITECTURE:
            return cls.from_architecture(source.path, **kwargs)
        if source.format in RERANKER_FORMATS:
            raise CheckpointError(
                f"{source}: a reranker (a cross-encoder), not an embedding model: rerank with it "
                "(`search --rerank`, `gtr_keras.load(...).predict(pairs)`)"
            )
        if source.format != KERAS_HUB:
            return load_source(cls, source, load_weights, **kwargs)
        with source.local() as path:
            if not path.startswith(DOWNLOAD_PREFIXES):
                check_model_directory(path, load_weights)  # its settings, before keras-hub reads it
            return preset_utils.get_preset_loader(path).load_task(cls, load_weights, True, **kwargs)

    def save_to_preset(self, preset_dir: str | os.PathLike[str], max_shard_size: int = 10) -> None:
        """keras-hub's `save_to_preset`, replacing `preset_dir` as a unit (`preset_writer.write_preset`).

        A quantized model is refused; a mixed precision policy (`mixed_bfloat16`) is recorded as its
        weights' dtype: load it with `dtype="bfloat16"` to run in bfloat16.

        Example:
        >>> embedder.save_to_preset("models/my-gtr")  # doctest: +SKIP
        """
        write_preset(self, preset_dir, functools.partial(super().save_to_preset, max_shard_size=max_shard_size))

    def load_task_weights(self, filepath):
        """Loads the task weights (the projection), which the file must hold exactly.

        Args:
            filepath: a `task.weights.h5` file.

        Raises:
            CheckpointError: a missing, extra, misshapen or non-finite weight, a
                vocabulary with more pieces than the model has embedding rows,
                or a setting of the file's model directory that contradicts
                its weights (`model_directory.check_weights_file`).
        """
        check_weights_file(self, filepath)
        tokenizer = self.preprocessor.tokenizer if self.preprocessor is not None else None
        if tokenizer is not None and tokenizer.vocabulary_size() > self.backbone.vocabulary_size:
            directory = os.path.dirname(os.fspath(filepath))
            raise CheckpointError(
                f"{directory}/assets/tokenizer/{VOCABULARY_FILE}: {tokenizer.vocabulary_size()} pieces, but the "
                f"model has {self.backbone.vocabulary_size} token embedding rows (config.json vocabulary_size): "
                "the vocabulary is another model's"
            )
        super().load_task_weights(filepath)
        check_finite(file_weights_by_path(self), filepath)

    def get_config(self):
        config = {**super().get_config(), "embedding_dim": self.embedding_dim}
        if self.matryoshka_dims:  # only when trained with them: other models' configs stay as they were
            config["matryoshka_dims"] = list(self.matryoshka_dims)
        return config

    @property
    def query_length(self):
        """Token budget of queries (the preprocessor's), EOS included."""
        return self.preprocessor.query_length

    @property
    def document_length(self):
        """Token budget of documents (the preprocessor's), EOS included."""
        return self.preprocessor.sequence_length

    def batch_encoder(self, jit_compile: bool = False) -> Encoder:
        """The `Encoder` behind `encode_*` (one per `jit_compile` setting, built once)."""
        if self.preprocessor is None:
            raise ValueError("this GTRTextEmbedder has no preprocessor: it embeds token ids only")
        if jit_compile not in self._batch_encoders:
            self._batch_encoders[jit_compile] = Encoder(self, jit_compile=jit_compile)
        return self._batch_encoders[jit_compile]

    def encode_text(
        self,
        text: str | Sequence[str],
        kind: Literal["query", "document"] = "document",
        batch_size: int = 32,
        progress: bool | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embeds a string or a list of strings: float32 numpy `[n, D]`, unit rows, in input order.

        Args:
            text: a string or a list of strings.
            kind: `"query"` or `"document"`: which token budget applies.
            batch_size: texts per forward pass.
            progress: show a progress bar; by default only for long inputs.
            dimensions: N, the first N coordinates renormalised (`TextEncoder.encode`); None: all D.
        """
        texts = [text] if isinstance(text, (str, bytes)) else list(text)
        if keras.backend.backend() != "tensorflow":
            dimensions = self.batch_encoder().check_dimensions(dimensions)
            return truncate(self._encode_through_the_backend(texts, kind, batch_size), dimensions)
        return self.batch_encoder().encode(texts, kind, batch_size, progress, dimensions)

    def _encode_through_the_backend(self, texts, kind, batch_size):
        """`encode_text` on the JAX or PyTorch backend, where the `Encoder`'s traced TensorFlow path is not
        available: tokens from the graph tokenizer (TF Text, eagerly), the model called by the backend."""
        if self.preprocessor is None:
            raise ValueError("this GTRTextEmbedder has no preprocessor: it embeds token ids only")
        rows = [np.zeros((0, self.embedding_dim), np.float32)]
        for start in range(0, len(texts), batch_size):
            batch = tf.constant([to_bytes(text) for text in texts[start : start + batch_size]], tf.string)
            features = pad_token_ids(self.preprocessor.token_ids(batch, kind))
            rows.append(ops.convert_to_numpy(self({key: value.numpy() for key, value in features.items()})))
        return np.concatenate(rows).astype(np.float32)

    def encode_queries(
        self,
        queries: Sequence[str],
        batch_size: int = 32,
        progress: bool | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embeds queries (truncated to `query_length` tokens; to `dimensions` coordinates where given)."""
        return self.encode_text(queries, "query", batch_size, progress, dimensions)

    def encode_documents(
        self,
        documents: Sequence[str],
        batch_size: int = 32,
        progress: bool | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embeds documents (truncated to `document_length` tokens; to `dimensions` coordinates where given)."""
        return self.encode_text(documents, "document", batch_size, progress, dimensions)

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs):
        """Keras' `Model.export` with strings in: the encoder SavedModel that `gtr-keras export` writes (one
        set of signatures however it is written: `write_saved_model`), without TF Serving's version
        directory and warmup requests. As Keras' export, it has the `serve` endpoint: `serve(texts)`, tf.string
        `[batch]` -> float32 `[batch, D]`, the documents' embeddings (the document budget, as `serving_default`).

        Loading it needs `import tensorflow_text` first. Keras' other formats (and an `input_signature`)
        are refused: their converters do not take TF Text's tokenizer op; `gtr-keras export --format`
        (`gtr_keras.export`) writes GTR's exports for other runtimes (docs/serving.md). The directory is
        written as a unit, and an existing one is replaced only when empty or a SavedModel (a `DataError`
        names a file of any other folder, before any work).

        Args:
            filepath: the SavedModel directory to write.
            format: `"tf_saved_model"`.
            verbose: log its endpoint and signatures, at INFO (Keras' default: yes).

        Example:
        >>> embedder.export("exports/keras-gtr")
        >>> tf.saved_model.load("exports/keras-gtr").serve(tf.constant(["a document"])).shape
        TensorShape([1, 768])
        >>> tf.saved_model.load("exports/keras-gtr").signatures["encode_queries"](texts=tf.constant(["a query"]))
        {'embeddings': <tf.Tensor: shape=(1, 768), dtype=float32, numpy=...>}
        """
        if format != "tf_saved_model" or input_signature is not None or kwargs:
            given = f"format={format!r}" if format != "tf_saved_model" else "input_signature or keyword arguments"
            raise UserError(
                f"GTRTextEmbedder.export: {given} is not supported (only format='tf_saved_model', strings in); "
                "for LiteRT and other runtimes use `gtr-keras export --format`"
            )
        if self.preprocessor is None:
            raise UserError("GTRTextEmbedder.export: this GTRTextEmbedder has no preprocessor to take strings")
        files.check_replaceable(filepath, [SAVED_MODEL_DIRECTORY])
        with files.atomic_directory(filepath, [SAVED_MODEL_DIRECTORY]) as staging:
            signatures = self.write_saved_model(staging)
        if verbose is None or verbose:
            logger.info("%s: endpoint 'serve': texts tf.string [batch] -> float32 [batch, D] (documents)", filepath)
            for name in signatures:
                logger.info(
                    "%s: signature %r: texts tf.string [batch] -> embeddings float32 [batch, D]", filepath, name
                )

    def saved_model_root(self, directory: str | os.PathLike[str]) -> Any:
        """The object a SavedModel of this model saves (the encoder's, and `gtr-keras export`'s searcher's):
        the model's weights, each stored once (`variables`, `trainable_variables`, `regularization_losses`:
        TF Hub's reusable SavedModel), and the SentencePiece model as an asset (staged in `directory`, a local
        directory, as `spiece.model`; `save_saved_model` removes the staged copy). Its functions embed with
        `embed_strings`.

        Example:
        >>> root = embedder.saved_model_root(staging)  # doctest: +SKIP
        """
        root = tf.__internal__.tracking.AutoTrackable()
        root.variables = [v.value for v in self.variables]
        root.trainable_variables = [v.value for v in self.trainable_variables]
        root.regularization_losses = []
        with open(os.path.join(directory, SPIECE_ASSET), "wb") as f:
            f.write(self.preprocessor.tokenizer.proto)
        root.spiece_model = tf.saved_model.Asset(os.path.join(directory, SPIECE_ASSET))
        return root

    @staticmethod
    def save_saved_model(root: Any, directory: str | os.PathLike[str], signatures: dict[str, Any]) -> None:
        """Saves `root` (`saved_model_root`) with `signatures` into `directory`."""
        tf.saved_model.save(root, os.fspath(directory), signatures=signatures)
        os.remove(os.path.join(directory, SPIECE_ASSET))

    def write_saved_model(self, directory: str | os.PathLike[str], dimensions: int | None = None) -> dict[str, Any]:
        """Writes the encoder SavedModel into the empty local `directory`; returns its signatures.

        It follows TF Hub's convention for text embeddings: `obj(texts)` / `obj(texts, training=...)`,
        tf.string `[batch]` -> float32 `[batch, D]` with the document budget (`training=True` runs dropout),
        and `obj.variables` and `obj.trainable_variables`, so `hub.KerasLayer(path, trainable=True)`
        fine-tunes it; its signatures, for TF Serving and Keras 3's `TFSMLayer`, are `serving_default` and
        `encode_documents` (tf.string `[None]` -> `{"embeddings": float32 [None, D]}`, document budget) and
        `encode_queries` (query budget). Its `serve` endpoint is Keras' `Model.export`'s: `obj.serve(texts)`,
        the embeddings `[batch, D]` of `serving_default` as a tensor. With `dimensions` N, every function
        gives the first N coordinates renormalised, `[batch, N]` (`gtr-keras export --dimensions`).
        """
        root = self.saved_model_root(directory)
        root.__call__ = tf.function(
            lambda texts, training=False: self.embed_strings(texts, "document", training, dimensions)
        )
        for training in (False, True):
            root.__call__.get_concrete_function(STRINGS, training)

        def embed(kind):
            return tf.function(
                lambda texts: {"embeddings": self.embed_strings(texts, kind, dimensions=dimensions)},
                input_signature=[STRINGS],
            )

        root.encode_queries, root.encode_documents = embed("query"), embed("document")
        root.serve = tf.function(
            lambda texts: self.embed_strings(texts, "document", dimensions=dimensions), input_signature=[STRINGS]
        )
        signatures = {
            "serving_default": root.encode_documents,
            ENCODER_SIGNATURES["document"]: root.encode_documents,
            ENCODER_SIGNATURES["query"]: root.encode_queries,
        }
        self.save_saved_model(root, directory, signatures)
        return signatures

    def embed_strings(
        self, texts: Any, kind: Literal["query", "document"], training: bool = False, dimensions: int | None = None
    ) -> Any:
        """Embeddings of a tf.string `[batch]` tensor of texts of `kind` (`"query"` or `"document"`), in the
        graph: tokenised with the kind's budget, float32 `[batch, D]` out (`[batch, dimensions]`, the first
        coordinates renormalised, with `dimensions`)."""
        features = pad_token_ids(self.preprocessor.token_ids(texts, kind))
        return truncate_tensor(self(features, training=training), dimensions)

    def similarity(self, query_embeddings: Any, document_embeddings: Any) -> Any:
        """Cosine similarities `[queries, documents]` of unit-norm embeddings."""
        scores = ops.matmul(ops.convert_to_tensor(query_embeddings), ops.transpose(document_embeddings))
        return ops.convert_to_numpy(scores)
