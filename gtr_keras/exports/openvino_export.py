"""OpenVINO export: an OpenVINO IR (`encoder.xml`, `encoder.bin`), token ids and padding mask in.

`openvino.convert_model` converts the encoder's TensorFlow function (batch and length dynamic); the
weights are stored in float32 (`compress_to_fp16=False`). OpenVINO's CPU plugin runs in bfloat16 by
default on CPUs with AVX512-BF16 or AMX: compile with `{"INFERENCE_PRECISION_HINT": "f32"}` for float32
(`RuntimeEncoder` does). The files beside the model: `gtr_keras.exports.token_id_export`.
"""

import contextlib
import sys

from gtr_keras.exports.export_formats import FORMATS, check_installed
from gtr_keras.exports.token_id_export import forward_function, token_id_directory, write_token_id_export
from gtr_keras.utils import files
from gtr_keras.utils.native_logs import filtered_native_logs

OPENVINO_FILES = ("encoder.xml", "encoder.bin")
OPENVINO_DIRECTORY = token_id_directory("an OpenVINO export", OPENVINO_FILES)


def check_openvino_output(export_dir, **options):
    """Refuses (`UserError`) an `export_dir` that is not empty nor an OpenVINO export, before the model loads."""
    files.check_replaceable(export_dir, [OPENVINO_DIRECTORY])


@contextlib.contextmanager
def _tensorflow_frontend_on_python_3_13():
    """OpenVINO's TensorFlow frontend (2026.4) reads TensorFlow's version through `exec("import tensorflow")`
    then `exec("del tensorflow")`, which raises NameError on Python 3.13, where each `exec` in a function
    gets a fresh snapshot of its locals (PEP 667): every in-memory TensorFlow conversion fails. For the
    conversion only, that function is replaced by one that reads the same fields without `exec`."""
    from openvino.frontend.tensorflow import utils

    if sys.version_info < (3, 13):
        yield
        return
    original = utils.get_environment_setup

    def environment_setup(framework):
        setup = {"python_version": "{}.{}.{}".format(*sys.version_info[:3]), "sys_platform": sys.platform}
        if framework == "tf" and "tensorflow" in sys.modules:
            setup["tensorflow"] = utils.get_imported_module_version(sys.modules["tensorflow"])
        return setup

    utils.get_environment_setup = environment_setup
    try:
        yield
    finally:
        utils.get_environment_setup = original


def write_openvino(encoder, path):
    """Converts the encoder to an OpenVINO IR at `path` (`.xml`, local; its `.bin` beside it).

    Example:
    >>> write_openvino(gtr_keras.load("models/gtr-base"), "/tmp/gtr/encoder.xml")
    """
    import openvino

    with filtered_native_logs(), _tensorflow_frontend_on_python_3_13():
        model = openvino.convert_model(forward_function(encoder).get_concrete_function())
    openvino.save_model(model, path, compress_to_fp16=False)


def export_openvino(encoder, export_dir):
    """Writes an OpenVINO export directory: `encoder.xml`, `encoder.bin`, `spiece.model`, `export.json`.

    Args:
        encoder: the float32 `Encoder` to export.
        export_dir: the directory to write (replaced when it is an OpenVINO export or empty).

    Returns:
        The path of `encoder.xml`.

    Example:
    >>> export_openvino(gtr_keras.load("models/gtr-base"), "exports/gtr-openvino")
    'exports/gtr-openvino/encoder.xml'
    """
    check_installed(FORMATS["openvino"], "write")  # the install hint of `gtr-keras export --format openvino`
    return write_token_id_export(
        encoder,
        export_dir,
        OPENVINO_DIRECTORY,
        lambda staging: write_openvino(encoder, str(staging / OPENVINO_FILES[0])),
        {"format": "openvino"},
    )
