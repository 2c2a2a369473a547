"""What the ONNX and OpenVINO exports share: the token-ids-in forward pass, and the files beside the model.

Those runtimes get no tokenizer in the graph (onnxruntime-extensions' and openvino-tokenizers'
SentencePiece ops break score ties as TF Text's older `SentencepieceOp` does, unlike the `sentencepiece`
library and `GTRTokenizer`: benchmarks/RESULTS.md, "Runtimes"), so an export directory holds

- the model file (`encoder.onnx`, or `encoder.xml` and `encoder.bin`): int32 `token_ids` and
  `padding_mask` `[batch, length]` in (both dimensions dynamic), float32 `embeddings` `[batch, D]` out
  (L2-normalised rows);
- `spiece.model`, the SentencePiece model, to tokenise with the `sentencepiece` library;
- `export.json`: the token budgets (`query_length`, `document_length`, EOS included), `lowercase`, the EOS
  and pad ids, `embedding_dim` (N, and `dimensions` N, for an export of `--dimensions N`: its embeddings
  are the model's first N coordinates, renormalised, in the graph), the model file and its format.

`gtr_keras.exports.runtime_encoder.RuntimeEncoder` reads such a directory and encodes texts as the
SavedModel does.
"""

import hashlib
import json
import os

import tensorflow as tf

from gtr_keras.errors import UserError
from gtr_keras.exports.runtime_encoder import CONFIG_FILE, INPUTS, OUTPUT
from gtr_keras.models.gtr.gtr_tokenizer import EOS_ID, PAD_ID
from gtr_keras.utils import files
from gtr_keras.utils.dimensions import truncate_tensor
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.locks import locks_output

VOCABULARY_FILE = "spiece.model"
TOKEN_INPUTS = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUTS]


def token_id_directory(description, model_files):
    """The `DirectoryKind` of a token-ids-in export whose model is `model_files` (replaced as a unit)."""
    return files.DirectoryKind(description, (model_files[0], CONFIG_FILE), (*model_files, VOCABULARY_FILE, CONFIG_FILE))


def forward_function(encoder):
    """The encoder's model as a `tf.function` of int32 `token_ids` and `padding_mask` `[None, None]`, giving
    `{"embeddings": float32 [None, D]}`.

    Example:
    >>> forward_function(gtr_keras.load(model_dir))(ids, mask)["embeddings"].shape
    TensorShape([2, 64])
    """
    model = encoder.model
    if model.compute_dtype != "float32":
        raise UserError(
            f"the model computes in {model.compute_dtype}: ONNX and OpenVINO exports are float32 (load it in "
            "float32; ONNX Runtime's int8 is `--quantize int8`)"
        )

    def forward(token_ids, padding_mask):
        embeddings = model({"token_ids": token_ids, "padding_mask": padding_mask}, training=False)
        return {OUTPUT: truncate_tensor(embeddings, encoder.dimensions)}

    return tf.function(forward, input_signature=TOKEN_INPUTS)


@locks_output("export_dir")
def write_token_id_export(encoder, export_dir, directory, write_model, config):
    """Writes `export_dir` as a unit: the model (`write_model(staging_dir)`), `spiece.model` and `export.json`.

    Args:
        encoder: the `Encoder` exported.
        export_dir: the export directory, replaced when it is one of `directory`'s kind (or empty).
        directory: its `DirectoryKind` (`token_id_directory`); `directory.marks[0]` names the model file.
        write_model: writes the model file(s) into the staging directory it is given.
        config: entries of `export.json` of the format's own (`"format"`, ...).

    Returns:
        The path of the model file.
    """
    proto = encoder.tokenizer.proto
    with atomic_directory(export_dir, [directory]) as staging:
        write_model(staging)
        (staging / VOCABULARY_FILE).write_bytes(proto)
        record = {
            **config,
            "model_file": directory.marks[0],
            "inputs": {name: "int32 [batch, length]" for name in INPUTS},
            "output": f"{OUTPUT}: float32 [batch, {encoder.embedding_dim}], L2-normalised",
            "embedding_dim": encoder.embedding_dim,
            **({"dimensions": encoder.dimensions} if encoder.dimensions else {}),
            "query_length": encoder.query_length,
            "document_length": encoder.document_length,
            "lowercase": encoder.tokenizer.lowercase,
            "eos_id": EOS_ID,
            "pad_id": PAD_ID,
            "vocabulary": VOCABULARY_FILE,
            "vocabulary_sha256": hashlib.sha256(proto).hexdigest(),
        }
        (staging / CONFIG_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return os.path.join(export_dir, directory.marks[0])
