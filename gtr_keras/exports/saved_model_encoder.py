"""`SavedModelEncoder`: texts to embeddings with the encoder SavedModel of `gtr-keras export` (`encoder/N`); and
`SavedModelScorer`: pairs to scores with a reranker's (`reranker/N`)."""

import numpy as np
import tensorflow as tf

from gtr_keras.exports.savedmodel.loader import load_export
from gtr_keras.models.gtr.gtr_text_embedder import ENCODER_SIGNATURES
from gtr_keras.models.text_encoder import TextEncoder, TextPairScorer, to_bytes


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


class SavedModelScorer(TextPairScorer):
    """Scores (query, document) pairs with a reranker's SavedModel (`EXPORT_DIR/reranker/VERSION`), as the
    reranker does: each batch (sorted by the pairs' characters, results in input order) goes to its `score`
    signature, which tokenises in its graph. `gtr_keras.load` returns one for such a directory.

    Args:
        path: the SavedModel directory, local or on a file system TensorFlow knows.

    Example:
    >>> SavedModelScorer("exports/minilm/reranker/1").predict([("what keeps a wing up?", "lift")]).shape
    (1,)
    """

    def __init__(self, path):
        self.saved_model = load_export(path)
        self._score = self.saved_model.signatures["score"]

    def prepare(self, pairs):
        return [(to_bytes(query), to_bytes(document)) for query, document in pairs]

    def score_batch(self, items, batch_size):
        queries, documents = (tf.constant([item[side] for item in items], tf.string) for side in (0, 1))
        return self._score(queries=queries, documents=documents)["scores"].numpy().astype(np.float32)
