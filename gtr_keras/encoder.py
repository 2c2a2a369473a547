"""`Encoder`: texts in, L2-normalised embeddings out, in length-sorted batches."""

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from gtr_keras.tokenizer import DOCUMENT_LENGTH, PAD_ID, QUERY_LENGTH

LENGTH_BUCKETS = (16, 32, 64, 128, 256, 384, 512)
PROGRESS_THRESHOLD = 5000


def bucket_length(length):
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


class Encoder:
    """Encodes queries and documents with a `GTREncoder` and its tokenizer.

    Texts are tokenised in the graph, sorted by token length and batched, so
    short texts are not padded to long ones; results come back in input order.

    Args:
        model: a `GTREncoder`.
        tokenizer: a `GTRTokenizer` (its SentencePiece model is shared by both
            truncation lengths).
        query_length: token budget for queries, EOS included.
        document_length: token budget for documents, EOS included.
        jit_compile: compile the forward pass with XLA (one program per
            padded shape; see `padded_shape`).

    Example:
    >>> encoder = gtr_keras.load("models/gtr-base")
    >>> q = encoder.encode_queries(["what is a dual encoder?"])
    >>> d = encoder.encode_documents(["A dual encoder embeds ..."], batch_size=32)
    >>> scores = q @ d.T
    """

    def __init__(self, model, tokenizer, query_length=QUERY_LENGTH, document_length=DOCUMENT_LENGTH,
                 jit_compile=False):
        self.model = model
        self.tokenizer = tokenizer
        self.query_length = query_length
        self.document_length = document_length
        self.jit_compile = jit_compile
        self._tokenizers = {
            "query": tokenizer.with_length(query_length),
            "document": tokenizer.with_length(document_length),
        }
        def forward(token_ids, padding_mask):
            return model({"token_ids": token_ids, "padding_mask": padding_mask}, training=False)

        if jit_compile:
            # Traced once per padded shape, so the trace count is the number of XLA programs.
            self._forward = tf.function(forward, jit_compile=True)
        else:
            self._forward = tf.function(forward, input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2)
        self._tokenize = {
            kind: tf.function(t.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
            for kind, t in self._tokenizers.items()
        }

    @property
    def embedding_dim(self):
        return self.model.embedding_dim

    def tokenize(self, texts, kind="document"):
        """Token id lists (EOS included, truncated to the kind's length)."""
        if kind not in self._tokenize:
            raise ValueError(f"kind must be 'query' or 'document', got {kind!r}")
        ids = []
        for start in range(0, len(texts), 4096):
            chunk = tf.constant([_to_bytes(t) for t in texts[start:start + 4096]], tf.string)
            ids.extend(self._tokenize[kind](chunk).to_list())
        return ids

    def encode(self, texts, kind="document", batch_size=32, progress=None):
        """Embeds texts as float32 `[len(texts), D]`, L2-normalised rows.

        Args:
            texts: a list of strings (or UTF-8 bytes).
            kind: `"query"` or `"document"`: which truncation length applies.
            batch_size: texts per forward pass.
            progress: show a progress bar; by default only for long inputs.
        """
        output = np.zeros((len(texts), self.embedding_dim), np.float32)
        if not len(texts):
            return output
        token_ids = self.tokenize(list(texts), kind)
        lengths = np.array([len(row) for row in token_ids])
        order = np.argsort(lengths, kind="stable")
        show = progress if progress is not None else len(texts) >= PROGRESS_THRESHOLD
        with tqdm(total=len(texts), disable=not show, desc=f"encoding {kind}s", unit=kind) as bar:
            for start in range(0, len(texts), batch_size):
                rows = order[start:start + batch_size]
                batch = np.full(self.padded_shape(len(rows), lengths[rows].max(), batch_size), PAD_ID, np.int32)
                mask = np.zeros_like(batch)
                for i, row in enumerate(rows):
                    batch[i, : lengths[row]] = token_ids[row]
                    mask[i, : lengths[row]] = 1
                output[rows] = self.embed_tokens(batch, mask)[: len(rows)]
                bar.update(len(rows))
        return output

    def padded_shape(self, rows, length, batch_size):
        """The `[rows, length]` shape a batch of `rows` texts, the longest `length` tokens, is padded to.

        Off XLA, one graph takes every shape and batches are not padded at
        all. Under XLA each shape is a compiled program, so rows round up to
        a power of two (at most `batch_size`) and lengths to `bucket_length`:
        a bounded set of programs for any input.

        Example:
        >>> Encoder(model, tokenizer, jit_compile=True).padded_shape(3, 70, batch_size=32)
        (4, 128)
        """
        if not self.jit_compile:
            return rows, length
        return min(batch_size, 1 << (rows - 1).bit_length()), bucket_length(length)

    def embed_tokens(self, token_ids, padding_mask):
        """Embeddings of a tokenised batch: int32 `[B, L]` ids and mask in, float32 `[B, D]` numpy out."""
        return self._forward(token_ids, padding_mask).numpy()

    def encode_queries(self, texts, batch_size=32, progress=None):
        """Embeds queries (truncated to `query_length` tokens)."""
        return self.encode(texts, "query", batch_size, progress)

    def encode_documents(self, texts, batch_size=32, progress=None):
        """Embeds documents (truncated to `document_length` tokens)."""
        return self.encode(texts, "document", batch_size, progress)


def _to_bytes(text):
    return text if isinstance(text, bytes) else text.encode("utf-8")
