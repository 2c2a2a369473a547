"""`RuntimeEncoder`: texts to embeddings with an ONNX (ONNX Runtime) or OpenVINO export of gtr-keras; and
`RuntimeScorer`: pairs to scores with a reranker's ONNX export."""

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import sentencepiece as spm

from gtr_keras.errors import DataError
from gtr_keras.exports.export_formats import FORMATS, check_installed
from gtr_keras.models.text_encoder import TextEncoder, TextPairScorer, pad_pairs
from gtr_keras.utils.records import check_fields, read_json_object

CONFIG_FILE = "export.json"
INPUTS = ("token_ids", "padding_mask")
OUTPUT = "embeddings"
RUNTIMES = {"onnx": "onnxruntime", "openvino": "openvino"}
OPENVINO_FLOAT32 = {"INFERENCE_PRECISION_HINT": "f32"}
REMEDY = "export the model again"
CONFIG_FIELDS = {
    "format": tuple(RUNTIMES),
    "model_file": "file",
    "vocabulary": "file",
    "vocabulary_sha256": "sha256",
    "embedding_dim": "positive",
    "query_length": "positive",
    "document_length": "positive",
    "lowercase": "bool",
    "eos_id": "count",
    "pad_id": "count",
}
# What `tf.strings.strip` (the SavedModel's and `GTRTokenizer`'s) strips: ASCII whitespace, not Unicode's.
ASCII_WHITESPACE = " \t\n\v\f\r"


class RuntimeEncoder(TextEncoder):
    """Encodes texts with an `export --format onnx|openvino` directory, as the SavedModel encoder does.

    Texts are tokenised with the `sentencepiece` library and the export's `spiece.model`, with T5's
    conventions (ASCII whitespace stripped at the ends, as `tf.strings.strip` does; lowercased where
    `export.json` says so; truncated to the kind's token budget with EOS kept last), padded per batch to
    its longest text, and run in ONNX Runtime or OpenVINO; `encode_queries` and `encode_documents` are
    every encoder's (`TextEncoder`). `gtr_keras.load(export_dir)` returns one. It imports neither
    TensorFlow nor Keras: it needs `numpy` and `sentencepiece` (gtr-keras' own dependencies) and
    `onnxruntime` or `openvino` (the `[onnx]`, `[openvino]` extras).

    `export.json` is checked when the encoder is made: every field's type and value (one line naming the
    file and the field), the model and vocabulary files (names in the directory, never paths), the
    vocabulary's SHA-256 against `vocabulary_sha256`, and the EOS and pad ids against it.

    Args:
        export_dir: a local export directory (`export.json`, `spiece.model` and the model file).
        openvino_config: OpenVINO compile properties over `{"INFERENCE_PRECISION_HINT": "f32"}`
            (`{"INFERENCE_PRECISION_HINT": "bf16"}` for bfloat16 on a CPU that has it).
        session_options: an `onnxruntime.SessionOptions` (threads, optimisation level), or None.

    Example:
    >>> encoder = RuntimeEncoder("exports/gtr-onnx")
    >>> queries = encoder.encode_queries(["what keeps a wing up?"])
    >>> documents = encoder.encode_documents(["Lift on a wing.", "The boundary layer."])
    >>> (queries @ documents.T).shape
    (1, 2)
    """

    def __init__(
        self,
        export_dir: str | os.PathLike[str],
        openvino_config: dict[str, Any] | None = None,
        session_options: Any = None,
    ):
        self.export_dir = os.fspath(export_dir)
        self.openvino_config = openvino_config
        self.session_options = session_options
        self.config = read_export_config(self.export_dir)
        self.runtime = self.config["format"]
        check_installed(FORMATS[self.runtime], "run")  # the install hint of `gtr-keras export --format onnx|openvino`
        vocabulary = os.path.join(self.export_dir, self.config["vocabulary"])
        self._pieces = spm.SentencePieceProcessor(model_proto=read_vocabulary(vocabulary, self.config))
        path = os.path.join(self.export_dir, CONFIG_FILE)
        check_vocabulary_ids(path, self.config, self._pieces)
        model_path = os.path.join(self.export_dir, self.config["model_file"])
        if not os.path.isfile(model_path):
            raise DataError(f"{model_path}: no such file (named by {path}'s 'model_file'); {REMEDY}")
        self._run = self._open(model_path)

    def _open(self, model_path):
        if self.runtime == "onnx":
            import onnxruntime

            session = onnxruntime.InferenceSession(model_path, self.session_options, providers=["CPUExecutionProvider"])
            return lambda ids, mask: session.run(None, {INPUTS[0]: ids, INPUTS[1]: mask})[0]
        import openvino

        compiled = openvino.Core().compile_model(
            model_path, "CPU", {**OPENVINO_FLOAT32, **(self.openvino_config or {})}
        )
        return lambda ids, mask: compiled({INPUTS[0]: ids, INPUTS[1]: mask})[0]

    embedding_dim = property(lambda self: self.config["embedding_dim"], doc="D, the embedding dimension.")
    query_length = property(lambda self: self.config["query_length"], doc="Token budget of queries, EOS included.")
    document_length = property(lambda self: self.config["document_length"], doc="Token budget of documents.")
    pad_id = property(lambda self: self.config["pad_id"], doc="The id that pads a batch.")

    def tokenize(self, texts: Sequence[str | bytes], kind: str = "document") -> list[list[int]]:
        """Token id lists of `texts` (strings or UTF-8 bytes), EOS last, truncated to the kind's budget."""
        decoded = [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else t for t in texts]
        decoded = [t.strip(ASCII_WHITESPACE) for t in decoded]
        decoded = [t.lower() for t in decoded] if self.config["lowercase"] else decoded
        keep = self.length(kind) - 1
        return [pieces[:keep] + [self.config["eos_id"]] for pieces in self._pieces.encode(decoded)]

    def embed_tokens(self, token_ids: np.ndarray, padding_mask: np.ndarray) -> np.ndarray:
        """Embeddings of a tokenised batch: int32 `[B, L]` ids and mask in, float32 `[B, D]` out."""
        return np.asarray(self._run(np.asarray(token_ids, np.int32), np.asarray(padding_mask, np.int32)))


def read_export_config(export_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked `export.json` of an `export --format onnx|openvino` directory (`CONFIG_FIELDS`).

    Raises:
        DataError: a missing or malformed file, naming it and the field.

    Example:
    >>> read_export_config("exports/gtr-onnx")["format"]
    'onnx'
    """
    path = os.path.join(os.fspath(export_dir), CONFIG_FILE)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file (not an `export --format onnx|openvino` directory)")
    return check_fields(path, read_json_object(path, REMEDY), CONFIG_FIELDS, REMEDY)


def check_vocabulary_ids(path: str, config: dict[str, Any], pieces: Any) -> None:
    """Raises `DataError` naming `path` (`export.json`) unless its EOS and pad ids are those of the
    vocabulary `pieces` (a `SentencePieceProcessor`)."""
    for field, expected in (("eos_id", pieces.eos_id()), ("pad_id", pieces.pad_id())):
        if config[field] != expected:
            raise DataError(f"{path}: field {field!r} is {config[field]}, its vocabulary's is {expected}; {REMEDY}")


def read_vocabulary(path: str, config: dict[str, Any]) -> bytes:
    """The bytes of the vocabulary file `path`, once their SHA-256 is the one `export.json` records."""
    try:
        with open(path, "rb") as f:
            proto = f.read()
    except OSError as error:
        raise DataError(f"{path}: unreadable ({error.strerror}); {REMEDY}") from None
    if hashlib.sha256(proto).hexdigest() != config["vocabulary_sha256"]:
        raise DataError(
            f"{path}: not the vocabulary the model was exported with (its SHA-256 is not {CONFIG_FILE}'s "
            f"vocabulary_sha256); {REMEDY}"
        )
    return proto


RERANKER_FIELDS = {
    "format": ("onnx",),
    "kind": ("reranker",),
    "model_file": "file",
    "tokenizer": "file",
    "activation": ("sigmoid", "identity"),
    "sequence_length": "positive",
    "pad_id": "count",
}


class RuntimeScorer(TextPairScorer):
    """Scores (query, document) pairs with a reranker's ONNX export (`export --reranker MODEL --format onnx`).

    The pairs are tokenised, packed and cut on the host by the export's `tokenizer.json` (Hugging Face's
    `tokenizers`: the reranker's vocabulary and rules, `longest_first` at its budget), sorted by length,
    padded per batch and run in ONNX Runtime. It imports neither TensorFlow nor Keras.

    Args:
        export_dir: a local export directory (`export.json`, `tokenizer.json`, `reranker.onnx`).
        session_options: an `onnxruntime.SessionOptions`, or None.

    Example:
    >>> RuntimeScorer("exports/minilm-onnx").predict([("what keeps a wing up?", "lift")]).shape
    (1,)
    """

    def __init__(self, export_dir: str | os.PathLike[str], session_options: Any = None):
        self.export_dir = os.fspath(export_dir)
        path = os.path.join(self.export_dir, CONFIG_FILE)
        self.config = check_fields(path, read_json_object(path, REMEDY), RERANKER_FIELDS, REMEDY)
        check_installed(FORMATS["onnx"], "run", reranker=True)
        import onnxruntime
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(os.path.join(self.export_dir, self.config["tokenizer"]))
        model_path = os.path.join(self.export_dir, self.config["model_file"])
        self._session = onnxruntime.InferenceSession(model_path, session_options, providers=["CPUExecutionProvider"])

    sequence_length = property(lambda self: self.config["sequence_length"], doc="The pair's token budget.")

    def prepare(self, pairs: Sequence[Sequence[str | bytes]]) -> list["_Encoded"]:
        texts = [tuple(t.decode("utf-8", errors="replace") if isinstance(t, bytes) else t for t in p) for p in pairs]
        return [_Encoded(e.ids, e.type_ids) for e in self.tokenizer.encode_batch(texts)]

    def score_batch(self, items: Sequence["_Encoded"], batch_size: int) -> np.ndarray:
        ids, segments, mask = pad_pairs([(item.ids, item.type_ids) for item in items], self.config["pad_id"])
        return self._session.run(None, {"token_ids": ids, "segment_ids": segments, "padding_mask": mask})[0]


class _Encoded:
    def __init__(self, ids, type_ids):
        self.ids, self.type_ids = ids, type_ids

    def __len__(self):
        return len(self.ids)
