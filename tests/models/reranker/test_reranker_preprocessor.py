import pytest
import tensorflow as tf

from gtr_keras.errors import UserError
from gtr_keras.models.reranker.reranker_bert_tokenizer import RerankerBertTokenizer
from gtr_keras.models.reranker.reranker_preprocessor import RerankerPreprocessor, longest_first


def hugging_faces_rule(first, second, budget):
    """`tokenizers`' `longest_first` for one pair, written out step by step (what the reference fixture shows)."""
    if first + second <= budget:
        return first, second
    swap = first > second
    short, long = (second, first) if swap else (first, second)
    long_kept = short if short > budget else max(short, budget - short)
    short_kept = short
    if short_kept + long_kept > budget:
        short_kept, long_kept = budget // 2, budget // 2 + budget % 2
    short_kept, long_kept = min(short_kept, short), min(long_kept, long)
    return (long_kept, short_kept) if swap else (short_kept, long_kept)


def test_longest_first_keeps_the_shorter_side_whole_and_cuts_the_longer():
    sizes = [(a, b) for a in range(0, 14) for b in range(0, 14)]
    for budget in (1, 6, 7):
        kept = longest_first(tf.constant([a for a, _ in sizes]), tf.constant([b for _, b in sizes]), budget)
        got = list(zip(kept[0].numpy().tolist(), kept[1].numpy().tolist()))
        assert got == [hugging_faces_rule(a, b, budget) for a, b in sizes]


def test_pairs_are_packed_with_segments_and_cut_to_the_budget():
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
    preprocessor = RerankerPreprocessor(RerankerBertTokenizer(vocabulary, lowercase=True), sequence_length=8)
    features = preprocessor({"query": [" A  b", "a"], "document": ["c c c c c c c", "B"]})
    assert features["token_ids"].numpy().tolist() == [[2, 5, 6, 3, 7, 7, 7, 3], [2, 5, 3, 6, 3, 0, 0, 0]]
    assert features["segment_ids"].numpy().tolist() == [[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0, 0]]
    assert features["padding_mask"].numpy().tolist() == [[1] * 8, [1] * 5 + [0] * 3]
    restored = RerankerPreprocessor.from_config(preprocessor.get_config())
    assert restored.sequence_length == 8


def test_a_budget_without_room_for_text_is_refused():
    with pytest.raises(UserError, match="sequence_length must be an integer of at least 5, got 4"):
        RerankerPreprocessor(RerankerBertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]), 4)
