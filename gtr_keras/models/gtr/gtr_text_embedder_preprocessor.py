"""`GTRTextEmbedderPreprocessor`: raw strings to GTR model inputs, with a token budget per text kind."""

from typing import Any, Literal

import keras
import keras_hub
import tensorflow as tf
from keras_hub.src.utils.tensor_utils import preprocessing_function

from gtr_keras.errors import UserError
from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.gtr_tokenizer import (
    DOCUMENT_LENGTH,
    QUERY_LENGTH,
    GTRTokenizer,
    pad_token_ids,
)

KINDS = ("query", "document")


@keras.saving.register_keras_serializable(package="gtr_keras")
class GTRTextEmbedderPreprocessor(keras_hub.models.TextEmbedderPreprocessor):
    """Tokenises and pads texts for `GTRTextEmbedder`, with T5's conventions.

    Each text becomes its SentencePiece ids, truncated so that EOS (id 1) is
    still the last token, then the batch is padded with id 0 to its longest
    row (or to the budget with `pad_to_length`, for static shapes on TPUs).
    GTR gives queries and documents different budgets (64 and 512 tokens):
    calling the layer uses the document budget (`sequence_length`), as
    keras-hub's `encode_text` does; `kind="query"` in `token_ids` and
    `features` uses `query_length`.

    Args:
        tokenizer: a `GTRTokenizer`.
        sequence_length: token budget of documents (and of plain calls), EOS included.
        query_length: token budget of queries, EOS included.
        pad_to_length: pad every batch to its budget instead of its longest row.

    Call arguments:
        x: a string or a batch of strings.
        y, sample_weight: passed through unaltered.

    Example:
    >>> preprocessor = GTRTextEmbedderPreprocessor(GTRTokenizer(spiece_model), query_length=16)
    >>> preprocessor(["wing lift", ""])["token_ids"].shape
    TensorShape([2, 3])
    >>> preprocessor.features(["word " * 100], kind="query")["token_ids"].shape
    TensorShape([1, 16])
    """

    backbone_cls = GTRBackbone
    tokenizer_cls = GTRTokenizer

    def __init__(
        self,
        tokenizer: GTRTokenizer,
        sequence_length: int = DOCUMENT_LENGTH,
        query_length: int = QUERY_LENGTH,
        pad_to_length: bool = False,
        **kwargs: Any,
    ):
        super().__init__(tokenizer, sequence_length=sequence_length, **kwargs)
        for name, length in (("sequence_length", sequence_length), ("query_length", query_length)):
            if not isinstance(length, int) or length < 2:
                raise UserError(f"{name} must be an integer of at least 2 (one token and EOS), got {length!r}")
        self.query_length = query_length
        self.pad_to_length = pad_to_length

    def build(self, input_shape):
        # The packing is `token_ids` + `pad_token_ids`; keras-hub's packer is not used.
        self.built = True

    def length(self, kind: Literal["query", "document"]) -> int:
        """The token budget of `"query"` or `"document"` texts."""
        if kind not in KINDS:
            raise UserError(f"kind must be 'query' or 'document', got {kind!r}")
        return self.query_length if kind == "query" else self.sequence_length

    def token_ids(self, texts: Any, kind: Literal["query", "document"] = "document") -> Any:
        """Ragged token ids `[batch, (length)]` of a batch of strings, EOS included."""
        return self.tokenizer.token_ids(texts, self.length(kind))

    def features(self, texts: Any, kind: Literal["query", "document"] = "document") -> dict[str, Any]:
        """Model inputs `{"token_ids", "padding_mask"}` int32 `[batch, length]` of a batch of strings."""
        return pad_token_ids(self.token_ids(texts, kind), self.length(kind) if self.pad_to_length else None)

    def tower_features(self, batch: Any) -> Any:
        """Model inputs of the text towers of a training batch; other entries are left out.

        Args:
            batch: a dict with tf.string `"query"` `[B]` (query budget; optional),
                `"positive"` `[B]` and optionally `"negatives"` `[B, k]`
                (document budget).

        Returns:
            `{"query", "positive"[, "negatives"]}`, each `{"token_ids",
            "padding_mask"}` int32, `[B, L]` (negatives `[B, k, L]`).
        """
        features = {"positive": self.features(batch["positive"])}
        if "query" in batch:
            features["query"] = self.features(batch["query"], "query")
        if "negatives" in batch:
            k = tf.shape(batch["negatives"])[1]
            flat = self.features(tf.reshape(batch["negatives"], [-1]))
            length = self.sequence_length if self.pad_to_length else tf.shape(flat["token_ids"])[-1]
            features["negatives"] = {name: tf.reshape(value, [-1, k, length]) for name, value in flat.items()}
        return features

    @preprocessing_function
    def call(self, x, y=None, sample_weight=None):
        x = tf.convert_to_tensor(x, tf.string)
        features = self.features(tf.reshape(x, [-1]))
        if x.shape.rank == 0:
            features = {name: value[0] for name, value in features.items()}
        return keras.utils.pack_x_y_sample_weight(features, y, sample_weight)

    def compute_output_spec(self, x, y=None, sample_weight=None):
        # Symbolic calls (a functional model on string inputs, rebuilt before the vocabulary is loaded).
        shape = (*x.shape, self.sequence_length if self.pad_to_length else None)
        features = {name: keras.KerasTensor(shape, dtype="int32") for name in ("token_ids", "padding_mask")}
        return keras.utils.pack_x_y_sample_weight(features, y, sample_weight)

    def get_config(self):
        config = super().get_config()
        config.pop("truncate", None)
        return {**config, "query_length": self.query_length, "pad_to_length": self.pad_to_length}
