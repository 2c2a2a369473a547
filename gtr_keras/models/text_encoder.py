"""`TextEncoder`: what every encoder of gtr-keras shares, whatever runs the model (Keras, a SavedModel,
LiteRT, ONNX Runtime, OpenVINO): `encode_queries` and `encode_documents` with the same arguments and the
same batching. It needs numpy only (tqdm for a progress bar), so that the encoders of the ONNX and OpenVINO
exports run without TensorFlow or Keras.
"""

import contextlib

import numpy as np

from gtr_keras.errors import CheckpointError, UserError

KINDS = ("query", "document")
PROGRESS_THRESHOLD = 5000


def check_kind(kind):
    """Refuses a kind of text other than `"query"` and `"document"` (`UserError`)."""
    if kind not in KINDS:
        raise UserError(f"kind must be 'query' or 'document', got {kind!r}")


def to_bytes(text):
    """A text as UTF-8 bytes (bytes as they are), for a `tf.string` batch."""
    return text if isinstance(text, bytes) else text.encode("utf-8")


def length_sorted_batches(lengths, batch_size):
    """Row numbers of items of `lengths` in batches of at most `batch_size`, shortest first (a stable sort), so
    that a batch padded to its longest item pads little: how every encoder, and a reranker's `PairScorer`, batch.

    Example:
    >>> [rows.tolist() for rows in length_sorted_batches([5, 1, 3], 2)]
    [[1, 2], [0]]
    """
    order = np.argsort(lengths, kind="stable")
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


class _NoBar:
    def update(self, n):
        pass


@contextlib.contextmanager
def _progress_bar(total, kind, progress):
    show = progress if progress is not None else total >= PROGRESS_THRESHOLD
    if not show:
        yield _NoBar()
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if progress:
            raise UserError("progress=True needs tqdm: pip install tqdm") from None
        yield _NoBar()
        return
    with tqdm(total=total, desc=f"encoding {kind}s", unit=kind) as bar:
        yield bar


class TextEncoder:
    """Texts in, float32 L2-normalised embeddings out, in batches sorted by length; results in input order.

    A subclass gives `embedding_dim`, `query_length`, `document_length` and either `tokenize(texts, kind)`
    with `embed_tokens(token_ids, padding_mask)` (the model takes token ids: each batch is padded with
    `pad_id` to its longest text, or to `padded_shape`), or `prepare` and `embed_batch` of its own (the
    model takes texts).

    Example:
    >>> encoder = gtr_keras.load("exports/gtr-onnx")  # or a model directory, a SavedModel, a LiteRT export
    >>> encoder.encode_documents(["Lift on a wing.", "The boundary layer."], batch_size=32).shape
    (2, 768)
    """

    pad_id = 0

    def length(self, kind):
        """The token budget of `"query"` or `"document"`, EOS included."""
        check_kind(kind)
        return self.query_length if kind == "query" else self.document_length

    def prepare(self, texts, kind):
        """What `embed_batch` takes, one item per text, each with a `len` to sort by: token id lists."""
        return self.tokenize(texts, kind)

    def padded_shape(self, rows, length, batch_size):
        """The `[rows, length]` shape a batch is padded to: the batch as it is."""
        return rows, length

    def embed_batch(self, items, kind, batch_size):
        """Embeddings `[>= len(items), D]` of one batch of `prepare`'s items: token ids, padded."""
        lengths = [len(row) for row in items]
        ids = np.full(self.padded_shape(len(items), max(lengths), batch_size), self.pad_id, np.int32)
        mask = np.zeros_like(ids)
        for i, row in enumerate(items):
            ids[i, : lengths[i]] = row
            mask[i, : lengths[i]] = 1
        return self.embed_tokens(ids, mask)

    def encode(self, texts, kind="document", batch_size=32, progress=None):
        """Embeds texts as float32 `[len(texts), D]`, L2-normalised rows.

        Args:
            texts: a list of strings (or UTF-8 bytes).
            kind: `"query"` or `"document"`: which truncation length applies.
            batch_size: texts per forward pass.
            progress: show a progress bar; by default only for long inputs.

        Raises:
            CheckpointError: the model gives a non-finite embedding; nothing is returned.
        """
        check_kind(kind)
        texts = list(texts)
        output = np.zeros((len(texts), self.embedding_dim), np.float32)
        if not texts:
            return output
        items = self.prepare(texts, kind)
        with _progress_bar(len(texts), kind, progress) as bar:
            for rows in length_sorted_batches([len(item) for item in items], batch_size):
                output[rows] = np.asarray(self.embed_batch([items[row] for row in rows], kind, batch_size))[: len(rows)]
                bar.update(len(rows))
        broken = np.flatnonzero(~np.isfinite(output).all(axis=1))
        if broken.size:
            raise CheckpointError(
                f"the model gives non-finite embeddings (NaN or infinity) for {broken.size} of {len(texts)} "
                f"{kind}s (the first: number {broken[0]}); nothing was written"
            )
        return output

    def encode_queries(self, texts, batch_size=32, progress=None):
        """Embeds queries (truncated to `query_length` tokens)."""
        return self.encode(texts, "query", batch_size, progress)

    def encode_documents(self, texts, batch_size=32, progress=None):
        """Embeds documents (truncated to `document_length` tokens)."""
        return self.encode(texts, "document", batch_size, progress)
