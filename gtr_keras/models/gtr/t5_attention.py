"""`T5Attention`: T5's self-attention, without the 1/sqrt(d) scaling of the scores."""

import keras
from keras import ops


class T5Attention(keras.layers.Layer):
    """T5 self-attention: unscaled dot products plus a position bias.

    `num_heads * key_value_dim` need not equal `hidden_dim` (it does not in
    T5-3B/11B and so GTR-XL/XXL).

    Args:
        hidden_dim: model width.
        num_heads: attention heads.
        key_value_dim: width of each head.
        dropout: dropout on the attention weights.

    Example:
    >>> attention = T5Attention(hidden_dim=16, num_heads=2, key_value_dim=4)
    >>> x = np.ones((1, 3, 16), "float32")
    >>> bias = np.zeros((1, 2, 3, 3), "float32")
    >>> tuple(attention(x, bias).shape)
    (1, 3, 16)
    """

    def __init__(self, hidden_dim, num_heads, key_value_dim, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.key_value_dim = key_value_dim
        self.dropout = dropout
        inner_dim = num_heads * key_value_dim
        init = keras.initializers.RandomNormal
        self.query_dense = keras.layers.Dense(
            inner_dim,
            use_bias=False,
            name="query",
            kernel_initializer=init(stddev=(hidden_dim * key_value_dim) ** -0.5),
            dtype=self.dtype_policy,
        )
        self.key_dense, self.value_dense = (
            keras.layers.Dense(
                inner_dim,
                use_bias=False,
                name=name,
                kernel_initializer=init(stddev=hidden_dim**-0.5),
                dtype=self.dtype_policy,
            )
            for name in ("key", "value")
        )
        self.output_dense = keras.layers.Dense(
            hidden_dim,
            use_bias=False,
            name="output",
            kernel_initializer=init(stddev=inner_dim**-0.5),
            dtype=self.dtype_policy,
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, hidden_states_shape, attention_bias_shape=None):
        for dense in (self.query_dense, self.key_dense, self.value_dense):
            dense.build(hidden_states_shape)
        self.output_dense.build((*hidden_states_shape[:-1], self.num_heads * self.key_value_dim))
        self.dropout_layer.build(attention_bias_shape)

    def _split_heads(self, x, batch, length):
        x = ops.reshape(x, (batch, length, self.num_heads, self.key_value_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def call(self, hidden_states, attention_bias, training=False):
        # Batch and length come from the layer's input, not from the projections: tf2onnx flattens a Dense's
        # output to [batch * length, width] for its MatMul, and a shape read there gives a wrong Reshape.
        batch, length = ops.shape(hidden_states)[0], ops.shape(hidden_states)[1]
        query = self._split_heads(self.query_dense(hidden_states), batch, length)
        key = self._split_heads(self.key_dense(hidden_states), batch, length)
        value = self._split_heads(self.value_dense(hidden_states), batch, length)
        scores = ops.matmul(query, ops.transpose(key, (0, 1, 3, 2)))
        scores = ops.cast(scores, "float32") + ops.cast(attention_bias, "float32")
        weights = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        weights = self.dropout_layer(weights, training=training)
        context = ops.transpose(ops.matmul(weights, value), (0, 2, 1, 3))
        context = ops.reshape(context, (batch, length, self.num_heads * self.key_value_dim))
        return self.output_dense(context)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "key_value_dim": self.key_value_dim,
            "dropout": self.dropout,
        }
