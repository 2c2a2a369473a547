"""Keras layers of the T5 encoder tower and the GTR embedding head.

The arithmetic follows the reference T5 (Mesh TensorFlow, as ported to Hugging
Face `transformers`): RMS layer norms without bias or mean subtraction,
attention without the 1/sqrt(d) scaling, and a relative position bias owned by
the first layer and shared by all the others.
"""

import math

import keras
import numpy as np
from keras import ops


def relative_position_buckets(relative_positions, num_buckets=32, max_distance=128):
    """Maps key-minus-query offsets to T5's bidirectional buckets.

    Half of the buckets hold offsets to the right. Offsets below
    `num_buckets // 4` get a bucket each; larger ones share logarithmically
    sized buckets up to `max_distance`. The logarithm is taken in float32 in the
    same order of operations as the reference, so that offsets on a bucket edge
    (16, 32, 64 with the defaults) land where the reference puts them.

    Args:
        relative_positions: integer numpy array of offsets (key - query).
        num_buckets: total buckets, both directions together.
        max_distance: offset from which all offsets share the last bucket.

    Example:
    >>> relative_position_buckets(np.array([-1, 0, 1, 200]))
    array([ 1,  0, 17, 31], dtype=int32)
    """
    relative_positions = np.asarray(relative_positions, dtype=np.int64)
    half = num_buckets // 2
    buckets = np.where(relative_positions > 0, half, 0)
    distance = np.abs(relative_positions)
    max_exact = half // 2
    with np.errstate(divide="ignore"):
        scaled = (
            np.log(distance.astype(np.float32) / np.float32(max_exact))
            / np.float32(math.log(max_distance / max_exact))
            * np.float32(half - max_exact)
        )
    large = np.minimum(max_exact + np.where(distance < max_exact, 0, scaled).astype(np.int64), half - 1)
    return (buckets + np.where(distance < max_exact, distance, large)).astype(np.int32)


class RelativePositionBias(keras.layers.Layer):
    """T5's attention bias: per-head relative position bias plus padding mask.

    Buckets are looked up in a constant table over offsets in
    `[-max_distance, max_distance]` (all larger offsets share the outermost
    buckets), so the layer works at any sequence length and compiles with XLA.
    Padded keys get a large negative bias.

    Args:
        num_heads: attention heads.
        num_buckets: relative position buckets (32 in T5 and GTR).
        max_distance: distance from which offsets share a bucket (128).

    Example:
    >>> bias = RelativePositionBias(num_heads=4)
    >>> bias(np.array([[1, 1, 1, 0, 0]])).shape
    (1, 4, 5, 5)
    """

    def __init__(self, num_heads, num_buckets=32, max_distance=128, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self._bucket_table = relative_position_buckets(
            np.arange(-max_distance, max_distance + 1), num_buckets, max_distance
        )

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.num_buckets, self.num_heads),
            initializer=keras.initializers.RandomNormal(stddev=1.0),
        )

    def call(self, padding_mask):
        length = ops.shape(padding_mask)[1]
        positions = ops.arange(length)
        offsets = ops.clip(positions[None, :] - positions[:, None], -self.max_distance, self.max_distance)
        buckets = ops.take(ops.convert_to_tensor(self._bucket_table), offsets + self.max_distance)
        bias = ops.transpose(ops.take(ops.cast(self.embeddings, "float32"), buckets, axis=0), (2, 0, 1))
        masked = (1.0 - ops.cast(padding_mask, "float32")) * -1e9
        return bias[None, :, :, :] + masked[:, None, None, :]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_heads, input_shape[1], input_shape[1])

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
        }


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
    >>> attention(x, bias).shape
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
            inner_dim, use_bias=False, name="query",
            kernel_initializer=init(stddev=(hidden_dim * key_value_dim) ** -0.5), dtype=self.dtype_policy,
        )
        self.key_dense, self.value_dense = (
            keras.layers.Dense(
                inner_dim, use_bias=False, name=name,
                kernel_initializer=init(stddev=hidden_dim**-0.5), dtype=self.dtype_policy,
            )
            for name in ("key", "value")
        )
        self.output_dense = keras.layers.Dense(
            hidden_dim, use_bias=False, name="output",
            kernel_initializer=init(stddev=inner_dim**-0.5), dtype=self.dtype_policy,
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, hidden_states_shape, attention_bias_shape=None):
        for dense in (self.query_dense, self.key_dense, self.value_dense):
            dense.build(hidden_states_shape)
        self.output_dense.build((*hidden_states_shape[:-1], self.num_heads * self.key_value_dim))
        self.dropout_layer.build(attention_bias_shape)

    def _split_heads(self, x):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads, self.key_value_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def call(self, hidden_states, attention_bias, training=False):
        query = self._split_heads(self.query_dense(hidden_states))
        key = self._split_heads(self.key_dense(hidden_states))
        value = self._split_heads(self.value_dense(hidden_states))
        scores = ops.matmul(query, ops.transpose(key, (0, 1, 3, 2)))
        scores = ops.cast(scores, "float32") + ops.cast(attention_bias, "float32")
        weights = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        weights = self.dropout_layer(weights, training=training)
        context = ops.transpose(ops.matmul(weights, value), (0, 2, 1, 3))
        batch, length = ops.shape(context)[0], ops.shape(context)[1]
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


class T5FeedForward(keras.layers.Layer):
    """T5 feed-forward block: relu (T5 v1.0, GTR) or gated-gelu (T5 v1.1).

    Args:
        hidden_dim: model width.
        intermediate_dim: inner width.
        activation: `"relu"` or `"gated-gelu"` (tanh-approximated gelu gate).
        dropout: dropout on the inner activations.

    Example:
    >>> ffn = T5FeedForward(hidden_dim=16, intermediate_dim=32, activation="gated-gelu")
    >>> ffn(np.ones((2, 3, 16), "float32")).shape
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
                intermediate_dim, use_bias=False, name=name,
                kernel_initializer=init(stddev=hidden_dim**-0.5), dtype=self.dtype_policy,
            )
            for name in in_names
        ]
        self.output_dense = keras.layers.Dense(
            hidden_dim, use_bias=False, name="output",
            kernel_initializer=init(stddev=intermediate_dim**-0.5), dtype=self.dtype_policy,
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
    >>> block(np.ones((1, 3, 16), "float32"), np.zeros((1, 2, 3, 3), "float32")).shape
    (1, 3, 16)
    """

    def __init__(
        self, hidden_dim, num_heads, key_value_dim, intermediate_dim,
        feedforward="relu", dropout=0.0, layer_norm_epsilon=1e-6, **kwargs,
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


class MaskedMeanPooling(keras.layers.Layer):
    """Mean of the token vectors where `padding_mask` is true.

    Example:
    >>> x = np.array([[[1.0], [3.0], [100.0]]], "float32")
    >>> MaskedMeanPooling()(x, np.array([[1, 1, 0]])).numpy().tolist()
    [[2.0]]
    """

    def call(self, sequence, padding_mask):
        mask = ops.cast(ops.expand_dims(padding_mask, -1), sequence.dtype)
        total = ops.sum(sequence * mask, axis=1)
        count = ops.maximum(ops.sum(mask, axis=1), 1e-9)
        return total / count
