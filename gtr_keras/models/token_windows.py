"""Token windows of long texts: the one place a text is cut into windows of a model's SentencePiece pieces, with
each window's piece span and character offsets (what `--passages TOKENS[:STRIDE]` indexes, and what late
chunking pools). It needs the `sentencepiece` library only (no TensorFlow).

A text's pieces are those `GTRTokenizer.token_ids` gives it (the library's ids of the same model proto,
surrounding whitespace dropped by SentencePiece's own normalisation), EOS not counted. Piece `i` owns the
characters from where it begins to where the next one begins (the first from 0, the last to the end of the
text), so a text's windows cover it whole: `text[start:end]` of the windows, overlaps set aside, is the text.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

from gtr_keras.errors import UserError

MIN_TOKENS = 8


class Window(NamedTuple):
    """One window of a text: its `number` (from 0), its pieces `[token_start, token_end)` (piece positions in
    the text's pieces, EOS not counted) and its characters `[start, end)` in the text."""

    number: int
    token_start: int
    token_end: int
    start: int
    end: int


def parse_passages(value: str | tuple[int, int] | list[int], document_length: int | None = None) -> tuple[int, int]:
    """`(tokens, stride)` of a passages setting: `"TOKENS[:STRIDE]"` or a pair, the stride TOKENS by default (windows
    that touch, no overlap); `UserError` (one line) for a malformed value, TOKENS below 8 or above the model's
    document budget (`document_length`, EOS included: at most `document_length - 1` pieces), or STRIDE above TOKENS
    or below 1.

    Example:
    >>> parse_passages("64:32", document_length=128)
    (64, 32)
    >>> parse_passages("100")
    (100, 100)
    """
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) > 2 or not all(part.strip().isdigit() for part in parts):
            raise UserError(f"passages: TOKENS[:STRIDE] (two positive integers, e.g. 64:32), got {value!r}")
        numbers = [int(part) for part in parts]
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(type(n) is int for n in value):
        numbers = list(value)
    else:
        raise UserError(f"passages: 'TOKENS[:STRIDE]' or a (tokens, stride) pair of ints, got {value!r}")
    tokens, stride = numbers[0], numbers[-1]
    if tokens < MIN_TOKENS:
        raise UserError(f"passages: TOKENS must be at least {MIN_TOKENS}, got {tokens}")
    if document_length is not None and tokens > document_length - 1:
        raise UserError(
            f"passages: TOKENS {tokens} is above the model's document budget ({document_length} tokens, EOS "
            f"included: at most {document_length - 1})"
        )
    if not 1 <= stride <= tokens:
        raise UserError(f"passages: STRIDE must be from 1 to TOKENS ({tokens}), got {stride}")
    return tokens, stride


class PieceSpans:
    """The SentencePiece pieces of texts with their character offsets, from a model's vocabulary.

    Args:
        proto: the SentencePiece model (`GTRTokenizer.proto`).
        lowercase: the tokenizer lowercases text first (`GTRTokenizer.lowercase`).

    Example:
    >>> spans = PieceSpans(encoder.tokenizer.proto)
    >>> spans.starts("Lift on a wing.")
    [0, 4, 7, 9, 14]
    """

    def __init__(self, proto: bytes, lowercase: bool = False):
        import sentencepiece as spm

        self.processor = spm.SentencePieceProcessor(model_proto=proto)
        self.lowercase = lowercase

    def starts(self, text: str) -> list[int]:
        """Where each piece of `text` begins, in characters: the first at 0."""
        import numpy as np  # not for the parser, which checks `--passages`

        text = self._lowered(text)
        pieces = self.processor.encode(text, out_type="proto").pieces
        if not pieces:
            return []
        char_of_byte = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])
        begins = np.searchsorted(char_of_byte, [piece.begin for piece in pieces])
        return [0, *(int(b) for b in begins[1:])]

    def count(self, text: str) -> int:
        """The number of pieces of `text` (EOS not counted)."""
        return len(self.processor.encode(self._lowered(text)))

    def _lowered(self, text: str) -> str:
        if not self.lowercase:
            return text
        return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)  # one character for one, as TF does


def token_windows(starts: list[int], length: int, tokens: int, stride: int) -> list[Window]:
    """The windows of a text of `length` characters whose pieces begin at `starts`: `tokens` pieces each, the
    next starting `stride` pieces on, the last ending with the text; one window for a text of at most `tokens`
    pieces (an empty text included).

    Example:
    >>> [tuple(w) for w in token_windows([0, 4, 7, 9], 14, tokens=2, stride=2)]
    [(0, 0, 2, 0, 7), (1, 2, 4, 7, 14)]
    """
    count = len(starts)
    firsts = range(0, max(count - tokens, 0) + stride, stride) if count > tokens else [0]
    windows = []
    for number, first in enumerate(firsts):
        last = min(first + tokens, count)
        if windows and last <= windows[-1].token_end:
            break
        end = starts[last] if last < count else length
        windows.append(Window(number, first, last, starts[first] if number else 0, end))
    return windows


def document_windows(
    spans: PieceSpans,
    texts: list[str],
    tokens: int,
    stride: int,
    budgets: list[int] | None = None,
    fits: Callable[[int, Window], bool] | None = None,
) -> list[list[Window]]:
    """Per text, its windows (`token_windows`) of `tokens` pieces every `stride` pieces; where a text's
    `budgets[i]` (the pieces its windows may hold, e.g. what its title leaves of the model's budget) is lower,
    of that many (at least `MIN_TOKENS`), and the stride no more than them. With `fits`, a text `i` with a window
    `w` for which `fits(i, w)` is false (e.g. its text, tokenized alone with its title, past the model's budget:
    SentencePiece may cut a window's seams into more pieces than the text had there) is cut again into windows
    a piece shorter, until each fits (or `MIN_TOKENS` is reached).

    Example:
    >>> windows = document_windows(PieceSpans(encoder.tokenizer.proto), texts, 64, 32)
    >>> [(w.start, w.end) for w in windows[0]]
    """
    result = []
    for i, text in enumerate(texts):
        starts = spans.starts(text)
        size = tokens if budgets is None else max(min(tokens, budgets[i]), MIN_TOKENS)
        windows = token_windows(starts, len(text), size, min(stride, size))
        while fits is not None and size > MIN_TOKENS and not all(fits(i, window) for window in windows):
            size -= 1
            windows = token_windows(starts, len(text), size, min(stride, size))
        result.append(windows)
    return result


def piece_spans_of(encoder: Any) -> PieceSpans:
    """The `PieceSpans` of an encoder's tokenizer (a Keras model's `GTRTokenizer`); `UserError` for an encoder
    without one (an export: build a passages index with the model directory)."""
    tokenizer = getattr(encoder, "tokenizer", None)
    if getattr(tokenizer, "proto", None) is None:
        raise UserError("passages: the model's SentencePiece tokenizer cuts the windows: give its model directory")
    return PieceSpans(tokenizer.proto, getattr(tokenizer, "lowercase", False))
