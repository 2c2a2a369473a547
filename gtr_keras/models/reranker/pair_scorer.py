"""`PairScorer`: (query, document) pairs in, a reranker's scores out, in length-sorted batches."""

import numpy as np
import tensorflow as tf

from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.models.gtr.encoder import bucket_length
from gtr_keras.models.text_encoder import length_sorted_batches, to_bytes

_TOKENIZED_AT_ONCE = 4096


def check_pairs(pairs):
    """The pairs as a list of `(query, document)` string (or UTF-8 bytes) tuples; `UserError` naming the first
    item that is not one."""
    checked = []
    for number, pair in enumerate(pairs):
        if isinstance(pair, (str, bytes)) or len(pair) != 2 or not all(isinstance(t, (str, bytes)) for t in pair):
            raise UserError(f"pairs: item {number} is not a (query, document) pair of strings: {pair!r}"[:200])
        checked.append(tuple(pair))
    return checked


class PairScorer:
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

    def padded_shape(self, rows, length, batch_size):
        """The `[rows, length]` a batch is padded to: as it is, or under XLA rounded up (`Encoder.padded_shape`)."""
        if not self.jit_compile:
            return rows, length
        return min(batch_size, 1 << (rows - 1).bit_length()), bucket_length(length)

    def score_tokens(self, items, batch_size):
        """Scores `[len(items)]` of one batch of `tokenize`'s items, padded."""
        lengths = [len(ids) for ids, _ in items]
        shape = self.padded_shape(len(items), max(lengths), batch_size)
        token_ids = np.full(shape, self.model.preprocessor.pad_id, np.int32)
        segment_ids, mask = np.zeros(shape, np.int32), np.zeros(shape, np.int32)
        for i, (ids, segments) in enumerate(items):
            token_ids[i, : lengths[i]], segment_ids[i, : lengths[i]], mask[i, : lengths[i]] = ids, segments, 1
        return self._forward(token_ids, segment_ids, mask).numpy()[: len(items)]

    def predict(self, pairs, batch_size=32):
        """Scores of `(query, document)` pairs: float32 `[len(pairs)]`, in input order.

        Args:
            pairs: a list of `(query, document)` strings (or UTF-8 bytes).
            batch_size: pairs per forward pass.

        Raises:
            UserError: an item that is not a pair of strings.
            CheckpointError: the model gives a non-finite score; nothing is returned.
        """
        pairs = check_pairs(pairs)
        scores = np.zeros(len(pairs), np.float32)
        if not pairs:
            return scores
        items = self.tokenize(pairs)
        for rows in length_sorted_batches([len(ids) for ids, _ in items], batch_size):
            scores[rows] = self.score_tokens([items[row] for row in rows], batch_size)
        broken = np.flatnonzero(~np.isfinite(scores))
        if broken.size:
            raise CheckpointError(
                f"the reranker gives non-finite scores (NaN or infinity) for {broken.size} of {len(pairs)} pairs "
                f"(the first: number {broken[0]})"
            )
        return scores
