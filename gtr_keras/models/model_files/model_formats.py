"""The formats of model sources that gtr-keras reads, and the loaders of the formats that the model family
does not read itself (`register_loader`: `gtr_keras.convert.preset_loader` registers them when `gtr_keras`
is imported). It imports nothing, so that `import gtr_keras` registers them without Keras."""

KERAS_HUB = "keras-hub"  # a preset directory that `save_to_preset` wrote, or a keras-hub download handle
SENTENCE_TRANSFORMERS = "sentence-transformers"  # that library's layout of a T5 GTR checkpoint
ARCHITECTURE = "architecture"  # a name of `presets.PRESETS` with no weights: randomly initialised
CROSS_ENCODER = "cross-encoder"  # a Hugging Face `*ForSequenceClassification` checkpoint (a reranker)
RERANKER = "reranker"  # a keras-hub preset of a `Reranker` (what `convert` writes from a cross-encoder)
RERANKER_FORMATS = (CROSS_ENCODER, RERANKER)

_LOADERS = {}


def register_loader(model_format, loader):
    """Makes `model_source.load_source` read sources of `model_format` with `loader`.

    Args:
        model_format: `SENTENCE_TRANSFORMERS`, or another format's name.
        loader: `loader(embedder_cls, local_path, load_weights=True, **kwargs)`, building `embedder_cls`.

    Example:
    >>> register_loader(SENTENCE_TRANSFORMERS, load_sentence_transformers_directory)  # doctest: +SKIP
    """
    _LOADERS[model_format] = loader


def registered_loader(model_format):
    """The loader registered for `model_format`, or None.

    Example:
    >>> registered_loader(KERAS_HUB) is None
    True
    """
    return _LOADERS.get(model_format)
