"""gtr-keras: GTR dual-encoder retrievers in Keras 3 on TensorFlow.

Importing the package registers its keras-hub classes (`GTRBackbone`,
`GTRTextEmbedder`, `GTRTextEmbedderPreprocessor`, `GTRTokenizer`) with Keras, so
that `keras_hub.models.TextEmbedder.from_preset(DIR)` and `keras.saving.load_model`
find them: at once when Keras is imported already, else as soon as it is
(a post-import hook, `utils.import_hooks`), so that a process that only searches an
index (`gtr_keras.index.SearchIndex`) or runs an ONNX or OpenVINO export never loads
Keras or TensorFlow. Once the model family is imported, the package installs its
Keras and keras-hub patches (`gtr_keras.patches`) and the loaders of other model
formats (`gtr_keras.convert`). The other top-level names are imported on first use.

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

from gtr_keras.utils.import_hooks import when_imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow's first import


def _register_keras_classes(module):
    if "gtr_keras.models.gtr" in sys.modules:
        return  # imported, or being imported
    keras_hub = sys.modules.get("keras_hub")
    if module.__name__ == "keras" and keras_hub is not None and getattr(keras_hub.__spec__, "_initializing", False):
        return  # Keras was imported by keras_hub's import: registered by keras_hub's hook
    importlib.import_module("gtr_keras.models.gtr")


def _wire_the_model_family(family):
    from gtr_keras.convert import preset_loader
    from gtr_keras.patches import keras_functional_models, keras_hub_preset_loader

    keras_functional_models.install()
    keras_hub_preset_loader.install()
    preset_loader.install()


# Once no module of the package is half imported: the patches and converters import the family's modules.
when_imported("gtr_keras.models.gtr", _wire_the_model_family, settled="gtr_keras.")
for _name in ("keras", "keras_hub"):
    when_imported(_name, _register_keras_classes)  # runs now if `_name` is imported already

__version__ = "0.1.0"

_EXPORTS = {
    "load": "gtr_keras.loading",
    "save": "gtr_keras.saving",
    "convert_sentence_transformers": "gtr_keras.saving",
    "fingerprint": "gtr_keras.models.model_files.fingerprint",
    "CheckpointError": "gtr_keras.errors",
    "UserError": "gtr_keras.errors",
    "Encoder": "gtr_keras.models.gtr.encoder",
    "GTRBackbone": "gtr_keras.models.gtr.gtr_backbone",
    "GTRTextEmbedder": "gtr_keras.models.gtr.gtr_text_embedder",
    "GTRTextEmbedderPreprocessor": "gtr_keras.models.gtr.gtr_text_embedder_preprocessor",
    "GTRTokenizer": "gtr_keras.models.gtr.gtr_tokenizer",
    "preset_config": "gtr_keras.models.gtr.presets",
    "SearchIndex": "gtr_keras.index.search_index",
    "write_search_index": "gtr_keras.index.search_index",
    "EmbeddingFiles": "gtr_keras.index.embedding_files",
    "index_embeddings": "gtr_keras.retrieval.retriever",
    "build_index": "gtr_keras.retrieval.retriever",
    "update_index": "gtr_keras.retrieval.index_updates",
    "update_search_index": "gtr_keras.index.segment_writer",
    "compact_search_index": "gtr_keras.index.segment_writer",
    "Retriever": "gtr_keras.retrieval.retriever",
    "HybridRetriever": "gtr_keras.retrieval.hybrid_retriever",
    "Fusion": "gtr_keras.lexical.fusion",
    "Filter": "gtr_keras.filters.expressions",
    "model_fusion": "gtr_keras.lexical.fusion",
    "load_export": "gtr_keras.serving.export",
    "export_all": "gtr_keras.serving.export",
    "TextEncoder": "gtr_keras.models.text_encoder",
    "Corpus": "gtr_keras.beir.readers",
    "load_corpus": "gtr_keras.beir.readers",
    "load_queries": "gtr_keras.beir.readers",
    "load_qrels": "gtr_keras.beir.readers",
    "load_dataset": "gtr_keras.retrieval.runs",
    "evaluate_run": "gtr_keras.beir.evaluation",
    "read_trec_run": "gtr_keras.beir.evaluation",
    "write_trec_run": "gtr_keras.beir.evaluation",
    "train": "gtr_keras.training.loop",
    "TrainConfig": "gtr_keras.training.config",
    "DualEncoder": "gtr_keras.training.dual_encoder",
    "distill": "gtr_keras.distillation.distillation_loop",
    "load_teacher": "gtr_keras.distillation.teachers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gtr_keras' has no attribute {name!r}")
