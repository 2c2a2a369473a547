"""`Encoder`: texts in, L2-normalised embeddings out, in length-sorted batches."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from gtr_keras.errors import UserError
from gtr_keras.models.gtr.gtr_tokenizer import PAD_ID
from gtr_keras.models.text_encoder import (
    TextEncoder,
    check_finite_embeddings,
    check_spans,
    length_sorted_batches,
    to_bytes,
)

LENGTH_BUCKETS = (16, 32, 64, 128, 256, 384, 512)


def bucket_length(length: int) -> int:
    """Rounds a token length up to the next padding bucket.

    Padding to a few fixed lengths keeps the number of distinct input shapes
    (and so of compiled XLA programs) bounded; past 512, to multiples of 256.

    Example:
    >>> bucket_length(70), bucket_length(600)
    (128, 768)
    """
    for bucket in LENGTH_BUCKETS:
        if length <= bucket:
            return bucket
    return -(-length // 256) * 256


class Encoder(TextEncoder):
    """Encodes texts with a `GTRTextEmbedder` in length-sorted batches: numpy in, numpy out.

    Texts are tokenised in the graph, sorted by token length and batched, so
    short texts are not padded to long ones; results come back in input
    order. `GTRTextEmbedder.encode_*` run on one of these, and
    `gtr_keras.load` returns one for a model directory; its `encode_queries`
    and `encode_documents` are every encoder's (`TextEncoder`).

    Args:
        model: a `GTRTextEmbedder` with a `GTRTextEmbedderPreprocessor`
            (whose token budgets apply: `query_length`, `document_length`).
        jit_compile: compile the forward pass with XLA (one program per
            padded shape; see `padded_shape`).

    Example:
    >>> encoder = gtr_keras.load(model_dir)
    >>> q = encoder.encode_queries(["what keeps a wing up?"])
    >>> d = encoder.encode_documents(["lift on a wing", "boundary layer"], batch_size=32)
    >>> (q @ d.T).shape
    (1, 2)
    """

    pad_id = PAD_ID
    token_outputs = True

    def __init__(self, model: Any, jit_compile: bool = False):
        self.model = model
        self.jit_compile = jit_compile
        # (tokenizer, its traced `token_ids`), replaced as a whole: thread-safe
        self._tokenize: tuple[Any, Any] = (None, None)

        def forward(token_ids, padding_mask):
            return model({"token_ids": token_ids, "padding_mask": padding_mask}, training=False)

        def embed_spans(token_ids, padding_mask, spans):
            return model.embed_spans({"token_ids": token_ids, "padding_mask": padding_mask}, spans)

        if jit_compile:
            # Traced once per padded shape, so the trace count is the number of XLA programs.
            self._forward = tf.function(forward, jit_compile=True)
            self._embed_spans = tf.function(embed_spans, jit_compile=True)
        else:
            tokens = [tf.TensorSpec([None, None], tf.int32)] * 2
            self._forward = tf.function(forward, input_signature=tokens)
            self._embed_spans = tf.function(
                embed_spans, input_signature=[*tokens, tf.TensorSpec([None, None, 2], tf.int32)]
            )

    # Read through the model at each call: a preprocessor set on the model later (a training run's token
    # budgets or tokenizer) applies to an `Encoder` made before it.
    preprocessor = property(lambda self: self.model.preprocessor, doc="The model's `GTRTextEmbedderPreprocessor`.")
    tokenizer = property(lambda self: self.model.preprocessor.tokenizer, doc="The model's `GTRTokenizer`.")
    query_length = property(lambda self: self.model.query_length, doc="Token budget of queries, EOS included.")
    document_length = property(lambda self: self.model.document_length, doc="Token budget of documents.")
    embedding_dim = property(lambda self: self.model.embedding_dim, doc="D, the embedding dimension.")
    matryoshka_dims = property(lambda self: self.model.matryoshka_dims, doc="The dimensions it was trained for.")

    def tokenize(
        self, texts: Sequence[str | bytes], kind: str = "document", length: int | None = None
    ) -> list[list[int]]:
        """Token id lists (EOS included, truncated to `length` tokens, by default the kind's budget)."""
        preprocessor = self.preprocessor
        if preprocessor is None:
            raise UserError("the model has no preprocessor now: it embeds token ids only")
        length = length or preprocessor.length(kind)
        tokenizer, token_ids = self._tokenize
        if tokenizer is not preprocessor.tokenizer:
            tokenizer = preprocessor.tokenizer
            token_ids = tf.function(
                tokenizer.token_ids, input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([], tf.int32)]
            )
            self._tokenize = (tokenizer, token_ids)
        ids = []
        for start in range(0, len(texts), 4096):
            chunk = tf.constant([to_bytes(t) for t in texts[start : start + 4096]], tf.string)
            ids.extend(token_ids(chunk, length).to_list())
        return ids

    def padded_shape(self, rows: int, length: int, batch_size: int) -> tuple[int, int]:
        """The `[rows, length]` shape a batch of `rows` texts, the longest `length` tokens, is padded to.

        Off XLA, one graph takes every shape and batches are not padded at
        all. Under XLA each shape is a compiled program, so rows round up to
        a power of two (at most `batch_size`) and lengths to `bucket_length`:
        a bounded set of programs for any input.

        Example:
        >>> Encoder(model, jit_compile=True).padded_shape(3, 70, batch_size=32)
        (4, 128)
        """
        if not self.jit_compile:
            return rows, length
        return min(batch_size, 1 << (rows - 1).bit_length()), bucket_length(length)

    def embed_tokens(self, token_ids: np.ndarray, padding_mask: np.ndarray) -> np.ndarray:
        """Embeddings of a tokenised batch: int32 `[B, L]` ids and mask in, float32 `[B, D]` numpy out."""
        return self._forward(token_ids, padding_mask).numpy()

    def embed_token_spans(
        self, token_ids: Sequence[Sequence[int]], spans: Sequence[Sequence[Sequence[int]]], batch_size: int = 4
    ) -> np.ndarray:
        """Late chunking of tokenised texts: one unit vector per span, each text in one forward pass
        (`encode_late_chunks` from token ids; a segment of a text longer than a forward pass is a text of its
        own).

        Args:
            token_ids: each text's token ids (as `tokenize` gives them, or a slice of them).
            spans: for each text, its `[start, end)` spans over its ids (`UserError` for one out of range).
            batch_size: texts per forward pass.

        Returns:
            float32 `[total spans, D]`, the first text's spans first.

        Example:
        >>> ids = encoder.tokenize(["lift on a wing"])
        >>> encoder.embed_token_spans(ids, [[(0, 2), (2, len(ids[0]))]]).shape
        (2, 768)
        """
        checked = check_spans(spans, [len(text_ids) for text_ids in token_ids])
        offsets = np.cumsum([0] + [len(text_spans) for text_spans in checked])
        output = np.zeros((offsets[-1], self.embedding_dim), np.float32)
        chunked = np.array([row for row, text_spans in enumerate(checked) if len(text_spans)], np.int64)
        for batch in length_sorted_batches([len(token_ids[row]) for row in chunked], batch_size):
            rows = chunked[batch]
            ids, padding_mask = self.padded_tokens([token_ids[row] for row in rows], batch_size)
            most = max(len(checked[row]) for row in rows)
            if self.jit_compile:  # a bounded number of XLA programs: span counts in powers of two
                most = 1 << (most - 1).bit_length()
            batch_spans = np.zeros((len(ids), most, 2), np.int32)
            for i, row in enumerate(rows):
                batch_spans[i, : len(checked[row])] = checked[row]
            vectors = self._embed_spans(ids, padding_mask, batch_spans).numpy()
            for i, row in enumerate(rows):
                output[offsets[row] : offsets[row + 1]] = vectors[i, : len(checked[row])]
        check_finite_embeddings(output, "spans")
        return output
