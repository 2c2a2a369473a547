"""LiteRT (TFLite) export: raw strings in, embeddings out, the tokenizer inside as TF Text's custom op.

`export_litert` writes `EXPORT_DIR/encoder.tflite` (and the directory's `checksums.json`), a flatbuffer
with the SavedModel encoder's two signatures (`exports.savedmodel`): `encode_documents` (the document budget)
and `encode_queries` (the query budget), each `texts` tf.string `[batch]` -> `embeddings` float32
`[batch, D]`, batch and length dynamic; 0 texts give `[0, D]`, in TFLite's interpreter with its default XNNPACK
delegate too (`_at_least_one_row`).
It holds TFLite builtin ops and TF Text's `TFText>FastSentencepieceTokenize` custom op, which
`tensorflow_text`'s `tflite_registrar` registers (no Flex delegate: `load_litert`). Texts must be valid
UTF-8 (the SavedModel also replaces invalid bytes by U+FFFD; LiteRT has no op for that); surrounding
whitespace is SentencePiece's to drop, as in the SavedModel.
"""

import os
import warnings

import tensorflow as tf

from gtr_keras.errors import UserError
from gtr_keras.utils import files
from gtr_keras.utils.dimensions import truncate_tensor
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.locks import locks_output
from gtr_keras.utils.native_logs import filtered_native_logs

LITERT_FILE = "encoder.tflite"
SIGNATURES = ("encode_documents", "encode_queries")
TEXTS = tf.TensorSpec([None], tf.string, name="texts")
# What an export directory of `export_litert` holds (its `checksums.json` besides), so that it may be replaced.
LITERT_DIRECTORY = files.DirectoryKind("a LiteRT export", (LITERT_FILE,), (LITERT_FILE,))


def litert_path(export_dir):
    """Where `export_litert` writes: `export_dir/encoder.tflite`."""
    return os.path.join(os.fspath(export_dir), LITERT_FILE)


def check_litert_export(encoder, export_dir):
    """Refuses (`UserError`), before the work, what a LiteRT export cannot hold or replace: a model that
    lowercases in TensorFlow (no LiteRT op for it), one in bfloat16, a vocabulary that keeps extra
    whitespace (the export leaves stripping to SentencePiece), a directory at `encoder.tflite`, or an
    `export_dir` that holds anything else than a LiteRT export (`files.check_replaceable`)."""
    from sentencepiece import sentencepiece_model_pb2

    if encoder.tokenizer.lowercase:
        raise UserError(
            "--format litert: the model lowercases texts with a TensorFlow op that LiteRT lacks "
            "(lowercase=True); export it as a SavedModel, or use a case-folding SentencePiece model"
        )
    if encoder.model.compute_dtype != "float32":
        raise UserError(f"--format litert: exports float32 weights, not {encoder.model.compute_dtype}")
    spec = sentencepiece_model_pb2.ModelProto.FromString(encoder.tokenizer.proto).normalizer_spec
    if not spec.remove_extra_whitespaces:
        raise UserError(
            "--format litert: the SentencePiece model keeps extra whitespace (remove_extra_whitespaces is "
            "false), so the export could not leave stripping texts to it; export a SavedModel"
        )
    if files.isdir(litert_path(export_dir)):
        raise UserError(f"{litert_path(export_dir)}: is a directory, expected the .tflite file to write")
    files.check_replaceable(export_dir, [LITERT_DIRECTORY])


def _at_least_one_row(features):
    """`features` (`token_ids`, `padding_mask` `[batch, length]`) padded to one row of one token where they
    are empty, as they are for 0 texts: XNNPACK, the delegate TFLite's interpreters apply by default, cannot
    reshape its nodes to an empty batch (`RuntimeError: XNNPack delegate failed to reshape runtime`). The
    embedding of the row added is cut off after (`litert_flatbuffer`); a batch of texts is left as it is."""
    shape = tf.shape(features["token_ids"])
    missing = [[0, 1 - tf.minimum(shape[0], 1)], [0, 1 - tf.minimum(shape[1], 1)]]
    return {name: tf.pad(value, missing, constant_values=1) for name, value in features.items()}


def litert_flatbuffer(encoder):
    """The `.tflite` bytes of `encoder` (converted through a SavedModel in a temporary directory)."""
    tokenizer, model = encoder.tokenizer, encoder.model

    def embed(texts, kind):
        features = tokenizer.dense_token_ids(texts, encoder.preprocessor.length(kind), clean_text=False)
        embeddings = model(_at_least_one_row(features), training=False)[: tf.shape(texts)[0]]
        return {"embeddings": truncate_tensor(embeddings, encoder.dimensions)}

    root = tf.__internal__.tracking.AutoTrackable()
    root.weights = [v.value for v in model.variables]
    signatures = {
        "encode_documents": tf.function(lambda texts: embed(texts, "document"), input_signature=[TEXTS]),
        "encode_queries": tf.function(lambda texts: embed(texts, "query"), input_signature=[TEXTS]),
    }
    with files.temporary_directory("gtr-keras-litert-") as scratch:
        tf.saved_model.save(root, scratch, signatures=signatures)
        converter = tf.lite.TFLiteConverter.from_saved_model(scratch, signature_keys=list(SIGNATURES))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.allow_custom_ops = True  # TF Text's SentencePiece op, which its tflite_registrar provides
        with filtered_native_logs():
            return converter.convert()


@locks_output("export_dir")
def export_litert(encoder, export_dir):
    """Writes the directory `export_dir` of `encoder.tflite` (replacing an earlier LiteRT export at once) and
    returns the file's path.

    Args:
        encoder: the float32 `Encoder` to export.
        export_dir: the export directory, local or on any file system TensorFlow knows.

    Example:
    >>> path = export_litert(gtr_keras.load("gtr_small_distilled_en"), "exports/gtr")
    >>> runner = load_litert(path).get_signature_runner("encode_queries")
    >>> runner(texts=np.array(["what keeps a wing up?"], dtype=object))["embeddings"].shape
    (1, 384)
    """
    check_litert_export(encoder, export_dir)
    flatbuffer = litert_flatbuffer(encoder)
    with atomic_directory(export_dir, [LITERT_DIRECTORY]) as staging:
        (staging / LITERT_FILE).write_bytes(flatbuffer)
    return litert_path(export_dir)


def load_litert(path, num_threads=None):
    """A TFLite interpreter of a LiteRT export, with TF Text's custom ops registered (no Flex delegate).

    `num_threads`: the interpreter's threads (None: TFLite's default).

    Example:
    >>> interpreter = load_litert("exports/gtr/encoder.tflite")
    >>> sorted(interpreter.get_signature_list())
    ['encode_documents', 'encode_queries']
    """
    from tensorflow.lite.python.interpreter import InterpreterWithCustomOps
    from tensorflow_text.core.pybinds import tflite_registrar

    with (
        warnings.catch_warnings()
    ):  # TF 2.20's interpreter points to ai_edge_litert's, which TF Text's ops do not target
        warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated")
        return InterpreterWithCustomOps(
            model_content=files.read_bytes(os.fspath(path)),
            custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS,
            num_threads=num_threads,
        )
