"""gtr-keras: GTR dual-encoder retrievers in Keras 3 on TensorFlow.

Importing the package registers its keras-hub classes (`GTRBackbone`,
`GTRTextEmbedder`, `GTRTextEmbedderPreprocessor`, `GTRTokenizer`) with Keras, so
that `keras_hub.models.TextEmbedder.from_preset(DIR)` and `keras.saving.load_model`
find them. The other top-level names are imported on first use.

Example:
>>> import gtr_keras, keras_hub
>>> embedder = keras_hub.models.TextEmbedder.from_preset(model_dir)
>>> embedder.encode_queries(["what is a dual encoder?"]).shape
(1, 64)
"""

import importlib

from gtr_keras.text_embedder import GTRTextEmbedder  # noqa: F401  (registers the keras-hub classes)

__version__ = "0.1.0"

_EXPORTS = {
    "load": "gtr_keras.checkpoints",
    "save": "gtr_keras.checkpoints",
    "convert_sentence_transformers": "gtr_keras.checkpoints",
    "CheckpointError": "gtr_keras.checkpoints",
    "Encoder": "gtr_keras.encoder",
    "GTRBackbone": "gtr_keras.backbone",
    "GTRTextEmbedder": "gtr_keras.text_embedder",
    "GTRTextEmbedderPreprocessor": "gtr_keras.preprocessor",
    "GTRTokenizer": "gtr_keras.tokenizer",
    "preset_config": "gtr_keras.presets",
    "load_export": "gtr_keras.export",
    "train": "gtr_keras.training",
    "distill": "gtr_keras.distillation",
    "load_teacher": "gtr_keras.teachers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gtr_keras' has no attribute {name!r}")
