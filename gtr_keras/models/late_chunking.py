"""Late chunking of token windows (`--passages TOKENS[:STRIDE] --late-chunking`, docs/long-documents.md): each
window's vector pooled from a forward pass of its whole document (`"title text"`, up to `document_length`
tokens) instead of the window's text alone, so it sees its document's context.

The windows are a passages index's (`models.token_windows`: character windows of a document's `text`); each is
mapped onto the tokens of the document's `"title text"` (the first window from the title on, the last through
EOS, so a document of one window gets its plain embedding when it fits the model's budget). A document longer
than `document_length` tokens is encoded in segments of that many tokens, every `document_length` minus the
model's `document_length` tokens (so that each window lies whole in one), each window pooled in the segment
that starts last at or before it: no window is left out, and a window's vector depends on its document
alone, not on the other windows encoded with it.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from gtr_keras.errors import UserError
from gtr_keras.models.text_encoder import check_token_outputs
from gtr_keras.models.token_windows import piece_spans_of


class LateChunks:
    """Late-chunk vectors of documents' character windows, from the Keras model's token outputs.

    Args:
        encoder: the Keras model's `Encoder` (or its `truncated(N)`: N coordinates out); any other encoder
            (an export's) has no token outputs to pool: `UserError`.
        document_length: tokens of a forward pass, EOS included: at least the model's `document_length`.

    Example:
    >>> late = LateChunks(gtr_keras.load(model_dir), document_length=2048)
    >>> late.encode(["A title"], [long_text], [[(0, 301), (152, 455)]]).shape
    (2, 768)
    """

    def __init__(self, encoder: Any, document_length: int = 2048):
        check_token_outputs(encoder)
        if not isinstance(document_length, int) or document_length < encoder.document_length:
            raise UserError(
                f"document_length: late chunking reads at least the model's {encoder.document_length} tokens, got "
                f"{document_length!r}"
            )
        self.encoder = encoder
        self.document_length = document_length
        self.pieces = piece_spans_of(encoder)

    def token_spans(
        self, title: str, text: str, windows: Sequence[tuple[int, int]]
    ) -> tuple[str, int, list[tuple[int, int]]]:
        """`("title text", tokens, spans)`: the document as the model reads it, its number of tokens (EOS included)
        and each character window `[start, end)` of `text` as a `[start, end)` span of its token ids (EOS in
        the last window's).

        Example:
        >>> late.token_spans("Lift", "on a wing", [(0, 4), (4, 9)])
        ('Lift on a wing', 5, [(0, 3), (3, 5)])
        """
        raw = f"{title} {text}"
        joined = raw.strip()
        shift = len(title) + 1 - (len(raw) - len(raw.lstrip()))  # a character of `text` in `joined`
        starts = np.asarray(self.pieces.starts(joined), np.int64)
        count = len(starts)
        spans = []
        for start, end in windows:
            first = 0 if start == 0 else int(np.searchsorted(starts, start + shift))
            last = count + 1 if end >= len(text) else int(np.searchsorted(starts, end + shift))
            spans.append((min(first, count), max(last, min(first, count) + 1)))
        return joined, count + 1, spans

    def encode(
        self,
        titles: Sequence[str],
        texts: Sequence[str],
        windows: Sequence[Sequence[tuple[int, int]]],
        batch_size: int = 4,
    ) -> np.ndarray:
        """The windows' late-chunk vectors: float32 `[total windows, D]` (N with a truncated encoder), the
        first document's windows first, each document's in the order given.

        Args:
            titles: the documents' titles (`""` for none).
            texts: the documents' texts.
            windows: for each document, character windows `[start, end)` of its text (a passages index's rows,
                all of a document's or some).
            batch_size: segments a forward pass.
        """
        documents = [
            self.token_spans(title, text, text_windows) for title, text, text_windows in zip(titles, texts, windows)
        ]
        longest = max((tokens for _, tokens, _ in documents), default=2)
        ids = self.encoder.tokenize([joined for joined, _, _ in documents], length=longest) if documents else []
        step = max(self.document_length - self.encoder.document_length, 1)
        segment_of, segment_ids, segment_spans, rows = {}, [], [], []  # rows: each segment's spans' output rows
        row = 0
        for number, ((_, _, spans), text_ids) in enumerate(zip(documents, ids)):
            whole = len(text_ids) <= self.document_length
            for start, end in spans:
                start, end = min(start, len(text_ids) - 1), min(end, len(text_ids))
                base = 0 if whole else start // step * step
                if (number, base) not in segment_of:
                    segment_of[number, base] = len(segment_ids)
                    segment_ids.append(text_ids[base : base + self.document_length])
                    segment_spans.append([])
                    rows.append([])
                segment = segment_of[number, base]
                segment_spans[segment].append((start - base, end - base))
                rows[segment].append(row)
                row += 1
        vectors = self.encoder.embed_token_spans(segment_ids, segment_spans, batch_size)
        output = np.empty_like(vectors)
        output[np.asarray([row for segment_rows in rows for row in segment_rows], np.int64)] = vectors
        return output
