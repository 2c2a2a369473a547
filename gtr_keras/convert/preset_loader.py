"""The loaders of the model formats that keras-hub does not read, registered with the model family's
`model_formats.register_loader` by `install()` (which `import gtr_keras` runs): a sentence-transformers
checkpoint and a cross-encoder (reranker) checkpoint. Each builds the class it is given. Their converters,
and with them Keras, are imported when a checkpoint is read, so that registering them costs nothing.
"""

from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.models.model_files.model_formats import CROSS_ENCODER, SENTENCE_TRANSFORMERS, register_loader


def _sentence_transformers(embedder_cls, source, load_weights=True, dtype=None, **kwargs):
    from gtr_keras.convert.sentence_transformers import load_sentence_transformers

    _refuse_arguments(source, "a sentence-transformers checkpoint", kwargs)
    return load_sentence_transformers(embedder_cls, source, dtype=dtype, load_weights=load_weights)


def _cross_encoder(reranker_cls, source, load_weights=True, dtype=None, **kwargs):
    from gtr_keras.convert.cross_encoder import load_cross_encoder

    _refuse_arguments(source, "a cross-encoder checkpoint", kwargs)
    if not hasattr(reranker_cls, "bert_tokenizer_cls"):
        raise CheckpointError(f"{source}: a cross-encoder (a reranker), not a {reranker_cls.__name__}")
    return load_cross_encoder(reranker_cls, source, load_weights, dtype)


def _refuse_arguments(source, what, arguments):
    """keras-hub's `from_preset` arguments (`num_classes`, ...) apply to keras-hub presets only."""
    if arguments:
        raise UserError(f"{source}: {what} takes no {sorted(arguments)}")


def install():
    """Registers the loaders of sentence-transformers and cross-encoder checkpoints (idempotent).

    Example:
    >>> install()
    >>> GTRTextEmbedder.from_preset("tests/fixtures/tiny-gtr-st")  # doctest: +SKIP
    """
    register_loader(SENTENCE_TRANSFORMERS, _sentence_transformers)
    register_loader(CROSS_ENCODER, _cross_encoder)
