"""gtr-keras: GTR dual-encoder retrievers in Keras 3 on TensorFlow.

Importing the package registers its keras-hub classes (`GTRBackbone`,
`GTRTextEmbedder`, `GTRTextEmbedderPreprocessor`, `GTRTokenizer`) with Keras, so
that `keras_hub.models.TextEmbedder.from_preset(DIR)` and `keras.saving.load_model`
find them: at once when Keras is imported already, else as soon as it is
(a post-import hook), so that a process that only searches an index
(`gtr_keras.index.SearchIndex`) never loads Keras or TensorFlow. The other
top-level names are imported on first use.

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
import sys

import wrapt

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow's first import


def _register_keras_classes(module):
    if "gtr_keras.models.gtr" in sys.modules:
        return  # imported, or being imported
    keras_hub = sys.modules.get("keras_hub")
    if module.__name__ == "keras" and keras_hub is not None and getattr(keras_hub.__spec__, "_initializing", False):
        return  # Keras was imported by keras_hub's import: registered by keras_hub's hook
    importlib.import_module("gtr_keras.models.gtr")


for _name in ("keras", "keras_hub"):
    wrapt.register_post_import_hook(_register_keras_classes, _name)  # runs now if `_name` is imported already

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
    "SearchIndex": "gtr_keras.retrieval.search_index",
    "write_search_index": "gtr_keras.retrieval.search_index",
    "EmbeddingFiles": "gtr_keras.retrieval.embedding_files",
    "index_embeddings": "gtr_keras.retrieval.retriever",
    "build_index": "gtr_keras.retrieval.retriever",
    "update_index": "gtr_keras.retrieval.index_updates",
    "update_search_index": "gtr_keras.retrieval.segment_writer",
    "compact_search_index": "gtr_keras.retrieval.segment_writer",
    "Retriever": "gtr_keras.retrieval.retriever",
    "HybridRetriever": "gtr_keras.retrieval.hybrid_retriever",
    "Fusion": "gtr_keras.retrieval.fusion",
    "model_fusion": "gtr_keras.retrieval.fusion",
    "load_export": "gtr_keras.serving.export",
    "export_all": "gtr_keras.serving.export",
    "train": "gtr_keras.training.loop",
    "TrainConfig": "gtr_keras.training.config",
    "DualEncoder": "gtr_keras.training.dual_encoder",
    "distill": "gtr_keras.training.distillation_loop",
    "load_teacher": "gtr_keras.training.teachers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gtr_keras' has no attribute {name!r}")
