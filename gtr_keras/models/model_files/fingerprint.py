"""The fingerprint of a GTR model (or a reranker): SHA-256 of its weights, vocabulary and architecture, which
resumed jobs, indexes and teacher caches record to notice a changed model.
"""

import hashlib
import json

import ml_dtypes
import numpy as np


def fingerprint(model, in_bfloat16=False):
    """SHA-256 (hex) of a GTR model: its weights, vocabulary and architecture.

    Covers every weight (position, shape, dtype, values), the SentencePiece
    vocabulary (and the tokenizer's lowercasing) and the architecture; the
    same model gives the same fingerprint in any directory format. The token
    budgets are not covered (callers record them beside it where they
    matter); the precision is, as the weights' dtype, unless `in_bfloat16`.
    Resumed jobs and indexes record it to detect a changed model. The
    tokenizer's op is not covered: it is not part of the model.

    Args:
        model: a `GTRTextEmbedder`, or an `Encoder` (its `.model`).
        in_bfloat16: hash every floating-point weight rounded to bfloat16
            (as loading with `dtype="bfloat16"` rounds them): the same
            fingerprint for a model loaded in float32 or in bfloat16.

    Example:
    >>> fingerprint(gtr_keras.load("models/gtr-base")) == fingerprint(gtr_keras.load("models/copy"))
    True
    """
    embedder = getattr(model, "model", model)
    if not hasattr(embedder, "embedding_dim"):
        return _reranker_fingerprint(embedder, in_bfloat16)
    settings = {key: value for key, value in embedder.backbone.get_config().items() if key not in ("name", "dtype")}
    settings["embedding_dim"] = embedder.embedding_dim
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8"))
    digest.update(embedder.preprocessor.tokenizer.proto)
    if embedder.preprocessor.tokenizer.lowercase:  # only when on: the fingerprints of other models stay as they were
        digest.update(b"lowercase")
    update_with_weights(digest, embedder.weights, in_bfloat16)
    return digest.hexdigest()


def _reranker_fingerprint(reranker, in_bfloat16):
    """A `Reranker`'s fingerprint: its backbone's class and settings, its head's, its pair budget, its
    vocabulary and its weights."""
    settings = {key: value for key, value in reranker.backbone.get_config().items() if key not in ("name", "dtype")}
    settings.update(
        backbone=type(reranker.backbone).__name__,
        activation=reranker.activation,
        sequence_length=reranker.preprocessor.sequence_length,
    )
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8"))
    tokenizer = reranker.preprocessor.tokenizer
    proto = getattr(tokenizer, "proto", None)
    digest.update(proto if proto is not None else "\n".join(tokenizer.get_vocabulary()).encode("utf-8"))
    options = {k: v for k, v in tokenizer.get_config().items() if k not in ("name", "dtype", "vocabulary", "proto")}
    digest.update(json.dumps(options, sort_keys=True, default=str).encode("utf-8"))
    update_with_weights(digest, reranker.weights, in_bfloat16)
    return digest.hexdigest()


def update_with_weights(digest, weights, in_bfloat16=False):
    """Feeds every weight (position, shape, dtype, values) into a `hashlib` digest; with `in_bfloat16`, its
    floating-point weights rounded to bfloat16."""
    for number, weight in enumerate(weights):
        value = np.ascontiguousarray(weight.numpy())
        if in_bfloat16 and value.dtype.kind == "f":  # bfloat16 itself is of kind "V"
            value = value.astype(ml_dtypes.bfloat16)
        digest.update(f"{number}:{value.shape}:{value.dtype}".encode())
        digest.update(value.tobytes())
