"""Property tests: any unicode or bytes, 0 to 100,000 characters, through tokenizer -> encoder."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtr_keras.cli.main import main

_LONG = 100_000


def _repeated(unit):
    """Strings (or bytes) up to `_LONG` long: a generated piece repeated (hypothesis draws at most a few KB)."""
    return st.builds(
        lambda piece, length: (piece * (length // max(len(piece), 1) + 1))[:length], unit, st.integers(0, _LONG)
    )


TEXT = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300),
    _repeated(st.text(min_size=1, max_size=40)),
    _repeated(st.binary(min_size=1, max_size=40)),
)
BATCHES = st.lists(TEXT, min_size=1, max_size=5)
PROPERTY_SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _as_text(value):
    """What a reader makes of a value: bytes decoded with U+FFFD for invalid UTF-8, as the tokenizer does."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _jsonl_line(number, value):
    """One JSONL record holding `value` as it is: bytes stay raw bytes (escaping only what JSON must)."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8")
    escaped = b"".join(f"\\u{byte:04x}".encode() if byte < 0x20 or byte in b'"\\' else bytes([byte]) for byte in raw)
    return b'{"_id": "' + str(number).encode() + b'", "text": "' + escaped + b'"}\n'


def _check_rows(embeddings, count):
    assert embeddings.shape[0] == count
    assert np.isfinite(embeddings).all()
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)


@PROPERTY_SETTINGS
@given(texts=BATCHES)
def test_any_text_gives_finite_unit_rows_in_input_order(tiny_encoder, texts):
    for kind in ("query", "document"):
        embeddings = tiny_encoder.encode(texts, kind=kind)
        _check_rows(embeddings, len(texts))
        one_by_one = np.concatenate([tiny_encoder.encode([text], kind=kind) for text in texts])
        np.testing.assert_allclose(embeddings, one_by_one, atol=2e-5)
        as_text = tiny_encoder.encode([_as_text(text) for text in texts], kind=kind)
        np.testing.assert_allclose(embeddings, as_text, atol=1e-6)


@pytest.mark.large
@pytest.mark.slow
@settings(PROPERTY_SETTINGS, max_examples=15)
@given(texts=BATCHES)
def test_the_command_line_and_the_python_api_agree(tmp_path_factory, tiny_model_dir, tiny_encoder, texts):
    directory = tmp_path_factory.mktemp("property")
    path = directory / "texts.jsonl"
    path.write_bytes(b"".join(_jsonl_line(number, text) for number, text in enumerate(texts)))
    out = directory / "out.npy"
    assert (
        main(["encode", "--model", tiny_model_dir, "--input", str(path), "--output", str(out), "--kind", "document"])
        == 0
    )
    embeddings = np.load(out)
    _check_rows(embeddings, len(texts))
    np.testing.assert_allclose(embeddings, tiny_encoder.encode_documents(texts), atol=1e-6)
    assert (directory / "out.ids.txt").read_text().split() == [str(i) for i in range(len(texts))]
