"""`RuntimeEncoder`: texts to embeddings with an ONNX (ONNX Runtime) or OpenVINO export of gtr-keras."""

import json
import os

import numpy as np
import sentencepiece as spm

from gtr_keras.errors import DataError
from gtr_keras.models.text_encoder import TextEncoder
from gtr_keras.serving.export_formats import FORMATS, check_installed

CONFIG_FILE = "export.json"
INPUTS = ("token_ids", "padding_mask")
OUTPUT = "embeddings"
RUNTIMES = {"onnx": "onnxruntime", "openvino": "openvino"}
OPENVINO_FLOAT32 = {"INFERENCE_PRECISION_HINT": "f32"}


class RuntimeEncoder(TextEncoder):
    """Encodes texts with an `export --format onnx|openvino` directory, as the SavedModel encoder does.

    Texts are tokenised with the `sentencepiece` library and the export's `spiece.model`, with T5's
    conventions (stripped, lowercased where `export.json` says so, truncated to the kind's token budget
    with EOS kept last), padded per batch to its longest text, and run in ONNX Runtime or OpenVINO;
    `encode_queries` and `encode_documents` are every encoder's (`TextEncoder`). `gtr_keras.load(export_dir)`
    returns one. It imports neither TensorFlow nor Keras.

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

    def __init__(self, export_dir, openvino_config=None, session_options=None):
        self.export_dir = os.fspath(export_dir)
        self.openvino_config = openvino_config
        self.session_options = session_options
        path = os.path.join(self.export_dir, CONFIG_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                self.config = json.load(f)
        except FileNotFoundError:
            raise DataError(f"{path}: no such file (not an `export --format onnx|openvino` directory)") from None
        runtime = self.config.get("format")
        if runtime not in RUNTIMES:
            raise DataError(f"{path}: format {runtime!r} is not one of {', '.join(RUNTIMES)}")
        self.runtime = runtime
        check_installed(FORMATS[runtime], "run")  # the install hint of `gtr-keras export --format onnx|openvino`
        self._pieces = spm.SentencePieceProcessor(model_file=os.path.join(self.export_dir, self.config["vocabulary"]))
        self._run = self._open(os.path.join(self.export_dir, self.config["model_file"]))

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

    def tokenize(self, texts, kind="document"):
        """Token id lists of `texts` (strings or UTF-8 bytes), EOS last, truncated to the kind's budget."""
        texts = [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else t for t in texts]
        texts = [t.strip().lower() if self.config["lowercase"] else t.strip() for t in texts]
        keep = self.length(kind) - 1
        return [pieces[:keep] + [self.config["eos_id"]] for pieces in self._pieces.encode(texts)]

    def embed_tokens(self, token_ids, padding_mask):
        """Embeddings of a tokenised batch: int32 `[B, L]` ids and mask in, float32 `[B, D]` out."""
        return np.asarray(self._run(np.asarray(token_ids, np.int32), np.asarray(padding_mask, np.int32)))
