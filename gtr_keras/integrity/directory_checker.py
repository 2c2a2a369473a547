"""`check_directory`: what kind of gtr-keras directory a path is, checked by that kind's checker.

The kinds, recognised by their records: an index directory of `gtr-keras index` (`retriever.json`), a
search index (`index.json`), an ONNX or OpenVINO export (`export.json`), a LiteRT export
(`encoder.tflite`), a SavedModel (`saved_model.pb`), an export root (`encoder/N`, `searcher/N`), and a
model directory (`config.json`).
"""

import os

from gtr_keras.errors import DataError
from gtr_keras.exports.runtime_encoder import CONFIG_FILE as EXPORT_JSON
from gtr_keras.integrity.check_report import CheckReport
from gtr_keras.integrity.export_checker import (
    EXPORT_NAMES,
    SAVED_MODEL_FILE,
    check_export_root,
    check_litert_file,
    check_saved_model,
    check_token_id_export,
)
from gtr_keras.integrity.index_checker import INDEX_DIRECTORY, check_index_directory, check_search_index
from gtr_keras.integrity.model_checker import check_model_files
from gtr_keras.models.model_files.model_directory import CONFIG_FILE
from gtr_keras.storage.layout import INDEX_JSON, RETRIEVER_JSON
from gtr_keras.utils import files


def check_directory(path: str | os.PathLike[str]) -> CheckReport:
    """A `CheckReport` of the gtr-keras directory (or LiteRT file) `path`, of whatever kind it is.

    Raises:
        DataError: `path` does not exist, or is no directory that gtr-keras writes.

    Example:
    >>> report = check_directory("indexes/scifact")
    >>> report.ok
    True
    """
    path = os.fspath(path).rstrip("/") or "/"
    if not files.exists(path):
        raise DataError(f"{path}: no such file or directory")
    if files.isfile(path):
        if not path.endswith(".tflite"):
            raise DataError(f"{path}: a file; check takes a directory that gtr-keras writes (or a .tflite)")
        report = CheckReport(path, "a LiteRT export")
        report.step(lambda: check_litert_file(path, report), path)
        return report

    def has(name):
        return files.exists(os.path.join(path, name))

    kinds = (
        (RETRIEVER_JSON, INDEX_DIRECTORY, check_index_directory),
        (INDEX_JSON, "a search index", check_search_index),
        (EXPORT_JSON, "an ONNX or OpenVINO export", check_token_id_export),
        (SAVED_MODEL_FILE, "a SavedModel", check_saved_model),
        (CONFIG_FILE, "a model directory", check_model_files),
    )
    for mark, kind, check in kinds:
        if has(mark):
            report = CheckReport(path, kind)
            report.step(lambda check=check, report=report: check(path, report), path)
            return report
    if any(has(name) for name in EXPORT_NAMES):
        report = CheckReport(path, "an export")
        report.step(lambda: check_export_root(path, report), path)
        return report
    from gtr_keras.exports.litert import LITERT_FILE  # imports TensorFlow: the last kind tried

    if has(LITERT_FILE):
        report = CheckReport(path, "a LiteRT export")
        report.step(lambda: check_litert_file(os.path.join(path, LITERT_FILE), report), path)
        return report
    raise DataError(
        f"{path}: not a directory that gtr-keras writes (no {RETRIEVER_JSON}, {INDEX_JSON}, {EXPORT_JSON}, "
        f"{LITERT_FILE}, {SAVED_MODEL_FILE}, {CONFIG_FILE}, encoder/ or searcher/)"
    )
