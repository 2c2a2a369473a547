"""SentencePiece tokenisation in the TensorFlow graph, with T5's conventions."""

import io
import os

import keras
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text

PAD_ID = 0
EOS_ID = 1
QUERY_LENGTH = 64
DOCUMENT_LENGTH = 512


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


class GTRTokenizer(keras.layers.Layer):
    """Turns raw strings into padded T5 token ids inside the graph.

    Follows Hugging Face's `T5Tokenizer` as sentence-transformers calls it:
    surrounding whitespace stripped, SentencePiece pieces, EOS (id 1) appended,
    pad id 0, and truncation that keeps EOS as the last token, so at most
    `sequence_length - 1` pieces of text are kept. Batches are padded to their
    longest row, not to `sequence_length`.

    Text is tokenised as plain text: a literal `"</s>"` in the input is not
    turned into EOS (Hugging Face's tokenizer would).

    Args:
        proto: the SentencePiece model, as bytes or a path to `spiece.model`.
        sequence_length: maximum tokens per text, EOS included (64 for queries,
            512 for documents in GTR).
        lowercase: lowercase the text first (sentence-transformers'
            `do_lower_case`; False for GTR).

    Example:
    >>> tokenizer = GTRTokenizer("spiece.model", sequence_length=64)
    >>> batch = tokenizer(tf.constant(["what is a dual encoder?", ""]))
    >>> batch["token_ids"][1].numpy()[:2]
    array([1, 0], dtype=int32)
    """

    def __init__(self, proto=None, sequence_length=DOCUMENT_LENGTH, lowercase=False, **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = sequence_length
        self.lowercase = lowercase
        self.proto = None
        if proto is not None:
            self.set_proto(proto)

    def set_proto(self, proto):
        if isinstance(proto, (str, os.PathLike)):
            with open(proto, "rb") as f:
                proto = f.read()
        self.proto = proto
        self.sentencepiece = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)

    def with_length(self, sequence_length):
        """Returns a tokenizer sharing this SentencePiece model with another length."""
        return GTRTokenizer(self.proto, sequence_length, self.lowercase, name=f"{self.name}_{sequence_length}")

    def tokenize(self, strings):
        """Token ids as a `tf.RaggedTensor` `[batch, (length)]`, EOS included."""
        strings = tf.strings.strip(tf.convert_to_tensor(strings, tf.string))
        if self.lowercase:
            strings = tf.strings.lower(strings, encoding="utf-8")
        pieces = self.sentencepiece.tokenize(strings)[:, : self.sequence_length - 1]
        eos = tf.fill([pieces.nrows(), 1], tf.constant(EOS_ID, pieces.dtype))
        return tf.concat([pieces, tf.RaggedTensor.from_tensor(eos)], axis=1)

    def call(self, strings):
        return pad_token_ids(self.tokenize(strings))

    def vocabulary_size(self):
        return int(self.sentencepiece.vocab_size())

    def get_config(self):
        return {**super().get_config(), "sequence_length": self.sequence_length, "lowercase": self.lowercase}

    def save_assets(self, dir_path):
        with open(os.path.join(dir_path, "spiece.model"), "wb") as f:
            f.write(self.proto)

    def load_assets(self, dir_path):
        self.set_proto(os.path.join(dir_path, "spiece.model"))


def train_sentencepiece(texts, output_path, vocabulary_size=8000, seed_sentences=200_000):
    """Trains a T5-style SentencePiece unigram model on `texts`.

    The special pieces sit where T5's do (`<pad>` 0, `</s>` 1, `<unk>` 2, no
    BOS), with T5's `nmt_nfkc` normalisation, so the result works with
    `GTRTokenizer` and with Hugging Face's `T5Tokenizer`.

    Args:
        texts: an iterable of training strings.
        output_path: where to write the `.model` file.
        vocabulary_size: pieces in the model (T5 adds 100 sentinel ids on top).
        seed_sentences: at most this many texts are sampled for training.

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
        normalization_rule_name="nmt_nfkc",
        character_coverage=0.9995,
        input_sentence_size=seed_sentences,
        shuffle_input_sentence=True,
        max_sentence_length=16384,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=os.cpu_count() or 1,
    )
    with open(output_path, "wb") as f:
        f.write(model.getvalue())
    return output_path
