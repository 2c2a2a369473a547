"""`RerankerXLMRobertaBackbone`: keras-hub's `XLMRobertaBackbone` whose GELU ONNX can run."""

import keras
import keras_hub

from gtr_keras.models.reranker.reranker_bert_backbone import gelu, use_feedforward_activation


@keras.saving.register_keras_serializable(package="gtr_keras")
class RerankerXLMRobertaBackbone(keras_hub.models.XLMRobertaBackbone):
    """keras-hub's `XLMRobertaBackbone` (its layers, weight names and converter) with the exact GELU written with
    `erf` (`reranker_bert_backbone.gelu`): the same values as Keras' (`erfc`), and an op the reranker's ONNX
    export has.

    Args:
        **kwargs: `keras_hub.models.XLMRobertaBackbone`'s arguments.

    Example:
    >>> backbone = RerankerXLMRobertaBackbone(vocabulary_size=300, num_layers=2, num_heads=4, hidden_dim=32,
    ...                                       intermediate_dim=64, max_sequence_length=48)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        use_feedforward_activation(self, gelu)
