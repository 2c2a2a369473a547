"""`GTRBackbone`: the T5 encoder tower of GTR as a keras-hub `Backbone`."""

from typing import Any

import keras
import keras_hub

from gtr_keras.models.gtr.relative_position_bias import RelativePositionBias
from gtr_keras.models.gtr.t5_encoder_block import T5EncoderBlock
from gtr_keras.models.model_files.model_directory import (
    check_finite,
    check_weights_file,
    file_weights_by_path,
)
from gtr_keras.models.subclassed_model import SubclassedModelType

INPUT_NAMES = ("token_ids", "padding_mask")


@keras.saving.register_keras_serializable(package="gtr_keras")
class GTRBackbone(keras_hub.models.Backbone, metaclass=SubclassedModelType):
    """The T5 encoder that GTR shares between queries and documents.

    Token embedding, pre-norm T5 blocks with one relative position bias shared
    by all of them, final RMS norm: the reference T5 arithmetic
    (`t5_encoder_block`, `gtr_relative_position_bias`), exact at every relative distance, which keras-hub's
    own T5 layers are not. The GTR head (mean pooling, projection, L2 norm)
    lives in `GTRTextEmbedder`, as sentence-transformers keeps it in modules of
    its own.

    Args:
        vocabulary_size: token embedding rows.
        num_layers: encoder blocks.
        hidden_dim: model width (`d_model`).
        key_value_dim: width of each attention head (`d_kv`); `num_heads *
            key_value_dim` need not equal `hidden_dim` (GTR-XL/XXL).
        num_heads: attention heads.
        intermediate_dim: feed-forward width (`d_ff`).
        feedforward: `"relu"` (T5 v1.0, GTR) or `"gated-gelu"` (T5 v1.1).
        num_buckets: relative position buckets.
        max_distance: relative position max distance.
        dropout: dropout rate used in training.
        layer_norm_epsilon: RMS norm epsilon.
        dtype: dtype policy, e.g. `"mixed_bfloat16"` to train in bfloat16 or
            `"bfloat16"` for inference.

    Inputs: a dict with `"token_ids"` and `"padding_mask"`, both int `[batch, length]`.
    Output: the final-norm token vectors, `[batch, length, hidden_dim]`.

    Example:
    >>> backbone = GTRBackbone(vocabulary_size=1100, num_layers=2, hidden_dim=64, key_value_dim=8,
    ...                        num_heads=4, intermediate_dim=128)
    >>> features = {"token_ids": np.array([[5, 6, 1, 0]]), "padding_mask": np.array([[1, 1, 1, 0]])}
    >>> backbone(features).shape
    TensorShape([1, 4, 64])
    """

    def __init__(
        self,
        vocabulary_size: int,
        num_layers: int,
        hidden_dim: int,
        key_value_dim: int,
        num_heads: int,
        intermediate_dim: int,
        feedforward: str = "relu",
        num_buckets: int = 32,
        max_distance: int = 128,
        dropout: float = 0.0,
        layer_norm_epsilon: float = 1e-6,
        dtype: Any = None,
        **kwargs: Any,
    ):
        # A subclassed model rather than a functional one, so that `keras.models.clone_model`
        # (which rebuilds functional models as plain `Functional`s) keeps the class.
        super().__init__(dtype=dtype, **kwargs)

        # === Layers ===
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            hidden_dim,
            name="token_embedding",
            dtype=dtype,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
        )
        self.embedding_dropout = keras.layers.Dropout(dropout, name="embedding_dropout", dtype=dtype)
        self.relative_position_bias = RelativePositionBias(
            num_heads, num_buckets, max_distance, name="relative_position_bias", dtype="float32"
        )
        self.encoder_blocks = [
            T5EncoderBlock(
                hidden_dim,
                num_heads,
                key_value_dim,
                intermediate_dim,
                feedforward,
                dropout,
                layer_norm_epsilon,
                name=f"block_{i}",
                dtype=dtype,
            )
            for i in range(num_layers)
        ]
        self.final_norm = keras.layers.RMSNormalization(epsilon=layer_norm_epsilon, name="final_norm", dtype=dtype)
        self.final_dropout = keras.layers.Dropout(dropout, name="final_dropout", dtype=dtype)
        self.build()

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.key_value_dim = key_value_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.feedforward = feedforward
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, input_shape=None):
        # Each sublayer from its shapes: tracing `call` instead would cost a symbolic pass per model made.
        sequence = (None, None, self.token_embedding.output_dim)
        self.token_embedding.build((None, None))
        for dropout in (self.embedding_dropout, self.final_dropout):
            dropout.build(sequence)
        self.relative_position_bias.build()
        for block in self.encoder_blocks:
            block.build(sequence, (None, self.relative_position_bias.num_heads, None, None))
        self.final_norm.build(sequence)
        self.built = True

    def call(self, inputs, training=False):
        x = self.embedding_dropout(self.token_embedding(inputs["token_ids"]), training=training)
        attention_bias = self.relative_position_bias(inputs["padding_mask"])
        for block in self.encoder_blocks:
            x = block(x, attention_bias, training=training)
        return self.final_dropout(self.final_norm(x), training=training)

    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        """Loads a weights file, which must hold exactly this model's weights.

        Keras alone ignores weights the model lacks (a 4-block file loads
        into a 3-block model without a word); keras-hub's loaders call this.

        Args:
            filepath: a `.weights.h5` file, or the `.weights.json` index of
                sharded ones.
            skip_mismatch: load as Keras does, without the check.

        Raises:
            CheckpointError: a missing, extra, misshapen or non-finite weight,
                or a setting of the file's model directory that contradicts
                its weights (`model_directory.check_weights_file`).

        Example:
        >>> backbone.load_weights("models/m/model.weights.h5")  # doctest: +SKIP
        """
        if not skip_mismatch:
            check_weights_file(self, filepath)
        super().load_weights(filepath, skip_mismatch=skip_mismatch, **kwargs)
        check_finite(file_weights_by_path(self), filepath)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "key_value_dim": self.key_value_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "feedforward": self.feedforward,
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }
