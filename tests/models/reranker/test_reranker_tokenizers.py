"""The rerankers' tokenizers give Hugging Face's ids (the fixture's reference, made by `transformers`) on texts of
Unicode cases the pairs leave out: Greek final sigma, Turkish dotted I, sharp s, ligatures, combining marks,
format characters, right-to-left scripts, CJK, line and paragraph separators, emoji sequences, full-width forms,
words of over 100 characters."""

import json
import os

import pytest
import tensorflow as tf
from reranker_inputs import CHECKPOINTS, REFERENCE

from gtr_keras.models.reranker.reranker_bert_tokenizer import RerankerBertTokenizer
from gtr_keras.models.reranker.reranker_xlm_roberta_tokenizer import RerankerXLMRobertaTokenizer


def bert_tokenizer():
    with open(os.path.join(CHECKPOINTS["bert"], "tokenizer.json"), encoding="utf-8") as f:
        model = json.load(f)["model"]
    vocabulary = sorted(model["vocab"], key=model["vocab"].get)
    return RerankerBertTokenizer(vocabulary, lowercase=True)


def xlm_roberta_tokenizer():
    with open(os.path.join(CHECKPOINTS["xlmr"], "sentencepiece.bpe.model"), "rb") as f:
        return RerankerXLMRobertaTokenizer(f.read())


@pytest.mark.parametrize("family, make", [("bert", bert_tokenizer), ("xlmr", xlm_roberta_tokenizer)])
def test_texts_of_every_unicode_case_get_hugging_faces_ids(family, make):
    tokenizer = make()
    got = tokenizer.tokenize(tf.constant(REFERENCE["texts"])).to_list()
    for text, ids, expected in zip(REFERENCE["texts"], got, REFERENCE[family]["text_token_ids"]):
        assert ids == expected, text
