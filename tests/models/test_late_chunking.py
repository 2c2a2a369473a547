"""`models.late_chunking`: a passages index's windows pooled from forward passes of their whole documents."""

import numpy as np
import pytest

from gtr_keras.errors import UserError
from gtr_keras.models.late_chunking import LateChunks
from gtr_keras.models.token_windows import document_windows
from gtr_keras.utils.dimensions import truncate

WORDS = ("red", "blue", "green", "small", "large", "long", "short", "thin", "thick", "swept") * 3
TEXT = " ".join(
    f"the boundary layer of the {word} wing separates near the trailing edge at high angles." for word in WORDS
)


@pytest.fixture(scope="module")
def short_encoder(tiny_model_dir):
    """The tiny model read with a document budget of 48 tokens, so that a few hundred tokens need segments."""
    from gtr_keras.saving import load_model

    return load_model(tiny_model_dir, document_length=48)


def _windows(late, text, tokens, stride):
    return [(w.start, w.end) for w in document_windows(late.pieces, [text], tokens, stride)[0]]


def _pooled(model, token_ids, start, end):
    """A span's vector by hand: the forward pass of `token_ids` alone, the span's outputs averaged, projected
    by the kernel and divided by their norm."""
    features = {"token_ids": np.array([token_ids], np.int32), "padding_mask": np.ones((1, len(token_ids)), np.int32)}
    vector = model.backbone(features).numpy()[0][start:end].mean(axis=0) @ model.projection.kernel.numpy()
    return vector / np.linalg.norm(vector)


def test_a_document_of_one_window_gets_its_plain_embedding(tiny_encoder):
    late = LateChunks(tiny_encoder, document_length=1024)
    titles, texts = ["Lift", ""], ["on a wing at low speed", "  the boundary layer  "]
    vectors = late.encode(titles, texts, [[(0, len(text))] for text in texts])
    joined = [f"{title} {text}".strip() for title, text in zip(titles, texts)]
    np.testing.assert_allclose(vectors, tiny_encoder.encode_documents(joined), atol=1e-5)


def test_windows_are_spans_of_one_forward_pass_of_title_and_text(tiny_encoder):
    late = LateChunks(tiny_encoder, document_length=1024)
    windows = _windows(late, TEXT, 24, 16)
    joined, tokens, spans = late.token_spans("wings", TEXT, windows)
    ids = tiny_encoder.tokenize([joined], length=1024)[0]
    assert joined == f"wings {TEXT}" and tokens == len(ids) > 3 * 24 and len(windows) > 3
    assert spans[0][0] == 0 and spans[-1][1] == len(ids)  # the title in the first window, EOS in the last
    detokenize = tiny_encoder.tokenizer.detokenize
    for (start, end), (first, last) in list(zip(windows, spans))[1:-1]:
        assert detokenize(ids[first:last]) == TEXT[start:end].strip()
    vectors = late.encode(["wings"], [TEXT], [windows])
    expected = [_pooled(tiny_encoder.model, ids, first, last) for first, last in spans]
    np.testing.assert_allclose(vectors, np.array(expected), atol=1e-5)


def test_a_document_longer_than_a_forward_pass_is_pooled_in_segments(short_encoder, shown_warnings):
    late = LateChunks(short_encoder, document_length=80)  # segments of 80 tokens every 32
    windows = _windows(late, TEXT, 16, 8)
    _, tokens, spans = late.token_spans("", TEXT, windows)
    ids = short_encoder.tokenize([TEXT], length=tokens)[0]
    assert tokens > 4 * 80
    vectors = late.encode([""], [TEXT], [windows])
    expected = []
    for first, last in spans:
        base = first // 32 * 32
        expected.append(_pooled(short_encoder.model, ids[base : base + 80], first - base, last - base))
    np.testing.assert_allclose(vectors, np.array(expected), atol=1e-5)
    some = late.encode([""], [TEXT], [windows[7:12]])  # a window's vector is its document's, whatever else is encoded
    np.testing.assert_allclose(some, vectors[7:12], atol=1e-6)
    with pytest.warns(UserWarning, match="not trained for embeddings of 16 dimensions"):
        cut = LateChunks(short_encoder.truncated(16), document_length=80).encode([""], [TEXT], [windows[:3]])
    np.testing.assert_allclose(cut, truncate(vectors[:3], 16), atol=1e-5)


def test_an_encoder_without_token_outputs_or_a_short_forward_pass_is_refused(tiny_encoder):
    from gtr_keras.models.text_encoder import TextEncoder

    with pytest.raises(UserError, match="^late chunking needs the Keras model's token outputs; TextEncoder"):
        LateChunks(TextEncoder())
    with pytest.raises(
        UserError, match="^document_length: late chunking reads at least the model's 512 tokens, got 256"
    ):
        LateChunks(tiny_encoder, 256)
