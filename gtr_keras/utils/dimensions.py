"""Embeddings cut to their first N coordinates (OpenAI's `dimensions`, sentence-transformers' `truncate_dim`):
the one rule for N (`check_dimensions`: an integer from 1 to D) and the one truncation, renormalised to unit
length, in numpy (`truncate`) and in a TensorFlow graph (`truncate_tensor`, for the exports). The rule
imports nothing: the command line's parser checks `--dimensions` with it (`cli.helpers.flag_types.dimensions`).

GTR was not trained with Matryoshka representation learning: its first N coordinates carry less than a model
trained for them (`gtr-keras train --matryoshka-dims`) does; docs/dimensions.md.

Example:
>>> truncate(np.array([[0.6, 0.0, 0.8]], np.float32), 2)
array([[1., 0.]], dtype=float32)
>>> check_dimensions(0, 768)
Traceback (most recent call last):
gtr_keras.errors.UserError: dimensions: must be an integer from 1 to 768, got 0
"""

import numbers

from gtr_keras.errors import UserError


def dimensions_rule(value, embedding_dim=None):
    """The reason `value` is not a number of dimensions (an integer from 1 to `embedding_dim`, or at least 1
    where D is not known yet), or None when it is one. Booleans and floats are not integers.

    Example:
    >>> dimensions_rule(1.5, 768)
    'must be an integer from 1 to 768, got 1.5'
    """
    bound = f"from 1 to {embedding_dim}" if embedding_dim is not None else "of at least 1"
    integer = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    valid = integer and value >= 1 and (embedding_dim is None or value <= embedding_dim)
    return None if valid else f"must be an integer {bound}, got {value!r}"


def check_dimensions(value, embedding_dim=None, name="dimensions", error=UserError):
    """`value` when it is a number of dimensions (`dimensions_rule`), else `error` naming `name`.

    Example:
    >>> check_dimensions(64, 768)
    64
    """
    reason = dimensions_rule(value, embedding_dim)
    if reason:
        raise error(f"{name}: {reason}")
    return int(value)


def truncate(embeddings, dimensions):
    """The first `dimensions` coordinates of each row of `embeddings` `[n, D]`, divided by their L2 norm
    (float32; a row whose prefix is all zeros stays zeros). `dimensions` None: the embeddings as they are.

    Example:
    >>> truncate(np.array([[3.0, 4.0, 12.0]]), 2).tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """
    import numpy as np

    embeddings = np.asarray(embeddings, np.float32)
    if dimensions is None:
        return embeddings
    check_dimensions(dimensions, embeddings.shape[-1])
    prefix = embeddings[..., :dimensions]
    norms = np.linalg.norm(prefix, axis=-1, keepdims=True)
    return (prefix / np.maximum(norms, np.finfo(np.float32).tiny)).astype(np.float32)


def truncate_tensor(embeddings, dimensions):
    """`truncate` in a TensorFlow graph: float `[..., D]` in, float32 `[..., dimensions]` out (its last
    dimension static), for an export that bakes `dimensions` in and the Matryoshka loss
    (`training.losses`). `dimensions` None: the embeddings as float32.

    Example:
    >>> truncate_tensor(tf.constant([[3.0, 4.0, 12.0]]), 2).shape
    TensorShape([1, 2])
    """
    import tensorflow as tf

    embeddings = tf.cast(embeddings, tf.float32)
    if dimensions is None:
        return embeddings
    check_dimensions(dimensions, embeddings.shape[-1])
    return tf.math.l2_normalize(embeddings[..., :dimensions], axis=-1)
