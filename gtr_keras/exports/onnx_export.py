"""ONNX export: token ids and padding mask in, embeddings out, for ONNX Runtime (float32 or dynamic int8).

The encoder is converted with tf2onnx (opset `OPSET`, batch and length dynamic); `--quantize int8`
quantizes its MatMul weights with ONNX Runtime's dynamic quantization (int8 weights, activations quantized
per call), the fastest CPU path measured here (benchmarks/RESULTS.md, "Runtimes"). The files beside the
model and how to feed it: `gtr_keras.exports.token_id_export`.
"""

import os

from gtr_keras.errors import UserError
from gtr_keras.exports.export_formats import FORMATS, check_installed
from gtr_keras.exports.token_id_export import forward_function, token_id_directory, write_token_id_export
from gtr_keras.utils import files
from gtr_keras.utils.native_logs import filtered_native_logs

ONNX_FILE = "encoder.onnx"
ONNX_DIRECTORY = token_id_directory("an ONNX export", (ONNX_FILE,))
OPSET = 17
QUANTIZATIONS = ("int8",)


def check_onnx_output(export_dir, **options):
    """Refuses (`UserError`) an `export_dir` that is not empty nor an ONNX export, before the model loads."""
    files.check_replaceable(export_dir, [ONNX_DIRECTORY])


def write_onnx(encoder, path, quantize=None):
    """Converts the encoder to ONNX at `path` (local), its MatMul weights in int8 with `quantize="int8"`.

    Example:
    >>> write_onnx(gtr_keras.load("models/gtr-base"), "/tmp/gtr.onnx", quantize="int8")
    """
    import tf2onnx

    forward = forward_function(encoder)
    float_path = path if quantize is None else f"{path}.float32"
    with filtered_native_logs():
        tf2onnx.convert.from_function(
            forward, input_signature=forward.input_signature, opset=OPSET, output_path=float_path
        )
    if quantize is None:
        return
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(float_path, path, weight_type=QuantType.QInt8)
    os.remove(float_path)


def export_onnx(encoder, export_dir, quantize=None):
    """Writes an ONNX export directory: `encoder.onnx`, `spiece.model` and `export.json`, as a unit.

    Args:
        encoder: the float32 `Encoder` to export.
        export_dir: the directory to write (replaced when it is an ONNX export or empty).
        quantize: None (float32) or `"int8"` (ONNX Runtime's dynamic quantization).

    Returns:
        The path of `encoder.onnx`.

    Example:
    >>> export_onnx(gtr_keras.load("models/gtr-base"), "exports/gtr-onnx", quantize="int8")
    'exports/gtr-onnx/encoder.onnx'
    """
    check_installed(FORMATS["onnx"], "write")  # the install hint of `gtr-keras export --format onnx`
    if quantize not in (None, *QUANTIZATIONS):
        raise UserError(f"quantize must be None or one of {', '.join(QUANTIZATIONS)}, got {quantize!r}")
    return write_token_id_export(
        encoder,
        export_dir,
        ONNX_DIRECTORY,
        lambda staging: write_onnx(encoder, str(staging / ONNX_FILE), quantize),
        {"format": "onnx", "opset": OPSET, "quantize": quantize},
    )
