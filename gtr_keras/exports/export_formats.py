"""Every export format in one table (`FORMATS`): what it needs, which of `export`'s flags it takes, how it is
written, how its directory is recognised and which encoder runs it.

The command line (`gtr-keras export --format NAME`, whose checks import no TensorFlow) and the Python API
(`gtr_keras.load(EXPORT_DIR)`, the format's writer) read the same entry, so a missing runtime is the same
one-line hint everywhere (`missing_package_hint`). The writers and encoders are named by module, and
imported when used: this module imports nothing but `gtr_keras.errors`.

Example:
>>> FORMATS["onnx"].extra, FORMATS["onnx"].flags
('onnx', ('quantize',))
>>> check_installed(FORMATS["onnx"], "run")  # UserError: onnx needs onnxruntime: pip install 'gtr-keras[onnx]'
>>> [package for _, package in FORMATS["onnx"].needs("run", reranker=True)]
['onnxruntime', 'tokenizers']
"""

import dataclasses
import importlib
import importlib.util
import os
from typing import Any

from gtr_keras.errors import UserError

TENSORFLOW = (("tensorflow", "tensorflow"), ("tensorflow_text", "tensorflow-text"))
EXPORT_CONFIG_FILE = "export.json"  # the ONNX and OpenVINO exports' record (`exports.token_id_export`)


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One export format.

    Args:
        name: its `--format` value.
        description: what it is, for `--help` and messages.
        writes: `(import name, pip package)` of what writing it needs.
        runs: `(import name, pip package)` of what running a GTR encoder's export needs (`gtr_keras.load`).
        extra: the gtr-keras extra that installs them (None: the base install).
        flags: the destinations of `export`'s optional flags it takes (the others stay at their defaults).
        options: those of `flags` that its writer takes as keyword arguments.
        marks: files of an export directory that say it is of this format.
        writer: `"module:function"`, `function(encoder, out, **options)`, writing the export.
        checker: `"module:function"`, `function(out, **options)`, refusing (`UserError`) an output that the
            export could not replace, before the model loads; or None.
        encoder: `"module:Class"`, `Class(export_dir)`, a `TextEncoder` of the export.
        reranker_writer: `"module:function"`, `function(reranker, out, **options)`, writing a reranker's export
            (`export --reranker`); None for a format that exports GTR encoders only.
        reranker_checker: as `checker`, for a reranker's export.
        reranker_marks: the files of a reranker's export directory of this format.
        reranker_scorer: `"module:Class"`, `Class(export_dir)`, a `TextPairScorer` of a reranker's export.
        reranker_runs: as `runs`, for a reranker's export (writing one needs them too: it writes with them).
    """

    name: str
    description: str
    writes: tuple
    runs: tuple
    extra: str | None
    flags: tuple
    options: tuple
    marks: tuple
    writer: str
    checker: str | None
    encoder: str
    reranker_writer: str | None = None
    reranker_checker: str | None = None
    reranker_marks: tuple = ()
    reranker_scorer: str | None = None
    reranker_runs: tuple = ()

    def exports_rerankers(self) -> bool:
        return self.reranker_writer is not None

    def needs(self, purpose: str, reranker: bool = False) -> tuple[tuple[str, str], ...]:
        """`(import name, pip package)` of what `purpose` (`"write"` or `"run"`) of this format's export (a
        reranker's, with `reranker`) needs."""
        if purpose == "write":
            return self.writes + (self.reranker_runs if reranker else ())
        return self.reranker_runs if reranker else self.runs

    def is_reranker_export(self, export_dir: str | os.PathLike[str]) -> bool:
        """True when `export_dir` holds this format's export of a reranker."""
        marks = self.reranker_marks
        return bool(marks) and all(os.path.isfile(os.path.join(os.fspath(export_dir), mark)) for mark in marks)

    def check_output(self, out: str | os.PathLike[str], reranker: bool = False, **options: Any) -> None:
        """Refuses (`UserError`) an output that this export (of a reranker, with `reranker`) could not replace,
        before any work."""
        checker = self.reranker_checker if reranker else self.checker
        if checker:
            _named(checker)(out, **options)

    def write(self, encoder: Any, out: str | os.PathLike[str], reranker: bool = False, **options: Any) -> list[str]:
        """Writes `encoder`'s export (a reranker's, with `reranker`) to `out`, its packages checked first; returns
        the paths written."""
        check_installed(self, "write", reranker)
        written = _named(self.reranker_writer if reranker else self.writer)(encoder, out, **options)
        return list(written) if isinstance(written, (list, tuple)) else [written]

    def open(self, export_dir: str | os.PathLike[str], verify: bool = False) -> Any:
        """The `TextEncoder` of an export directory of this format (a reranker's `TextPairScorer` for a reranker's
        export), its runtime checked first (and with `verify`, every file against its record:
        `utils.checksums.verify_directory`)."""
        reranker = self.is_reranker_export(export_dir)
        check_installed(self, "run", reranker)
        if verify:
            _named("gtr_keras.utils.checksums:verify_directory")(export_dir)
        return _named(self.reranker_scorer if reranker else self.encoder)(export_dir)


FORMATS = {
    entry.name: entry
    for entry in (
        ExportFormat(
            "savedmodel",
            "TF Hub reusable SavedModels (encoder, and with --index a searcher) for TF Serving and Keras 3",
            writes=TENSORFLOW,
            runs=TENSORFLOW,
            extra=None,
            flags=("index", "searcher", "k", "version", "precision", "search_param", "allow_large_float32"),
            options=("index", "searcher", "k", "version", "search_param", "allow_large_float32"),
            marks=("saved_model.pb",),
            writer="gtr_keras.exports.savedmodel.cli_adapter:write_export",
            checker="gtr_keras.exports.savedmodel.cli_adapter:check_export_versions",
            encoder="gtr_keras.exports.saved_model_encoder:SavedModelEncoder",
            reranker_writer="gtr_keras.exports.reranker_export:export_reranker_savedmodel",
            reranker_checker="gtr_keras.exports.reranker_export:check_reranker_savedmodel_outputs",
            reranker_marks=("saved_model.pb", os.path.join("assets.extra", "reranker.json")),
            reranker_scorer="gtr_keras.exports.saved_model_encoder:SavedModelScorer",
        ),
        ExportFormat(
            "litert",
            "a LiteRT (.tflite) encoder with TF Text's SentencePiece op",
            writes=TENSORFLOW,
            runs=TENSORFLOW,
            extra=None,
            flags=(),
            options=(),
            marks=("encoder.tflite",),
            writer="gtr_keras.exports.litert:export_litert",
            checker=None,
            encoder="gtr_keras.exports.litert_encoder:LiteRTEncoder",
        ),
        ExportFormat(
            "onnx",
            "an ONNX encoder of token ids, for ONNX Runtime",
            writes=(("tf2onnx", "tf2onnx"), ("onnxruntime", "onnxruntime")),
            runs=(("onnxruntime", "onnxruntime"), ("sentencepiece", "sentencepiece")),
            extra="onnx",
            flags=("quantize",),
            options=("quantize",),
            marks=("encoder.onnx", EXPORT_CONFIG_FILE),
            writer="gtr_keras.exports.onnx_export:export_onnx",
            checker="gtr_keras.exports.onnx_export:check_onnx_output",
            encoder="gtr_keras.exports.runtime_encoder:RuntimeEncoder",
            reranker_writer="gtr_keras.exports.reranker_export:export_reranker_onnx",
            reranker_checker="gtr_keras.exports.reranker_export:check_reranker_onnx_output",
            reranker_marks=("reranker.onnx", EXPORT_CONFIG_FILE),
            reranker_scorer="gtr_keras.exports.runtime_encoder:RuntimeScorer",
            reranker_runs=(("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers")),
        ),
        ExportFormat(
            "openvino",
            "an OpenVINO IR encoder of token ids",
            writes=(("openvino", "openvino"),),
            runs=(("openvino", "openvino"), ("sentencepiece", "sentencepiece")),
            extra="openvino",
            flags=(),
            options=(),
            marks=("encoder.xml", EXPORT_CONFIG_FILE),
            writer="gtr_keras.exports.openvino_export:export_openvino",
            checker="gtr_keras.exports.openvino_export:check_openvino_output",
            encoder="gtr_keras.exports.runtime_encoder:RuntimeEncoder",
        ),
    )
}


def _named(reference):
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def missing_package_hint(export_format: ExportFormat, purpose: str, reranker: bool = False) -> str | None:
    """The one-line install hint for the first package that `purpose` (`"write"` or `"run"`) of
    `export_format`'s export (a reranker's, with `reranker`: `ExportFormat.needs`) lacks, or None when all are
    installed.

    Example:
    >>> missing_package_hint(FORMATS["openvino"], "run")  # without openvino installed
    "openvino needs openvino: pip install 'gtr-keras[openvino]'"
    """
    for module, package in export_format.needs(purpose, reranker):
        if importlib.util.find_spec(module) is None:
            install = f"gtr-keras[{export_format.extra}]" if export_format.extra else package
            return f"{export_format.name} needs {package}: pip install '{install}'"
    return None


def check_installed(export_format: ExportFormat, purpose: str, reranker: bool = False) -> None:
    """Raises `UserError` with `missing_package_hint` when a package that `purpose` needs is missing."""
    hint = missing_package_hint(export_format, purpose, reranker)
    if hint:
        raise UserError(hint)


def format_of_directory(path: str | os.PathLike[str]) -> ExportFormat | None:
    """The `ExportFormat` whose marks (or whose reranker export's marks) are all in the local directory `path`, or
    None (a model directory, or anything else)."""
    path = os.fspath(path)
    for export_format in FORMATS.values():
        if all(os.path.isfile(os.path.join(path, mark)) for mark in export_format.marks):
            return export_format
        if export_format.is_reranker_export(path):
            return export_format
    return None
