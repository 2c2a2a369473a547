"""gtr-keras: GTR dual-encoder retrievers in Keras 3 on TensorFlow.

The top-level names are imported lazily so that the light modules
(`gtr_keras.corpus`, `gtr_keras.evaluation`, `gtr_keras.bm25`) do not pull in
TensorFlow.

Example:
>>> import gtr_keras
>>> encoder = gtr_keras.load("models/gtr-base")
>>> encoder.encode_queries(["what is a dual encoder?"]).shape
(1, 768)
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "load": "gtr_keras.checkpoints",
    "save": "gtr_keras.checkpoints",
    "convert_sentence_transformers": "gtr_keras.checkpoints",
    "CheckpointError": "gtr_keras.checkpoints",
    "Encoder": "gtr_keras.encoder",
    "GTREncoder": "gtr_keras.model",
    "GTRTokenizer": "gtr_keras.tokenizer",
    "preset_config": "gtr_keras.presets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gtr_keras' has no attribute {name!r}")
