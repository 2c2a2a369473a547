"""`models.token_windows`: the passages setting's rule, token windows and their character offsets on the bundled
model's SentencePiece vocabulary."""

import os

import numpy as np
import pytest
import sentencepiece as spm

from gtr_keras.errors import UserError
from gtr_keras.models.token_windows import PieceSpans, document_windows, parse_passages, token_windows

VOCABULARY = os.path.join(
    os.path.dirname(__file__), "..", "..", "gtr_keras", "assets", "gtr-small-distilled", "assets", "tokenizer"
)
ABSTRACT_WORDS = (
    "Background: IL-6 β-catenin (CD4+) T-cells 10.5% p<0.001 mRNA-expression hypoxia-inducible HIF-1α in vivo, "
    "knockdown; BRCA1/2 mutations [n=312] cardiomyocytes' apoptosis."
).split()
TEXT = "  Lift on a wing:  the pressure   below exceeds ½ the pressure above; Mach ≈ 0.8 near the tip.  "


@pytest.fixture(scope="module")
def spans():
    with open(os.path.join(VOCABULARY, "vocabulary.spm"), "rb") as f:
        return PieceSpans(f.read())


@pytest.mark.parametrize(
    "value, expected",
    [("64:32", (64, 32)), ("64", (64, 64)), ((16, 8), (16, 8)), ([8, 1], (8, 1)), ("127", (127, 127))],
)
def test_a_passages_setting_is_tokens_and_a_stride_that_defaults_to_tokens(value, expected):
    assert parse_passages(value, document_length=128) == expected


@pytest.mark.parametrize(
    "value, message",
    [
        ("7", "TOKENS must be at least 8, got 7"),
        ("128", "TOKENS 128 is above the model's document budget (128 tokens, EOS included: at most 127)"),
        ("64:65", "STRIDE must be from 1 to TOKENS (64), got 65"),
        ("64:0", "STRIDE must be from 1 to TOKENS (64), got 0"),
        ("64:", "TOKENS[:STRIDE] (two positive integers"),
        ("a:b", "TOKENS[:STRIDE] (two positive integers"),
        ("64:32:16", "TOKENS[:STRIDE] (two positive integers"),
        ("-64", "TOKENS[:STRIDE] (two positive integers"),
        ((64,), "a (tokens, stride) pair of ints"),
        ((64.0, 32), "a (tokens, stride) pair of ints"),
    ],
)
def test_a_bad_passages_setting_is_refused_in_one_line(value, message):
    with pytest.raises(UserError, match="^passages: ") as error:
        parse_passages(value, document_length=128)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_pieces_are_the_tokenizers_and_their_starts_partition_the_text(spans):
    starts = spans.starts(TEXT)
    processor = spm.SentencePieceProcessor(model_file=os.path.join(VOCABULARY, "vocabulary.spm"))
    assert len(starts) == len(processor.encode(TEXT.strip())) == spans.count(TEXT)
    assert starts[0] == 0 and starts == sorted(starts) and starts[-1] < len(TEXT)
    pieces = [TEXT[a:b] for a, b in zip(starts, [*starts[1:], len(TEXT)])]
    assert "".join(pieces) == TEXT
    assert pieces[1].strip() == "on" and "½" in "".join(pieces)  # characters, not UTF-8 bytes


def test_windows_hold_tokens_pieces_every_stride_and_cover_the_text(spans):
    starts = spans.starts(TEXT)
    windows = token_windows(starts, len(TEXT), tokens=8, stride=5)
    assert [w.number for w in windows] == list(range(len(windows)))
    assert [w.token_start for w in windows] == list(range(0, 5 * len(windows), 5))
    assert all(w.token_end - w.token_start == 8 for w in windows[:-1]) and windows[-1].token_end == len(starts)
    assert windows[0].start == 0 and windows[-1].end == len(TEXT)
    assert all(w.start == starts[w.token_start] for w in windows[1:])
    joined = ""
    for window in windows:
        assert window.start <= len(joined)  # each window starts within what the ones before cover
        joined += TEXT[window.start : window.end][len(joined) - window.start :]
    assert joined == TEXT


def test_a_text_that_fits_is_one_window_and_an_empty_text_one_empty_window():
    assert [tuple(w) for w in token_windows([0, 3, 5], 9, tokens=8, stride=4)] == [(0, 0, 3, 0, 9)]
    assert [tuple(w) for w in token_windows([], 0, tokens=8, stride=8)] == [(0, 0, 0, 0, 0)]
    assert [tuple(w) for w in token_windows([0, 2, 4, 6], 8, tokens=2, stride=2)] == [(0, 0, 2, 0, 4), (1, 2, 4, 4, 8)]


def test_a_texts_budget_narrows_its_windows_to_at_least_eight_pieces(spans):
    wide, narrow, floor = document_windows(spans, [TEXT] * 3, 16, 16, budgets=[100, 10, 2])
    assert {w.token_end - w.token_start for w in wide[:-1]} == {16}
    assert {w.token_end - w.token_start for w in narrow[:-1]} == {10}
    assert {w.token_end - w.token_start for w in floor[:-1]} == {8}


def test_every_window_of_a_long_text_tokenizes_alone_with_its_title_within_the_budget(spans):
    text = " ".join(np.random.default_rng(0).choice(ABSTRACT_WORDS, size=400))
    title, limit = "HIF-1α and IL-6", 40
    budget = limit - spans.count(title)

    def count(window):
        return spans.count(f"{title} {text[window.start : window.end]}")

    plain = document_windows(spans, [text], 64, 32, [budget])[0]
    assert max(count(window) for window in plain) > limit  # SentencePiece cuts a window's seams anew, alone
    windows = document_windows(spans, [text], 64, 32, [budget], fits=lambda i, window: count(window) <= limit)[0]
    assert max(count(window) for window in windows) <= limit
    assert windows[0].start == 0 and windows[-1].end == len(text)
    assert all(b.start <= a.end for a, b in zip(windows, windows[1:]))  # still covering the text
