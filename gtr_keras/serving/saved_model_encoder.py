"""`SavedModelEncoder`: texts to embeddings with the encoder SavedModel of `gtr-keras export` (`encoder/N`)."""

import numpy as np
import tensorflow as tf

from gtr_keras.models.gtr.gtr_text_embedder import ENCODER_SIGNATURES
from gtr_keras.models.text_encoder import TextEncoder, to_bytes
from gtr_keras.serving.export import load_export


class SavedModelEncoder(TextEncoder):
    """Encodes texts with an exported encoder SavedModel (`EXPORT_DIR/encoder/VERSION`), as the model does.

    The SavedModel tokenises inside its graph, with the model's budgets: each batch (sorted by length,
    results in input order) goes to its `encode_queries` or `encode_documents` signature. `gtr_keras.load`
    returns one for such a directory; it loads with `load_export` (TF Text's ops registered).

    Args:
        path: the SavedModel directory, local or on a file system TensorFlow knows.

    Example:
    >>> encoder = SavedModelEncoder("exports/gtr/encoder/1")
    >>> encoder.encode_documents(["Lift on a wing."], batch_size=32).shape
    (1, 768)
    """

    query_length = document_length = None  # inside the graph

    def __init__(self, path):
        self.saved_model = load_export(path)
        self._signatures = {kind: self.saved_model.signatures[name] for kind, name in ENCODER_SIGNATURES.items()}
        self.embedding_dim = int(self._signatures["document"].structured_outputs["embeddings"].shape[-1])

    def prepare(self, texts, kind):
        return [to_bytes(text) for text in texts]

    def embed_batch(self, items, kind, batch_size):
        return self._signatures[kind](texts=tf.constant(items, tf.string))["embeddings"].numpy().astype(np.float32)
