"""`PairScorer`: (query, document) pairs in, a reranker's scores out, in length-sorted batches."""

import tensorflow as tf

from gtr_keras.models.gtr.encoder import bucket_length
from gtr_keras.models.text_encoder import TextPairScorer, pad_pairs, to_bytes

_TOKENIZED_AT_ONCE = 4096


class PairScorer(TextPairScorer):
    """Scores (query, document) pairs with a `Reranker`: numpy in, numpy out.

    Pairs are tokenised in the graph (the reranker's `RerankerPreprocessor`: its budget, `longest_first`),
    sorted by packed length and batched as `gtr_keras.load`'s encoders batch texts
    (`text_encoder.length_sorted_batches`), so that short pairs are not padded to long ones; scores come back
    in input order. `gtr_keras.load(RERANKER_DIR)` returns one.

    Args:
        model: a `Reranker` with a preprocessor.
        jit_compile: compile the forward pass with XLA (one program per padded shape: rows rounded up to a
            power of two, lengths to `encoder.bucket_length`).

    Example:
    >>> scorer = gtr_keras.load("models/ms-marco-minilm")
    >>> scorer.predict([("what keeps a wing up?", "lift"), ("what keeps a wing up?", "drag")])
    array([0.93, 0.12], dtype=float32)
    """

    def __init__(self, model, jit_compile=False):
        self.model = model
        self.jit_compile = jit_compile
        preprocessor = model.preprocessor
        self._tokenize = tf.function(
            preprocessor.pair_token_ids, input_signature=[tf.TensorSpec([None], tf.string)] * 2
        )

        def forward(token_ids, segment_ids, padding_mask):
            inputs = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
            return model.scores(model(inputs, training=False))

        signature = None if jit_compile else [tf.TensorSpec([None, None], tf.int32)] * 3
        self._forward = tf.function(forward, input_signature=signature, jit_compile=jit_compile or None)

    sequence_length = property(lambda self: self.model.preprocessor.sequence_length, doc="The pair's token budget.")

    def tokenize(self, pairs):
        """`[(token_ids, segment_ids)]`, lists of ints, of the packed and cut pairs."""
        tokenized = []
        for start in range(0, len(pairs), _TOKENIZED_AT_ONCE):
            chunk = pairs[start : start + _TOKENIZED_AT_ONCE]
            queries, documents = ([to_bytes(pair[side]) for pair in chunk] for side in (0, 1))
            packed = self._tokenize(tf.constant(queries, tf.string), tf.constant(documents, tf.string))
            tokenized.extend(zip(packed["token_ids"].to_list(), packed["segment_ids"].to_list()))
        return tokenized

    def prepare(self, pairs):
        return [_Packed(item) for item in self.tokenize(pairs)]

    def padded_shape(self, rows, length, batch_size):
        """The `[rows, length]` a batch is padded to: as it is, or under XLA rounded up (`Encoder.padded_shape`)."""
        if not self.jit_compile:
            return rows, length
        return min(batch_size, 1 << (rows - 1).bit_length()), bucket_length(length)

    def score_batch(self, items, batch_size):
        """Scores of one batch of `prepare`'s items, padded."""
        shape = self.padded_shape(len(items), max(len(item) for item in items), batch_size)
        inputs = pad_pairs([item.ids for item in items], self.model.preprocessor.pad_id, shape)
        return self._forward(*inputs).numpy()[: len(items)]


class _Packed:
    """A packed pair, `(token_ids, segment_ids)`, whose `len` is its length in tokens."""

    def __init__(self, ids):
        self.ids = ids

    def __len__(self):
        return len(self.ids[0])
