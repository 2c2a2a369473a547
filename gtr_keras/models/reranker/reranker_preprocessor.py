"""`RerankerPreprocessor`: (query, document) string pairs to a cross-encoder's inputs, cut as Hugging Face cuts."""

import keras
import keras_hub
import tensorflow as tf
from keras_hub.src.utils.tensor_utils import preprocessing_function

from gtr_keras.errors import UserError

SEQUENCE_LENGTH = 512


def longest_first(first, second, budget):
    """How many tokens of each side of a pair Hugging Face's `longest_first` truncation keeps.

    The rule of the `tokenizers` library (the fast tokenizers that sentence-transformers' `CrossEncoder`
    runs): a pair within `budget` stays whole; else the shorter side stays whole when it fits in half
    the budget and the longer one gets the rest; else each gets half, the longer side the odd token
    (the first side when both are as long).

    Args:
        first, second: int tensors `[batch]`, the tokens of each side.
        budget: the tokens both sides may have together (the model's length less its special tokens).

    Returns:
        `(kept_first, kept_second)`, int tensors `[batch]`.

    Example:
    >>> [t.numpy().tolist() for t in longest_first(tf.constant([3, 30, 30]), tf.constant([30, 3, 30]), 10)]
    [[3, 7, 5], [7, 3, 5]]
    """
    budget = tf.constant(budget, first.dtype)
    swap = first > second
    short, long = tf.minimum(first, second), tf.maximum(first, second)
    long_kept = tf.where(short > budget, short, tf.maximum(short, budget - short))
    halves = short + long_kept > budget
    short_kept = tf.minimum(short, tf.where(halves, budget // 2, short))
    long_kept = tf.minimum(long, tf.where(halves, budget // 2 + budget % 2, long_kept))
    over = first + second > budget
    kept_first = tf.where(over, tf.where(swap, long_kept, short_kept), first)
    kept_second = tf.where(over, tf.where(swap, short_kept, long_kept), second)
    return kept_first, kept_second


def _head(ids, count):
    positions = tf.ragged.range(ids.row_lengths())
    return tf.ragged.boolean_mask(ids, positions < tf.expand_dims(count, 1))


@keras.saving.register_keras_serializable(package="gtr_keras")
class RerankerPreprocessor(keras_hub.models.TextClassifierPreprocessor):
    """Packs (query, document) pairs for a `Reranker`, as sentence-transformers' `CrossEncoder` does.

    Each side is tokenised alone, the pair cut to `sequence_length` tokens with Hugging Face's
    `longest_first` rule (`longest_first`: the longer side loses tokens first, so a long document is cut
    and a short query kept whole), and packed with the tokenizer's special tokens: `[CLS] q [SEP] d [SEP]`
    with segment ids 0 then 1 for a BERT WordPiece tokenizer, `<s> q </s></s> d </s>` for XLM-RoBERTa's.
    Batches are padded to their longest pair.

    Args:
        tokenizer: a `RerankerBertTokenizer` or a `RerankerXLMRobertaTokenizer`.
        sequence_length: the pair's token budget, special tokens included (the checkpoint's
            `model_max_length`).

    Call arguments:
        x: `{"query": queries, "document": documents}`, string tensors `[batch]` (a dict: keras-hub reads a
            tuple as `(x, y)`).
        y, sample_weight: passed through unaltered.

    Example:
    >>> preprocessor = RerankerPreprocessor(RerankerBertTokenizer("vocab.txt", lowercase=True), 40)
    >>> preprocessor({"query": ["what is lift?"], "document": ["lift on a wing"]})["token_ids"].shape  # doctest: +SKIP
    TensorShape([1, 11])
    """

    def __init__(self, tokenizer, sequence_length=SEQUENCE_LENGTH, **kwargs):
        kwargs.pop("truncate", None)
        super().__init__(tokenizer, sequence_length=sequence_length, **kwargs)
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, int) or sequence_length < 5:
            raise UserError(f"sequence_length must be an integer of at least 5, got {sequence_length!r}")

    def build(self, input_shape):
        # The packing is `pair_token_ids`'; keras-hub's packer is not used.
        self.built = True

    @property
    def xlm_roberta(self):
        return isinstance(self.tokenizer, keras_hub.models.XLMRobertaTokenizer)

    @property
    def special_tokens(self):
        """The special tokens a pair gets: 3 for BERT, 4 for XLM-RoBERTa."""
        return 4 if self.xlm_roberta else 3

    @property
    def pad_id(self):
        return self.tokenizer.pad_token_id

    def pair_token_ids(self, queries, documents):
        """`{"token_ids", "segment_ids"}` ragged int32 `[batch, (length)]` of the packed, cut pairs."""
        first = self.tokenizer.tokenize(tf.convert_to_tensor(queries, tf.string))
        second = self.tokenizer.tokenize(tf.convert_to_tensor(documents, tf.string))
        kept = longest_first(first.row_lengths(), second.row_lengths(), self.sequence_length - self.special_tokens)
        first, second = _head(first, kept[0]), _head(second, kept[1])
        rows = first.nrows()

        def token(token_id, count=1):
            return tf.RaggedTensor.from_tensor(tf.fill([rows, count], tf.constant(token_id, first.dtype)))

        if self.xlm_roberta:
            start, end = self.tokenizer.start_token_id, self.tokenizer.end_token_id
            token_ids = tf.concat([token(start), first, token(end, 2), second, token(end)], axis=1)
            return {"token_ids": token_ids, "segment_ids": tf.zeros_like(token_ids)}
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        token_ids = tf.concat([token(cls), first, token(sep), second, token(sep)], axis=1)
        first_segment = tf.zeros_like(tf.concat([token(cls), first, token(sep)], axis=1))
        segment_ids = tf.concat([first_segment, tf.ones_like(tf.concat([second, token(sep)], axis=1))], axis=1)
        return {"token_ids": token_ids, "segment_ids": segment_ids}

    def pad(self, pairs, length=None):
        """Model inputs `{"token_ids", "segment_ids", "padding_mask"}` int32 `[batch, length]` of
        `pair_token_ids`' ragged ids, padded to `length` (default: the longest pair)."""
        shape = [None, length]
        return {
            "token_ids": pairs["token_ids"].to_tensor(default_value=self.pad_id, shape=shape),
            "segment_ids": pairs["segment_ids"].to_tensor(default_value=0, shape=shape),
            "padding_mask": tf.ones_like(pairs["token_ids"]).to_tensor(default_value=0, shape=shape),
        }

    def features(self, queries, documents):
        """Model inputs of a batch of pairs (`pad` of `pair_token_ids`)."""
        return self.pad(self.pair_token_ids(queries, documents))

    @preprocessing_function
    def call(self, x, y=None, sample_weight=None):
        return keras.utils.pack_x_y_sample_weight(self.features(x["query"], x["document"]), y, sample_weight)

    def get_config(self):
        config = super().get_config()
        config.pop("truncate", None)
        return config
