"""`RelativePositionBias`: T5's relative position bias, shared by all encoder blocks, and its buckets.

The buckets are those of the reference T5 (Mesh TensorFlow, as ported to Hugging Face `transformers`),
exact at every offset, bucket edges included.
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
    >>> tuple(bias(np.array([[1, 1, 1, 0, 0]])).shape)
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
        # expand_dims rather than new axes by indexing, which LiteRT's converter takes only at static shapes.
        return ops.expand_dims(bias, 0) + ops.expand_dims(ops.expand_dims(masked, 1), 1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_heads, input_shape[1], input_shape[1])

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
        }
