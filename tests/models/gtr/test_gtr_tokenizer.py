import json
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURES, TINY_ST

from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.gtr_tokenizer import EOS_ID, GTRTokenizer, pad_token_ids, train_sentencepiece

SPIECE = os.path.join(TINY_ST, "spiece.model")


def _texts():
    with open(os.path.join(FIXTURES, "tiny-gtr-texts.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("length", [64, 512])
def test_ids_equal_hugging_face_t5_tokenizer_fixture(length):
    reference = np.load(os.path.join(FIXTURES, "tiny-gtr-reference.npz"))[f"token_ids_{length}"]
    texts = _texts()
    assert len(texts) >= 20 and "" in texts
    batch = GTRTextEmbedderPreprocessor(GTRTokenizer(SPIECE), sequence_length=length)(tf.constant(texts))
    ids = batch["token_ids"].numpy()
    assert ids.shape[1] == length  # the fixture has texts longer than both lengths
    np.testing.assert_array_equal(ids, reference[:, : ids.shape[1]])
    np.testing.assert_array_equal(batch["padding_mask"].numpy(), (reference != 0).astype("int32"))


def test_ids_equal_hugging_face_live():
    transformers = pytest.importorskip("transformers")
    hf = transformers.T5Tokenizer.from_pretrained(TINY_ST)
    texts = _texts() + ["  spaced   out  ", "ﬁ ligature ① ＡＢＣ", "x" * 3000]
    ours = GTRTokenizer(SPIECE).token_ids(tf.constant(texts), 64).to_list()
    assert ours == [hf(t.strip(), truncation=True, max_length=64)["input_ids"] for t in texts]


def test_config_and_assets_round_trip(tmp_path):
    tokenizer = GTRTokenizer(SPIECE, lowercase=True)
    tokenizer.save_assets(str(tmp_path))
    clone = GTRTokenizer.from_config(tokenizer.get_config())
    assert clone.get_config()["proto"] is None and clone.lowercase
    clone.load_assets(str(tmp_path))
    text = tf.constant(["Upper CASE"])
    assert clone.tokenize(text).to_list() == tokenizer.tokenize(text).to_list()
    assert tokenizer.tokenize(text).to_list() == tokenizer.tokenize(tf.constant(["upper case"])).to_list()
    assert (tokenizer.end_token_id, tokenizer.pad_token_id) == (EOS_ID, 0)


def test_trained_model_has_t5_special_ids(tmp_path):
    path = train_sentencepiece(["the wing lift", "boundary layer flow"] * 200, tmp_path / "sp.model", 60)
    tokenizer = GTRTokenizer(str(path))
    assert tokenizer.vocabulary_size() <= 60
    assert tokenizer.token_ids(tf.constant(["wing"]), 64).to_list()[0][-1] == EOS_ID
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
    assert [sp.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]


def test_a_case_folding_model_reads_upper_and_lower_case_alike(tmp_path):
    texts = ["The wing lift of a Boundary Layer", "flow over a WING", "Heat transfer in jets"] * 200
    folded = GTRTokenizer(str(train_sentencepiece(texts, tmp_path / "cf.model", 80, case_folding=True)))
    plain = GTRTokenizer(str(train_sentencepiece(texts, tmp_path / "plain.model", 80)))
    lower, upper = ["boundary layer of a wing"], ["BOUNDARY LAYER OF A WING"]
    assert folded.token_ids(upper, 64).to_list() == folded.token_ids(lower, 64).to_list()
    assert plain.token_ids(upper, 64).to_list() != plain.token_ids(lower, 64).to_list()
    import sentencepiece  # the folding is in the model file: any SentencePiece reader applies it

    sp = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "cf.model"))
    assert sp.encode(upper[0]) + [EOS_ID] == folded.token_ids(upper, 64).to_list()[0]


def test_a_tokenizer_survives_one_made_after_a_seed_being_garbage_collected():
    """TF Text's older op kept the model in a counter-named resource that `set_random_seed` let a later
    tokenizer delete; the fast op's model is a graph constant, which nothing shares."""
    import gc

    import keras

    first = GTRTokenizer(SPIECE)
    expected = first.tokenize(["heat transfer in a wing"]).to_list()
    keras.utils.set_random_seed(0)
    second = GTRTokenizer(SPIECE)
    assert second.tokenize(["heat transfer in a wing"]).to_list() == expected
    del second
    gc.collect()
    assert first.tokenize(["heat transfer in a wing"]).to_list() == expected


def _tie_texts(library):
    """Texts whose best segmentations tie exactly: a run of a repeated piece u (with uu also a piece) after a
    one-character word start, which splits as u + uu or uu + u at the same score ("▁4" "0" "00" / "▁4" "00" "0")."""
    pieces = {library.id_to_piece(i) for i in range(library.get_piece_size())}
    starts = sorted(piece[1:] for piece in pieces if len(piece) == 2 and piece[0] == "\u2581")
    units = sorted(piece for piece in pieces if piece.isalnum() and piece * 2 in pieces)
    return [f"a {s}{u * k}{end}" for s in starts for u in units for k in (3, 5) for end in ("", " a", "-")]


@pytest.mark.parametrize("vocabulary", ["bundled", "fixture"])
def test_ids_equal_the_sentencepiece_library_on_exact_ties(vocabulary):
    """The ids are the `sentencepiece` library's on the bundled Cranfield's 1,625 texts, the fixture's texts and
    generated ties; TF Text's older op (which GTRTokenizer used before) breaks some of those ties otherwise,
    which shows they are ties (benchmarks/tokenizer_ties.py measures the five collections)."""
    import sentencepiece
    import tensorflow_text

    from gtr_keras.beir.readers import load_corpus, load_queries
    from gtr_keras.cli.helpers.demo_steps import DEMO_DATASET
    from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR

    path = (
        os.path.join(BUNDLED_MODEL_DIR, "assets", "tokenizer", "vocabulary.spm") if vocabulary == "bundled" else SPIECE
    )
    with open(path, "rb") as f:
        proto = f.read()
    library = sentencepiece.SentencePieceProcessor(model_proto=proto)
    ties = _tie_texts(library)
    texts = load_corpus(DEMO_DATASET).joined() + list(load_queries(DEMO_DATASET).values()) + _texts() + ties
    expected = [library.encode(text.strip()) for text in texts]
    assert GTRTokenizer(proto).tokenize(texts).to_list() == expected

    old = tensorflow_text.SentencepieceTokenizer(proto).tokenize(ties).to_list()
    broken = [i for i, ids in enumerate(old) if ids != expected[-len(ties) + i]]
    assert len(broken) >= 6 and len(ties) >= 100

    def score(ids):
        return sum(library.get_score(piece) for piece in ids)

    for i in broken:
        assert sorted(old[i]) == sorted(expected[-len(ties) + i])  # the same pieces in another order: the same score
        assert score(old[i]) == score(expected[-len(ties) + i])


@pytest.mark.parametrize("length", [2, 5, 64])
def test_dense_token_ids_are_the_padded_ragged_ones(length):
    tokenizer = GTRTokenizer(SPIECE)
    texts = _texts()
    for batch in (texts, texts[:1], [""], ["", "  "], []):
        strings = tf.constant(batch, tf.string)
        expected = pad_token_ids(tokenizer.token_ids(strings, length))
        dense = tokenizer.dense_token_ids(strings, length)
        for key in ("token_ids", "padding_mask"):
            assert dense[key].dtype == expected[key].dtype
            np.testing.assert_array_equal(dense[key].numpy(), expected[key].numpy())


def test_without_clean_text_valid_utf8_gets_the_same_ids():
    """SentencePiece's normalisation drops the surrounding whitespace that `tf.strings.strip` strips."""
    tokenizer = GTRTokenizer(SPIECE)
    texts = _texts() + [" \t\n wing lift \r\n ", "\u3000full-width space\u00a0", "\x0bvertical tab"]
    assert tokenizer.tokenize(texts, clean_text=False).to_list() == tokenizer.tokenize(texts).to_list()
