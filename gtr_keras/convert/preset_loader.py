"""Which reader loads a source that is not a keras-hub preset (keras-hub's `get_preset_loader`, for
gtr-keras' other formats): `GTRTextEmbedder.from_preset` asks `load_foreign_format` first.
"""

import os

from gtr_keras.convert.first_format import first_format_config, load_first_format
from gtr_keras.convert.sentence_transformers import load_sentence_transformers
from gtr_keras.models.gtr.model_directory import (
    DOWNLOAD_PREFIXES,
    HF_PREFIX,
    is_remote,
    local_model_directory,
)
from gtr_keras.models.gtr.presets import HUB_IDS
from gtr_keras.utils import files


def load_foreign_format(embedder_cls, preset, load_weights=True, dtype=None, **kwargs):
    """An `embedder_cls` (a `GTRTextEmbedder` class) from a source that is not a keras-hub preset, or None for a preset.

    Sources: a sentence-transformers checkpoint directory, `hf://ORG/NAME`, a
    name of `HUB_IDS`, or a model directory of gtr-keras' first format.
    """
    preset = os.fspath(preset)
    if is_remote(preset):
        with local_model_directory(preset) as local:
            return load_foreign_format(embedder_cls, local, load_weights, dtype, **kwargs)
    directory = not preset.startswith(DOWNLOAD_PREFIXES)
    legacy_config = first_format_config(preset) if directory else None
    if legacy_config is not None:
        return load_first_format(embedder_cls, preset, legacy_config, load_weights, dtype)
    if preset in HUB_IDS:
        source = HUB_IDS[preset]
    elif preset.startswith(HF_PREFIX) or (directory and files.isfile(os.path.join(preset, "modules.json"))):
        source = preset  # `resolve_source` takes hf:// ids and directories
    else:
        return None
    if kwargs:
        raise ValueError(f"{preset}: a sentence-transformers checkpoint takes no {sorted(kwargs)}")
    return load_sentence_transformers(embedder_cls, source, dtype=dtype, load_weights=load_weights)
