"""The checks of an export directory: ONNX and OpenVINO (`export.json`, the vocabulary, the model files),
LiteRT (the flatbuffer), a SavedModel version directory, and an export root of `encoder/`, `searcher/` and
`reranker/` versions; a reranker's ONNX export (`export.json` of kind `reranker`, its model and tokenizer files)."""

import os

import sentencepiece as spm

from gtr_keras.errors import DataError
from gtr_keras.exports.export_formats import FORMATS
from gtr_keras.exports.runtime_encoder import (
    CONFIG_FILE,
    REMEDY,
    RERANKER_FIELDS,
    check_vocabulary_ids,
    read_export_config,
    read_vocabulary,
)
from gtr_keras.utils import files
from gtr_keras.utils.checksums import is_lock, leftover_reason
from gtr_keras.utils.records import check_fields, read_json_object

SAVED_MODEL_FILE = "saved_model.pb"
VARIABLES_INDEX = os.path.join("variables", "variables.index")
EXPORT_NAMES = ("encoder", "searcher", "reranker")
_TFLITE_IDENTIFIER = b"TFL3"  # the flatbuffer's file identifier, bytes 4 to 8


def _runs_with(export_format, reranker=False):
    """The note of what running the export needs (`ExportFormat.needs`, which `gtr_keras.load` checks)."""
    return f"runs with {', '.join(package for _, package in FORMATS[export_format].needs('run', reranker))}"


def check_token_id_export(directory, report):
    """Checks an `export --format onnx|openvino` directory (a GTR encoder's or a reranker's) into `report`."""
    report.checksums(directory)
    report.leftovers_beside(directory)
    path = os.path.join(directory, CONFIG_FILE)
    record = report.step(lambda: read_json_object(path, REMEDY), path)
    if isinstance(record, dict) and record.get("kind") == "reranker":
        config = report.step(lambda: check_fields(path, record, RERANKER_FIELDS, REMEDY), path)
        if config is not None:
            report.note(f"a reranker's {config['format']} export")
            report.note(_runs_with(config["format"], reranker=True))
            for field in ("model_file", "tokenizer"):
                if not files.isfile(os.path.join(directory, config[field])):
                    report.add(os.path.join(directory, config[field]), f"missing (named by {CONFIG_FILE}'s {field!r})")
        return
    config = report.step(lambda: read_export_config(directory), path)
    if config is None:
        return
    report.note(f"{config['format']} export, D {config['embedding_dim']}")
    report.note(_runs_with(config["format"]))
    vocabulary = os.path.join(directory, config["vocabulary"])
    proto = report.step(lambda: read_vocabulary(vocabulary, config), vocabulary)
    pieces = report.step(lambda: spm.SentencePieceProcessor(model_proto=proto), vocabulary) if proto else None
    if pieces is not None:
        report.step(
            lambda: check_vocabulary_ids(os.path.join(directory, CONFIG_FILE), config, pieces),
            os.path.join(directory, CONFIG_FILE),
        )
    model = os.path.join(directory, config["model_file"])
    if not files.isfile(model):
        report.add(model, f"missing (named by {CONFIG_FILE}'s 'model_file')")
    if config["format"] == "openvino" and not files.isfile(model.removesuffix(".xml") + ".bin"):
        report.add(model.removesuffix(".xml") + ".bin", "missing (the weights of the OpenVINO model)")


def check_litert_file(path, report):
    """Checks a LiteRT export (its directory, and the flatbuffer `encoder.tflite` at `path`) into `report`."""
    directory = os.path.dirname(path)
    report.checksums(directory)
    report.leftovers_beside(directory)
    head = report.step(lambda: files.read_bytes(path)[:8], path)
    if head is not None and head[4:8] != _TFLITE_IDENTIFIER:
        report.add(path, "not a TFLite flatbuffer (no TFL3 identifier)")
    report.note("LiteRT export")


def check_saved_model(directory, report, beside=True):
    """Checks a SavedModel directory (an export's `encoder/N` or `searcher/N`) into `report` (with `beside`,
    what writes of it that did not end left beside it too)."""
    report.checksums(directory)
    if beside:
        report.leftovers_beside(directory)
    for name in (SAVED_MODEL_FILE, VARIABLES_INDEX):
        if not files.isfile(os.path.join(directory, name)):
            report.add(os.path.join(directory, name), "missing (not a whole SavedModel)")


def check_export_root(directory, report):
    """Checks every version of an export root's `encoder/`, `searcher/` and `reranker/` into `report`."""
    versions = 0
    for name in EXPORT_NAMES:
        folder = os.path.join(directory, name)
        if not files.isdir(folder):
            continue
        for version in files.listdir(folder):
            if version.isdigit():
                check_saved_model(os.path.join(folder, version), report, beside=False)
                versions += 1
            elif version.startswith(".") and not is_lock(version):
                report.add(os.path.join(folder, version), leftover_reason(version), leftover=True)
    if not versions:
        raise DataError(f"{directory}: no encoder/N, searcher/N or reranker/N SavedModel")
    report.note(f"{versions} SavedModel version{'s' * (versions != 1)}")
