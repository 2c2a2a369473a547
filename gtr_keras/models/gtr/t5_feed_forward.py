"""`T5FeedForward`: T5's feed-forward sublayer, relu or gated-gelu."""

import keras
from keras import ops


class T5FeedForward(keras.layers.Layer):
    """T5 feed-forward block: relu (T5 v1.0, GTR) or gated-gelu (T5 v1.1).

    Args:
        hidden_dim: model width.
        intermediate_dim: inner width.
        activation: `"relu"` or `"gated-gelu"` (tanh-approximated gelu gate).
        dropout: dropout on the inner activations.

    Example:
    >>> ffn = T5FeedForward(hidden_dim=16, intermediate_dim=32, activation="gated-gelu")
    >>> tuple(ffn(np.ones((2, 3, 16), "float32")).shape)
    (2, 3, 16)
    """

    def __init__(self, hidden_dim, intermediate_dim, activation="relu", dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if activation not in ("relu", "gated-gelu"):
            raise ValueError(f"feed-forward activation must be 'relu' or 'gated-gelu', got {activation!r}")
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.activation = activation
        self.dropout = dropout
        init = keras.initializers.RandomNormal
        in_names = ("input",) if activation == "relu" else ("input", "gate")
        self.input_denses = [
            keras.layers.Dense(
                intermediate_dim,
                use_bias=False,
                name=name,
                kernel_initializer=init(stddev=hidden_dim**-0.5),
                dtype=self.dtype_policy,
            )
            for name in in_names
        ]
        self.output_dense = keras.layers.Dense(
            hidden_dim,
            use_bias=False,
            name="output",
            kernel_initializer=init(stddev=intermediate_dim**-0.5),
            dtype=self.dtype_policy,
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape):
        for dense in self.input_denses:
            dense.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self.intermediate_dim))
        self.dropout_layer.build((*input_shape[:-1], self.intermediate_dim))

    def call(self, x, training=False):
        if self.activation == "relu":
            inner = ops.relu(self.input_denses[0](x))
        else:
            inner = ops.gelu(self.input_denses[1](x), approximate=True) * self.input_denses[0](x)
        inner = self.dropout_layer(inner, training=training)
        return self.output_dense(inner)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "activation": self.activation,
            "dropout": self.dropout,
        }
