"""`Reranker`: a cross-encoder (a keras-hub BERT or XLM-RoBERTa backbone and Hugging Face's scoring head) as a
keras-hub `TextClassifier`."""

import functools

import keras
import keras_hub
from keras import ops
from keras_hub.src.utils import preset_utils

from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.models.model_files.model_formats import CROSS_ENCODER, RERANKER
from gtr_keras.models.model_files.model_source import load_source, resolve_model_source
from gtr_keras.models.model_files.preset_writer import write_preset
from gtr_keras.models.reranker.pair_scorer import PairScorer
from gtr_keras.models.reranker.reranker_bert_backbone import RerankerBertBackbone
from gtr_keras.models.reranker.reranker_bert_tokenizer import RerankerBertTokenizer
from gtr_keras.models.reranker.reranker_preprocessor import RerankerPreprocessor
from gtr_keras.models.reranker.reranker_xlm_roberta_backbone import RerankerXLMRobertaBackbone
from gtr_keras.models.reranker.reranker_xlm_roberta_tokenizer import RerankerXLMRobertaTokenizer

ACTIVATIONS = ("sigmoid", "identity")
BACKBONES = (RerankerBertBackbone, RerankerXLMRobertaBackbone)
TOKENIZERS = (RerankerBertTokenizer, RerankerXLMRobertaTokenizer)


@keras.saving.register_keras_serializable(package="gtr_keras")
class Reranker(keras_hub.models.TextClassifier):
    """A cross-encoder: a (query, document) pair in, one relevance score out.

    The head is Hugging Face's for the backbone's family, as in the `*ForSequenceClassification` checkpoints
    that sentence-transformers' `CrossEncoder` loads: for BERT, the pooler (a tanh dense layer on `[CLS]`,
    keras-hub's `BertBackbone`'s `pooled_output`) then `output_dense`; for XLM-RoBERTa, `pooled_dense` (tanh)
    on `<s>` then `output_dense`. `call` gives the logits `[batch, 1]`; the score is the activation of the
    logit that `CrossEncoder.predict` applies by default (`activation`: a sigmoid for a one-label checkpoint
    whose config names none). `scorer()` scores Python pairs in length-sorted batches (`PairScorer`);
    `gtr_keras.load(MODEL_DIR)` returns one for a reranker's model directory.

    Args:
        backbone: a `RerankerBertBackbone` or a `RerankerXLMRobertaBackbone`.
        preprocessor: a `RerankerPreprocessor`, or None for a model of token ids only.
        activation: `"sigmoid"` or `"identity"`, applied to the logit in `scores`.
        dropout: the head's dropout rate (training only).

    Example:
    >>> reranker = Reranker.from_preset("tests/fixtures/tiny-bert-cross-encoder")
    >>> reranker.scorer().predict([("what keeps a wing up?", "lift"), ("what keeps a wing up?", "drag")]).shape
    (2,)
    """

    backbone_cls = None  # a BERT or an XLM-RoBERTa backbone
    preprocessor_cls = RerankerPreprocessor
    bert_backbone_cls = RerankerBertBackbone
    xlm_roberta_backbone_cls = RerankerXLMRobertaBackbone
    bert_tokenizer_cls = RerankerBertTokenizer
    xlm_roberta_tokenizer_cls = RerankerXLMRobertaTokenizer

    def __init__(self, backbone, preprocessor=None, activation="sigmoid", dropout=0.1, **kwargs):
        if not isinstance(backbone, BACKBONES):
            raise UserError(f"backbone must be one of {[c.__name__ for c in BACKBONES]}, got {type(backbone).__name__}")
        if preprocessor is not None and not isinstance(preprocessor.tokenizer, TOKENIZERS):
            raise UserError(
                f"the tokenizer must be one of {[c.__name__ for c in TOKENIZERS]}, got "
                f"{type(preprocessor.tokenizer).__name__}"
            )
        if activation not in ACTIVATIONS:
            raise UserError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        kwargs.pop("compile", None)
        super().__init__(dtype=backbone.dtype_policy, compile=False, **kwargs)

        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        policy = backbone.dtype_policy
        hidden = (None, backbone.hidden_dim)
        self.pooled_dropout = self.pooled_dense = None
        if not self.pools_in_backbone:
            self.pooled_dropout = keras.layers.Dropout(dropout, dtype=policy, name="pooled_dropout")
            self.pooled_dense = keras.layers.Dense(
                backbone.hidden_dim, activation="tanh", dtype=policy, name="pooled_dense"
            )
            self.pooled_dropout.build(hidden)
            self.pooled_dense.build(hidden)
        self.output_dropout = keras.layers.Dropout(dropout, dtype=policy, name="output_dropout")
        self.output_dense = keras.layers.Dense(1, dtype=policy, name="output_dense")
        self.output_dropout.build(hidden)
        self.output_dense.build(hidden)
        self.built = True

        # === Config ===
        self.activation = activation
        self.dropout = dropout
        self._scorers = {}

    @property
    def pools_in_backbone(self):
        """True for BERT, whose pooler is the backbone's `pooled_dense`; False for XLM-RoBERTa's head."""
        return isinstance(self.backbone, keras_hub.models.BertBackbone)

    def call(self, inputs, training=False):
        names = {"token_ids", "padding_mask"} | ({"segment_ids"} if self.pools_in_backbone else set())
        outputs = self.backbone({name: inputs[name] for name in names}, training=training)
        if self.pools_in_backbone:
            pooled = outputs["pooled_output"]
        else:
            pooled = self.pooled_dense(self.pooled_dropout(outputs[:, 0, :], training=training))
        return self.output_dense(self.output_dropout(pooled, training=training))

    def scores(self, logits):
        """The scores (`activation` of the logits `[batch, 1]`), float32 `[batch]`."""
        logits = ops.cast(ops.reshape(logits, [-1]), "float32")
        return ops.sigmoid(logits) if self.activation == "sigmoid" else logits

    @classmethod
    def from_parts(cls, backbone, tokenizer, sequence_length, activation="sigmoid", dropout=0.1):
        """A reranker from a backbone and a tokenizer, as the converters build one.

        Example:
        >>> reranker = Reranker.from_parts(backbone, tokenizer, 512)  # doctest: +SKIP
        """
        return cls(backbone, RerankerPreprocessor(tokenizer, sequence_length), activation, dropout)

    @classmethod
    def from_preset(cls, preset, load_weights=True, **kwargs):
        """Loads a reranker's model directory (a keras-hub preset that `save_to_preset` wrote), or converts a
        sentence-transformers cross-encoder checkpoint on the way (a directory with a `config.json` naming
        `BertForSequenceClassification` or `XLMRobertaForSequenceClassification`, or an `hf://` id of one;
        `gtr_keras.convert.cross_encoder`).

        Args:
            preset: a directory, an `hf://` id, or a resolved `ModelSource`.
            load_weights: read the weights (else randomly initialised).
            **kwargs: keras-hub's `from_preset` arguments (`dtype`).

        Raises:
            CheckpointError: a source that holds no reranker (a GTR model, another architecture), naming it.

        Example:
        >>> reranker = Reranker.from_preset("models/ms-marco-minilm")  # doctest: +SKIP
        """
        source = resolve_model_source(preset, CROSS_ENCODER if str(preset).startswith("hf://") else None)
        if source.format == CROSS_ENCODER:
            return load_source(cls, source, load_weights, **kwargs)
        if source.format != RERANKER:
            raise CheckpointError(
                f"{source}: not a reranker (a {source.format} model directory); a reranker is a cross-encoder "
                "checkpoint or what `gtr-keras convert` wrote from one"
            )
        with source.local() as path:
            return preset_utils.get_preset_loader(path).load_task(cls, load_weights, True, **kwargs)

    def save_to_preset(self, preset_dir, max_shard_size=10):
        """keras-hub's `save_to_preset`, replacing `preset_dir` as a unit (`preset_writer.write_preset`).

        Example:
        >>> reranker.save_to_preset("models/my-reranker")  # doctest: +SKIP
        """
        write_preset(self, preset_dir, functools.partial(super().save_to_preset, max_shard_size=max_shard_size))

    def scorer(self, jit_compile=False):
        """The `PairScorer` of this reranker (one per `jit_compile` setting, built once)."""
        if self.preprocessor is None:
            raise UserError("this Reranker has no preprocessor: it scores token ids only")
        if jit_compile not in self._scorers:
            self._scorers[jit_compile] = PairScorer(self, jit_compile=jit_compile)
        return self._scorers[jit_compile]

    def get_config(self):
        return {**super().get_config(), "activation": self.activation, "dropout": self.dropout}
