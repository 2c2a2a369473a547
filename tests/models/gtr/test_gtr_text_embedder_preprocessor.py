import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_ST

from gtr_keras.errors import UserError
from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.models.gtr.gtr_tokenizer import EOS_ID, GTRTokenizer

SPIECE = os.path.join(TINY_ST, "spiece.model")


def test_preprocessor_basics():
    """What keras-hub's `run_preprocessor_test` checks: the output, and the same output after `from_config`."""
    preprocessor = GTRTextEmbedderPreprocessor(GTRTokenizer(SPIECE), sequence_length=8, pad_to_length=True)
    texts = ["the wing lift", "boundary layer " * 10]
    output = preprocessor(texts)
    assert output["token_ids"].shape == (2, 8)
    np.testing.assert_array_equal(output["padding_mask"], output["token_ids"] != 0)
    clone = GTRTextEmbedderPreprocessor.from_config(preprocessor.get_config())
    clone.tokenizer.set_proto(preprocessor.tokenizer.proto)  # a config holds no assets
    np.testing.assert_array_equal(clone(texts)["token_ids"], output["token_ids"])


def test_truncation_keeps_eos_last_and_pads_with_zero():
    preprocessor = GTRTextEmbedderPreprocessor(GTRTokenizer(SPIECE), sequence_length=8)
    batch = preprocessor(tf.constant(["word " * 50, "", "wing"]))
    ids = batch["token_ids"].numpy()
    assert ids.shape == (3, 8)
    assert ids[0, -1] == EOS_ID and (ids[0, :-1] != EOS_ID).all()
    assert ids[1].tolist() == [EOS_ID] + [0] * 7
    assert batch["padding_mask"].numpy()[1].tolist() == [1] + [0] * 7


def test_preprocessor_budgets_and_static_padding():
    preprocessor = GTRTextEmbedderPreprocessor(
        GTRTokenizer(SPIECE), sequence_length=12, query_length=5, pad_to_length=True
    )
    assert preprocessor.features(["wing"], kind="query")["token_ids"].shape == (1, 5)
    assert preprocessor(["wing"])["token_ids"].shape == (1, 12)
    single = preprocessor("wing lift")
    assert single["token_ids"].shape == (12,) and single["token_ids"][-1] == 0
    towers = preprocessor.tower_features(
        {
            "query": tf.constant(["a", "b"]),
            "positive": tf.constant(["c", "d"]),
            "negatives": tf.constant([["e"], ["f"]]),
        }
    )
    assert towers["query"]["token_ids"].shape == (2, 5) and towers["negatives"]["padding_mask"].shape == (2, 1, 12)
    with pytest.raises(UserError, match="query_length must be an integer of at least 2"):
        GTRTextEmbedderPreprocessor(GTRTokenizer(SPIECE), query_length=1)


def test_a_batch_is_padded_to_its_longest_row_without_pad_to_length():
    preprocessor = GTRTextEmbedderPreprocessor(GTRTokenizer(SPIECE), sequence_length=64)
    lengths = [len(ids) for ids in preprocessor.token_ids(["wing", "the lift of a wing"]).to_list()]
    assert preprocessor(["wing", "the lift of a wing"])["token_ids"].shape == (2, max(lengths))


def test_length_and_token_ids_follow_the_kind():
    preprocessor = GTRTextEmbedderPreprocessor(GTRTokenizer(SPIECE), sequence_length=6, query_length=3)
    assert (preprocessor.length("query"), preprocessor.length("document")) == (3, 6)
    text = ["boundary layer flow over a wing"]
    assert len(preprocessor.token_ids(text, "query").to_list()[0]) == 3
    assert len(preprocessor.token_ids(text).to_list()[0]) == 6
    with pytest.raises(UserError, match="^kind must be 'query' or 'document', got 'passage'$"):
        preprocessor.length("passage")


def test_tower_features_leave_out_other_entries_and_a_missing_query():
    preprocessor = GTRTextEmbedderPreprocessor(GTRTokenizer(SPIECE), sequence_length=8)
    batch = {"positive": tf.constant(["wing", "lift"]), "positive_id": tf.constant([1, 2])}
    towers = preprocessor.tower_features(batch)
    assert set(towers) == {"positive"} and set(towers["positive"]) == {"token_ids", "padding_mask"}
    negatives = preprocessor.tower_features(
        {"positive": tf.constant(["wing"]), "negatives": tf.constant([["lift", "the boundary layer of a wing"]])}
    )["negatives"]
    flat = preprocessor.features(tf.constant(["lift", "the boundary layer of a wing"]))
    np.testing.assert_array_equal(negatives["token_ids"].numpy()[0], flat["token_ids"].numpy())


def test_labels_and_sample_weights_pass_through():
    preprocessor = GTRTextEmbedderPreprocessor(GTRTokenizer(SPIECE), sequence_length=8)
    x, y, sample_weight = preprocessor(["wing"], y=np.array([3]), sample_weight=np.array([0.5]))
    assert x["token_ids"].shape[0] == 1
    assert np.asarray(y).tolist() == [3] and np.asarray(sample_weight).tolist() == [0.5]


def test_config_round_trip_keeps_the_budgets():
    preprocessor = GTRTextEmbedderPreprocessor(
        GTRTokenizer(SPIECE), sequence_length=20, query_length=7, pad_to_length=True
    )
    config = preprocessor.get_config()
    assert "truncate" not in config
    assert (config["sequence_length"], config["query_length"], config["pad_to_length"]) == (20, 7, True)
