"""SentencePiece tokenisation in the TensorFlow graph (TF Text's `FastSentencepieceTokenizer`), with T5's
conventions, as a keras-hub tokenizer."""

import hashlib
import io
import json
import os
from collections.abc import Iterable
from typing import Any

import keras
import keras_hub
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text
from keras_hub.src.utils import preset_utils

from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.utils import files

PAD_ID = 0
EOS_ID = 1
QUERY_LENGTH = 64
DOCUMENT_LENGTH = 512
VOCABULARY_FILE = "vocabulary.spm"  # keras-hub's SentencePiece asset name
METADATA_FILE = "metadata.json"  # keras-hub's preset metadata, where the vocabulary's SHA-256 is recorded
VOCABULARY_SHA256 = "vocabulary_sha256"


def pad_token_ids(token_ids, length=None):
    """Model inputs from ragged token ids: `{"token_ids", "padding_mask"}` int `[batch, length]`.

    Args:
        token_ids: a `tf.RaggedTensor` `[batch, (length)]`.
        length: pad to this length (static shapes, e.g. for TPUs); by default
            to the longest row.
    """
    shape = [None, length]
    return {
        "token_ids": token_ids.to_tensor(default_value=PAD_ID, shape=shape),
        "padding_mask": tf.ones_like(token_ids).to_tensor(default_value=0, shape=shape),
    }


@keras.saving.register_keras_serializable(package="gtr_keras")
class GTRTokenizer(keras_hub.tokenizers.SentencePieceTokenizer):
    """T5's SentencePiece tokenizer, in the TensorFlow graph, as a keras-hub tokenizer.

    Follows Hugging Face's `T5Tokenizer` as sentence-transformers calls it:
    invalid UTF-8 replaced by U+FFFD (as Python's `decode(errors="replace")`
    does), surrounding whitespace stripped, SentencePiece pieces, and (in
    `token_ids`, which the preprocessor, the training data and the exports
    use) EOS (id 1) appended with truncation that keeps EOS as the last
    token, so at most `sequence_length - 1` pieces of text are kept. Pad id 0.

    The pieces are TF Text's `FastSentencepieceTokenizer`'s, built from the
    same model proto: the `sentencepiece` library's ids, exact score ties
    between segmentations included (TF Text's older `SentencepieceOp` broke
    those otherwise; docs/models.md), and an op that TF Serving and LiteRT
    (with TF Text's custom ops) run. The model is a constant of the graph,
    not a resource.

    `tokenize` gives the pieces alone (keras-hub's convention: special
    tokens are the preprocessor's business). It always runs TensorFlow ops,
    eagerly or in a graph. Text is tokenised as plain text: a literal
    `"</s>"` in the input is not turned into EOS (Hugging Face's tokenizer
    would). The SentencePiece model is saved as an asset
    (`assets/tokenizer/vocabulary.spm` in a preset directory).

    Args:
        proto: the SentencePiece model, as bytes or a path to `spiece.model`.
        lowercase: lowercase the text first (sentence-transformers'
            `do_lower_case`; False for GTR).

    Example:
    >>> tokenizer = GTRTokenizer(spiece_model)
    >>> tokenizer.token_ids(["what is a dual encoder?", ""], sequence_length=64)[1].numpy()
    array([1], dtype=int32)
    """

    backbone_cls = GTRBackbone

    def __init__(self, proto: bytes | str | None = None, lowercase: bool = False, **kwargs: Any):
        self._add_special_token("</s>", "end_token")
        self._add_special_token("<pad>", "pad_token")
        super().__init__(proto=proto, **kwargs)
        self.lowercase = lowercase

    def load_preset_assets(self, preset):
        """Reads the vocabulary of a preset: its own `assets/tokenizer/vocabulary.spm`, whose SHA-256 must be
        the one its `metadata.json` records (presets saved before it was recorded are not checked)."""
        if self.config_file != os.path.basename(self.config_file) or self.config_file.startswith("."):
            raise CheckpointError(
                f"{preset}: the tokenizer's config_file {self.config_file!r} is not a file name: a model "
                "directory reads only its own files"
            )
        super().load_preset_assets(preset)
        if preset_utils.check_file_exists(preset, METADATA_FILE):
            with open(preset_utils.get_file(preset, METADATA_FILE), encoding="utf-8") as f:
                recorded = json.load(f).get(VOCABULARY_SHA256)
            if recorded and recorded != hashlib.sha256(self.proto).hexdigest():
                raise CheckpointError(
                    f"{preset}/assets/tokenizer/{VOCABULARY_FILE}: not the vocabulary this model was saved with "
                    f"({METADATA_FILE} records SHA-256 {recorded[:12]}..., the file has "
                    f"{hashlib.sha256(self.proto).hexdigest()[:12]}...)"
                )

    def load_assets(self, dir_path):
        # Reads the bytes here: keras-hub's `load_assets` passes a path, which safe mode refuses.
        path = os.path.join(dir_path, VOCABULARY_FILE)
        proto = files.read_bytes(path)
        if not proto:
            raise CheckpointError(f"{path}: empty (no SentencePiece model)")
        try:
            spm.SentencePieceProcessor(model_proto=proto)
        except Exception as error:  # sentencepiece raises RuntimeError or its own errors
            raise CheckpointError(f"{path}: not a SentencePiece model ({error})") from None
        self.set_proto(proto)

    def _set_proto_tf(self, proto):
        with tf.init_scope():  # the model's constant outlives any graph this is first called in
            self._sentence_piece = tensorflow_text.FastSentencepieceTokenizer(proto)

    def tokenize(self, inputs, clean_text=True):
        """SentencePiece ids of each text, as a `tf.RaggedTensor` `[batch, (pieces)]` (no EOS).

        Args:
            inputs: a batch of strings `[batch]`.
            clean_text: first replace invalid UTF-8 by U+FFFD, strip surrounding whitespace and (with
                `lowercase`) lowercase, with TensorFlow's string ops. False leaves the text to
                SentencePiece's own normalisation, which drops surrounding whitespace too (T5's models
                remove extra whitespace): the same ids for valid UTF-8, without ops that LiteRT lacks.
        """
        self._check_vocabulary()
        self._maybe_initialized_tf()
        strings = tf.convert_to_tensor(inputs, tf.string)
        if clean_text:
            strings = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
            strings = tf.strings.strip(strings)
            if self.lowercase:
                strings = tf.strings.lower(strings, encoding="utf-8")
        return self._sentence_piece.tokenize(strings).with_row_splits_dtype(tf.int64)

    def token_ids(self, inputs: Any, sequence_length: int, clean_text: bool = True) -> Any:
        """Model token ids: `[batch, (length)]` ragged, truncated to `sequence_length` with EOS kept last.

        Args:
            inputs: a batch of strings `[batch]`.
            sequence_length: the token budget, EOS included (>= 2).
            clean_text: as for `tokenize`.
        """
        pieces = self.tokenize(inputs, clean_text)[:, : sequence_length - 1]
        eos = tf.fill([pieces.nrows(), 1], tf.constant(EOS_ID, pieces.dtype))
        return tf.concat([pieces, tf.RaggedTensor.from_tensor(eos)], axis=1)

    def dense_token_ids(self, inputs: Any, sequence_length: int, clean_text: bool = True) -> Any:
        """`pad_token_ids(self.token_ids(inputs, sequence_length, clean_text))` with dense ops only (a gather,
        comparisons and `where`, which LiteRT has as builtins; no ragged ops).

        Args:
            inputs: a batch of strings `[batch]`.
            sequence_length: the token budget, EOS included (>= 2).
            clean_text: as for `tokenize`.
        """
        pieces = self.tokenize(inputs, clean_text)
        starts = pieces.row_splits[:-1]
        lengths = tf.expand_dims(tf.minimum(pieces.row_splits[1:] - starts, sequence_length - 1), 1)
        width = tf.reduce_max(tf.concat([lengths[:, 0] + 1, [0]], 0))  # 0 for no texts, as `to_tensor` gives
        positions = tf.expand_dims(tf.range(width), 0)
        values = tf.concat([pieces.values, [PAD_ID]], 0)  # a last id to gather past each row's end
        text = tf.gather(values, tf.minimum(tf.expand_dims(starts, 1) + positions, tf.size(values, tf.int64) - 1))
        token_ids = tf.where(positions < lengths, text, tf.where(positions == lengths, EOS_ID, PAD_ID))
        return {"token_ids": token_ids, "padding_mask": tf.cast(positions <= lengths, token_ids.dtype)}

    def get_config(self):
        return {**super().get_config(), "lowercase": self.lowercase}


def train_sentencepiece(
    texts: Iterable[str],
    output_path: str | os.PathLike[str],
    vocabulary_size: int = 8000,
    seed_sentences: int = 200_000,
    case_folding: bool = False,
    num_threads: int | None = None,
):
    """Trains a T5-style SentencePiece unigram model on `texts`.

    The special pieces sit where T5's do (`<pad>` 0, `</s>` 1, `<unk>` 2, no
    BOS), with T5's `nmt_nfkc` normalisation, so the result works with
    `GTRTokenizer` and with Hugging Face's `T5Tokenizer`.

    Args:
        texts: an iterable of training strings.
        output_path: where to write the `.model` file.
        vocabulary_size: pieces in the model (T5 adds 100 sentinel ids on top).
        seed_sentences: at most this many texts are sampled for training.
        case_folding: normalise with NFKC and Unicode case folding
            (`nmt_nfkc_cf`) instead: the model, and every tokenizer that
            loads it, then maps "WING", "Wing" and "wing" to the same pieces.
        num_threads: SentencePiece's training threads (default: one a CPU core).

    Example:
    >>> train_sentencepiece(corpus_texts, "spiece.model", vocabulary_size=1000)
    """
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=(t for t in texts if t.strip()),
        model_writer=model,
        vocab_size=vocabulary_size,
        model_type="unigram",
        pad_id=PAD_ID,
        eos_id=EOS_ID,
        unk_id=2,
        bos_id=-1,
        normalization_rule_name="nmt_nfkc_cf" if case_folding else "nmt_nfkc",
        character_coverage=0.9995,
        input_sentence_size=seed_sentences,
        shuffle_input_sentence=True,
        max_sentence_length=16384,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=num_threads or os.cpu_count() or 1,
    )
    with open(output_path, "wb") as f:
        f.write(model.getvalue())
    return output_path
