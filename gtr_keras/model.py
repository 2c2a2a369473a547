"""The GTR encoder: a T5 encoder tower with a mean-pool, projection and L2 head."""

import keras

from gtr_keras.layers import MaskedMeanPooling, RelativePositionBias, T5EncoderBlock
from gtr_keras.presets import preset_config


class GTREncoder(keras.Model):
    """Shared query/document tower of a GTR dual encoder.

    Token ids go through a T5 encoder (embedding, pre-norm blocks with a shared
    relative position bias, final RMS norm); the token vectors are averaged over
    non-pad positions, projected without bias to `embedding_dim` and
    L2-normalised, so the dot product of two outputs is their cosine.

    Args:
        vocabulary_size: token embedding rows.
        num_layers: encoder blocks.
        hidden_dim: model width (`d_model`).
        key_value_dim: width of each attention head (`d_kv`).
        num_heads: attention heads.
        intermediate_dim: feed-forward width (`d_ff`).
        embedding_dim: output dimension D of the projection (768 in GTR).
        feedforward: `"relu"` (T5 v1.0, GTR) or `"gated-gelu"` (T5 v1.1).
        num_buckets: relative position buckets.
        max_distance: relative position max distance.
        dropout: dropout rate used in training.
        layer_norm_epsilon: RMS norm epsilon.
        dtype: dtype policy, e.g. `"mixed_bfloat16"`.

    Inputs: a dict with `"token_ids"` and `"padding_mask"`, both int `[batch, length]`.
    Output: float32 `[batch, embedding_dim]`, unit-norm rows.

    Example:
    >>> model = GTREncoder.from_preset("gtr-tiny")
    >>> out = model({"token_ids": np.array([[5, 6, 1, 0]]), "padding_mask": np.array([[1, 1, 1, 0]])})
    >>> out.shape
    TensorShape([1, 64])
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        hidden_dim,
        key_value_dim,
        num_heads,
        intermediate_dim,
        embedding_dim=768,
        feedforward="relu",
        num_buckets=32,
        max_distance=128,
        dropout=0.0,
        layer_norm_epsilon=1e-6,
        dtype=None,
        **kwargs,
    ):
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = keras.layers.Embedding(
            vocabulary_size, hidden_dim, name="token_embedding", dtype=dtype,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
        )(token_ids)
        x = keras.layers.Dropout(dropout, name="embedding_dropout", dtype=dtype)(x)
        attention_bias = RelativePositionBias(
            num_heads, num_buckets, max_distance, name="relative_position_bias", dtype="float32"
        )(padding_mask)
        for i in range(num_layers):
            x = T5EncoderBlock(
                hidden_dim, num_heads, key_value_dim, intermediate_dim, feedforward, dropout,
                layer_norm_epsilon, name=f"block_{i}", dtype=dtype,
            )(x, attention_bias)
        x = keras.layers.RMSNormalization(epsilon=layer_norm_epsilon, name="final_norm", dtype=dtype)(x)
        x = keras.layers.Dropout(dropout, name="final_dropout", dtype=dtype)(x)
        pooled = MaskedMeanPooling(name="mean_pooling", dtype=dtype)(x, padding_mask)
        projected = keras.layers.Dense(embedding_dim, use_bias=False, name="projection", dtype=dtype)(pooled)
        embeddings = keras.layers.UnitNormalization(name="l2_normalize", dtype="float32")(projected)
        super().__init__(
            inputs={"token_ids": token_ids, "padding_mask": padding_mask}, outputs=embeddings, **kwargs
        )
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.key_value_dim = key_value_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.embedding_dim = embedding_dim
        self.feedforward = feedforward
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon

    @classmethod
    def from_preset(cls, name, **overrides):
        """Builds a randomly initialised encoder of a preset's shape."""
        return cls(**preset_config(name, **overrides))

    def get_config(self):
        return {
            "name": self.name,
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "key_value_dim": self.key_value_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "embedding_dim": self.embedding_dim,
            "feedforward": self.feedforward,
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
