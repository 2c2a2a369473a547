"""`gtr_keras.load`: one call for an encoder of any runtime, from a model directory or an export directory.

An export directory (the SavedModel `EXPORT_DIR/encoder/VERSION`, or what `gtr-keras export --format
litert|onnx|openvino` wrote) is recognised by its files (`exports.export_formats.format_of_directory`) and
opened with its format's encoder; anything else is a model source (`saving.load_model`). Each gives the same
`encode_queries` and `encode_documents` (`models.text_encoder.TextEncoder`). This module imports no
TensorFlow: an ONNX or OpenVINO export loads with its runtime, `sentencepiece` and numpy only.
"""

import os

from gtr_keras.errors import UserError
from gtr_keras.exports.export_formats import format_of_directory
from gtr_keras.models.text_encoder import TextEncoder, TextPairScorer


def load(
    path: str | os.PathLike[str],
    jit_compile: bool = False,
    dtype: str | None = None,
    query_length: int | None = None,
    document_length: int | None = None,
    verify: bool = False,
) -> TextEncoder | TextPairScorer:
    """An encoder (texts in, numpy embeddings out) for a model directory, a checkpoint or an export.

    Args:
        path: a model directory or anything `GTRTextEmbedder.from_preset` takes (a sentence-transformers
            checkpoint, `hf://...`, a trained model's name), or an export directory: the SavedModel
            `EXPORT_DIR/encoder/VERSION`, or an `export --format litert|onnx|openvino` directory.
        jit_compile: compile the forward pass with XLA (a model only).
        dtype: optional dtype policy of the model: `"bfloat16"` for bfloat16 inference (float32
            embeddings out), `"mixed_bfloat16"` to train in bfloat16 (a model only).
        query_length: token budget for queries instead of the saved one (a model only).
        document_length: token budget for documents instead of the saved one (a model only).
        verify: first verify every file of the directory against its record (`utils.checksums`: a directory
            gtr-keras wrote; `gtr-keras check` verifies it and more), and refuse a damaged one (`DataError`).

    Returns:
        An `Encoder` (a model; the Keras model is `encoder.model`), or the export's encoder:
        `SavedModelEncoder`, `LiteRTEncoder` or `RuntimeEncoder` (ONNX, OpenVINO). All are
        `TextEncoder`s: `encode_queries(texts, batch_size=32, progress=None)` and `encode_documents`.

    Raises:
        UserError: an export whose runtime is not installed (the one-line install hint of `gtr-keras
            export`), or a model-only argument given with an export (its budgets and dtype are fixed).

    Example:
    >>> encoder = gtr_keras.load("models/gtr-base")
    >>> fast = gtr_keras.load("models/gtr-base", dtype="bfloat16", document_length=256)
    >>> onnx = gtr_keras.load("exports/gtr-onnx")  # ONNX Runtime, no TensorFlow
    >>> onnx.encode_documents(["Lift on a wing."]).shape
    (1, 768)
    """
    export_format = format_of_directory(path) if isinstance(path, (str, os.PathLike)) else None
    if export_format is None:
        from gtr_keras.saving import load_model  # the model's stack (Keras, TensorFlow) only for one

        return load_model(path, jit_compile, dtype, query_length, document_length, verify)
    given = {
        "jit_compile": jit_compile,
        "dtype": dtype,
        "query_length": query_length,
        "document_length": document_length,
    }
    fixed = sorted(name for name, value in given.items() if value)
    if fixed:
        raise UserError(
            f"{os.fspath(path)}: a {export_format.name} export takes no {', '.join(fixed)} (fixed at export)"
        )
    return export_format.open(path, verify)
