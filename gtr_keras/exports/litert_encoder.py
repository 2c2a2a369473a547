"""`LiteRTEncoder`: texts to embeddings with the LiteRT export of `gtr-keras export --format litert`."""

import os

import numpy as np

from gtr_keras.exports.litert import LITERT_FILE, load_litert
from gtr_keras.models.gtr.gtr_text_embedder import ENCODER_SIGNATURES
from gtr_keras.models.text_encoder import TextEncoder


class LiteRTEncoder(TextEncoder):
    """Encodes texts with a LiteRT export directory (`encoder.tflite`), as the model does.

    The flatbuffer tokenises inside (TF Text's SentencePiece op, registered by `load_litert`): each batch
    (sorted by length, results in input order) goes to its `encode_queries` or `encode_documents`
    signature. Texts must be valid UTF-8 (`exports.litert`). `gtr_keras.load` returns one for such a
    directory.

    Args:
        export_dir: the directory holding `encoder.tflite`.
        num_threads: the interpreter's threads (None: TFLite's default).

    Example:
    >>> encoder = LiteRTEncoder("exports/gtr-litert")
    >>> encoder.encode_queries(["what keeps a wing up?"]).shape
    (1, 768)
    """

    query_length = document_length = None  # inside the graph

    def __init__(self, export_dir, num_threads=None):
        self.interpreter = load_litert(os.path.join(os.fspath(export_dir), LITERT_FILE), num_threads)
        self._runners = {kind: self.interpreter.get_signature_runner(name) for kind, name in ENCODER_SIGNATURES.items()}
        outputs = self._runners["document"].get_output_details()
        self.embedding_dim = int(outputs["embeddings"]["shape_signature"][-1])

    def prepare(self, texts, kind):
        return [text.decode("utf-8") if isinstance(text, bytes) else text for text in texts]

    def embed_batch(self, items, kind, batch_size):
        return np.asarray(self._runners[kind](texts=np.array(items, dtype=object))["embeddings"], np.float32)
