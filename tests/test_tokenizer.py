import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import FIXTURES, TINY_ST
from gtr_keras.tokenizer import EOS_ID, GTRTokenizer, train_sentencepiece

SPIECE = os.path.join(TINY_ST, "spiece.model")


def _texts():
    with open(os.path.join(FIXTURES, "tiny-gtr-texts.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("length", [64, 512])
def test_ids_equal_hugging_face_t5_tokenizer_fixture(length):
    reference = np.load(os.path.join(FIXTURES, "tiny-gtr-reference.npz"))[f"token_ids_{length}"]
    texts = _texts()
    assert len(texts) >= 20 and "" in texts
    batch = GTRTokenizer(SPIECE, sequence_length=length)(tf.constant(texts))
    ids = batch["token_ids"].numpy()
    assert ids.shape[1] == length  # the fixture has texts longer than both lengths
    np.testing.assert_array_equal(ids, reference[:, : ids.shape[1]])
    np.testing.assert_array_equal(batch["padding_mask"].numpy(), (reference != 0).astype("int32"))


def test_ids_equal_hugging_face_live():
    transformers = pytest.importorskip("transformers")
    hf = transformers.T5Tokenizer.from_pretrained(TINY_ST)
    texts = _texts() + ["  spaced   out  ", "ﬁ ligature ① ＡＢＣ", "x" * 3000]
    ours = GTRTokenizer(SPIECE, sequence_length=64).tokenize(tf.constant(texts)).to_list()
    assert ours == [hf(t.strip(), truncation=True, max_length=64)["input_ids"] for t in texts]


def test_truncation_keeps_eos_last_and_pads_with_zero():
    tokenizer = GTRTokenizer(SPIECE, sequence_length=8)
    batch = tokenizer(tf.constant(["word " * 50, "", "wing"]))
    ids = batch["token_ids"].numpy()
    assert ids.shape == (3, 8)
    assert ids[0, -1] == EOS_ID and (ids[0, :-1] != EOS_ID).all()
    assert ids[1].tolist() == [EOS_ID] + [0] * 7
    assert batch["padding_mask"].numpy()[1].tolist() == [1] + [0] * 7


def test_with_length_shares_the_model_and_round_trips_config(tmp_path):
    tokenizer = GTRTokenizer(SPIECE, sequence_length=512, lowercase=True)
    short = tokenizer.with_length(64)
    assert short.proto is tokenizer.proto and short.sequence_length == 64 and short.lowercase
    tokenizer.save_assets(str(tmp_path))
    clone = GTRTokenizer.from_config(tokenizer.get_config())
    clone.load_assets(str(tmp_path))
    text = tf.constant(["Upper CASE"])
    assert clone.tokenize(text).to_list() == tokenizer.tokenize(text).to_list()
    assert tokenizer.tokenize(text).to_list() == tokenizer.tokenize(tf.constant(["upper case"])).to_list()


def test_trained_model_has_t5_special_ids(tmp_path):
    path = train_sentencepiece(["the wing lift", "boundary layer flow"] * 200, tmp_path / "sp.model", 60)
    tokenizer = GTRTokenizer(str(path))
    assert tokenizer.vocabulary_size() <= 60
    assert tokenizer.tokenize(tf.constant(["wing"])).to_list()[0][-1] == EOS_ID
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
    assert [sp.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
