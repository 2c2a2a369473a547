"""`RerankerBertTokenizer`: BERT's WordPiece tokenizer as Hugging Face's fast tokenizer runs it, in the graph."""

import keras
import keras_hub
import tensorflow as tf
import tensorflow_text
from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize

from gtr_keras.models.reranker.reranker_bert_backbone import RerankerBertBackbone

MAX_WORD_CHARACTERS = 100  # Hugging Face's `max_input_chars_per_word`: a longer word is one unknown token
_REMOVED = r"[\x{0}\x{FFFD}\p{Cc}\p{Cf}\p{Co}\p{Cs}]"  # `clean_text`: control characters (tabs and newlines are spaces)
_SPACES = r"[\t\n\r\p{Z}]"


@keras.saving.register_keras_serializable(package="gtr_keras")
class RerankerBertTokenizer(keras_hub.models.BertTokenizer):
    """keras-hub's `BertTokenizer` (its vocabulary asset and special tokens) with the text normalisation of
    Hugging Face's `BertNormalizer` and `BertPreTokenizer`, which cross-encoder checkpoints are trained with.

    In order: control characters, NUL and U+FFFD removed, every whitespace character a space
    (`clean_text`); with `strip_accents` (by default: with `lowercase`), NFD and the non-spacing marks
    removed; with `lowercase`, Unicode lower case (not keras-hub's NFKC case folding, which turns "ﬁ" into
    "fi" where BERT's tokenizer does not); then split at spaces, punctuation and CJK characters, and
    WordPiece with words of more than 100 characters (not bytes) as one unknown token. `tokenize` gives the
    pieces alone, without `[CLS]` and `[SEP]` (the preprocessor adds them). Text is tokenised as plain text:
    a literal `"[SEP]"` in the input is not the separator token (Hugging Face's tokenizer would make it one).

    Args:
        vocabulary: the WordPiece vocabulary (a list of pieces, or a `vocab.txt` path).
        lowercase: lower-case the text (`do_lower_case`).
        strip_accents: remove accents; None: as `lowercase` (Hugging Face's default).

    Example:
    >>> tokenizer = RerankerBertTokenizer("vocab.txt", lowercase=True)
    >>> tokenizer.tokenize(tf.constant(["Café naïve"])).to_list()  # doctest: +SKIP
    [[2043, 2001]]
    """

    backbone_cls = RerankerBertBackbone

    def __init__(self, vocabulary=None, lowercase=False, strip_accents=None, **kwargs):
        self.hf_strip_accents = lowercase if strip_accents is None else strip_accents
        super().__init__(vocabulary=vocabulary, lowercase=lowercase, **kwargs)

    def _set_vocabulary_tf(self):
        with tf.init_scope():  # the table outlives any graph this is first called in
            self._fast_word_piece = tensorflow_text.FastWordpieceTokenizer(
                vocab=self.vocabulary,
                token_out_type=tf.int32,
                suffix_indicator=self.suffix_indicator,
                unknown_token=self.oov_token,
                max_bytes_per_word=4 * MAX_WORD_CHARACTERS,  # UTF-8: at most 4 bytes a character
                no_pretokenization=True,
            )

    def tokenize(self, inputs):
        """WordPiece ids of each text, as a `tf.RaggedTensor` `[batch, (pieces)]` (no special tokens).

        Args:
            inputs: a batch of strings `[batch]`.
        """
        self._check_vocabulary()
        if self._fast_word_piece is None:
            self._set_vocabulary_tf()
        text = tf.strings.unicode_transcode(
            tf.convert_to_tensor(inputs, tf.string), "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        text = tf.strings.regex_replace(tf.strings.regex_replace(text, r"[\t\n\r]", " "), _REMOVED, "")
        text = tf.strings.regex_replace(text, _SPACES, " ")
        if self.hf_strip_accents:
            text = tf.strings.regex_replace(tensorflow_text.normalize_utf8(text, "NFD"), r"\p{Mn}", "")
        if self.lowercase:
            text = tf.strings.lower(text, encoding="utf-8")
        words = pretokenize(text, lowercase=False, strip_accents=False, split=True, split_on_cjk=self.split_on_cjk)
        long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > MAX_WORD_CHARACTERS
        words = words.with_flat_values(tf.where(long, self.oov_token, words.flat_values))
        return self._fast_word_piece.tokenize(words).merge_dims(-2, -1).with_row_splits_dtype(tf.int64)

    def get_config(self):
        return {**super().get_config(), "strip_accents": self.hf_strip_accents}
