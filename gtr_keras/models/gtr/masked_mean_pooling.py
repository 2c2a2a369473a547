"""`MaskedMeanPooling`: the GTR head's mean of the token vectors, padding left out."""

import keras
from keras import ops


class MaskedMeanPooling(keras.layers.Layer):
    """Mean of the token vectors where `padding_mask` is true.

    Call arguments:
        sequence: float tensor `[batch, length, width]`.
        padding_mask: `[batch, length]`, true (or 1) at the tokens to average.

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
