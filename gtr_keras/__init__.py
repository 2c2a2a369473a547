"""gtr-keras: GTR dual-encoder retrievers in Keras 3 on TensorFlow.

Importing the package registers its keras-hub classes (`GTRBackbone`,
`GTRTextEmbedder`, `GTRTextEmbedderPreprocessor`, `GTRTokenizer`) with Keras, so
that `keras_hub.models.TextEmbedder.from_preset(DIR)` and `keras.saving.load_model`
find them. The other top-level names are imported on first use.

TensorFlow's C++ start-up lines (CUDA probing on a machine without a GPU,
oneDNN notices) are silenced unless `TF_CPP_MIN_LOG_LEVEL` is set: set it (to 0
for everything) before the first import of TensorFlow to see them.

Example:
>>> import gtr_keras, keras_hub
>>> embedder = keras_hub.models.TextEmbedder.from_preset(model_dir)
>>> embedder.encode_queries(["what is a dual encoder?"]).shape
(1, 64)
"""

import importlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow's first import (below)

from gtr_keras.models.gtr.text_embedder import GTRTextEmbedder  # noqa: E402,F401  (registers the keras-hub classes)

__version__ = "0.1.0"

_EXPORTS = {
    "load": "gtr_keras.models.gtr.saving",
    "save": "gtr_keras.models.gtr.saving",
    "migrate": "gtr_keras.models.gtr.saving",
    "convert_sentence_transformers": "gtr_keras.models.gtr.saving",
    "fingerprint": "gtr_keras.models.gtr.fingerprint",
    "CheckpointError": "gtr_keras.errors",
    "UserError": "gtr_keras.errors",
    "Encoder": "gtr_keras.models.gtr.encoder",
    "GTRBackbone": "gtr_keras.models.gtr.backbone",
    "GTRTextEmbedder": "gtr_keras.models.gtr.text_embedder",
    "GTRTextEmbedderPreprocessor": "gtr_keras.models.gtr.preprocessor",
    "GTRTokenizer": "gtr_keras.models.gtr.tokenizer",
    "preset_config": "gtr_keras.models.gtr.presets",
    "SearchIndex": "gtr_keras.retrieval.index",
    "build_index": "gtr_keras.retrieval.retriever",
    "Retriever": "gtr_keras.retrieval.retriever",
    "load_export": "gtr_keras.serving.export",
    "export_all": "gtr_keras.serving.export",
    "train": "gtr_keras.training.loop",
    "TrainConfig": "gtr_keras.training.config",
    "DualEncoder": "gtr_keras.training.dual_encoder",
    "distill": "gtr_keras.training.distillation",
    "load_teacher": "gtr_keras.training.teachers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gtr_keras' has no attribute {name!r}")
