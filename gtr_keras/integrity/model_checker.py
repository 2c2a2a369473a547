"""The checks of a model directory: a keras-hub preset of gtr-keras (a GTR model or a reranker), or a
sentence-transformers directory it wrote.

Checksums first, then every JSON record (the settings against the weights' shapes and each other:
`model_directory.check_model_directory`; the fusion record), the SentencePiece model, and every weight
read and found finite.
"""

import os

from gtr_keras.errors import CheckpointError
from gtr_keras.lexical.fusion import model_fusion
from gtr_keras.models.model_files.model_directory import (
    SHARDED_WEIGHTS_FILE,
    TASK_WEIGHTS_FILE,
    WEIGHTS_FILE,
    check_finite,
    check_model_directory,
    read_json,
    read_weights,
)
from gtr_keras.models.model_files.model_formats import KERAS_HUB, RERANKER
from gtr_keras.models.model_files.model_source import directory_format
from gtr_keras.utils import files

_PRESET_VOCABULARY = os.path.join("assets", "tokenizer", "vocabulary.spm")


def check_model_files(directory, report):
    """Checks the model directory `directory` into `report`."""
    report.checksums(directory)
    report.leftovers_beside(directory)
    model_format = report.step(lambda: directory_format(directory), directory)
    if model_format is None:
        return
    report.note(f"{model_format} format")
    for name in sorted(files.listdir(directory)):
        if name.endswith(".json") and name != files.CHECKSUMS_FILE:
            report.step(lambda name=name: read_json(os.path.join(directory, name)), os.path.join(directory, name))
    if model_format in (KERAS_HUB, RERANKER):
        report.step(lambda: check_model_directory(directory), directory)
        report.step(lambda: model_fusion(directory), directory)
        vocabulary = os.path.join(directory, _PRESET_VOCABULARY)
        if files.isfile(vocabulary):
            report.step(lambda: _spiece(vocabulary), vocabulary)
    weights = [WEIGHTS_FILE if files.isfile(os.path.join(directory, WEIGHTS_FILE)) else SHARDED_WEIGHTS_FILE]
    weights += [TASK_WEIGHTS_FILE] if files.isfile(os.path.join(directory, TASK_WEIGHTS_FILE)) else []
    for name in weights:
        path = os.path.join(directory, name)
        if files.isfile(path) and model_format in (KERAS_HUB, RERANKER):
            values = report.step(lambda path=path: read_weights(path), path)
            if values is not None:
                report.step(lambda path=path, values=values: check_finite(values, path), path)
                report.note(f"{name}: {len(values)} weights, finite")


def _spiece(path):
    import sentencepiece

    try:
        sentencepiece.SentencePieceProcessor(model_proto=files.read_bytes(path))
    except (RuntimeError, TypeError) as error:
        raise CheckpointError(f"{path}: corrupt SentencePiece model ({error})") from None
