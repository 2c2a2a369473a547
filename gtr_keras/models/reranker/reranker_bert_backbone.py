"""`RerankerBertBackbone`: keras-hub's `BertBackbone` with the GELU of Hugging Face's BERT checkpoints."""

import functools

import keras
import keras_hub

HIDDEN_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh")  # Hugging Face's names: erf, tanh, tanh


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
        activation = functools.partial(keras.activations.gelu, approximate=hidden_act != "gelu")
        for layer in self.transformer_layers:
            layer._feedforward_intermediate_dense.activation = activation
        self.hidden_act = hidden_act

    def get_config(self):
        return {**super().get_config(), "hidden_act": self.hidden_act}
