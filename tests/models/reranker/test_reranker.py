import os

import numpy as np
import pytest
from reranker_inputs import CHECKPOINTS, PAIRS, REFERENCE

import gtr_keras
from gtr_keras.cli.main import main
from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.reranker.pair_scorer import PairScorer
from gtr_keras.models.reranker.reranker import Reranker


@pytest.mark.parametrize("family", ["bert", "xlmr"])
def test_a_converted_reranker_scores_pairs_as_sentence_transformers_cross_encoder(reranker_dirs, family):
    """`CrossEncoder(DIR).predict` (its default sigmoid) on pairs that cut either side, accents, upper case,
    unknown and control characters, long words and documents, and empty texts."""
    scorer = gtr_keras.load(reranker_dirs[family])
    assert isinstance(scorer, PairScorer) and scorer.sequence_length == REFERENCE[family]["max_length"]
    assert [ids for ids, _ in scorer.tokenize(PAIRS)] == REFERENCE[family]["token_ids"]
    scores = scorer.predict(PAIRS, batch_size=3)
    assert scores.dtype == np.float32 and scores.shape == (len(PAIRS),)
    np.testing.assert_allclose(scores, REFERENCE[family]["scores"], atol=1e-5, rtol=0)
    assert np.ptp(scores) > 0.3  # the fixture's scores spread: the comparison means something


def test_a_checkpoint_loads_directly_and_its_logits_are_the_references(reranker_dirs):
    reranker = Reranker.from_preset(CHECKPOINTS["xlmr"])
    scorer = reranker.scorer()
    items = scorer.tokenize(PAIRS)
    logits = [float(reranker(scorer_inputs(items[i : i + 1]))[0, 0]) for i in range(len(items))]
    np.testing.assert_allclose(logits, REFERENCE["xlmr"]["logits"], atol=1e-4, rtol=1e-5)


def scorer_inputs(items):
    ((ids, segments),) = items
    return {
        "token_ids": np.array([ids], np.int32),
        "segment_ids": np.array([segments], np.int32),
        "padding_mask": np.ones([1, len(ids)], np.int32),
    }


def test_scores_keep_the_input_order_whatever_the_batches(bert_scorer):
    one_by_one = bert_scorer.predict(PAIRS, batch_size=1)
    np.testing.assert_allclose(bert_scorer.predict(PAIRS[::-1], batch_size=5), one_by_one[::-1], atol=1e-6)
    assert bert_scorer.predict([]).shape == (0,)


def test_a_bfloat16_reranker_scores_near_float32(reranker_dirs):
    scores = gtr_keras.load(reranker_dirs["bert"], dtype="bfloat16").predict(PAIRS)
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, REFERENCE["bert"]["scores"], atol=0.05)


def test_the_model_directory_is_checked_file_by_file(reranker_dirs, capsys):
    assert main(["check", reranker_dirs["xlmr"]]) == 0
    assert "reranker format" in capsys.readouterr().out
    assert sorted(os.listdir(os.path.join(reranker_dirs["xlmr"], "assets", "tokenizer"))) == ["vocabulary.spm"]


def test_pairs_that_are_not_pairs_of_strings_are_refused(bert_scorer):
    with pytest.raises(UserError, match=r"^pairs: item 1 is not a \(query, document\) pair of strings"):
        bert_scorer.predict([("a", "b"), ("a", "b", "c")])
    with pytest.raises(UserError, match="item 0"):
        bert_scorer.predict(["just a text"])


def test_a_pair_holding_a_lone_surrogate_is_refused_naming_it(bert_scorer):
    with pytest.raises(UserError, match=r"^pairs: item 1's document: a lone surrogate \(U\+DCFF at character 2\)"):
        bert_scorer.predict([("a", "b"), ("a", "b \udcff")])
    with pytest.raises(UserError, match=r"^pairs: item 0's query: a lone surrogate"):
        bert_scorer.predict([("\ud800", "b")])


def test_a_reranker_is_not_an_embedding_model_nor_the_reverse(reranker_dirs, tiny_model_dir):
    with pytest.raises(CheckpointError, match="a reranker .a cross-encoder., not an embedding model"):
        GTRTextEmbedder.from_preset(reranker_dirs["bert"])
    with pytest.raises(CheckpointError, match="not a reranker"):
        Reranker.from_preset(tiny_model_dir)
    with pytest.raises(UserError, match="takes no query_length"):
        gtr_keras.load(reranker_dirs["bert"], document_length=64)
