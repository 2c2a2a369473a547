"""`load_export`: an exported SavedModel loaded after the custom ops it needs (TF Text's, ScaNN's) are registered."""

import os
from typing import Any

import tensorflow as tf

from gtr_keras.errors import DataError
from gtr_keras.utils import files
from gtr_keras.utils.checksums import verify_directory

IMPORT_HINT = (
    "GTR SavedModels use TF Text's SentencePiece ops (and the ScaNN searcher uses ScaNN's ops): run "
    "`import tensorflow_text` (and `import scann`) before `tf.saved_model.load`/`hub.load`, or load with "
    "`gtr_keras.exports.load_export(path)`."
)


def load_export(path: str | os.PathLike[str], verify: bool = False) -> Any:
    """Loads an exported SavedModel after registering the custom ops it needs.

    Args:
        path: a SavedModel directory, local or on a file system TensorFlow knows (`gs://...`).
        verify: first verify every file against the directory's record (`utils.checksums.verify_directory`),
            and refuse a damaged one.

    Raises:
        DataError: `path` does not exist, or is on a file system TensorFlow does not know.
        RuntimeError: the SavedModel needs ops that are not registered (the
            message says which import brings them).

    Example:
    >>> searcher = gtr_keras.exports.load_export("exports/scifact/searcher/1")
    >>> searcher.signatures["serving_default"](queries=tf.constant(["vitamin D"]))["ids"]
    """
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    try:
        from scann.scann_ops.py import scann_ops  # noqa: F401  (registers the ScaNN ops, also after a TF-free load)
    except ImportError:
        pass
    path = os.fspath(path)
    if not files.exists(path):  # (`exists` names a file system TensorFlow does not know)
        raise DataError(f"{path}: no such file or directory")
    try:
        if verify:
            verify_directory(path)
        return tf.saved_model.load(path)
    except (tf.errors.NotFoundError, ValueError, RuntimeError, KeyError) as error:
        if "not registered" in str(error) or "Op type" in str(error):
            raise RuntimeError(f"{path}: {IMPORT_HINT} ({type(error).__name__}: {error})") from error
        raise
