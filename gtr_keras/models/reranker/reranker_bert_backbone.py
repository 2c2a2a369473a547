"""`RerankerBertBackbone`: keras-hub's `BertBackbone` with the GELU of Hugging Face's BERT checkpoints."""

import math

import keras
import keras_hub
from keras import ops

HIDDEN_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh")  # Hugging Face's names: erf, tanh, tanh


def gelu(x):
    """The exact GELU, `x Phi(x)`, written with `erf`: Keras' exact GELU is TensorFlow's, written with `erfc`,
    which ONNX does not have (the reranker's ONNX export runs this one)."""
    return 0.5 * x * (1.0 + ops.erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return keras.activations.gelu(x, approximate=True)


def use_feedforward_activation(backbone, activation):
    """Sets the feed-forward activation of every transformer layer of a keras-hub BERT or RoBERTa backbone."""
    for layer in backbone.transformer_layers:
        layer._feedforward_intermediate_dense.activation = activation


@keras.saving.register_keras_serializable(package="gtr_keras")
class RerankerBertBackbone(keras_hub.models.BertBackbone):
    """keras-hub's `BertBackbone` (its layers, weight names and converter) whose feed-forward GELU is the one the
    checkpoint was trained with.

    keras-hub computes BERT's GELU with the tanh approximation; Hugging Face's `hidden_act: "gelu"` (BERT,
    MiniLM, the `cross-encoder/ms-marco-*` rerankers) is the exact, erf one, which the approximation misses by
    up to 5e-4 per activation, more than a reranker's scores may move. `hidden_act` chooses.

    Args:
        hidden_act: `"gelu"` (exact) or `"gelu_new"` / `"gelu_pytorch_tanh"` (tanh approximation).
        **kwargs: `keras_hub.models.BertBackbone`'s arguments.

    Example:
    >>> backbone = RerankerBertBackbone(vocabulary_size=400, num_layers=2, num_heads=4, hidden_dim=32,
    ...                                 intermediate_dim=64, max_sequence_length=64)
    """

    def __init__(self, hidden_act="gelu", **kwargs):
        if hidden_act not in HIDDEN_ACTIVATIONS:
            raise ValueError(f"hidden_act must be one of {HIDDEN_ACTIVATIONS}, got {hidden_act!r}")
        super().__init__(**kwargs)
        use_feedforward_activation(self, gelu if hidden_act == "gelu" else gelu_tanh)
        self.hidden_act = hidden_act

    def get_config(self):
        return {**super().get_config(), "hidden_act": self.hidden_act}
