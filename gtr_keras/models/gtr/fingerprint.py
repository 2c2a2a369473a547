"""The fingerprint of a GTR model: SHA-256 of its weights, vocabulary and architecture, which resumed
jobs, indexes and teacher caches record to notice a changed model.
"""

import hashlib
import json

import numpy as np


def fingerprint(model):
    """SHA-256 (hex) of a GTR model: its weights, vocabulary and architecture.

    Covers every weight (position, shape, dtype, values), the SentencePiece
    vocabulary (and the tokenizer's lowercasing) and the architecture; the
    same model gives the same fingerprint in any directory format. The token
    budgets are not covered (callers record them beside it where they
    matter); the precision is, as the weights' dtype. Resumed jobs and
    indexes record it to detect a changed model.

    Args:
        model: a `GTRTextEmbedder`, or an `Encoder` (its `.model`).

    Example:
    >>> fingerprint(gtr_keras.load("models/gtr-base")) == fingerprint(gtr_keras.load("models/copy"))
    True
    """
    embedder = getattr(model, "model", model)
    settings = {key: value for key, value in embedder.backbone.get_config().items() if key not in ("name", "dtype")}
    settings["embedding_dim"] = embedder.embedding_dim
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8"))
    digest.update(embedder.preprocessor.tokenizer.proto)
    if embedder.preprocessor.tokenizer.lowercase:  # only when on: the fingerprints of other models stay as they were
        digest.update(b"lowercase")
    update_with_weights(digest, embedder.weights)
    return digest.hexdigest()


def update_with_weights(digest, weights):
    """Feeds every weight (position, shape, dtype, values) into a `hashlib` digest."""
    for number, weight in enumerate(weights):
        value = np.ascontiguousarray(weight.numpy())
        digest.update(f"{number}:{value.shape}:{value.dtype}".encode("utf-8"))
        digest.update(value.tobytes())
