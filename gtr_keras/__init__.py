"""gtr-keras: GTR dual-encoder retrievers in Keras 3 on TensorFlow.

Importing the package registers the loaders of the model formats keras-hub does not read
(`gtr_keras.convert.preset_loader`), which cost no import of Keras. The model family
(`gtr_keras.models.gtr`: `GTRBackbone`, `GTRTextEmbedder`, `GTRTextEmbedderPreprocessor`,
`GTRTokenizer`) registers its classes with Keras and its presets with keras-hub when it is
imported, so that `keras.saving.load_model` and keras-hub's `from_preset` find them: at once
when Keras is imported already, else with the first of the package's names that needs it
(`gtr_keras.load`, `gtr_keras.GTRTextEmbedder`, ...), so that a process that only searches an
index (`gtr_keras.Index.open(path).search(vectors)`) or runs an ONNX or OpenVINO export never
loads Keras or TensorFlow. A process that imports Keras after the package and then loads a GTR model through
Keras or keras-hub alone imports the family first (`import gtr_keras.models.gtr`). The other
top-level names are imported on first use; a type checker or an IDE reads them from the
`if TYPE_CHECKING:` imports below (the package is typed: `py.typed`).

TensorFlow's C++ start-up lines (CUDA probing on a machine without a GPU,
oneDNN notices) are silenced unless `TF_CPP_MIN_LOG_LEVEL` is set: set it (to 0
for everything) before the first import of TensorFlow to see them.

Example:
>>> import keras_hub
>>> import gtr_keras
>>> embedder = keras_hub.models.TextEmbedder.from_preset(model_dir)
>>> embedder.encode_queries(["what is a dual encoder?"]).shape
(1, 64)
"""

import importlib
import os
import sys
from typing import TYPE_CHECKING

from gtr_keras.convert import preset_loader
from gtr_keras.utils.lazy_exports import lazy_exports

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow's first import

preset_loader.install()

__version__ = "0.1.0"

# What `lazy_exports` imports on first use, for type checkers and IDEs (never run; `X as X`: a re-export).
if TYPE_CHECKING:
    from gtr_keras.beir.dataset import load_dataset as load_dataset
    from gtr_keras.beir.readers import Corpus as Corpus
    from gtr_keras.distillation.distillation_loop import distill as distill
    from gtr_keras.errors import CheckpointError as CheckpointError
    from gtr_keras.errors import DataError as DataError
    from gtr_keras.errors import MismatchError as MismatchError
    from gtr_keras.errors import RetryLaterError as RetryLaterError
    from gtr_keras.errors import UserError as UserError
    from gtr_keras.exports.exporter import export as export
    from gtr_keras.filters.expressions import Filter as Filter
    from gtr_keras.lexical.fusion import Fusion as Fusion
    from gtr_keras.loading import load as load
    from gtr_keras.models.gtr.gtr_backbone import GTRBackbone as GTRBackbone
    from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder as GTRTextEmbedder
    from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import (
        GTRTextEmbedderPreprocessor as GTRTextEmbedderPreprocessor,
    )
    from gtr_keras.models.gtr.gtr_tokenizer import GTRTokenizer as GTRTokenizer
    from gtr_keras.retrieval.evaluator import evaluate as evaluate
    from gtr_keras.retrieval.index import Index as Index
    from gtr_keras.saving import save as save
    from gtr_keras.training.config import TrainConfig as TrainConfig
    from gtr_keras.training.dual_encoder import DualEncoder as DualEncoder
    from gtr_keras.training.loop import train as train

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        # A model: load, save, export, evaluate.
        "load": "gtr_keras.loading",
        "save": "gtr_keras.saving",
        "export": "gtr_keras.exports.exporter",
        "evaluate": "gtr_keras.retrieval.evaluator",
        # An index, its filters and its fusion of GTR and BM25.
        "Index": "gtr_keras.retrieval.index",
        "Filter": "gtr_keras.filters.expressions",
        "Fusion": "gtr_keras.lexical.fusion",
        # Collections.
        "Corpus": "gtr_keras.beir.readers",
        "load_dataset": "gtr_keras.beir.dataset",
        # Training and distillation.
        "train": "gtr_keras.training.loop",
        "TrainConfig": "gtr_keras.training.config",
        "DualEncoder": "gtr_keras.training.dual_encoder",
        "distill": "gtr_keras.distillation.distillation_loop",
        # The keras-hub classes.
        "GTRBackbone": "gtr_keras.models.gtr.gtr_backbone",
        "GTRTextEmbedder": "gtr_keras.models.gtr.gtr_text_embedder",
        "GTRTextEmbedderPreprocessor": "gtr_keras.models.gtr.gtr_text_embedder_preprocessor",
        "GTRTokenizer": "gtr_keras.models.gtr.gtr_tokenizer",
        # The errors a user can fix (exit status 2 on the command line).
        "UserError": "gtr_keras.errors",
        "DataError": "gtr_keras.errors",
        "CheckpointError": "gtr_keras.errors",
        "MismatchError": "gtr_keras.errors",
        # The errors of work to retry later, unchanged (exit status 2 too).
        "RetryLaterError": "gtr_keras.errors",
    },
)

if "keras" in sys.modules:  # Keras costs nothing more: the classes are registered with it now
    importlib.import_module("gtr_keras.models.gtr")
