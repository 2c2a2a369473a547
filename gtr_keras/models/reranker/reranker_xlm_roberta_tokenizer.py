"""`RerankerXLMRobertaTokenizer`: XLM-RoBERTa's SentencePiece tokenizer with the `sentencepiece` library's ids."""

import keras
import keras_hub
import tensorflow as tf
import tensorflow_text


@keras.saving.register_keras_serializable(package="gtr_keras")
class RerankerXLMRobertaTokenizer(keras_hub.models.XLMRobertaTokenizer):
    """keras-hub's `XLMRobertaTokenizer` (its SentencePiece asset and fairseq's ids: `<s>` 0, `<pad>` 1, `</s>` 2,
    `<unk>` 3, the model's pieces from 4) on TF Text's `FastSentencepieceTokenizer`.

    keras-hub tokenises with TF Text's older `SentencepieceOp`, which breaks exact score ties between
    segmentations otherwise than the `sentencepiece` library and Hugging Face's tokenizer (docs/models.md,
    "The tokenizer"); this op gives their ids, as `GTRTokenizer` does for GTR. Invalid UTF-8 is read with each
    bad sequence replaced by U+FFFD, and NEL (U+0085) is a space, as Hugging Face's pre-tokeniser splits at it.
    `tokenize` gives the pieces alone, without `<s>` and `</s>`.

    Args:
        proto: the SentencePiece model (`sentencepiece.bpe.model`), as bytes or a path.

    Example:
    >>> tokenizer = RerankerXLMRobertaTokenizer("sentencepiece.bpe.model")
    >>> tokenizer.tokenize(tf.constant(["the boundary layer"])).to_list()  # doctest: +SKIP
    [[4, 5, 61, 12]]
    """

    def _set_proto_tf(self, proto):
        with tf.init_scope():  # the model's constant outlives any graph this is first called in
            self._sentence_piece = tensorflow_text.FastSentencepieceTokenizer(proto)

    def tokenize(self, inputs):
        """Fairseq ids of each text's pieces, as a `tf.RaggedTensor` `[batch, (pieces)]`.

        Args:
            inputs: a batch of strings `[batch]`.
        """
        self._check_vocabulary()
        self._maybe_initialized_tf()
        text = tf.strings.unicode_transcode(
            tf.convert_to_tensor(inputs, tf.string), "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        # Hugging Face splits words at Unicode whitespace after the model's normalisation, which keeps NEL (U+0085):
        # the one whitespace character the SentencePiece library would read as text (tested against every one).
        pieces = self._sentence_piece.tokenize(tf.strings.regex_replace(text, r"\x{85}", " "))
        ids = tf.where(pieces.flat_values == 0, self.unk_token_id, pieces.flat_values + 1)
        return pieces.with_flat_values(tf.cast(ids, tf.int32)).with_row_splits_dtype(tf.int64)
