"""`TextEncoder`: what every encoder of gtr-keras shares, whatever runs the model (Keras, a SavedModel,
LiteRT, ONNX Runtime, OpenVINO): `encode_queries` and `encode_documents` with the same arguments and the
same batching; and `TextPairScorer`, what every reranker's scorer shares (`predict(pairs)`). It needs numpy
only (tqdm for a progress bar), so that the encoders and scorers of the ONNX and OpenVINO exports run without
TensorFlow or Keras.
"""

import contextlib
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.utils.dimensions import check_dimensions, truncate
from gtr_keras.utils.text_files import check_text

KINDS = ("query", "document")
PROGRESS_THRESHOLD = 5000


def check_kind(kind: str) -> None:
    """Refuses a kind of text other than `"query"` and `"document"` (`UserError`)."""
    if kind not in KINDS:
        raise UserError(f"kind must be 'query' or 'document', got {kind!r}")


def to_bytes(text: str | bytes) -> bytes:
    """A text as UTF-8 bytes (bytes as they are), for a `tf.string` batch."""
    return text if isinstance(text, bytes) else text.encode("utf-8")


def check_texts(texts: Iterable[str | bytes]) -> list[str | bytes]:
    """The texts as a list; `UserError` naming the first that is not valid Unicode (a lone surrogate)."""
    return [check_text(f"texts[{i}]", text) if isinstance(text, str) else text for i, text in enumerate(texts)]


def check_token_outputs(encoder: "TextEncoder") -> None:
    """`UserError` for an encoder without the model's token outputs (an export's): late chunking pools them."""
    if not encoder.token_outputs:
        raise UserError(
            f"late chunking needs the Keras model's token outputs; {type(encoder).__name__} gives pooled "
            "embeddings only: use the model directory"
        )


def check_document_length(document_length: Any) -> int:
    """`document_length` when it is a token budget (an integer of at least 2: one token and EOS), else `UserError`."""
    if not isinstance(document_length, int) or isinstance(document_length, bool) or document_length < 2:
        raise UserError(
            f"document_length must be an integer of at least 2 (one token and EOS), got {document_length!r}"
        )
    return document_length


def check_spans(spans: Sequence[Any], lengths: Sequence[int], document_length: int | None = None) -> list[np.ndarray]:
    """Each text's token spans as int32 `[n, 2]` arrays of `[start, end)`, checked against the text's number of
    tokens (`lengths`) and `document_length` (`UserError` naming the first bad one: not integers, empty, past
    the budget or past the text's tokens).

    Example:
    >>> check_spans([[(0, 4), (2, 6)], []], lengths=[6, 3], document_length=8)[0].tolist()
    [[0, 4], [2, 6]]
    """
    if len(spans) != len(lengths):
        raise UserError(f"spans: {len(spans)} lists of spans for {len(lengths)} texts (one list a text)")
    checked = []
    for i, text_spans in enumerate(spans):
        try:
            array = np.asarray(text_spans) if len(text_spans) else np.zeros((0, 2), np.int64)
        except (TypeError, ValueError):  # not a sized thing, or pairs of different lengths
            array = np.zeros(0)
        if array.ndim != 2 or array.shape[1] != 2 or array.dtype.kind not in "iu":
            raise UserError(f"spans[{i}]: not a list of [start, end) pairs of integers: {text_spans!r}"[:200])
        for j, (start, end) in enumerate(array.tolist()):
            if start < 0 or end <= start:
                raise UserError(f"spans[{i}][{j}]: [{start}, {end}) is empty or starts below 0")
            if document_length is not None and end > document_length:
                raise UserError(
                    f"spans[{i}][{j}]: [{start}, {end}) ends past document_length {document_length}: raise it"
                )
            if end > lengths[i]:
                raise UserError(f"spans[{i}][{j}]: [{start}, {end}) ends past the text's {lengths[i]} tokens")
        checked.append(array.astype(np.int32))
    return checked


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Row numbers of items of `lengths` in batches of at most `batch_size`, shortest first (a stable sort), so
    that a batch padded to its longest item pads little: how every encoder, and a reranker's `PairScorer`, batch.

    Example:
    >>> [rows.tolist() for rows in length_sorted_batches([5, 1, 3], 2)]
    [[1, 2], [0]]
    """
    order = np.argsort(lengths, kind="stable")
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def check_finite_embeddings(embeddings: np.ndarray, what: str) -> None:
    """`CheckpointError` when a row of `embeddings` (of `what`: "documents", ...) is not finite."""
    broken = np.flatnonzero(~np.isfinite(embeddings).all(axis=1))
    if broken.size:
        raise CheckpointError(
            f"the model gives non-finite embeddings (NaN or infinity) for {broken.size} of {len(embeddings)} "
            f"{what} (the first: number {broken[0]}); nothing was written"
        )


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
    model takes texts); and `matryoshka_dims`, the prefixes its model was trained for (`()`: none). An encoder
    with `token_outputs` (the Keras model's `Encoder`) also gives `embed_token_spans`, and so late chunking
    (`encode_late_chunks`).

    `dimensions=N` cuts the embeddings to their first N coordinates, renormalised (`utils.dimensions`);
    `truncated(N)` is the encoder that always does (`TruncatedEncoder`: what an index built with N
    searches with). Cutting a model's embeddings to a size it was not trained for (`matryoshka_dims`) costs
    quality: a warning says so, once per encoder.

    Example:
    >>> encoder = gtr_keras.load("exports/gtr-onnx")  # or a model directory, a SavedModel, a LiteRT export
    >>> encoder.encode_documents(["Lift on a wing.", "The boundary layer."], batch_size=32).shape
    (2, 768)
    """

    embedding_dim: int
    query_length: int
    document_length: int
    tokenize: Callable[..., Sequence[Any]]
    embed_tokens: Callable[[np.ndarray, np.ndarray], Any]
    pad_id = 0
    dimensions: int | None = None
    matryoshka_dims: Sequence[int] = ()
    # True where `embed_token_spans(token_ids, spans, batch_size)` pools the model's token outputs (late chunking).
    token_outputs = False
    embed_token_spans: Callable[[Sequence[Sequence[int]], Sequence[Any], int], np.ndarray]

    def length(self, kind: str) -> int:
        """The token budget of `"query"` or `"document"`, EOS included."""
        check_kind(kind)
        return self.query_length if kind == "query" else self.document_length

    def prepare(self, texts: Sequence[str | bytes], kind: str) -> Sequence[Any]:
        """What `embed_batch` takes, one item per text, each with a `len` to sort by: token id lists."""
        return self.tokenize(texts, kind)

    def padded_shape(self, rows: int, length: int, batch_size: int) -> tuple[int, int]:
        """The `[rows, length]` shape a batch is padded to: the batch as it is."""
        return rows, length

    def padded_tokens(self, items: Sequence[Sequence[int]], batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """int32 token ids and padding mask `padded_shape` of a batch of token id lists, padded with `pad_id`."""
        lengths = [len(row) for row in items]
        ids = np.full(self.padded_shape(len(items), max(lengths), batch_size), self.pad_id, np.int32)
        mask = np.zeros_like(ids)
        for i, row in enumerate(items):
            ids[i, : lengths[i]] = row
            mask[i, : lengths[i]] = 1
        return ids, mask

    def embed_batch(self, items: Sequence[Any], kind: str, batch_size: int) -> Any:
        """Embeddings `[>= len(items), D]` of one batch of `prepare`'s items: token ids, padded."""
        return self.embed_tokens(*self.padded_tokens(items, batch_size))

    def check_dimensions(self, dimensions: int | None) -> int | None:
        """`dimensions` checked against D (`UserError`: not an integer from 1 to D), or None; warns, once per
        encoder, when the model was not trained for them (`matryoshka_dims`)."""
        if dimensions is None:
            return None
        dimensions = check_dimensions(dimensions, self.embedding_dim)
        trained = dimensions == self.embedding_dim or dimensions in self.matryoshka_dims
        if not trained and not getattr(self, "_warned_of_dimensions", False):
            self._warned_of_dimensions = True
            warnings.warn(
                f"dimensions={dimensions}: this model was not trained for embeddings of {dimensions} dimensions "
                f"(Matryoshka dimensions: {list(self.matryoshka_dims) or 'none'}); truncating them costs quality "
                "(docs/dimensions.md)",
                stacklevel=3,
            )
        return dimensions

    def truncated(self, dimensions: int | None) -> "TextEncoder":
        """This encoder with its embeddings cut to their first `dimensions` coordinates, renormalised
        (`TruncatedEncoder`); itself for None.

        Example:
        >>> gtr_keras.load("models/gtr-base").truncated(256).encode_queries(["lift"]).shape
        (1, 256)
        """
        return self if dimensions is None else TruncatedEncoder(self, dimensions)

    def encode(
        self,
        texts: Iterable[str | bytes],
        kind: str = "document",
        batch_size: int = 32,
        progress: bool | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embeds texts as float32 `[len(texts), D]`, L2-normalised rows.

        Args:
            texts: a list of strings (or UTF-8 bytes).
            kind: `"query"` or `"document"`: which truncation length applies.
            batch_size: texts per forward pass.
            progress: show a progress bar; by default only for long inputs.
            dimensions: N, to return the first N coordinates of each embedding renormalised, `[len(texts), N]`
                (an integer from 1 to D); None: all D.

        Raises:
            UserError: `dimensions` not an integer from 1 to D, before any work; a text that is not valid
                Unicode (a lone surrogate), naming it.
            CheckpointError: the model gives a non-finite embedding; nothing is returned.
        """
        check_kind(kind)
        dimensions = self.check_dimensions(dimensions)
        texts = check_texts(texts)
        output = np.zeros((len(texts), self.embedding_dim), np.float32)
        if not texts:
            return truncate(output, dimensions)
        items = self.prepare(texts, kind)
        with _progress_bar(len(texts), kind, progress) as bar:
            for rows in length_sorted_batches([len(item) for item in items], batch_size):
                output[rows] = np.asarray(self.embed_batch([items[row] for row in rows], kind, batch_size))[: len(rows)]
                bar.update(len(rows))
        check_finite_embeddings(output, f"{kind}s")
        return truncate(output, dimensions)

    def encode_queries(
        self,
        texts: Iterable[str | bytes],
        batch_size: int = 32,
        progress: bool | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embeds queries (truncated to `query_length` tokens; to `dimensions` coordinates where given)."""
        return self.encode(texts, "query", batch_size, progress, dimensions)

    def encode_documents(
        self,
        texts: Iterable[str | bytes],
        batch_size: int = 32,
        progress: bool | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embeds documents (truncated to `document_length` tokens; to `dimensions` coordinates where given)."""
        return self.encode(texts, "document", batch_size, progress, dimensions)

    def encode_late_chunks(
        self,
        texts: Sequence[str | bytes],
        spans: Sequence[Sequence[Sequence[int]]],
        document_length: int,
        batch_size: int = 4,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Late chunking: one unit vector per token span of each text, each pooled from one forward pass of
        its whole text (up to `document_length` tokens), so each span's vector sees its text's context.

        Each text is tokenised to `document_length` tokens (EOS included, as `tokenize`), encoded once, and
        each span's token outputs go through the model's head (`GTRTextEmbedder.embed_spans`): exactly what
        pooling that span of the full forward pass gives. A span `[0, n)` over a text of n tokens gives
        its `encode_documents` embedding where n fits the model's `document_length`. T5's relative
        positions take any length; attention costs memory quadratic in it: `[batch, heads, L, L]`
        float32 a layer (docs/long-documents.md).

        Args:
            texts: the documents.
            spans: for each text, its `[start, end)` token spans (positions in `tokenize(texts,
                length=document_length)`'s ids); a text may have none.
            document_length: the token budget of the forward pass, EOS included (may exceed the model's).
            batch_size: texts per forward pass.
            dimensions: N, the first N coordinates renormalised; None: all D.

        Returns:
            float32 `[total spans, D]` (`[total spans, N]`), the spans of the first text first, each text's
            in the order given.

        Raises:
            UserError: a span that is empty, negative, past `document_length` or past its text's tokens,
                spans not one list a text, bad `dimensions`: before any forward pass.
            CheckpointError: the model gives a non-finite vector.

        Example:
        >>> encoder = gtr_keras.load(model_dir)
        >>> ids = encoder.tokenize([long_text], length=2048)[0]
        >>> encoder.encode_late_chunks([long_text], [[(0, 64), (64, len(ids))]], document_length=2048).shape
        (2, 768)
        """
        check_token_outputs(self)
        dimensions = self.check_dimensions(dimensions)
        check_document_length(document_length)
        texts = check_texts(texts)
        ids = self.tokenize(texts, length=document_length) if texts else []
        checked = check_spans(spans, [len(text_ids) for text_ids in ids], document_length)
        return truncate(self.embed_token_spans(ids, checked, batch_size), dimensions)


class TruncatedEncoder(TextEncoder):
    """An encoder whose embeddings are cut to their first `dimensions` coordinates, renormalised: its
    `embedding_dim` is N, and anything else (`model`, `tokenizer`, token budgets) is the encoder's, whose
    `encode_queries` and `encode_documents` it calls (a server's, batched with other requests, too). What an
    index built with `dimensions` encodes with (`TextEncoder.truncated`).

    Args:
        encoder: a `TextEncoder` of D-dimensional embeddings.
        dimensions: N, an integer from 1 to D.

    Example:
    >>> TruncatedEncoder(gtr_keras.load("models/gtr-base"), 128).encode_documents(["Lift on a wing."]).shape
    (1, 128)
    """

    def __init__(self, encoder: TextEncoder, dimensions: int):
        self.encoder = encoder
        self.dimensions = encoder.check_dimensions(dimensions)

    embedding_dim = property(lambda self: self.dimensions, doc="N, the dimensions its embeddings keep.")
    token_outputs = property(lambda self: self.encoder.token_outputs, doc="The encoder's.")
    matryoshka_dims = property(lambda self: self.encoder.matryoshka_dims, doc="The encoder's.")

    def __getattr__(self, name):
        if name == "encoder":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.encoder, name)

    def check_dimensions(self, dimensions: int | None) -> int | None:
        return None if dimensions is None else check_dimensions(dimensions, self.dimensions)

    def truncated(self, dimensions: int | None) -> TextEncoder:
        if dimensions is None or dimensions == self.dimensions:
            return self
        return TruncatedEncoder(self.encoder, check_dimensions(dimensions, self.dimensions))

    def encode(
        self,
        texts: Iterable[str | bytes],
        kind: str = "document",
        batch_size: int = 32,
        progress: bool | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        check_kind(kind)
        dimensions = self.check_dimensions(dimensions) or self.dimensions
        encode = self.encoder.encode_queries if kind == "query" else self.encoder.encode_documents
        return truncate(encode(texts, batch_size, progress), dimensions)

    def embed_token_spans(
        self, token_ids: Sequence[Sequence[int]], spans: Sequence[Sequence[Sequence[int]]], batch_size: int = 4
    ) -> np.ndarray:
        return truncate(self.encoder.embed_token_spans(token_ids, spans, batch_size), self.dimensions)


def check_pairs(pairs: Iterable[Sequence[str | bytes]]) -> list[tuple[str | bytes, str | bytes]]:
    """The pairs as a list of `(query, document)` string (or UTF-8 bytes) tuples; `UserError` naming the first
    item that is not one, or whose text is not valid Unicode (a lone surrogate).

    Example:
    >>> check_pairs([["what is lift?", "lift on a wing"]])
    [('what is lift?', 'lift on a wing')]
    """
    checked = []
    for number, pair in enumerate(pairs):
        if isinstance(pair, (str, bytes)) or len(pair) != 2 or not all(isinstance(t, (str, bytes)) for t in pair):
            raise UserError(f"pairs: item {number} is not a (query, document) pair of strings: {pair!r}"[:200])
        for side, text in zip(("query", "document"), pair):
            if isinstance(text, str):
                check_text(f"pairs: item {number}'s {side}", text)
        checked.append((pair[0], pair[1]))
    return checked


class TextPairScorer:
    """(query, document) pairs in, a reranker's float32 scores out, in batches sorted by length; results in input
    order: what every reranker's scorer shares, whatever runs the model (Keras, a SavedModel, ONNX Runtime).

    A subclass gives `prepare(pairs)` (one item per pair, each with a `len` to sort by) and
    `score_batch(items, batch_size)` (the scores of one batch of items).

    Example:
    >>> scorer = gtr_keras.load("models/minilm-reranker")  # or its SavedModel or ONNX export
    >>> scorer.predict([("what keeps a wing up?", "lift"), ("what keeps a wing up?", "drag")]).shape
    (2,)
    """

    prepare: Callable[[list[tuple[str | bytes, str | bytes]]], Sequence[Any]]
    score_batch: Callable[[Sequence[Any], int], Any]

    def predict(self, pairs: Iterable[Sequence[str | bytes]], batch_size: int = 32) -> np.ndarray:
        """Scores of `(query, document)` pairs: float32 `[len(pairs)]`, in input order.

        Args:
            pairs: a list of `(query, document)` strings (or UTF-8 bytes).
            batch_size: pairs per forward pass.

        Raises:
            UserError: an item that is not a pair of strings, or a text that is not valid Unicode.
            CheckpointError: the model gives a non-finite score; nothing is returned.
        """
        pairs = check_pairs(pairs)
        scores = np.zeros(len(pairs), np.float32)
        if not pairs:
            return scores
        items = self.prepare(pairs)
        for rows in length_sorted_batches([len(item) for item in items], batch_size):
            scores[rows] = np.asarray(self.score_batch([items[row] for row in rows], batch_size))[: len(rows)]
        broken = np.flatnonzero(~np.isfinite(scores))
        if broken.size:
            raise CheckpointError(
                f"the reranker gives non-finite scores (NaN or infinity) for {broken.size} of {len(pairs)} pairs "
                f"(the first: number {broken[0]})"
            )
        return scores


def pad_pairs(
    items: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int, shape: tuple[int, int] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int32 `token_ids`, `segment_ids` and `padding_mask` `[rows, length]` of `(token_ids, segment_ids)` lists,
    padded with `pad_id` to the longest (or to `shape`)."""
    lengths = [len(ids) for ids, _ in items]
    shape = shape or (len(items), max(lengths))
    token_ids = np.full(shape, pad_id, np.int32)
    segment_ids, mask = np.zeros(shape, np.int32), np.zeros(shape, np.int32)
    for i, (ids, segments) in enumerate(items):
        token_ids[i, : lengths[i]], segment_ids[i, : lengths[i]], mask[i, : lengths[i]] = ids, segments, 1
    return token_ids, segment_ids, mask
