"""`T5EncoderBlock`: one pre-norm T5 encoder layer (RMS norms without bias or mean subtraction)."""

import keras

from gtr_keras.models.gtr.t5_attention import T5Attention
from gtr_keras.models.gtr.t5_feed_forward import T5FeedForward


class T5EncoderBlock(keras.layers.Layer):
    """One pre-norm T5 encoder layer: self-attention then feed-forward.

    Args:
        hidden_dim: model width.
        num_heads: attention heads.
        key_value_dim: width of each head.
        intermediate_dim: feed-forward inner width.
        feedforward: `"relu"` or `"gated-gelu"`.
        dropout: dropout rate on residual branches and inside the sublayers.
        layer_norm_epsilon: RMS norm epsilon.

    Example:
    >>> block = T5EncoderBlock(16, num_heads=2, key_value_dim=8, intermediate_dim=32)
    >>> tuple(block(np.ones((1, 3, 16), "float32"), np.zeros((1, 2, 3, 3), "float32")).shape)
    (1, 3, 16)
    """

    def __init__(
        self,
        hidden_dim,
        num_heads,
        key_value_dim,
        intermediate_dim,
        feedforward="relu",
        dropout=0.0,
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.key_value_dim = key_value_dim
        self.intermediate_dim = intermediate_dim
        self.feedforward = feedforward
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        policy = self.dtype_policy
        self.attention_norm = keras.layers.RMSNormalization(
            epsilon=layer_norm_epsilon, name="attention_norm", dtype=policy
        )
        self.attention = T5Attention(hidden_dim, num_heads, key_value_dim, dropout, name="attention", dtype=policy)
        self.feedforward_norm = keras.layers.RMSNormalization(
            epsilon=layer_norm_epsilon, name="feedforward_norm", dtype=policy
        )
        self.feedforward_block = T5FeedForward(
            hidden_dim, intermediate_dim, feedforward, dropout, name="feedforward", dtype=policy
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, x_shape, attention_bias_shape=None):
        for layer in (self.attention_norm, self.feedforward_norm, self.feedforward_block, self.dropout_layer):
            layer.build(x_shape)
        self.attention.build(x_shape, attention_bias_shape)

    def call(self, x, attention_bias, training=False):
        attended = self.attention(self.attention_norm(x), attention_bias, training=training)
        x = x + self.dropout_layer(attended, training=training)
        transformed = self.feedforward_block(self.feedforward_norm(x), training=training)
        return x + self.dropout_layer(transformed, training=training)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "key_value_dim": self.key_value_dim,
            "intermediate_dim": self.intermediate_dim,
            "feedforward": self.feedforward,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }
