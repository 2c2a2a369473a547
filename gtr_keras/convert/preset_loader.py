"""One loader per model format: `load_embedder` reads a resolved `ModelSource` with the loader of its format
(keras-hub's `get_preset_loader`, for gtr-keras' formats).
"""

from keras_hub.src.utils import preset_utils

from gtr_keras.convert.legacy_format import first_format_config, load_first_format
from gtr_keras.convert.sentence_transformers import load_sentence_transformers
from gtr_keras.errors import UserError
from gtr_keras.models.model_files.model_directory import check_model_directory
from gtr_keras.models.model_files.model_source import (
    ARCHITECTURE,
    DOWNLOAD_PREFIXES,
    FIRST_FORMAT,
    KERAS_HUB,
    SENTENCE_TRANSFORMERS,
)


def _random_architecture(embedder_cls, name, load_weights=True, **kwargs):
    return embedder_cls.from_architecture(name, **kwargs)


def _first_format(embedder_cls, directory, load_weights=True, dtype=None, **kwargs):
    _refuse_arguments(directory, "a model directory of the first format", kwargs)
    return load_first_format(embedder_cls, directory, first_format_config(directory), load_weights, dtype)


def _sentence_transformers(embedder_cls, source, load_weights=True, dtype=None, **kwargs):
    _refuse_arguments(source, "a sentence-transformers checkpoint", kwargs)
    return load_sentence_transformers(embedder_cls, source, dtype=dtype, load_weights=load_weights)


def _refuse_arguments(source, what, arguments):
    """keras-hub's `from_preset` arguments (`num_classes`, ...) apply to keras-hub presets only."""
    if arguments:
        raise UserError(f"{source}: {what} takes no {sorted(arguments)}")


def _keras_hub(embedder_cls, preset, load_weights=True, **kwargs):
    """keras-hub's own loader (`Task.from_preset`'s), after the checks of a model directory's settings."""
    if not preset.startswith(DOWNLOAD_PREFIXES):
        check_model_directory(preset, load_weights)
    return preset_utils.get_preset_loader(preset).load_task(embedder_cls, load_weights, True, **kwargs)


_LOADERS = {
    ARCHITECTURE: _random_architecture,
    FIRST_FORMAT: _first_format,
    SENTENCE_TRANSFORMERS: _sentence_transformers,
    KERAS_HUB: _keras_hub,
}


def load_embedder(embedder_cls, source, load_weights=True, **kwargs):
    """An `embedder_cls` (a `GTRTextEmbedder` class) from a resolved `ModelSource`, in its format.

    A remote directory is copied locally for the load (`ModelSource.local`).

    Args:
        embedder_cls: the class to build (as keras-hub's converters take the backbone class).
        source: a `gtr_keras.models.model_files.model_source.ModelSource`.
        load_weights: read the weights (else randomly initialised, of the source's architecture).
        **kwargs: what `from_preset` passes on (`dtype`, and for keras-hub presets any of its arguments).

    Example:
    >>> embedder = load_embedder(GTRTextEmbedder, resolve_model_source("gtr-small-distilled"))  # doctest: +SKIP
    """
    with source.local() as path:
        return _LOADERS[source.format](embedder_cls, path, load_weights, **kwargs)
