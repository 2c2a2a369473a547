"""`MaskedMeanPooling`: the GTR head's mean of the token vectors, padding left out."""

import keras
from keras import ops


class MaskedMeanPooling(keras.layers.Layer):
    """Mean of the token vectors where the mask is true: one mean a text, or one a span of a text.

    A `[batch, length]` mask (the padding mask) gives each text's mean, GTR's pooling. A `[batch, spans,
    length]` mask gives one mean per span of each text (late chunking: `GTRTextEmbedder.embed_spans`), from
    the same token vectors; a span with no true token gives zeros.

    Call arguments:
        sequence: float tensor `[batch, length, width]`.
        padding_mask: `[batch, length]` or `[batch, spans, length]`, true (or 1) at the tokens to average.

    Output: `[batch, width]`, or `[batch, spans, width]` for a mask of spans.

    Example:
    >>> x = np.array([[[1.0], [3.0], [100.0]]], "float32")
    >>> MaskedMeanPooling()(x, np.array([[1, 1, 0]])).numpy().tolist()
    [[2.0]]
    >>> MaskedMeanPooling()(x, np.array([[[1, 1, 0], [0, 1, 1]]])).numpy().tolist()
    [[[2.0], [51.5]]]
    """

    def call(self, sequence, padding_mask):
        if len(padding_mask.shape) == 3:
            mask = ops.cast(padding_mask, sequence.dtype)
            count = ops.maximum(ops.sum(mask, axis=-1, keepdims=True), 1e-9)
            return ops.matmul(mask, sequence) / count
        mask = ops.cast(ops.expand_dims(padding_mask, -1), sequence.dtype)
        total = ops.sum(sequence * mask, axis=1)
        count = ops.maximum(ops.sum(mask, axis=1), 1e-9)
        return total / count
